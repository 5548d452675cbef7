//! `cra serve` as users start it: the binary on loopback, on PostgreSQL (when
//! `CRA_TEST_POSTGRES_URL` is set), printing the bound address, then stopped by SIGTERM with a
//! clean exit. Opening the PostgreSQL backend connects synchronous clients, which once panicked
//! when started on an async worker.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use cra_store::testing::{TestSchema, postgres_url};

use crate::{Reaped, terminate};

pub(crate) type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// The address `child` (a `cra serve`) prints once it listens, and the rest of its output.
pub(crate) fn listening(child: &mut std::process::Child) -> (String, Lines) {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("cra serve stopped before listening")
            .unwrap();
        if let Some(a) = line.strip_prefix("cra serve: listening on ") {
            return (a.to_owned(), lines);
        }
    }
}

/// Starts `cra serve` on loopback over the data directory `data`, in `cwd`, with `extra`
/// arguments, once it listens: the child, its address and the rest of its output.
fn start_serve(
    data: &std::path::Path,
    cwd: &std::path::Path,
    extra: &[&std::ffi::OsStr],
) -> (std::process::Child, String, Lines) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(extra)
        .arg("--data")
        .arg(data)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, lines) = listening(&mut child);
    (child, addr, lines)
}

#[test]
fn serve_on_postgres_starts_answers_and_stops_cleanly() {
    let Some(url) = postgres_url("serve_on_postgres_starts_answers_and_stops_cleanly") else {
        return;
    };
    let schema = TestSchema::new(&url, "serve");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cra.toml");
    std::fs::write(
        &config,
        format!("postgres_schema = \"{}\"\n", schema.name()),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cra"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--postgres",
            &url,
            "--config",
        ])
        .arg(&config)
        .arg("--data")
        .arg(dir.path().join("data"))
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, lines) = listening(&mut child);
    let health = crate::http_get(format!("{addr}/v1/health")).unwrap();
    assert_eq!(health.status().as_u16(), 200);
    // Read the rest on another thread: it ends when the server closes its output.
    let rest = std::thread::spawn(move || lines.map(|l| l.unwrap()).collect::<Vec<String>>());
    terminate(child);
    let rest = rest.join().unwrap();
    assert!(
        rest.iter()
            .any(|l| l.contains("stopped; every acknowledged write is on disk")),
        "{rest:?}"
    );
}

/// Issue 29, item 2, as the probe found it: under `prlimit --nofile=512`, 1,000 half-open
/// connections (a partial request head each, then silence) must not lock out a client that
/// sends its request, and SIGTERM still stops the server at once. On `fda2190` the descriptors
/// ran out and every client was locked out; a half-sent head kept SIGTERM from exiting.
#[test]
fn under_512_descriptors_1000_half_open_connections_lock_out_no_client() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new("prlimit")
        .arg("--nofile=512")
        .arg(env!("CARGO_BIN_EXE_cra"))
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(&data)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit (util-linux) runs the server");
    let (addr, _lines) = listening(&mut child);
    let socket = addr.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..1000 {
        // A connect the server's backlog cannot take yet still completes later; a refused one
        // counts too: the point is the client below.
        if let Ok(mut tcp) = std::net::TcpStream::connect(&socket) {
            let _ = tcp.write_all(b"GET /v1/health HTTP/1.1\r\nHost: cra\r\n");
            held.push(tcp);
        }
    }
    let token = cra_runtime::auth::local_admin_token(&data).unwrap();
    let client = cra_runtime::tls::blocking_http_client()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let answer = client
        .get(format!("{addr}/metrics"))
        .bearer_auth(&token)
        .send()
        .expect("an authenticated client is served");
    assert_eq!(answer.status().as_u16(), 200);
    terminate(child);
    drop(held);
}

/// Issue 29, item 12: `cra serve --tls-cert --tls-key` listens on https://, and a client command
/// reaches it given the CA (`--ca-cert`), and refuses it without, as an unknown certificate.
#[test]
fn cra_serve_over_tls_answers_cra_commands_given_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let made = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tools/make-test-pki.sh"
        ))
        .arg(&pki)
        .status()
        .expect("bash runs");
    assert!(made.success(), "make-test-pki.sh (needs openssl)");
    let data = dir.path().join("data");
    let (cert, key) = (pki.join("server.pem"), pki.join("server.key"));
    let tls = [
        "--tls-cert".as_ref(),
        cert.as_os_str(),
        "--tls-key".as_ref(),
        key.as_os_str(),
    ];
    let (child, url, _lines) = start_serve(&data, dir.path(), &tls);
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let token = cra_runtime::auth::local_admin_token(&data).unwrap();
    let approvals = |ca: Option<&std::path::Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cra"));
        cmd.args(["approvals", "list", "-o", "json", "--url", &url])
            .env("CRA_TOKEN", &token)
            .env_remove("CRA_CA_CERT");
        if let Some(ca) = ca {
            cmd.arg("--ca-cert").arg(ca);
        }
        cmd.output().unwrap()
    };
    let trusted = approvals(Some(&pki.join("ca.pem")));
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&trusted.stdout).unwrap();
    assert!(listed.is_array() || listed.is_object(), "{listed}");
    let untrusted = approvals(None);
    assert_eq!(untrusted.status.code(), Some(1));
    let said = String::from_utf8_lossy(&untrusted.stderr);
    assert!(said.contains("certificate"), "{said}");
    terminate(child);
}

