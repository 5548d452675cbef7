//! `cra trace export`: write stored TRACE chains as `.trace.jsonl` files that `cra trace verify`
//! (and the Appendix B Python) check offline.
//!
//! Sources, in this order: `--data DIR` (the redb data directory; a running server holds it),
//! `--postgres URL` (a PostgreSQL deployment, schema `--postgres-schema`), `--url` / `CRA_URL`
//! (a running server, `GET /v1/traces/{id}` with `Accept: application/x-ndjson`, bearer token
//! from `--token` / `CRA_TOKEN` or the local admin key), else `./cra-data`.
//!
//! * `--session ID`: one chain, to `--out FILE` or standard output.
//! * `--all`: every session with a chain, one `<session_id>.trace.jsonl` per session in the
//!   directory `--out DIR` (created if needed). From a server, "every" means every chain
//!   `GET /v1/traces` lists for the caller (its own sessions; all of them for an auditor).
//!   A chain that cannot be read (a stored event that no longer parses) does not stop the
//!   others: each such session is named on standard error (and under `unreadable` with
//!   `--json`) with why, and the command exits 2 once every other chain is exported.
//!
//! Files are written to `<name>.partial` and renamed when complete, so an interrupted export
//! never leaves a truncated chain under the final name. Progress goes to standard error.
//!
//! Exit codes: 0 exported; 1 could not run (no such session, unopenable store, unreachable
//! server, unwritable output).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use cra_trace::TraceEvent;
use cra_trace::store::ChainStore;
use cra_wire::Token;
use serde_json::json;

use crate::cmd::trace::Progress;
use crate::cmd::trace_io::{Failure, StoreArgs, read_readable_prefix};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// Arguments of `cra trace export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// The session to export.
    #[arg(long, conflicts_with = "all", required_unless_present = "all")]
    pub session: Option<String>,
    /// Export every session, one file each, into the directory given with --out (a chain that
    /// cannot be read is listed on standard error and the others are exported; exit 2).
    #[arg(long)]
    pub all: bool,
    /// Where to write: a file for --session (default: standard output), a directory for --all.
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    /// The store to read (--data DIR or --postgres URL).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Read from a running server instead (default $CRA_URL), with --session.
    #[arg(long, env = "CRA_URL")]
    pub url: Option<String>,
    /// The bearer token for --url (default $CRA_TOKEN, else the admin key of ./cra-data).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Progress on standard error: auto shows it when standard error is a terminal.
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
    /// Print a JSON summary (sessions, events, files) on standard output; needs --out.
    #[arg(long)]
    pub json: bool,
    /// Also write `<file>.tlog-proof` beside each chain: a C2SP tlog-proof@v1 that the chain's
    /// head is in a signed checkpoint of the transparency log (`cra trace verify FILE
    /// --checkpoint FILE.tlog-proof --log-key KEY` checks it offline). Needs --out. From a server
    /// (--url) a checkpoint is cut when none covers the head yet; from a stopped store (--data,
    /// --postgres) its latest published checkpoint must already cover it.
    #[arg(long)]
    pub with_proofs: bool,
}

/// One exported session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The session.
    pub session_id: String,
    /// Events written.
    pub events: u64,
    /// The file, or `None` for standard output (and for a chain that could not be read).
    pub file: Option<PathBuf>,
    /// Why the chain could not be read: `--all` goes on with the others, lists this one and
    /// exits 2. `None` when it was exported.
    pub unreadable: Option<String>,
}

impl Exported {
    /// A chain `--all` could not read, and why.
    fn unreadable(session_id: &str, why: Failure) -> Self {
        Self {
            session_id: session_id.to_owned(),
            events: 0,
            file: None,
            unreadable: Some(why.message),
        }
    }
}

/// A file name for a session: the id itself when it is made of letters, digits, `-`, `_` and
/// `.` (and does not start with `.`), else the id with every other byte as `%XX`.
pub fn file_name(session_id: &str) -> String {
    let mut name = String::new();
    for (i, b) in session_id.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if plain {
            name.push(b as char);
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name.push_str(".trace.jsonl");
    name
}

/// Draws `exporting ...` on `err` at most every 100 ms when `show`.
struct Meter<'a> {
    err: &'a mut dyn Write,
    show: bool,
    last: Option<Instant>,
    drew: bool,
}

