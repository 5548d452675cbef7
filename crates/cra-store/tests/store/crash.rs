//! Crash recovery: a writer process is killed with SIGKILL at random points, many times, over one
//! data directory. After each kill the directory must reopen, hold every append whose
//! acknowledgement reached this process, and every chain in it must verify.
//!
//! The writer is this test binary re-run with `CRA_STORE_CRASH_CHILD` set (see [`child_writer`]);
//! it prints `ACK <session> <sequence> <hash>` after each append returns, i.e. once durable.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use cra_store::RedbStore;
use cra_trace::store::ChainStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::backends::{note, verify_stored};

const CHILD_VAR: &str = "CRA_STORE_CRASH_CHILD";
const SEED_VAR: &str = "CRA_STORE_CRASH_SEED";

fn seed() -> u64 {
    std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

fn cycles() -> usize {
    std::env::var("CRA_STORE_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
}

#[test]
fn kill_nine_loses_no_acknowledged_event() {
    let seed = seed();
    let cycles = cycles();
    eprintln!("crash test: seed {seed} ({SEED_VAR}={seed} to repeat), {cycles} cycles");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let exe = std::env::current_exe().unwrap();
    // session -> (last acknowledged sequence, its hash)
    let mut acked: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut total_acks = 0usize;
    for cycle in 0..cycles {
        let kill_after = rng.random_range(1..=40usize);
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::child_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_VAR, &data)
            .env(SEED_VAR, rng.random::<u64>().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut this_cycle = 0usize;
        let mut record = |line: &str, this_cycle: &mut usize| {
            let mut parts = line.split(' ');
            if parts.next() != Some("ACK") {
                return;
            }
            let (Some(session), Some(seq), Some(hash)) = (parts.next(), parts.next(), parts.next())
            else {
                return;
            };
            let seq: u64 = seq.parse().unwrap();
            let entry = acked
                .entry(session.to_owned())
                .or_insert((0, String::new()));
            if entry.1.is_empty() || seq >= entry.0 {
                *entry = (seq, hash.to_owned());
            }
            *this_cycle += 1;
        };
        while this_cycle < kill_after {
            match lines.next() {
                Some(line) => record(&line.unwrap(), &mut this_cycle),
                None => break,
            }
        }
        child.kill().unwrap(); // SIGKILL
        // Acknowledgements already in the pipe reached us too: they count.
        for line in lines {
            match line {
                Ok(line) => record(&line, &mut this_cycle),
                Err(_) => break,
            }
        }
        child.wait().unwrap();
        assert!(
            this_cycle >= 1,
            "cycle {cycle} (seed {seed}): the writer acknowledged nothing"
        );
        total_acks += this_cycle;

        let store = RedbStore::open(&data)
            .unwrap_or_else(|e| panic!("cycle {cycle} (seed {seed}): reopen failed: {e}"));
        for (session, (seq, hash)) in &acked {
            let stored = store.read_range(session, *seq, seq + 1).unwrap();
            assert_eq!(
                stored.first().map(|e| e.event_hash.as_str()),
                Some(hash.as_str()),
                "cycle {cycle} (seed {seed}): acknowledged event {session}/{seq} lost"
            );
        }
        for summary in store.sessions().unwrap() {
            verify_stored(&store, &summary.session_id).unwrap_or_else(|e| {
                panic!(
                    "cycle {cycle} (seed {seed}): chain {} broken: {e}",
                    summary.session_id
                )
            });
        }
    }
    eprintln!("crash test: {cycles} kills, {total_acks} acknowledged appends, none lost");
}

/// The writer process: appends from four threads until killed, acknowledging each durable append
/// on stdout. Does nothing unless started by the crash test.
#[test]
fn child_writer() {
    let Some(dir) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_VAR).unwrap().parse().unwrap();
    let store = Arc::new(RedbStore::open(dir).unwrap());
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let store = store.clone();
            let out = out.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ t);
                for i in 0..1_000_000u64 {
                    let session = if rng.random_bool(0.5) {
                        "shared".to_owned()
                    } else {
                        format!("w{}", rng.random_range(0..6u32))
                    };
                    let n = rng.random_range(1..=5u64);
                    let events = store
                        .append(&session, (0..n).map(|k| note(i * 10 + k)).collect())
                        .unwrap();
                    let last = events.last().unwrap();
                    let mut out = out.lock().unwrap();
                    if writeln!(out, "ACK {session} {} {}", last.sequence, last.event_hash)
                        .and_then(|()| out.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
