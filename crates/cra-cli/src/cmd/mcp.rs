//! `cra mcp serve`: an MCP server over standard input and output (`specs/mcp.md`). It opens one
//! CARP session for `--agent` on a local data directory, through the runtime's service layer
//! (as `cra relay` local mode does), with the atlases of `--atlas`. `tools/list` answers the
//! actions its policies allow now; `tools/call` executes one, decided and recorded as over HTTP.
//! Standard output carries JSON-RPC only; notices go to standard error. On end of input, SIGTERM
//! or Ctrl-C the session ends (`session.ended` is durable before the process exits).
//!
//! Exit codes: 0 the session ended; 1 the server could not run (an unopenable data directory, a
//! broken atlas, a session that could not be opened or ended).

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use cra_runtime::auth::{Actor, ActorType};
use cra_runtime::mcp::McpSession;
use cra_wire::{SystemClock, UuidV7Ids};

use crate::exit::Exit;

/// `cra mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve one CARP session as MCP tools over standard input and output.
    Serve(ServeArgs),
}

/// `cra mcp serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The agent the session is for (its CARP requester).
    #[arg(long)]
    pub agent: String,
    /// What the session is for (the resolves' goal).
    #[arg(long, default_value = "MCP client")]
    pub goal: String,
    /// A capability the session's resolves ask for (repeatable; default: every capability of
    /// the atlases).
    #[arg(long = "capability")]
    pub capabilities: Vec<String>,
    /// An atlas directory or `.tar.gz` (repeatable).
    #[arg(long = "atlas")]
    pub atlases: Vec<PathBuf>,
    /// The data directory (the embedded store; a running server must not hold it).
    #[arg(long, env = "CRA_DATA", default_value = "cra-data")]
    pub data: PathBuf,
}

/// Runs `cra mcp`.
pub fn run(command: McpCommand) -> Exit {
    match command {
        McpCommand::Serve(args) => match serve(args) {
            Ok(()) => Exit::Success,
            Err(message) => {
                eprintln!("cra mcp serve: {message}");
                Exit::CouldNotRun
            }
        },
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    if args.atlases.is_empty() {
        return Err("name the atlases the session is governed by: --atlas DIR (repeatable)".into());
    }
    let executor = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the executor: {e}"))?;
    executor.block_on(async {
        let (state, notices) = cra_runtime::open_local(
            &args.data,
            &args.atlases,
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
        )
        .map_err(|e| e.to_string())?;
        for n in notices {
            if let cra_runtime::StartNotice::Info(line) = n {
                eprintln!("cra mcp serve: {line}");
            }
        }
        // Installed before the session opens, so that no failure after the open leaves it open,
        // and before the notice, so that a signal sent once the notice is seen is handled.
        let stop = stop_signal()?;
        let actor = Actor::local(args.agent.clone(), ActorType::Agent);
        let session = McpSession::open(state, actor, args.goal, args.capabilities)
            .await
            .map_err(|e| format!("cannot open the CARP session: {}", e.body.message))?;
        eprintln!(
            "cra mcp serve: CARP session {} for agent `{}`; serving MCP on standard input and output",
            session.session_id(),
            args.agent
        );
        cra_runtime::mcp::serve_stdio(session, stop).await
    })
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C); the handlers are installed when this returns.
#[cfg(unix)]
fn stop_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind: SignalKind| {
        signal(kind).map_err(|e| format!("cannot install a signal handler: {e}"))
    };
    let (mut term, mut int) = (
        handler(SignalKind::terminate())?,
        handler(SignalKind::interrupt())?,
    );
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
fn stop_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
