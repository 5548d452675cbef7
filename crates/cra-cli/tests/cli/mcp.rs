//! `cra mcp serve` as an agent's MCP client sees it: the real binary over stdio, driven by
//! rmcp's client (a peer we did not write). The tools are the actions the session's policies
//! allow; calls run, wait for approval or are refused as over HTTP; a name that names no action
//! is a protocol error; the resolution's context blocks are resources whose text hashes to what
//! `context.injected` recorded; and when the client goes away the session ends, with every call
//! in a chain that verifies.

use std::path::Path;
use std::sync::Arc;

use cra_runtime::auth::{Actor, ActorType};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments)
}

/// The runtime over `data` (the server has exited) and an auditor to read its chains.
fn reader_of(data: &Path) -> (cra_runtime::AppState, Actor) {
    let (state, _) = cra_runtime::open_local(
        data,
        &[],
        Arc::new(cra_wire::SystemClock),
        Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap();
    (state, Actor::local("auditor", ActorType::Human))
}

fn text_of(result: &CallToolResult) -> String {
    serde_json::to_value(&result.content).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_acts_through_mcp_and_every_call_is_in_its_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let atlas = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_cra")).configure(|c| {
        c.arg("mcp")
            .arg("serve")
            .args(["--agent", "bot", "--goal", "keep the docs current"])
            .arg("--atlas")
            .arg(&atlas)
            .arg("--data")
            .arg(&data);
    });
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();

    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["ci_rerun", "deploy_run", "doc_read"],
        "the allowed actions (db.drop is denied), named by the adapters' mapping"
    );

    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<String> = resources.iter().map(|r| r.uri.clone()).collect();
    assert_eq!(
        uris,
        ["cra://context/test.trace.ops/runbook/context/runbook.md"],
        "the resolution's one context block"
    );
    let contents = serde_json::to_value(
        client
            .read_resource(ReadResourceRequestParams::new(uris[0].clone()))
            .await
            .unwrap(),
    )
    .unwrap();
    let block_text = contents["contents"][0]["text"].as_str().unwrap().to_owned();
    assert!(
        client
            .read_resource(ReadResourceRequestParams::new("cra://context/nope"))
            .await
            .is_err(),
        "a URI that names no block is an error"
    );

    let read = client
        .call_tool(call("doc_read", json!({"page": "intro"})))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{read:?}");
    assert!(
        text_of(&read).contains("intro"),
        "the echo executor's result: {read:?}"
    );

    let deploy = client
        .call_tool(call("deploy_run", json!({"version": "1.2.3"})))
        .await
        .unwrap();
    assert_eq!(deploy.is_error, Some(true));
    assert!(text_of(&deploy).contains("approval_pending"), "{deploy:?}");

    let drop = client.call_tool(call("db_drop", json!({}))).await.unwrap();
    assert_eq!(
        drop.is_error,
        Some(true),
        "a listed-or-not atlas action is refused as a result"
    );
    assert!(
        text_of(&drop).contains("deny-drop"),
        "names the deciding policy: {drop:?}"
    );

    let bad = client
        .call_tool(call("doc_read", json!({"page": 5})))
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true), "parameters are checked: {bad:?}");

    let beyond: Value = serde_json::from_str(r#"{"page": 1e400}"#).unwrap();
    let refused = client
        .call_tool(call("doc_read", beyond))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("/execution/parameters/page") && refused.contains("double"),
        "a number no double holds is refused before anything is recorded: {refused}"
    );

    assert!(
        client
            .call_tool(call("no_such_tool", json!({})))
            .await
            .is_err(),
        "a name that names no atlas action is a protocol error"
    );
    client.cancel().await.unwrap();

    // The client is gone and the server has exited: read its chain from the data directory.
    let (state, auditor) = reader_of(&data);
    let chains = state.chains(&auditor).await.unwrap();
    assert_eq!(chains.len(), 1, "one CARP session");
    assert!(chains[0].ended, "ending the client ended the session");
    let id = chains[0].session_id.clone();
    let types: Vec<String> = state
        .trace(&auditor, &id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event_type.clone())
        .collect();
    for t in [
        "session.started",
        "carp.resolution.completed",
        "action.executed",
        "action.pending_approval",
        "action.denied",
        "session.ended",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} missing from {types:?}");
    }
    let events = state.trace(&auditor, &id).await.unwrap();
    let injected = events
        .iter()
        .find(|e| e.event_type == "context.injected")
        .unwrap();
    assert_eq!(
        injected.payload["content_hash"].as_str().unwrap(),
        cra_wire::hash::sha256_prefixed(block_text.as_bytes()),
        "the resource's text is what the chain recorded as injected"
    );
    let count = |t: &str| types.iter().filter(|x| *x == t).count();
    assert_eq!(
        count("action.requested"),
        4,
        "every call naming an action was recorded, the unknown name and 1e400 were not: {types:?}"
    );
    let verified = state.verify_chain(&auditor, id).await.unwrap();
    assert!(verified.valid, "{verified:?}");
}