/// Issue 29, item 3: twelve concurrent reads of a 50 MB chain keep `cra serve` under 200 MB of
/// resident memory at its peak (`VmHWM`), because the chain is streamed a page at a time from
/// the store. On `fda2190` each read loaded and rendered the whole chain: 3 GB at the peak.
#[test]
fn twelve_concurrent_reads_of_a_50_mb_chain_stay_under_200_mb_of_memory() {
    const EVENTS: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let session = "0190b000-0000-7000-8000-00000000c4a1";
    write_large_chain(&data, session, EVENTS, 25_000);
    let (child, addr, _lines) = start_serve(&data, dir.path(), &[]);
    let token = cra_runtime::auth::local_admin_token(&data).unwrap();
    let before = memory_kib(child.id(), "VmRSS");
    let readers: Vec<_> = (0..12)
        .map(|_| {
            let (url, token) = (format!("{addr}/v1/traces/{session}"), token.clone());
            std::thread::spawn(move || {
                let mut resp = cra_runtime::tls::blocking_http_client()
                    .build()
                    .unwrap()
                    .get(url)
                    .bearer_auth(token)
                    .header("accept", "application/x-ndjson")
                    .send()
                    .unwrap();
                assert_eq!(resp.status().as_u16(), 200);
                let mut lines = LineCount(0);
                std::io::copy(&mut resp, &mut lines).unwrap();
                lines.0
            })
        })
        .collect();
    for r in readers {
        assert_eq!(r.join().unwrap(), EVENTS, "every read has the whole chain");
    }
    let peak = memory_kib(child.id(), "VmHWM");
    terminate(child);
    eprintln!(
        "cra serve: {} MiB before the reads, {} MiB at the peak",
        before / 1024,
        peak / 1024
    );
    assert!(
        peak < 200 * 1024,
        "12 reads of the 50 MB chain peaked at {} MiB (it was at {} MiB before them)",
        peak / 1024,
        before / 1024
    );
}

/// Writes a session of `events` events of about `bytes` each into the redb store at `data`, as
/// the server would have: its CARP session record, then its chain.
fn write_large_chain(data: &std::path::Path, session: &str, events: usize, bytes: usize) {
    use cra_carp::store::CarpStore as _;
    use cra_trace::store::ChainStore as _;
    let store = cra_store::RedbStore::open(data).unwrap();
    let record = cra_carp::store::SessionRecord::opened(
        session,
        "bulk-bot",
        "2026-03-02T10:00:00.000000Z".into(),
    );
    store.create_session(&record).unwrap();
    let filler = "x".repeat(bytes);
    for batch in 0..events / 100 {
        let drafts = (0..100)
            .map(|i| cra_trace::EventDraft {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                span_id: "00f067aa0ba902b7".into(),
                parent_span_id: None,
                event_type: "bulk.recorded".into(),
                payload: serde_json::json!({ "n": batch * 100 + i, "filler": filler }),
            })
            .collect();
        store.append(session, drafts).unwrap();
    }
}

/// The `field` line of `/proc/{pid}/status` (`VmRSS`, `VmHWM`), in KiB.
fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A writer that counts the lines written to it and keeps nothing.
struct LineCount(usize);

impl std::io::Write for LineCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.iter().filter(|&&b| b == b'\n').count();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Issue 31, item 3, as an operator does it: `cra keys add` writes a second admin key and the
/// running `cra serve` picks it up by itself (its file watch); SIGHUP reloads on demand; `cra
/// keys revoke` retires the first admin key, refused from the next request after the reload; no
/// restart. The server's log says each reload, which is what the test waits for (a 60 s
/// deadline, never a sleep).
#[test]
fn cra_serve_reloads_its_keys_on_a_file_change_and_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut child, addr, _stdout) = start_serve(&data, dir.path(), &[]);
    let log = log_lines(child.stderr.take().unwrap());
    let server = Reaped::new(child);
    let admin = cra_runtime::auth::local_admin_token(&data).unwrap();
    let status = |token: &str| {
        cra_runtime::tls::blocking_http_client()
            .build()
            .unwrap()
            .get(format!("{addr}/v1/atlases"))
            .bearer_auth(token)
            .send()
            .unwrap()
    };
    assert_eq!(status(&admin).status().as_u16(), 200);
    let keys = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cra"))
            .arg("keys")
            .args(args)
            .arg("--data")
            .arg(&data)
            .args(["-o", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };

    let added = keys(&[
        "add", "--actor", "admin-2", "--type", "human", "--role", "admin",
    ]);
    let second = added["token"].as_str().unwrap().to_owned();
    wait_for(&log, &["credentials reloaded", "source=Watch", "added=1"]);
    assert_eq!(status(&second).status().as_u16(), 200);

    // SIGHUP reloads at once; the files are as they were, so nothing changed.
    let hup = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_for(&log, &["nothing changed", "source=Signal"]);

    // The first admin key revoked: refused from the next request after the reload.
    let first = cra_runtime::auth::fingerprint(&admin);
    let revoked = keys(&["revoke", "--key", &first]);
    assert_eq!(revoked[0]["status"], "revoked");
    wait_for(&log, &["credentials reloaded", "source=Watch", "changed=1"]);
    let refused = status(&admin);
    assert_eq!(refused.status().as_u16(), 401);
    assert!(refused.text().unwrap().contains("was revoked"));
    assert_eq!(status(&second).status().as_u16(), 200);
    terminate(server.take());
}

/// The lines `stderr` (a server's log) writes, read on a thread of their own.
fn log_lines(stderr: std::process::ChildStderr) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads `log` until a line holds every one of `parts`; fails after 60 s without one, naming
/// the lines seen.
fn wait_for(log: &std::sync::mpsc::Receiver<String>, parts: &[&str]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match log.recv_timeout(left) {
            Ok(line) if parts.iter().all(|p| line.contains(p)) => return,
            Ok(line) => seen.push(line),
            Err(e) => panic!("no log line with {parts:?} ({e}); saw {seen:#?}"),
        }
    }
}
