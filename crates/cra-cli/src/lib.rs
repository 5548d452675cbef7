//! `cra-cli`: every `cra` command as a library function, so tests call them directly.
//!
//! One module per command group under [`cmd`]; [`exit`] holds the exit-code contract shared by
//! all of them; [`output`] the `-o text|json` switch.

pub mod cmd;
pub mod exit;
pub mod output;

use clap::{Parser, Subcommand};

pub use exit::Exit;
pub use output::OutputFormat;

/// cra: the governed-context runtime for AI agents (CARP, TRACE, Atlas, Relay).
///
/// Exit codes, for every command: 0 success (valid, same, passed), 1 could not run,
/// 2 a negative result (invalid chain, failing test, deny under --fail-on, formatting needed,
/// divergence, traces differ, a simulated flip, a rejected approval, an upgrade still to make,
/// a restore that does not verify), 3 invalid atlas,
/// 4 requires approval (under --fail-on, or an approval still pending).
#[derive(Debug, Parser)]
#[command(name = "cra", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// The command group.
    #[command(subcommand)]
    pub command: Command,
    /// What HTTPS and WSS connections trust and present (every command that calls a server).
    #[command(flatten)]
    pub tls: cmd::client::TlsArgs,
}

/// Top-level command groups.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Verify, inspect and stream TRACE/1.0 audit chains.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCommand),
    /// Run the conformance suite in-process or against a server.
    #[command(subcommand)]
    Conformance(cmd::conformance::ConformanceCommand),
    /// Author atlases: init, check, fmt, inspect, adapters, pack.
    #[command(subcommand)]
    Atlas(cmd::atlas::AtlasCommand),
    /// Run the runtime: HTTP API, WebSocket trace streams, auth (see `cra serve --help`).
    Serve(cmd::serve::ServeArgs),
    /// Relay packages, facts, review, orient, export/import against a server (--url) or a local data directory.
    Relay(cmd::relay::RelayArgs),
    /// Resolve a CARP request in-process against atlases (no server needed).
    Resolve(cmd::resolve::ResolveArgs),
    /// Serve a CARP session as MCP tools (stdio): agents act through cra's policies.
    #[command(subcommand)]
    Mcp(cmd::mcp::McpCommand),
    /// An agent's CARP flow on a running server: open a session, resolve, execute, end.
    #[command(subcommand)]
    Session(cmd::session::SessionCommand),
    /// List, show (and wait on), grant and reject approvals on a running server.
    #[command(subcommand)]
    Approvals(cmd::approvals::ApprovalsCommand),
    /// The transparency log: make its key; watch a server's checkpoints stay consistent.
    #[command(subcommand)]
    Log(cmd::log::LogCommand),
    /// Run a C2SP tlog-witness that cosigns checkpoints of the logs it is given; make its key.
    #[command(subcommand)]
    Witness(cmd::witness::WitnessCommand),
    /// The API keys file: add a key (optionally expiring), revoke keys, list them by
    /// fingerprint; a running server reloads the file by itself.
    #[command(subcommand)]
    Keys(cmd::keys::KeysCommand),
    /// A stopped store's encryption at rest: generate a storage key, re-encrypt after a
    /// rotation.
    #[command(subcommand)]
    Store(cmd::store::StoreCommand),
    /// Upgrade a stopped store written by an earlier cra, or (--check) say what the upgrade
    /// would do; a store a newer cra wrote is refused.
    Migrate(cmd::migrate::MigrateArgs),
    /// Back up a whole store into one archive (chains, CARP state, Relay, atlases, the log),
    /// its manifest written last; PostgreSQL while replicas serve.
    Backup(cmd::backup::BackupArgs),
    /// Restore an archive into a new data directory or schema (a data directory's archive also
    /// onto PostgreSQL), verifying every chain and checkpoint before it is put in place.
    Restore(cmd::backup::RestoreArgs),
    /// Print a shell completion script (bash, zsh, fish) for every command and flag.
    Completions(cmd::completions::CompletionsArgs),
}

/// Runs a parsed command line and returns its exit status.
pub fn run(cli: Cli) -> Exit {
    if let Err(e) = cra_runtime::tls::set_client_defaults(&cli.tls.client_tls()) {
        eprintln!("cra: {e}");
        return Exit::CouldNotRun;
    }
    match cli.command {
        Command::Trace(c) => cmd::trace::run(c),
        Command::Conformance(c) => cmd::conformance::run(c),
        Command::Atlas(c) => cmd::atlas::run(c),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Relay(a) => cmd::relay::run(a),
        Command::Resolve(a) => cmd::resolve::run(a),
        Command::Mcp(c) => cmd::mcp::run(c),
        Command::Session(c) => cmd::session::run(c),
        Command::Approvals(c) => cmd::approvals::run(c),
        Command::Witness(c) => cmd::witness::run(c),
        Command::Log(c) => cmd::log::run(c),
        Command::Keys(c) => cmd::keys::run(c),
        Command::Store(c) => cmd::store::run(c),
        Command::Migrate(a) => cmd::migrate::run(a),
        Command::Backup(a) => cmd::backup::run_backup(a),
        Command::Restore(a) => cmd::backup::run_restore(a),
        Command::Completions(a) => cmd::completions::run(a),
    }
}