impl Meter<'_> {
    fn tick(&mut self, line: impl FnOnce() -> String) {
        if !self.show
            || self
                .last
                .is_some_and(|l| l.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(Instant::now());
        self.drew = true;
        let _ = write!(self.err, "\r{:<72}", line());
        let _ = self.err.flush();
    }

    fn done(&mut self) {
        if self.drew {
            let _ = write!(self.err, "\r{:72}\r", "");
            let _ = self.err.flush();
        }
    }
}

fn write_events(w: &mut dyn Write, events: &[TraceEvent]) -> io::Result<()> {
    for e in events {
        serde_json::to_writer(&mut *w, e).map_err(io::Error::other)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Writes `bytes` (or events) to `path` through `path.partial`.
fn write_file(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Failure> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let fail = |e: io::Error| {
        Failure::new(
            Token::Unavailable,
            format!("cannot write {}: {e}", path.display()),
        )
    };
    let file = std::fs::File::create(&partial).map_err(fail)?;
    let mut w = io::BufWriter::new(file);
    fill(&mut w).map_err(fail)?;
    let file = w.into_inner().map_err(|e| fail(e.into_error()))?;
    file.sync_all().map_err(fail)?;
    std::fs::rename(&partial, path).map_err(fail)
}

/// Exports from a chain store (redb or PostgreSQL).
pub fn export_from_store(
    args: &ExportArgs,
    chains: &dyn ChainStore,
    out: &mut dyn Write,
    err: &mut dyn Write,
    show_progress: bool,
) -> Result<Vec<Exported>, Failure> {
    let mut meter = Meter {
        err,
        show: show_progress,
        last: None,
        drew: false,
    };
    let result = (|| {
        if let Some(id) = &args.session {
            if chains
                .session(id)
                .map_err(|e| Failure::new(e.token(), e.to_string()))?
                .is_none()
            {
                return Err(Failure::new(
                    Token::SessionNotFound,
                    format!(
                        "no session {id} in the store; check the id (or the --data / --postgres source)"
                    ),
                ));
            }
            let (events, broken) = read_readable_prefix(chains, id, &mut |n| {
                meter.tick(|| format!("exporting {id}: {n} events"));
            })?;
            let file = args.out.clone().filter(|p| p.as_os_str() != "-");
            match &file {
                Some(path) => write_file(path, |w| write_events(w, &events))?,
                None => write_events(out, &events).map_err(|e| {
                    Failure::new(
                        Token::Unavailable,
                        format!("cannot write standard output: {e}"),
                    )
                })?,
            }
            return Ok(vec![Exported {
                session_id: id.clone(),
                events: events.len() as u64,
                file,
                unreadable: broken.map(|why| why.message),
            }]);
        }
        let Some(dir) = &args.out else {
            return Err(Failure::new(
                Token::InvalidRequest,
                "--all writes one file per session: give the directory with --out DIR",
            ));
        };
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::new(
                Token::Unavailable,
                format!("cannot create {}: {e}", dir.display()),
            )
        })?;
        let sessions = chains
            .sessions()
            .map_err(|e| Failure::new(e.token(), e.to_string()))?;
        let total = sessions.len();
        let mut done = Vec::with_capacity(total);
        let mut events_so_far = 0u64;
        for (k, s) in sessions.iter().enumerate() {
            let (events, broken) = read_readable_prefix(chains, &s.session_id, &mut |n| {
                meter.tick(|| {
                    format!(
                        "exporting session {}/{total}, {} events",
                        k + 1,
                        events_so_far + n
                    )
                });
            })?;
            if let Some(why) = broken {
                done.push(Exported::unreadable(&s.session_id, why));
                continue;
            }
            let path = dir.join(file_name(&s.session_id));
            write_file(&path, |w| write_events(w, &events))?;
            events_so_far += events.len() as u64;
            meter.tick(|| {
                format!(
                    "exporting session {}/{total}, {events_so_far} events",
                    k + 1
                )
            });
            done.push(Exported {
                session_id: s.session_id.clone(),
                events: events.len() as u64,
                file: Some(path),
                unreadable: None,
            });
        }
        Ok(done)
    })();
    meter.done();
    result
}

