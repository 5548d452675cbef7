//! `mcp-proxy`: what `cra mcp proxy` adds to an MCP tool call, against the same call made
//! directly to the upstream, side by side in one run.
//!
//! The upstream is the filesystem MCP server (`@modelcontextprotocol/server-filesystem`, from
//! `tools/peers`, installed by `.ci/install`) over a directory holding one small file. The same
//! rmcp client calls `read_text_file` on it `--calls` times per run, alternately straight to a
//! child `node` (the baseline) and through `cra mcp proxy` fronting another one (an atlas from
//! `cra atlas import-mcp` allowing reads). Through the proxy, every call is a CARP execute on
//! the embedded store with the runtime's durability: `action.requested` is on disk before the
//! upstream runs and the outcome before the result returns (two group-committed appends).
//!
//! Output: one JSON document on stdout, microseconds per call: p50 and p99 of each path over
//! every call of every run, and what the proxy adds at each.
//!
//! Usage: mcp-proxy --cra BIN --fs-server JS --work DIR [--calls N] [--runs R] [--smoke]

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};

/// The value after `--name`, if given.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn required(name: &str) -> anyhow::Result<String> {
    arg(name).with_context(|| format!("{name} is required (see the module documentation)"))
}

/// `q` (0..=1) of `v`, nearest rank.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Times `calls` calls of `read_text_file` on `file` through a client of `command`, after
/// three warm-up calls; microseconds per call.
async fn timed_calls(
    command: tokio::process::Command,
    file: &Path,
    calls: usize,
) -> anyhow::Result<Vec<f64>> {
    let client = ().serve(TokioChildProcess::new(command)?).await?;
    let arguments = json!({"path": file});
    let Value::Object(arguments) = arguments else {
        bail!("arguments are an object")
    };
    let call = || CallToolRequestParams::new("read_text_file").with_arguments(arguments.clone());
    for _ in 0..3 {
        client.call_tool(call()).await?;
    }
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let result = client.call_tool(call()).await?;
        out.push(t.elapsed().as_secs_f64() * 1e6);
        if result.is_error == Some(true) {
            bail!("the call failed: {:?}", result.content);
        }
    }
    client.cancel().await?;
    Ok(out)
}

async fn run() -> anyhow::Result<Value> {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let cra = PathBuf::from(required("--cra")?);
    let server = PathBuf::from(required("--fs-server")?);
    if !server.exists() {
        bail!(
            "{} is missing: run .ci/install (it installs the filesystem MCP server)",
            server.display()
        );
    }
    let work = PathBuf::from(required("--work")?);
    let calls: usize = arg("--calls").map_or(Ok(if smoke { 5 } else { 2000 }), |c| c.parse())?;
    let runs: usize = arg("--runs").map_or(Ok(if smoke { 1 } else { 3 }), |r| r.parse())?;
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    // The upstream resolves paths against its own allowed directory: every path is absolute.
    let work = std::fs::canonicalize(&work)?;
    let server = std::fs::canonicalize(&server)?;
    let files = work.join("files");
    std::fs::create_dir_all(&files)?;
    let file = files.join("notes.txt");
    std::fs::write(&file, "a line the agent reads\n")?;
    let upstream = format!("node {} {}", server.display(), files.display());
    let atlas = work.join("atlas");
    let imported = std::process::Command::new(&cra)
        .args([
            "atlas",
            "import-mcp",
            "--name",
            "fs",
            "--upstream-cmd",
            &upstream,
        ])
        .arg("--out")
        .arg(&atlas)
        .output()?;
    if !imported.status.success() {
        bail!("import-mcp: {}", String::from_utf8_lossy(&imported.stderr));
    }

    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let node = tokio::process::Command::new("node").configure(|c| {
            c.arg(&server)
                .arg(&files)
                .stderr(std::process::Stdio::null());
        });
        direct.extend(timed_calls(node, &file, calls).await?);
        let proxy = tokio::process::Command::new(&cra).configure(|c| {
            c.args([
                "mcp",
                "proxy",
                "--agent",
                "bench",
                "--upstream-cmd",
                &upstream,
            ])
            .arg("--atlas")
            .arg(&atlas)
            .arg("--data")
            .arg(work.join(format!("data-{run}")))
            .stderr(std::process::Stdio::null());
        });
        proxied.extend(timed_calls(proxy, &file, calls).await?);
    }
    let (d50, d99) = (quantile(&mut direct, 0.5), quantile(&mut direct, 0.99));
    let (p50, p99) = (quantile(&mut proxied, 0.5), quantile(&mut proxied, 0.99));
    Ok(json!({
        "calls_per_path": direct.len(),
        "runs": runs,
        "direct_us": {"p50": d50, "p99": d99},
        "proxy_us": {"p50": p50, "p99": p99},
        "added_us": {"p50": p50 - d50, "p99": p99 - d99},
        "target_added_us": {"p50": 1000, "p99": 3000},
    }))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    println!("{}", run().await?);
    Ok(())
}
