//! `cra mcp serve` as an agent's MCP client sees it: the real binary over stdio, driven by
//! rmcp's client (a peer we did not write). The tools are the actions the session's policies
//! allow; calls run, wait for approval or are refused as over HTTP; a name that names no action
//! is a protocol error; and when the client goes away the session ends, with every call in a
//! chain that verifies.

use std::path::Path;
use std::sync::Arc;

use cra_runtime::auth::{Actor, ActorType};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments)
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

    assert!(
        client
            .call_tool(call("no_such_tool", json!({})))
            .await
            .is_err(),
        "a name that names no atlas action is a protocol error"
    );
    client.cancel().await.unwrap();

    // The client is gone and the server has exited: read its chain from the data directory.
    let (state, _) = cra_runtime::open_local(
        &data,
        &[],
        Arc::new(cra_wire::SystemClock),
        Arc::new(cra_wire::UuidV7Ids),
    )
    .unwrap();
    let auditor = Actor::local("auditor", ActorType::Human);
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
    let count = |t: &str| types.iter().filter(|x| *x == t).count();
    assert_eq!(
        count("action.requested"),
        4,
        "every call naming an action was recorded, the unknown name was not: {types:?}"
    );
    let verified = state.verify_chain(&auditor, id).await.unwrap();
    assert!(verified.valid, "{verified:?}");
}