/// Exports one session (`--session`) or every readable one (`--all`, from `GET /v1/traces`)
/// from a server.
pub fn export_from_server(
    args: &ExportArgs,
    base: &str,
    token: &str,
    out: &mut dyn Write,
) -> Result<Vec<Exported>, Failure> {
    let client = http_client()?;
    let base = base.trim_end_matches('/');
    let Some(id) = &args.session else {
        let Some(dir) = &args.out else {
            return Err(Failure::new(
                Token::InvalidRequest,
                "--all writes one file per session: give the directory with --out DIR",
            ));
        };
        let sessions = listed_sessions(&client, base, token)?;
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::new(
                Token::Unavailable,
                format!("cannot create {}: {e}", dir.display()),
            )
        })?;
        let mut done = Vec::with_capacity(sessions.len());
        for id in sessions {
            let body = match fetch_chain(&client, base, &id, token) {
                Ok((body, None)) => body,
                // The server could not read the stored chain; anything else stops the export.
                Ok((_, Some(why))) => {
                    done.push(Exported::unreadable(&id, why));
                    continue;
                }
                Err(why) if why.token == Token::IntegrityError => {
                    done.push(Exported::unreadable(&id, why));
                    continue;
                }
                Err(other) => return Err(other),
            };
            let path = dir.join(file_name(&id));
            write_file(&path, |w| w.write_all(&body))?;
            done.push(Exported {
                events: body.iter().filter(|&&b| b == b'\n').count() as u64,
                session_id: id,
                file: Some(path),
                unreadable: None,
            });
        }
        return Ok(done);
    };
    let (body, broken) = fetch_chain(&client, base, id, token)?;
    let events = body.iter().filter(|&&b| b == b'\n').count() as u64;
    let file = args.out.clone().filter(|p| p.as_os_str() != "-");
    match &file {
        Some(path) => write_file(path, |w| w.write_all(&body))?,
        None => out.write_all(&body).map_err(|e| {
            Failure::new(
                Token::Unavailable,
                format!("cannot write standard output: {e}"),
            )
        })?,
    }
    Ok(vec![Exported {
        session_id: id.clone(),
        events,
        file,
        unreadable: broken.map(|why| why.message),
    }])
}

/// Writes `<file>.tlog-proof` for every exported chain file (`crate::cmd::trace_proof`).
fn write_proofs(base: &str, token: &str, exported: &[Exported]) -> Result<(), Failure> {
    let client = http_client()?;
    let base = base.trim_end_matches('/');
    write_proofs_with(exported, |head| {
        crate::cmd::trace_proof::fetch_proof(&client, base, token, head)
    })
}

/// Writes `<file>.tlog-proof` beside each exported chain, the proof of its head made by `prove`.
fn write_proofs_with(
    exported: &[Exported],
    prove: impl Fn(&str) -> Result<cra_tlog::TlogProof, Failure>,
) -> Result<(), Failure> {
    for x in exported {
        let Some(file) = &x.file else { continue };
        if x.events == 0 {
            continue;
        }
        let head = crate::cmd::trace_proof::last_event_hash(file)
            .map_err(|e| Failure::new(Token::Unavailable, e))?;
        let proof = prove(&head)?;
        let path = crate::cmd::trace_proof::proof_path(file);
        write_file(&path, |w| w.write_all(proof.to_text().as_bytes()))?;
    }
    Ok(())
}

/// Every chain the server at `base` lists for the caller (`GET /v1/traces`), each as its JSON
/// Lines: what `cra atlas simulate --url` re-decides.
pub fn server_chains(base: &str, token: &str) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let client = http_client()?;
    let base = base.trim_end_matches('/');
    listed_sessions(&client, base, token)?
        .into_iter()
        .map(|id| match fetch_chain(&client, base, &id, token)? {
            (body, None) => Ok((id, body)),
            (_, Some(why)) => Err(why),
        })
        .collect()
}

/// One session's whole chain from the server at `base`, as JSON Lines: what `cra trace state
/// --session` rebuilds. A chain the server could not read to its end is refused.
pub fn server_chain(base: &str, id: &str, token: &str) -> Result<Vec<u8>, Failure> {
    let client = http_client()?;
    match fetch_chain(&client, base.trim_end_matches('/'), id, token)? {
        (body, None) => Ok(body),
        (_, Some(why)) => Err(why),
    }
}

fn http_client() -> Result<reqwest::blocking::Client, Failure> {
    cra_runtime::tls::blocking_http_client()
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| {
            Failure::new(
                Token::Unavailable,
                format!("cannot build an HTTP client: {e}"),
            )
        })
}

