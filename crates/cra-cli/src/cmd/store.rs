//! `cra store`: the operator's commands on a stopped store's encryption at rest
//! (`specs/storage-encryption.md`): `key generate` writes a new storage key, `reencrypt`
//! rewrites every record with the current key after a rotation (or after turning encryption on
//! over plaintext records) and forgets the retired keys.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use cra_store::{ReencryptReport, StorageKey};
use cra_wire::Token;
use serde_json::json;

use crate::cmd::trace_io::{Failure, StoreArgs};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Storage keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Encrypt every record with the current key (`--storage-key-file`), reading older ones
    /// with the retired keys (`--retired-key-file`), then forget the retired keys.
    Reencrypt(ReencryptArgs),
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
                Ok(report) => {
                    print_report(&report, output, &mut out);
                    Exit::Success
                }
                Err(f) => f.report("cra store reencrypt", output, &mut out, &mut err),
            }
        }
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

/// Re-encrypts the named store, telling `progress` (standard error) how far each table got.
pub fn reencrypt(
    args: &ReencryptArgs,
    progress: &mut dyn Write,
) -> Result<ReencryptReport, Failure> {
    let store = &args.store;
    if store.storage_key_file.is_none() {
        return Err(Failure::new(
            Token::InvalidRequest,
            "give the key to encrypt with as --storage-key-file (and each older key as --retired-key-file)",
        ));
    }
    let mut tell = |table: &str, n: u64| {
        let _ = writeln!(progress, "{table}: {n} records re-encrypted");
    };
    let report = if let Some(pg) = store.open_postgres()? {
        pg.reencrypt(&mut tell)
    } else {
        let Some(dir) = store.data.as_deref() else {
            return Err(Failure::new(
                Token::InvalidRequest,
                "name the store: --data DIR (stopped server) or --postgres URL",
            ));
        };
        store.open_redb(dir)?.reencrypt(&mut tell)
    };
    report.map_err(|e| Failure::new(e.token(), e.to_string()))
}

fn print_report(report: &ReencryptReport, output: OutputFormat, out: &mut dyn Write) {
    let _ = match output {
        OutputFormat::Json => writeln!(
            out,
            "{}",
            json!({
                "tables": report.tables.iter().map(|(t, n)| json!({"table": t, "reencrypted": n})).collect::<Vec<_>>(),
                "retired_keys": report.retired,
            })
        ),
        OutputFormat::Text => {
            let total: u64 = report.tables.iter().map(|(_, n)| n).sum();
            writeln!(
                out,
                "{total} records re-encrypted; keys no longer needed: {}",
                if report.retired.is_empty() {
                    "none".to_owned()
                } else {
                    report.retired.join(", ")
                }
            )
        }
    };
}
