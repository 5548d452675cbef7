//! `cra store`: the operator's commands on a stopped store's encryption at rest
//! (`specs/storage-encryption.md`): `key generate` writes a new storage key, `reencrypt`
//! rewrites every record with the current key after a rotation (or after turning encryption on
//! over plaintext records) and forgets the retired keys, then on redb rewrites the database into
//! a fresh file, which `rewrite` also does on its own (after retention, say): the pages redb
//! freed otherwise keep the old bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use cra_store::redb::rewrite::RewriteReport;
use cra_store::{ReencryptReport, StorageKey};
use cra_wire::Token;
use serde_json::json;

use crate::cmd::trace_io::{Failure, StoreArgs, require_database};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Storage keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Encrypt every record with the current key (`--storage-key-file`), reading older ones
    /// with the retired keys (`--retired-key-file`), then forget the retired keys; a data
    /// directory's database is then rewritten into a fresh file (as `cra store rewrite`).
    Reencrypt(ReencryptArgs),
    /// Rewrite a stopped server's data directory into a fresh database file that holds only
    /// its live records: what re-encryption replaced and retention removed leaves no byte.
    Rewrite(RewriteArgs),
}

/// `cra store key` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Write a new random storage key (for `encryption.key_file`) and print its id.
    Generate(GenerateArgs),
}

/// `cra store key generate` options.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The file to write the key to (mode 0600); an existing file is never overwritten.
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `cra store reencrypt` options.
#[derive(Debug, Args)]
pub struct ReencryptArgs {
    /// The store, and its keys.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `cra store rewrite` options.
#[derive(Debug, Args)]
pub struct RewriteArgs {
    /// The data directory of a stopped server.
    #[arg(long)]
    pub data: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// What `cra store reencrypt` did: the records it re-encrypted and, on redb, the rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reencrypted {
    /// The re-encryption.
    pub report: ReencryptReport,
    /// The rewrite of a data directory's database (`None` on PostgreSQL).
    pub rewrite: Option<RewriteReport>,
}

/// Runs a `cra store` command.
pub fn run(command: StoreCommand) -> Exit {
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    match command {
        StoreCommand::Key(KeyCommand::Generate(args)) => match generate(&args) {
            Ok(id) => {
                let _ = match args.output {
                    OutputFormat::Text => writeln!(out, "{id}"),
                    OutputFormat::Json => {
                        writeln!(out, "{}", json!({"key_id": id, "key_file": args.out}))
                    }
                };
                Exit::Success
            }
            Err(f) => f.report("cra store key generate", args.output, &mut out, &mut err),
        },
        StoreCommand::Reencrypt(args) => {
            let output = args.output;
            match reencrypt(&args, &mut err) {
                Ok(done) => {
                    print_report(&done, output, &mut out);
                    Exit::Success
                }
                Err(f) => f.report("cra store reencrypt", output, &mut out, &mut err),
            }
        }
        StoreCommand::Rewrite(args) => match rewrite(&args.data, &mut err) {
            Ok(report) => {
                let _ = match args.output {
                    OutputFormat::Json => writeln!(out, "{}", rewrite_json(&report)),
                    OutputFormat::Text => writeln!(out, "{}", rewrite_text(&report)),
                };
                Exit::Success
            }
            Err(f) => f.report("cra store rewrite", args.output, &mut out, &mut err),
        },
    }
}

/// Writes a new key to `args.out` and answers its id.
pub fn generate(args: &GenerateArgs) -> Result<String, Failure> {
    let text = StorageKey::generate_text();
    let id = StorageKey::parse(&text)
        .map_err(|e| Failure::new(Token::InternalError, e.to_string()))?
        .id();
    cra_runtime::tlog::write_key_file(&args.out, &text).map_err(|e| {
        Failure::new(
            Token::InvalidRequest,
            format!("cannot write {}: {e}", args.out.display()),
        )
    })?;
    Ok(id.to_string())
}

/// Re-encrypts the named store, telling `progress` (standard error) how far each table got; a
/// data directory's database is then rewritten into a fresh file.
pub fn reencrypt(args: &ReencryptArgs, progress: &mut dyn Write) -> Result<Reencrypted, Failure> {
    let store = &args.store;
    if store.keys.storage_key_file.is_none() {
        return Err(Failure::new(
            Token::InvalidRequest,
            "give the key to encrypt with as --storage-key-file (and each older key as --retired-key-file)",
        ));
    }
    let mut tell = |table: &str, n: u64| {
        let _ = writeln!(progress, "{table}: {n} records re-encrypted");
    };
    let failed = |e: cra_store::BackendError| Failure::new(e.token(), e.to_string());
    if let Some(pg) = store.open_postgres()? {
        let report = pg.reencrypt(&mut tell).map_err(failed)?;
        return Ok(Reencrypted {
            report,
            rewrite: None,
        });
    }
    let Some(dir) = store.data.as_deref() else {
        return Err(Failure::new(
            Token::InvalidRequest,
            "name the store: --data DIR (stopped server) or --postgres URL",
        ));
    };
    // The store is closed before its file is rewritten.
    let report = store.open_redb(dir)?.reencrypt(&mut tell).map_err(failed)?;
    Ok(Reencrypted {
        report,
        rewrite: Some(rewrite(dir, progress)?),
    })
}

/// Rewrites the database of the data directory `dir` into a fresh file, telling `progress`
/// (standard error) how far each table got.
pub fn rewrite(dir: &Path, progress: &mut dyn Write) -> Result<RewriteReport, Failure> {
    require_database(dir)?;
    let mut tell = |table: &str, n: u64| {
        let _ = writeln!(progress, "{table}: {n} records copied");
    };
    cra_store::redb::rewrite::rewrite(dir, &mut tell)
        .map_err(|e| Failure::new(e.token(), e.to_string()))
}

fn rewrite_json(report: &RewriteReport) -> serde_json::Value {
    json!({
        "tables": report.tables.iter().map(|(t, n)| json!({"table": t, "records": n})).collect::<Vec<_>>(),
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
    })
}

fn rewrite_text(report: &RewriteReport) -> String {
    let records: u64 = report.tables.iter().map(|(_, n)| n).sum();
    format!(
        "rewrote {records} records of {} tables into a fresh file: {} bytes before, {} after",
        report.tables.len(),
        report.bytes_before,
        report.bytes_after
    )
}

fn print_report(done: &Reencrypted, output: OutputFormat, out: &mut dyn Write) {
    let report = &done.report;
    let _ = match output {
        OutputFormat::Json => writeln!(
            out,
            "{}",
            json!({
                "tables": report.tables.iter().map(|(t, n)| json!({"table": t, "reencrypted": n})).collect::<Vec<_>>(),
                "retired_keys": report.retired,
                "rewrite": done.rewrite.as_ref().map(rewrite_json),
            })
        ),
        OutputFormat::Text => {
            let total: u64 = report.tables.iter().map(|(_, n)| n).sum();
            let retired = if report.retired.is_empty() {
                "none".to_owned()
            } else {
                report.retired.join(", ")
            };
            let rewrite = done
                .rewrite
                .as_ref()
                .map(|r| format!("; {}", rewrite_text(r)))
                .unwrap_or_default();
            writeln!(
                out,
                "{total} records re-encrypted; keys no longer needed: {retired}{rewrite}"
            )
        }
    };
}