/// The sessions `GET /v1/traces` lists for the caller.
fn listed_sessions(
    client: &reqwest::blocking::Client,
    base: &str,
    token: &str,
) -> Result<Vec<String>, Failure> {
    let listing = fetch(client, &format!("{base}/v1/traces"), token, false)?;
    let chains: Vec<serde_json::Value> = serde_json::from_slice(&listing).map_err(|e| {
        Failure::new(
            Token::Unavailable,
            format!("the server's list of traces is not a JSON array: {e}"),
        )
    })?;
    chains
        .iter()
        .map(|c| {
            c.get("session_id")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .ok_or_else(|| {
                    Failure::new(
                        Token::Unavailable,
                        "the server's list of traces has an entry without session_id",
                    )
                })
        })
        .collect()
}

/// One session's chain as JSON Lines, and why it is short when the server stopped at a stored
/// event it cannot decode: the body then holds fewer events than its `CRA-Chain-Events` header
/// says, and the server's verification of the chain names the event.
fn fetch_chain(
    client: &reqwest::blocking::Client,
    base: &str,
    id: &str,
    token: &str,
) -> Result<(Vec<u8>, Option<Failure>), Failure> {
    let url = format!("{base}/v1/traces/{}", crate::cmd::client::enc(id));
    let (body, declared) = fetch_counted(client, &url, token)?;
    let events = body.iter().filter(|&&b| b == b'\n').count() as u64;
    match declared {
        Some(n) if events < n => {
            let why = unreadable_report(client, &url, token, events, n);
            Ok((body, Some(why)))
        }
        _ => Ok((body, None)),
    }
}

/// Why the server's chain at `url` stopped after `read` of its `declared` events: what its
/// verification (`POST {url}/verify`) finds, or as much as is known when that fails too.
fn unreadable_report(
    client: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    read: u64,
    declared: u64,
) -> Failure {
    let found = client
        .post(format!("{url}/verify"))
        .bearer_auth(token)
        .send()
        .ok()
        .and_then(|r| r.json::<serde_json::Value>().ok())
        .and_then(|v| {
            let e = v.get("first_error")?;
            Some(format!(
                "{} at sequence {}: {}",
                e.get("code")?.as_str()?,
                e.get("sequence")?.as_u64()?,
                e.get("message")?.as_str()?
            ))
        })
        .unwrap_or_else(|| "the server's verification names no finding".to_owned());
    Failure::new(
        Token::IntegrityError,
        format!(
            "the server read {read} of the chain's {declared} events and stopped ({found}); the readable prefix was exported"
        ),
    )
}

/// GETs the chain at `url` as JSON Lines, with the event count its `CRA-Chain-Events` header
/// declares (`None` from a server that sends none).
fn fetch_counted(
    client: &reqwest::blocking::Client,
    url: &str,
    token: &str,
) -> Result<(Vec<u8>, Option<u64>), Failure> {
    let (body, headers) = fetch_with_headers(client, url, token, true)?;
    let declared = headers
        .get("cra-chain-events")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    Ok((body, declared))
}

/// GETs `url` (as JSON Lines when `lines`), turning a refusal into the server's token and message.
fn fetch(
    client: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    lines: bool,
) -> Result<Vec<u8>, Failure> {
    fetch_with_headers(client, url, token, lines).map(|(body, _)| body)
}

/// [`fetch`], with the response's headers.
fn fetch_with_headers(
    client: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    lines: bool,
) -> Result<(Vec<u8>, reqwest::header::HeaderMap), Failure> {
    let mut request = client.get(url).bearer_auth(token);
    if lines {
        request = request.header("accept", "application/x-ndjson");
    }
    let resp = request.send().map_err(|e| {
        let why = cra_runtime::tls::explain(&e);
        Failure::new(Token::Unavailable, format!("cannot reach {url}: {why}"))
    })?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .bytes()
        .map_err(|e| Failure::new(Token::Unavailable, format!("reading {url}: {e}")))?;
    if !status.is_success() {
        let (token, message) = match serde_json::from_slice::<cra_wire::ErrorBody>(&body) {
            Ok(b) => (
                Token::parse(&b.error).unwrap_or(Token::Unavailable),
                format!("the server refused ({}): {}", status.as_u16(), b.message),
            ),
            Err(_) => (
                Token::Unavailable,
                format!("the server answered {}", status.as_u16()),
            ),
        };
        return Err(Failure::new(token, message));
    }
    Ok((body.to_vec(), headers))
}