/// `cra mcp serve` on a fresh data directory, once it says it is serving (its signal handlers
/// are installed by then); nothing has been sent on its standard input.
#[cfg(unix)]
fn serving(data: &Path) -> std::process::Child {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let atlas = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args(["mcp", "serve", "--agent", "bot", "--atlas"])
        .arg(&atlas)
        .arg("--data")
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving MCP") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server stopped before serving"
        );
    }
    child
}

/// Whether the one CARP session in `data` has ended (the server has exited).
fn the_session_ended(data: &Path) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (state, auditor) = reader_of(data);
    let chains = rt.block_on(state.chains(&auditor)).unwrap();
    assert_eq!(chains.len(), 1);
    chains[0].ended
}

/// SIGTERM ends the session, before any MCP message: `session.ended` is in the chain once the
/// process has exited, and it exits 0.
#[cfg(unix)]
#[test]
fn sigterm_ends_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut child = serving(&data);
    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(the_session_ended(&data));
}

/// A client that goes away before the MCP handshake (its end of input) ends the session too.
#[cfg(unix)]
#[test]
fn a_client_leaving_before_the_handshake_ends_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut child = serving(&data);
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(the_session_ended(&data));
}

/// `cra atlas import-mcp` then `cra mcp proxy`, in front of an MCP server (here `cra mcp serve`
/// itself, governed on its own): the imported atlas names every upstream tool by the written
/// rule; edited to allow one tool, the proxy lists every tool under its upstream name, passes
/// the allowed call's upstream result on as it is, and refuses the others, recording both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_mcp_and_proxy_govern_an_upstream_under_its_own_names() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
    let upstream = format!(
        "{} mcp serve --agent upstream-bot --atlas {} --data {}",
        env!("CARGO_BIN_EXE_cra"),
        fixture.display(),
        tmp.path().join("upstream-data").display()
    );
    let atlas = tmp.path().join("imported");
    let imported = std::process::Command::new(env!("CARGO_BIN_EXE_cra"))
        .args([
            "atlas",
            "import-mcp",
            "--name",
            "ops",
            "-o",
            "json",
            "--upstream-cmd",
        ])
        .arg(&upstream)
        .arg("--out")
        .arg(&atlas)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let summary: Value = serde_json::from_slice(&imported.stdout).unwrap();
    let ids: Vec<&str> = summary["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ops.doc.read", "ops.ci.rerun", "ops.deploy.run"]);
    // An author's edit: the one tool agents may call through the proxy.
    std::fs::write(
        atlas.join("policies/policies.json"),
        r#"[{"policy_id": "allow-reads", "type": "allow", "actions": ["ops.doc.read"]}]"#,
    )
    .unwrap();

    let data = tmp.path().join("proxy-data");
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_cra")).configure(|c| {
        c.args([
            "mcp",
            "proxy",
            "--agent",
            "bot",
            "--upstream-cmd",
            &upstream,
        ])
        .arg("--atlas")
        .arg(&atlas)
        .arg("--data")
        .arg(&data);
    });
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect();
    assert_eq!(
        names,
        ["doc_read"],
        "the allowed tool, under its upstream name"
    );
    let read = client
        .call_tool(call("doc_read", json!({"page": "intro"})))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{read:?}");
    assert_eq!(
        text_of(&read),
        json!([{"type": "text", "text": "{\"echo\":{\"page\":\"intro\"}}"}]).to_string(),
        "the upstream's own result, passed on"
    );
    let deploy = client
        .call_tool(call("deploy_run", json!({"version": "1"})))
        .await
        .unwrap();
    assert_eq!(
        deploy.is_error,
        Some(true),
        "not allowed by the edited atlas"
    );
    client.cancel().await.unwrap();

    let (state, auditor) = reader_of(&data);
    let chains = state.chains(&auditor).await.unwrap();
    let events = state.trace(&auditor, &chains[0].session_id).await.unwrap();
    let executed: Vec<&Value> = events
        .iter()
        .filter(|e| e.event_type == "action.executed")
        .map(|e| &e.payload)
        .collect();
    assert_eq!(executed.len(), 1, "the allowed call ran once");
    assert_eq!(executed[0]["action_id"], "ops.doc.read");
    let requested = events
        .iter()
        .filter(|e| e.event_type == "action.requested")
        .count();
    assert_eq!(requested, 2, "both calls are recorded");
}

