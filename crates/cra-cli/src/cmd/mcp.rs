//! `cra mcp serve`, `cra mcp proxy` and `cra atlas import-mcp` (`specs/mcp.md`).
//!
//! `serve` is an MCP server over standard input and output. It opens one CARP session for
//! `--agent` on a local data directory, through the runtime's service layer (as `cra relay`
//! local mode does), with the atlases of `--atlas`; with `--url URL --token T` it relays to that
//! server's `/mcp` instead, where the session is the token's agent's. `tools/list` answers the actions its
//! policies allow now; `tools/call` executes one, decided and recorded as over HTTP. Standard
//! output carries JSON-RPC only; notices go to standard error. On end of input, SIGTERM or
//! Ctrl-C the session ends (`session.ended` is durable before the process exits).
//!
//! `proxy` is `serve` in front of an MCP server cra did not write (`--upstream-cmd` or
//! `--upstream-url`): the atlas `import-mcp` wrote governs it, each tool is listed under its
//! upstream name, and an allowed call runs on the upstream as the `mcp` executor runs it. With
//! `--url` it relays to a server that runs the upstream as its executor, where operators decide
//! approvals, and still shows the upstream's names.
//!
//! Exit codes: 0 the session ended (or the atlas was written); 1 the command could not run (an
//! unopenable data directory, a broken atlas, an unreachable upstream, a session that could not
//! be opened or ended).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use cra_atlas::mcp_import::{self, Writes};
use cra_runtime::auth::{Actor, ActorType};
use cra_runtime::config::ExecutorConfig;
use cra_runtime::executor::mcp::Upstream;
use cra_runtime::mcp::bridge::Renames;
use cra_runtime::mcp::{McpSession, Naming};
use cra_wire::{SystemClock, UuidV7Ids};

use crate::cmd::trace_io::KeyArgs;
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra mcp` subcommands.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve one CARP session as MCP tools over standard input and output.
    Serve(ServeArgs),
    /// Govern an MCP server cra did not write: serve its tools, under their own names, through
    /// the atlas `cra atlas import-mcp` wrote for it.
    Proxy(ProxyArgs),
}

/// The upstream MCP server: a command to start, or a URL.
#[derive(Debug, Clone, Args)]
#[group(multiple = false)]
pub struct UpstreamArgs {
    /// The command that starts the upstream (program and arguments, split like a shell does
    /// with quotes; no variables or globs).
    #[arg(long = "upstream-cmd", value_name = "\"CMD ARGS\"")]
    pub upstream_cmd: Option<String>,
    /// The upstream's Streamable HTTP URL.
    #[arg(long = "upstream-url", value_name = "URL")]
    pub upstream_url: Option<String>,
}

impl UpstreamArgs {
    /// The upstream as an `mcp` executor's configuration.
    fn executor(&self) -> Result<ExecutorConfig, String> {
        match (&self.upstream_cmd, &self.upstream_url) {
            (Some(c), _) => Ok(ExecutorConfig::mcp_command(
                split_command(c)?,
                UPSTREAM_TIMEOUT_MS,
            )),
            (None, Some(u)) => Ok(ExecutorConfig::mcp_url(u.clone(), UPSTREAM_TIMEOUT_MS)),
            (None, None) => {
                Err("name the upstream: --upstream-cmd \"CMD ARGS\" or --upstream-url URL".into())
            }
        }
    }
}

/// How long an upstream call may take.
const UPSTREAM_TIMEOUT_MS: u64 = 30_000;

/// `cra atlas import-mcp` arguments.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// The server's name: the first segments of every action id and the executor's name
    /// (lowercase letters and digits, e.g. `fs`).
    #[arg(long)]
    pub name: String,
    /// The directory to write the atlas into (must not exist or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// The atlas id (default `mcp.<name>`).
    #[arg(long = "atlas-id")]
    pub atlas_id: Option<String>,
    /// What the atlas decides for tools not annotated read-only: `deny` them, or let an
    /// operator `approve` each call.
    #[arg(long, value_enum, default_value_t = WritesArg::Deny)]
    pub writes: WritesArg,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// `--writes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WritesArg {
    /// A deny policy names them.
    Deny,
    /// Allowed once an operator approves each call.
    Approve,
}

