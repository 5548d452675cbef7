//! `cra log`: the auditor's and operator's side of the transparency log (issue 26,
//! `specs/tlog.md`). `cra log key generate` makes a log's signer key; `cra log watch` fetches a
//! server's latest checkpoint, checks its signature by the pinned key and its consistency with
//! the last checkpoint seen (kept in a state file), and exits 2 with both checkpoints and the
//! failing proof when the log was rewritten, shrunk, served a bad proof, or signed by another
//! key; `cra log verify-receipt` is [`crate::cmd::log_receipt`].

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use cra_tlog::{Checkpoint, Ed25519Verifier, Hash, Verifiers};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra log` subcommands.
#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// The log's signer key.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Check a server's latest checkpoint against the last one seen (exit 2 when the log is
    /// not consistent with it).
    Watch(WatchArgs),
    /// Check a receipt of a resolve or execute offline (exit 2 when it does not hold).
    VerifyReceipt(crate::cmd::log_receipt::VerifyReceiptArgs),
}

/// `cra log key` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Write a new log signer key (`log.key_file`) and print its verifier key.
    Generate(GenerateArgs),
}

/// `cra log key generate` options.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The log's origin (the key's name), e.g. `cra.example.com/cra-log`.
    #[arg(long)]
    pub origin: String,
    /// The file to write the signer key to (mode 0600); an existing file is never overwritten.
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `cra log watch` options.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The server's base URL (e.g. http://127.0.0.1:8421; default: $CRA_URL). No key is
    /// needed: the log's key, checkpoints, proofs and tiles are public.
    #[arg(long, env = "CRA_URL")]
    pub url: String,
    /// The state file: the pinned key and the last checkpoint seen (created on first use).
    #[arg(long)]
    pub state: PathBuf,
    /// The log's verifier key string to pin. Absent: the state's, else the server's own
    /// (trusted on first use, and said so). A key other than the state's is pinned only when
    /// the served checkpoint is signed by both (the log is rotating its key).
    #[arg(long)]
    pub log_key: Option<String>,
    /// Check again every this many seconds until a check fails (absent: check once).
    #[arg(long)]
    pub every: Option<u64>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Runs a `cra log` subcommand.
pub fn run(command: LogCommand) -> Exit {
    match command {
        LogCommand::Key(KeyCommand::Generate(args)) => match generate(&args) {
            Ok(vkey) => {
                match args.output {
                    OutputFormat::Text => println!("{vkey}"),
                    OutputFormat::Json => println!(
                        "{}",
                        json!({"origin": args.origin, "verifier_key": vkey, "key_file": args.out})
                    ),
                }
                Exit::Success
            }
            Err(e) => {
                eprintln!("cra log key generate: {e}");
                Exit::CouldNotRun
            }
        },
        LogCommand::VerifyReceipt(args) => crate::cmd::log_receipt::run(&args),
        LogCommand::Watch(args) => loop {
            let outcome = watch_once(&args);
            let exit = report(&outcome, args.output);
            match (args.every, exit) {
                (Some(seconds), Exit::Success) => {
                    std::thread::sleep(std::time::Duration::from_secs(seconds.max(1)));
                }
                _ => return exit,
            }
        },
    }
}

/// Writes a new signer key for a log named `args.origin` and returns its verifier key string.
///
/// # Errors
/// A name that cannot name a key, or a file that exists or cannot be written.
pub fn generate(args: &GenerateArgs) -> Result<String, String> {
    let key = cra_runtime::tlog::generate_key(&args.origin)?;
    let signer = cra_tlog::Ed25519Signer::parse(&key).map_err(|e| e.to_string())?;
    cra_runtime::tlog::write_key_file(&args.out, &key)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    Ok(signer.verifier().to_key_string())
}

/// The verifiers of the key pinned in `state` (`pinned`), when the served checkpoint is signed by
/// both it and the new key (`new`, of the log `origin`): the watcher may then pin the new key.
fn repin(
    pinned: &str,
    origin: &str,
    new: &Verifiers,
    served: &str,
    state: &Path,
) -> Result<Verifiers, String> {
    let refuse = |why: String| {
        format!(
            "--log-key is not the key pinned in {} and {why}; a log rotating its key signs each checkpoint with both keys: run again while it does, or use another state file for another log",
            state.display()
        )
    };
    let old = Ed25519Verifier::parse(pinned)
        .map_err(|e| format!("the key pinned in {}: {e}", state.display()))?;
    if old.name() != origin {
        return Err(refuse(format!(
            "names another log (`{}`, not `{origin}`)",
            old.name()
        )));
    }
    let old = Verifiers::new(vec![old]).map_err(|e| e.to_string())?;
    for (which, verifiers) in [("the pinned key", &old), ("the new key", new)] {
        if let Err(e) = Checkpoint::open(served.as_bytes(), origin, verifiers) {
            return Err(refuse(format!(
                "the served checkpoint is not signed by {which} ({e})"
            )));
        }
    }
    Ok(old)
}

/// What a watcher keeps between runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WatchState {
    /// The pinned verifier key string.
    pub log_key: String,
    /// The last checkpoint seen and found consistent (a signed note), if any.
    pub checkpoint: Option<String>,
}

/// The result of one check.
#[derive(Debug)]
pub enum WatchOutcome {
    /// The new checkpoint is signed by the pinned key and consistent with the last one seen.
    Consistent {
        /// The last size seen before (none on the first check).
        from: Option<u64>,
        /// The new size.
        to: u64,
        /// Whether the key was pinned from the server on this first use.
        pinned_on_first_use: bool,
    },
    /// The log is not what the last checkpoint promised.
    Inconsistent(Box<Finding>),
    /// The check could not be made (network, files).
    Failed(String),
}

/// Evidence of an inconsistent log: what was wrong, both checkpoints and the proof.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// `bad_signature`, `smaller_tree`, `rewritten_tree` or `bad_consistency_proof`.
    pub kind: &'static str,
    /// What was found, for people.
    pub message: String,
    /// The last checkpoint seen (signed note).
    pub previous: Option<String>,
    /// The checkpoint the server serves now (signed note).
    pub served: String,
    /// The consistency proof the server gave, lowercase hex, when one was asked.
    pub proof: Option<Vec<String>>,
}

fn report(outcome: &WatchOutcome, output: OutputFormat) -> Exit {
    match (outcome, output) {
        (
            WatchOutcome::Consistent {
                from,
                to,
                pinned_on_first_use,
            },
            OutputFormat::Text,
        ) => {
            if *pinned_on_first_use {
                println!(
                    "pinned the server's log key on first use (pass --log-key to pin one you obtained yourself)"
                );
            }
            match from {
                Some(f) => println!("consistent: the log grew from {f} to {to} leaves"),
                None => println!("first checkpoint seen: {to} leaves"),
            }
            Exit::Success
        }
        (
            WatchOutcome::Consistent {
                from,
                to,
                pinned_on_first_use,
            },
            OutputFormat::Json,
        ) => {
            println!(
                "{}",
                json!({"consistent": true, "from": from, "to": to, "pinned_on_first_use": pinned_on_first_use})
            );
            Exit::Success
        }
        (WatchOutcome::Inconsistent(f), OutputFormat::Text) => {
            println!("INCONSISTENT ({}): {}", f.kind, f.message);
            if let Some(p) = &f.previous {
                println!("--- last checkpoint seen\n{p}");
            }
            println!("--- checkpoint served now\n{}", f.served);
            if let Some(proof) = &f.proof {
                println!("--- consistency proof served\n{}", proof.join("\n"));
            }
            Exit::Negative
        }
        (WatchOutcome::Inconsistent(f), OutputFormat::Json) => {
            let mut v = serde_json::to_value(f).unwrap_or_default();
            v["consistent"] = json!(false);
            println!("{v}");
            Exit::Negative
        }
        (WatchOutcome::Failed(e), _) => {
            eprintln!("cra log watch: {e}");
            Exit::CouldNotRun
        }
    }
}

/// One check of the server at `args.url` against the state file; the state moves on only when
/// the new checkpoint is consistent.
pub fn watch_once(args: &WatchArgs) -> WatchOutcome {
    match check(args) {
        Ok(outcome) => outcome,
        Err(e) => WatchOutcome::Failed(e),
    }
}

fn get_text(http: &reqwest::blocking::Client, url: &str) -> Result<String, String> {
    let resp = http
        .get(url)
        .send()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    let text = resp.text().map_err(|e| format!("GET {url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("GET {url}: {status}: {}", text.trim()));
    }
    Ok(text)
}

fn check(args: &WatchArgs) -> Result<WatchOutcome, String> {
    let http = cra_runtime::tls::blocking_http_client()
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let base = args.url.trim_end_matches('/');
    let stored: Option<WatchState> = match std::fs::read_to_string(&args.state) {
        Ok(text) => Some(
            serde_json::from_str(&text)
                .map_err(|e| format!("{} is not a watch state file: {e}", args.state.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read {}: {e}", args.state.display())),
    };
    let mut pinned_on_first_use = false;
    let log_key = match (&args.log_key, &stored) {
        (Some(k), _) => k.trim().to_owned(),
        (None, Some(s)) => s.log_key.clone(),
        (None, None) => {
            pinned_on_first_use = true;
            get_text(&http, &format!("{base}/v1/log/key"))?
                .trim()
                .to_owned()
        }
    };
    let verifier = Ed25519Verifier::parse(&log_key).map_err(|e| format!("the log key: {e}"))?;
    let origin = verifier.name().to_owned();
    let new_verifiers = Verifiers::new(vec![verifier]).map_err(|e| e.to_string())?;
    let previous_note = stored.as_ref().and_then(|s| s.checkpoint.clone());
    let served = get_text(&http, &format!("{base}/v1/log/checkpoint"))?;
    // The state's checkpoint opens with the key pinned before; a new --log-key is pinned only
    // when the served checkpoint carries both keys' signatures (a rotation: the old key vouches
    // for the new one).
    let verifiers = match &stored {
        Some(s) if s.log_key != log_key => {
            repin(&s.log_key, &origin, &new_verifiers, &served, &args.state)?
        }
        _ => new_verifiers,
    };
    let finding = |kind, message: String, proof| {
        Ok(WatchOutcome::Inconsistent(Box::new(Finding {
            kind,
            message,
            previous: previous_note.clone(),
            served: served.clone(),
            proof,
        })))
    };
    let new = match Checkpoint::open(served.as_bytes(), &origin, &verifiers) {
        Ok((c, _)) => c,
        Err(e) => {
            return finding(
                "bad_signature",
                format!("the served checkpoint is not signed by the pinned key of {origin}: {e}"),
                None,
            );
        }
    };
    let from = match &previous_note {
        None => None,
        Some(note) => {
            let (old, _) = Checkpoint::open(note.as_bytes(), &origin, &verifiers).map_err(|e| {
                format!(
                    "the checkpoint in {} no longer opens: {e}",
                    args.state.display()
                )
            })?;
            if let Some(f) = compare(&http, base, &old, &new)? {
                return finding(f.0, f.1, f.2);
            }
            Some(old.size())
        }
    };
    let state = WatchState {
        log_key,
        checkpoint: Some(served.clone()),
    };
    save(&args.state, &state)?;
    Ok(WatchOutcome::Consistent {
        from,
        to: new.size(),
        pinned_on_first_use,
    })
}

type Mismatch = (&'static str, String, Option<Vec<String>>);

/// Holds `new` against `old`: `Some` names what is wrong.
fn compare(
    http: &reqwest::blocking::Client,
    base: &str,
    old: &Checkpoint,
    new: &Checkpoint,
) -> Result<Option<Mismatch>, String> {
    if new.size() < old.size() {
        return Ok(Some((
            "smaller_tree",
            format!(
                "the log served a tree of {} leaves after one of {}: a log never shrinks",
                new.size(),
                old.size()
            ),
            None,
        )));
    }
    if new.size() == old.size() {
        if new.root() != old.root() {
            return Ok(Some((
                "rewritten_tree",
                format!(
                    "two different trees of {} leaves are signed: the log was rewritten",
                    new.size()
                ),
                None,
            )));
        }
        return Ok(None);
    }
    let url = format!(
        "{base}/v1/log/proof/consistency?from={}&to={}",
        old.size(),
        new.size()
    );
    let body: serde_json::Value = serde_json::from_str(&get_text(http, &url)?)
        .map_err(|e| format!("GET {url}: not JSON: {e}"))?;
    let hex = crate::cmd::trace_proof::hex_hashes(&body);
    let checked = cra_tlog::proof::proof_from_hex(&hex)
        .map_err(|e| e.to_string())
        .and_then(|proof: Vec<Hash>| {
            cra_tlog::verify_consistency(old.size(), new.size(), old.root(), new.root(), &proof)
                .map_err(|e| e.to_string())
        });
    Ok(checked.err().map(|e| {
        (
            "bad_consistency_proof",
            format!(
                "the tree of {} leaves is not proved to extend the one of {} seen before: {e}",
                new.size(),
                old.size()
            ),
            Some(hex),
        )
    }))
}

/// Writes the state file whole: a temporary file beside it, synced, then renamed over it.
fn save(path: &Path, state: &WatchState) -> Result<(), String> {
    let text = serde_json::to_string_pretty(state).map_err(|e| e.to_string())?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
