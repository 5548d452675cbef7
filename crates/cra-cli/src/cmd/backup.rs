//! `cra backup` and `cra restore` (`specs/backup.md`): a whole store into one archive, the
//! manifest written last, and an archive into a new data directory or schema, verified before it
//! is put in place.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use cra_store::backup::archive::{Archive, partial_path};
use cra_store::backup::{BackupError, Manifest, Verified};
use cra_wire::Token;
use serde_json::json;

use crate::cmd::trace_io::{Failure, StoreArgs};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra backup` options.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The store: a stopped server's data directory (--data), or a PostgreSQL schema
    /// (--postgres, --postgres-schema), which replicas may go on writing meanwhile. Without
    /// either, the running server at --url is backed up online.
    #[command(flatten)]
    pub store: StoreArgs,
    /// The running server to back up online (default: $CRA_URL or http://127.0.0.1:8421);
    /// it needs an admin key.
    #[arg(long, env = "CRA_URL")]
    pub url: Option<String>,
    /// Bearer token for --url (default: $CRA_TOKEN, else the admin key of ./cra-data).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The archive to write (a tar file); an existing file is never replaced. It is built as
    /// `<out>.partial` and renamed once its manifest is written.
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `cra restore` options.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The archive `cra backup` wrote.
    pub archive: PathBuf,
    /// Where to restore: a new data directory (--data) or a new PostgreSQL schema (--postgres,
    /// --postgres-schema), with the storage keys of an encrypted store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

fn failed(e: BackupError) -> Failure {
    let token = match &e {
        BackupError::Exists(_) | BackupError::SchemaInUse(_) => Token::AlreadyExists,
        BackupError::Partial(_) | BackupError::Damaged(_) | BackupError::Backend { .. } => {
            Token::InvalidRequest
        }
        BackupError::Store(s) => s.token(),
        BackupError::Io { .. } => Token::Unavailable,
        BackupError::Verify(_) => Token::IntegrityError,
    };
    Failure::new(token, e.to_string())
}

/// Downloads the running server's backup (`GET /v1/backup`) into `<out>.partial`, checks it
/// against its manifest, then renames it to `out`.
fn backup_online(args: &BackupArgs, progress: &mut dyn Write) -> Result<Manifest, Failure> {
    if args.out.exists() {
        return Err(failed(BackupError::Exists(args.out.clone())));
    }
    let base = args
        .url
        .clone()
        .unwrap_or_else(|| crate::cmd::client::DEFAULT_URL.to_owned());
    let base = base.trim_end_matches('/');
    let token = crate::cmd::client::token_or_local(args.token.clone()).ok_or_else(|| {
        Failure::new(
            Token::Unauthenticated,
            "no credential: pass --token or set CRA_TOKEN (an admin key), or name a stopped \
             store with --data or --postgres",
        )
    })?;
    let could_not = |e: &dyn std::fmt::Display| {
        Failure::new(Token::Unavailable, format!("cannot back up {base}: {e}"))
    };
    let client = cra_runtime::tls::blocking_http_client()
        .timeout(None::<std::time::Duration>)
        .build()
        .map_err(|e| could_not(&e))?;
    let _ = writeln!(progress, "backing up {base} (online)...");
    let mut response = client
        .get(format!("{base}/v1/backup"))
        .bearer_auth(token)
        .send()
        .map_err(|e| could_not(&e))?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().unwrap_or_default();
        return Err(could_not(&format!("the server answered {status}: {body}")));
    }
    let partial = partial_path(&args.out);
    let mut file = std::fs::File::create(&partial).map_err(|e| could_not(&e))?;
    let bytes = std::io::copy(&mut response, &mut file).map_err(|e| could_not(&e))?;
    file.sync_all().map_err(|e| could_not(&e))?;
    let _ = writeln!(
        progress,
        "received {bytes} bytes; checking them against the manifest"
    );
    let archive = Archive::open(&partial).map_err(|e| left_partial(e, &args.out))?;
    if args.out.exists() {
        return Err(failed(BackupError::Exists(args.out.clone())));
    }
    std::fs::rename(&partial, &args.out).map_err(|e| could_not(&e))?;
    Ok(archive.manifest)
}

fn name_the_store() -> Failure {
    Failure::new(
        Token::InvalidRequest,
        "name the store: --data DIR (a stopped server's) or --postgres URL",
    )
}

/// Runs `cra backup`.
pub fn run_backup(args: BackupArgs) -> Exit {
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    match backup(&args, &mut err) {
        Ok(manifest) => {
            let _ = match args.output {
                OutputFormat::Json => writeln!(out, "{}", json!(manifest)),
                OutputFormat::Text => writeln!(
                    out,
                    "backed up {} chains and a log of {} leaves ({} store, {}) into {}\n\
                     not in the archive, keep them yourself:\n  - {}",
                    manifest.chains,
                    manifest.log_size,
                    manifest.backend,
                    manifest.store_format,
                    args.out.display(),
                    manifest.not_included.join("\n  - ")
                ),
            };
            Exit::Success
        }
        Err(f) => f.report("cra backup", args.output, &mut out, &mut err),
    }
}

/// Backs up the named store into `args.out`, telling `progress` (standard error) each table.
pub fn backup(args: &BackupArgs, progress: &mut dyn Write) -> Result<Manifest, Failure> {
    let now = cra_wire::clock::format_timestamp(cra_wire::Clock::now(&cra_wire::SystemClock));
    let mut tell = |table: &str, n: u64| {
        let _ = writeln!(progress, "{table}: {n}");
    };
    let done = if let Some(url) = &args.store.postgres {
        cra_store::backup::pg::backup(url, &args.store.postgres_schema, &args.out, &now, &mut tell)
    } else if let Some(dir) = args.store.data.as_deref() {
        cra_store::backup::redb::backup_dir(dir, &args.out, &now, &mut tell)
    } else {
        return backup_online(args, progress);
    };
    done.map_err(|e| left_partial(e, &args.out))
}

/// The failure of a backup to `out`, naming the `<out>.partial` it left behind, if any.
fn left_partial(e: BackupError, out: &std::path::Path) -> Failure {
    let partial = partial_path(out);
    let mut f = failed(e);
    if partial.exists() {
        f.message = format!(
            "{}; the backup did not finish: {} is partial (a restore refuses it) and nothing \
             was written to {}",
            f.message,
            partial.display(),
            out.display()
        );
    }
    f
}

/// Runs `cra restore`.
pub fn run_restore(args: RestoreArgs) -> Exit {
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    match restore(&args, &mut err) {
        Ok(v) => {
            let _ = match args.output {
                OutputFormat::Json => writeln!(out, "{}", json!(v)),
                OutputFormat::Text => writeln!(
                    out,
                    "restored and verified {} chains ({} events) and a log of {} leaves whose {} \
                     checkpoints match it",
                    v.chains, v.events, v.log_size, v.checkpoints
                ),
            };
            Exit::Success
        }
        Err((f, verify)) => {
            let exit = f.report("cra restore", args.output, &mut out, &mut err);
            if verify { Exit::Negative } else { exit }
        }
    }
}

/// Restores `args.archive` into the named new store; a store that does not verify is not put
/// in place (the error's flag says it was verification that failed, exit 2).
pub fn restore(args: &RestoreArgs, progress: &mut dyn Write) -> Result<Verified, (Failure, bool)> {
    let archive = Archive::open(&args.archive).map_err(|e| (failed(e), false))?;
    let config = cra_store::StoreConfig::default()
        .with_encryption(args.store.encryption().map_err(|f| (f, false))?);
    let mut tell = |n: u64| {
        if n.is_multiple_of(100) {
            let _ = writeln!(progress, "{n} chains verified");
        }
    };
    let done = if let Some(url) = &args.store.postgres {
        cra_store::backup::pg::restore(
            &archive,
            url,
            &args.store.postgres_schema,
            config,
            &mut tell,
        )
    } else {
        let dir = args
            .store
            .data
            .as_deref()
            .ok_or_else(|| (name_the_store(), false))?;
        cra_store::backup::redb::restore(&archive, dir, config, &mut tell)
    };
    done.map_err(|e| {
        let verify = matches!(e, BackupError::Verify(_));
        (failed(e), verify)
    })
}