/// The key flags of a local session, which a session on a server (`--url`) has no use for.
const LOCAL_KEYS: [&str; 2] = ["storage_key_file", "retired_key_files"];

/// `cra mcp proxy` arguments.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// The atlas governing the upstream (written by `cra atlas import-mcp`, then edited).
    #[arg(long, required_unless_present = "url", conflicts_with = "url")]
    pub atlas: Option<PathBuf>,
    /// The agent the session is for (its CARP requester).
    #[arg(long, required_unless_present = "url", conflicts_with = "url")]
    pub agent: Option<String>,
    /// Relay to the `/mcp` of the cra server at this URL instead, which runs the upstream as
    /// its `mcp` executor (so operators decide approvals there); tools keep their upstream
    /// names.
    #[arg(long, requires = "token", conflicts_with_all = LOCAL_KEYS)]
    pub url: Option<String>,
    /// The API key (or JWT) the server knows the agent by (with `--url`).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// What the session is for (the resolves' goal).
    #[arg(long, default_value = cra_runtime::mcp::DEFAULT_GOAL)]
    pub goal: String,
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// The data directory (the embedded store; a running server must not hold it).
    #[arg(long, env = "CRA_DATA", default_value = "cra-data")]
    pub data: PathBuf,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// `cra mcp serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The agent the session is for (its CARP requester).
    #[arg(long, required_unless_present = "url", conflicts_with = "url")]
    pub agent: Option<String>,
    /// What the session is for (the resolves' goal).
    #[arg(long, default_value = cra_runtime::mcp::DEFAULT_GOAL)]
    pub goal: String,
    /// A capability the session's resolves ask for (repeatable; default: every capability of
    /// the atlases).
    #[arg(long = "capability", conflicts_with = "url")]
    pub capabilities: Vec<String>,
    /// An atlas directory or `.tar.gz` (repeatable).
    #[arg(long = "atlas", conflicts_with = "url")]
    pub atlases: Vec<PathBuf>,
    /// Relay to the `/mcp` of the cra server at this URL instead: the session is the token's
    /// agent's, on the server, under its atlases.
    #[arg(long, requires = "token", conflicts_with_all = LOCAL_KEYS)]
    pub url: Option<String>,
    /// The API key (or JWT) the server knows the agent by (with `--url`).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The data directory (the embedded store; a running server must not hold it).
    #[arg(long, env = "CRA_DATA", default_value = "cra-data")]
    pub data: PathBuf,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// Runs `cra mcp`.