/// `cra trace export` as a library function; `err_is_terminal` decides `--progress auto`.
pub fn export(
    args: &ExportArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
    err_is_terminal: bool,
) -> Exit {
    const CMD: &str = "cra trace export";
    let fmt = if args.json {
        OutputFormat::Json
    } else {
        OutputFormat::Text
    };
    if args.json && args.out.as_ref().is_none_or(|p| p.as_os_str() == "-") {
        return Failure::new(
            Token::InvalidRequest,
            "--json prints a summary on standard output, so the trace needs a file: give --out",
        )
        .report(CMD, fmt, out, err);
    }
    if args.with_proofs && args.out.as_ref().is_none_or(|p| p.as_os_str() == "-") {
        return Failure::new(
            Token::InvalidRequest,
            "--with-proofs writes each proof as a file beside its chain: give --out",
        )
        .report(CMD, fmt, out, err);
    }
    let show = match args.progress {
        Progress::Always => true,
        Progress::Never => false,
        Progress::Auto => err_is_terminal,
    };
    let result = if !args.store.given()
        && let Some(base) = &args.url
    {
        let token = crate::cmd::client::token_or_local(args.token.clone());
        match token {
            None => Err(Failure::new(
                Token::Unauthorized,
                "no credentials for the server: give --token or set CRA_TOKEN",
            )),
            Some(t) => export_from_server(args, base, &t, out).and_then(|done| {
                if args.with_proofs {
                    write_proofs(base, &t, &done)?;
                }
                Ok(done)
            }),
        }
    } else {
        match args.store.open(Some(Path::new("cra-data"))) {
            Err(f) => Err(f),
            Ok(None) => Err(Failure::new(Token::InvalidRequest, "no store to read")),
            Ok(Some(store)) => export_from_store(args, store.chains.as_ref(), out, err, show)
                .and_then(|done| {
                    if args.with_proofs {
                        write_proofs_with(&done, |head| {
                            crate::cmd::trace_proof::store_proof(store.log.as_ref(), head)
                        })?;
                    }
                    Ok(done)
                }),
        }
    };
    let all = match result {
        Ok(x) => x,
        Err(f) => return f.report(CMD, fmt, out, err),
    };
    // One session is written up to its first unreadable event; `--all` skips such a chain.
    let one = args.session.is_some();
    let unreadable: Vec<&Exported> = all.iter().filter(|x| x.unreadable.is_some()).collect();
    let exported: Vec<&Exported> = all
        .iter()
        .filter(|x| x.unreadable.is_none() || one)
        .collect();
    let events: u64 = exported.iter().map(|x| x.events).sum();
    if args.json {
        let doc = json!({
            "sessions": exported.len(),
            "events": events,
            "files": exported.iter().map(|x| json!({
                "session_id": x.session_id,
                "events": x.events,
                "file": x.file.as_ref().map(|p| p.display().to_string()),
            })).collect::<Vec<_>>(),
            "unreadable": unreadable.iter().map(|x| json!({
                "session_id": x.session_id,
                "reason": x.unreadable,
            })).collect::<Vec<_>>(),
        });
        let _ = writeln!(out, "{doc}");
    }
    for x in &unreadable {
        let what = if one {
            "only what comes before the unreadable event was exported"
        } else {
            "not exported"
        };
        let _ = writeln!(
            err,
            "{CMD}: session {}: {what}: {}",
            x.session_id,
            x.unreadable.as_deref().unwrap_or_default()
        );
    }
    if args.out.as_ref().is_some_and(|p| p.as_os_str() != "-") {
        let _ = writeln!(
            err,
            "exported {} session{} ({events} events) to {}",
            exported.len(),
            if exported.len() == 1 { "" } else { "s" },
            args.out
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
    }
    if unreadable.is_empty() {
        Exit::Success
    } else {
        if !one {
            let n = unreadable.len();
            let _ = writeln!(
                err,
                "{CMD}: {n} chain{} could not be read whole (above); every other one was exported",
                if n == 1 { "" } else { "s" }
            );
        }
        Exit::Negative
    }
}