/// Every action of the example atlases has a tool name that maps back to it, and keeps to the
/// characters MCP asks tool names to use (`[A-Za-z0-9_.-]`, 1 to 128).
#[test]
fn tool_names_round_trip_for_every_action_of_the_example_atlases() {
    use cra_atlas::adapters::{action_id_of, tool_name};

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases");
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let atlas = cra_atlas::load::load(&entry.unwrap().path()).unwrap();
        for action in &atlas.manifest.actions {
            let name = tool_name(&action.action_id);
            assert_eq!(action_id_of(&name), action.action_id, "{name}");
            assert!(
                (1..=128).contains(&name.len())
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)),
                "{name}"
            );
            seen += 1;
        }
    }
    assert!(seen >= 10, "the example atlases have actions: {seen}");
}

/// `cra mcp serve` on an encrypted data directory: with `--storage-key-file` the session runs
/// and a call's marker is in no file of the directory once it exits; the chain reads back and
/// verifies with the key; without the key the command refuses to start and names the key it
/// needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_opens_an_encrypted_directory_with_its_key_only() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let key = tmp.path().join("storage.key");
    let key_id = cra_cli::cmd::store::generate(&cra_cli::cmd::store::GenerateArgs {
        out: key.clone(),
        output: cra_cli::OutputFormat::Json,
    })
    .unwrap();
    let seed: u64 = rand::random();
    eprintln!("marker seed {seed:016x}");
    let marker = format!("mk{seed:016x}");
    let atlas = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/atlas");
    let serve = |keyed: bool| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_cra")).configure(|c| {
            c.args(["mcp", "serve", "--agent", "bot", "--atlas"])
                .arg(&atlas)
                .arg("--data")
                .arg(&data);
            if keyed {
                c.arg("--storage-key-file").arg(&key);
            }
        })
    };
    let client = ().serve(TokioChildProcess::new(serve(true)).unwrap()).await.unwrap();
    let read = client
        .call_tool(call("doc_read", json!({"page": marker})))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{read:?}");
    client.cancel().await.unwrap();
    assert!(
        !cra_store::testing::files_hold(&data, &marker),
        "the marker is in the data directory"
    );

    let (state, _) = cra_runtime::open_local_with(
        &data,
        &[],
        std::collections::BTreeMap::new(),
        cra_cli::cmd::trace_io::key_flags(Some(&key), &[]),
        Arc::new(cra_wire::SystemClock),
        Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap();
    let auditor = Actor::local("auditor", ActorType::Human);
    let chains = state.chains(&auditor).await.unwrap();
    let events = state.trace(&auditor, &chains[0].session_id).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.payload.to_string().contains(&marker)),
        "the call reads back whole"
    );
    let verified = state
        .verify_chain(&auditor, chains[0].session_id.clone())
        .await
        .unwrap();
    assert!(verified.valid, "{verified:?}");
    drop(state);

    let refused = serve(false).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("no storage key is configured") && stderr.contains(&key_id),
        "{stderr}"
    );
}