pub fn run(command: McpCommand) -> Exit {
    let (which, outcome) = match command {
        McpCommand::Serve(args) => ("serve", serve(args)),
        McpCommand::Proxy(args) => ("proxy", proxy(args)),
    };
    match outcome {
        Ok(()) => Exit::Success,
        Err(message) => {
            eprintln!("cra mcp {which}: {message}");
            Exit::CouldNotRun
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    if let (Some(url), Some(token)) = (&args.url, &args.token) {
        return bridge(url, token, false);
    }
    if args.atlases.is_empty() {
        return Err("name the atlases the session is governed by: --atlas DIR (repeatable)".into());
    }
    let session = Session {
        encryption: args.keys.config(),
        data: args.data,
        atlases: args.atlases,
        executors: BTreeMap::new(),
        agent: args.agent.unwrap_or_default(),
        goal: args.goal,
        capabilities: args.capabilities,
        upstream_names: false,
    };
    session.serve("cra mcp serve")
}

/// `cra mcp serve|proxy --url`: standard input and output relayed to the server's `/mcp`,
/// tools under their upstream names when `upstream_names` (the proxy).
fn bridge(url: &str, token: &str, upstream_names: bool) -> Result<(), String> {
    let executor = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the executor: {e}"))?;
    executor.block_on(async {
        let stop = stop_signal()?;
        let renames = if upstream_names {
            Renames::of_server(url, token).await?
        } else {
            Renames::default()
        };
        eprintln!("cra mcp: relaying MCP on standard input and output to {url}/mcp");
        cra_runtime::mcp::bridge_stdio(url, token, renames, stop).await
    })
}

fn proxy(args: ProxyArgs) -> Result<(), String> {
    let upstream_given =
        args.upstream.upstream_cmd.is_some() || args.upstream.upstream_url.is_some();
    if let (Some(url), Some(token)) = (&args.url, &args.token) {
        if upstream_given {
            return Err("with --url the server runs the upstream (its [executors] entry of kind \"mcp\"): drop --upstream-cmd and --upstream-url".into());
        }
        return bridge(url, token, true);
    }
    let (Some(atlas_dir), Some(agent)) = (args.atlas, args.agent) else {
        return Err(
            "name the atlas and the agent: --atlas DIR --agent ID (or --url and --token)".into(),
        );
    };
    let atlas = cra_atlas::load::load(&atlas_dir)
        .map_err(|e| format!("cannot load the atlas {}: {e}", atlas_dir.display()))?;
    let servers: std::collections::BTreeSet<&str> = atlas
        .manifest
        .actions
        .iter()
        .filter_map(|a| mcp_import::parse_executor_ref(a.executor.as_deref()?))
        .map(|(server, _)| server)
        .collect();
    let server = match servers.len() {
        1 => servers.into_iter().next().unwrap_or_default().to_owned(),
        0 => {
            return Err(format!(
                "no action of {} runs an MCP tool (executor mcp:<server>/<tool>); write the atlas with cra atlas import-mcp",
                atlas_dir.display()
            ));
        }
        _ => {
            return Err(format!(
                "the atlas's actions run tools of several MCP servers ({servers:?}); a proxy fronts one upstream"
            ));
        }
    };
    let session = Session {
        encryption: args.keys.config(),
        data: args.data,
        atlases: vec![atlas_dir],
        executors: BTreeMap::from([(server, args.upstream.executor()?)]),
        agent,
        goal: args.goal,
        capabilities: Vec::new(),
        upstream_names: true,
    };
    session.serve("cra mcp proxy")
}

/// One CARP session served over stdio, on a local data directory.
struct Session {
    data: PathBuf,
    /// The data directory's storage keys.
    encryption: cra_runtime::config::EncryptionConfig,
    atlases: Vec<PathBuf>,
    executors: BTreeMap<String, ExecutorConfig>,
    agent: String,
    goal: String,
    capabilities: Vec<String>,
    /// List tools under their upstream names (`cra mcp proxy`).
    upstream_names: bool,
}

impl Session {
    fn serve(self, who: &str) -> Result<(), String> {
        let executor = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the executor: {e}"))?;
        executor.block_on(async {
            let (state, notices) = cra_runtime::open_local_with(
                &self.data,
                &self.atlases,
                self.executors,
                self.encryption,
                Arc::new(SystemClock),
                Arc::new(UuidV7Ids),
            )
            .map_err(|e| e.to_string())?;
            for n in notices {
                if let cra_runtime::StartNotice::Info(line) = n {
                    eprintln!("{who}: {line}");
                }
            }
            let naming = if self.upstream_names {
                Naming::upstream_of(&state.atlases())
            } else {
                Naming::Adapter
            };
            // Installed before the session opens, so that no failure after the open leaves it
            // open, and before the notice, so that a signal sent once the notice is seen is
            // handled.
            let stop = stop_signal()?;
            let actor = Actor::local(self.agent.clone(), ActorType::Agent);
            let runtime = state.clone();
            let session = McpSession::open(state, actor, self.goal, self.capabilities)
                .await
                .map_err(|e| format!("cannot open the CARP session: {}", e.body.message))?
                .named(naming);
            eprintln!(
                "{who}: CARP session {} for agent `{}`; serving MCP on standard input and output",
                session.session_id(),
                self.agent
            );
            let served = cra_runtime::mcp::serve_stdio(session, stop).await;
            runtime.mcp.close().await;
            served
        })
    }
}

/// `cra atlas import-mcp`: lists the upstream's tools and writes the atlas governing them.
pub fn import(args: &ImportArgs) -> Exit {
    match import_atlas(args) {
        Ok(summary) => {
            match args.output {
                OutputFormat::Json => println!("{summary}"),
                OutputFormat::Text => print_import(&summary),
            }
            Exit::Success
        }
        Err(message) => {
            eprintln!("cra atlas import-mcp: {message}");
            Exit::CouldNotRun
        }
    }
}

fn import_atlas(args: &ImportArgs) -> Result<serde_json::Value, String> {
    let executor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the executor: {e}"))?;
    let upstream = Upstream::new(&args.name, args.upstream.executor()?);
    let tools = executor
        .block_on(upstream.described_tools())
        .map_err(|e| format!("{}: {}", e.code, e.message))?;
    drop(upstream);
    let atlas_id = args
        .atlas_id
        .clone()
        .unwrap_or_else(|| format!("mcp.{}", args.name));
    let writes = match args.writes {
        WritesArg::Deny => Writes::Deny,
        WritesArg::Approve => Writes::Approve,
    };
    let files = mcp_import::atlas_files(&args.name, &atlas_id, &tools, writes)
        .map_err(|e| e.to_string())?;
    crate::cmd::atlas::write_new_atlas(&args.out, &files)?;
    let actions: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "tool": t.name,
                "action_id": mcp_import::action_id_for(&args.name, &t.name).unwrap_or_default(),
                "read_only": t.read_only,
            })
        })
        .collect();
    Ok(serde_json::json!({
        "atlas_id": atlas_id,
        "out": args.out.display().to_string(),
        "writes": if writes == Writes::Deny { "deny" } else { "approve" },
        "actions": actions,
    }))
}

fn print_import(summary: &serde_json::Value) {
    println!(
        "wrote atlas {} to {} ({} tools)",
        summary["atlas_id"].as_str().unwrap_or_default(),
        summary["out"].as_str().unwrap_or_default(),
        summary["actions"].as_array().map_or(0, Vec::len)
    );
    let writes = summary["writes"].as_str().unwrap_or_default();
    for a in summary["actions"].as_array().into_iter().flatten() {
        let decision = if a["read_only"] == true {
            "allowed (read-only)"
        } else if writes == "approve" {
            "needs an operator's approval"
        } else {
            "denied"
        };
        println!(
            "  {} <- {}: {decision}",
            a["action_id"].as_str().unwrap_or_default(),
            a["tool"].as_str().unwrap_or_default()
        );
    }
}

/// Splits `command` into words as a POSIX shell would for plain words and quotes: unquoted
/// whitespace separates, `'...'` keeps everything, `"..."` keeps everything but `\"` and `\\`,
/// and a backslash outside quotes escapes the next character.
fn split_command(command: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => w.push(x),
                        None => return Err(format!("an unclosed ' in `{command}`")),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\')) => w.push(x),
                            Some(x) => {
                                w.push('\\');
                                w.push(x);
                            }
                            None => return Err(format!("an unclosed \" in `{command}`")),
                        },
                        Some(x) => w.push(x),
                        None => return Err(format!("an unclosed \" in `{command}`")),
                    }
                }
            }
            '\\' => {
                let next = chars
                    .next()
                    .ok_or_else(|| format!("a trailing \\ in `{command}`"))?;
                word.get_or_insert_with(String::new).push(next);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    if words.is_empty() {
        return Err("--upstream-cmd is empty: give the program that starts the MCP server".into());
    }
    Ok(words)
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

#[cfg(test)]
mod tests {
    use super::split_command;

    #[test]
    fn upstream_commands_split_like_a_shell_splits_words_and_quotes() {
        assert_eq!(
            split_command("npx -y  @modelcontextprotocol/server-filesystem /tmp/x").unwrap(),
            [
                "npx",
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/tmp/x"
            ]
        );
        assert_eq!(
            split_command(r#"node 'a b' "c \"d\"" e\ f """#).unwrap(),
            ["node", "a b", "c \"d\"", "e f", ""]
        );
        assert!(split_command("node 'open").is_err());
        assert!(split_command("   ").is_err());
    }
}
