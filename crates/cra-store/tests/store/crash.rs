//! Crash recovery: a writer process is killed with SIGKILL at random points, many times, over one
//! data directory. After each kill the directory must reopen, hold every append whose
//! acknowledgement reached this process, and every chain in it must verify.
//!
//! Run against redb and, when `CRA_TEST_POSTGRES_URL` is set, PostgreSQL (one schema over all
//! cycles). The writer is this test binary re-run with `CRA_STORE_CRASH_CHILD` set (see
//! [`child_writer`]); it prints `ACK <session> <sequence> <hash> <request id>` after each append
//! returns, i.e. once durable.
//!
//! The writer opens its store as the runtime does, with CARP state writes deferred to the next
//! append (`StateDurability::WithNextAppend`), and records a request id (a CARP state write)
//! before each append: an acknowledged append must bring that earlier state write with it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use cra_carp::store::CarpStore;
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{PgStore, RedbStore, StateDurability, StoreConfig};
use cra_trace::store::ChainStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::backends::{check_chain, note};

const CHILD_VAR: &str = "CRA_STORE_CRASH_CHILD";
const SCHEMA_VAR: &str = "CRA_STORE_CRASH_SCHEMA";
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

/// Where the writer writes: a redb data directory, or a PostgreSQL URL and schema.
enum Target {
    Redb(std::path::PathBuf),
    Pg(String, String),
}

/// A store holding both chains and CARP state, as the runtime's backends do.
trait Both: ChainStore + CarpStore {}
impl<T: ChainStore + CarpStore> Both for T {}

impl Target {
    fn open(&self) -> Box<dyn Both> {
        match self {
            Target::Redb(dir) => Box::new(RedbStore::open(dir).unwrap()),
            Target::Pg(url, schema) => {
                Box::new(PgStore::connect_with(url, schema, StoreConfig::default(), 4).unwrap())
            }
        }
    }
}

#[test]
fn kill_nine_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    cycle_kills("redb", &Target::Redb(dir.path().join("data")));
}

#[test]
fn kill_nine_loses_no_acknowledged_event_postgres() {
    let Some(url) = postgres_url("kill_nine_loses_no_acknowledged_event_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "crash");
    cycle_kills("postgres", &Target::Pg(url, schema.name().to_owned()));
}

fn cycle_kills(backend: &str, target: &Target) {
    let seed = seed();
    let cycles = cycles();
    eprintln!("crash test ({backend}): seed {seed} ({SEED_VAR}={seed} to repeat), {cycles} cycles");
    let mut rng = StdRng::seed_from_u64(seed);
    let exe = std::env::current_exe().unwrap();
    // session -> (last acknowledged sequence, its hash)
    let mut acked: BTreeMap<String, (u64, String)> = BTreeMap::new();
    // (session, request id) recorded before each acknowledged append.
    let mut state_writes: Vec<(String, String)> = Vec::new();
    let mut total_acks = 0usize;
    for cycle in 0..cycles {
        let kill_after = rng.random_range(1..=40usize);
        let mut command = Command::new(&exe);
        command
            .args(["--exact", "crash::child_writer", "--nocapture"])
            .env(SEED_VAR, rng.random::<u64>().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        match target {
            Target::Redb(dir) => command.env(CHILD_VAR, dir).env_remove(SCHEMA_VAR),
            Target::Pg(url, schema) => command.env(CHILD_VAR, url).env(SCHEMA_VAR, schema),
        };
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut this_cycle = 0usize;
        let mut record = |line: &str, this_cycle: &mut usize| {
            let mut parts = line.split(' ');
            if parts.next() != Some("ACK") {
                return;
            }
            let (Some(session), Some(seq), Some(hash), Some(request)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return;
            };
            state_writes.push((session.to_owned(), request.to_owned()));
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

        let store = target.open();
        for (session, (seq, hash)) in &acked {
            let stored = store.read_range(session, *seq, seq + 1).unwrap();
            assert_eq!(
                stored.first().map(|e| e.event_hash.as_str()),
                Some(hash.as_str()),
                "cycle {cycle} (seed {seed}): acknowledged event {session}/{seq} lost"
            );
        }
        for (session, request) in &state_writes {
            assert!(
                !store.insert_request_id(session, request).unwrap(),
                "cycle {cycle} (seed {seed}): the state write {session}/{request} made before an \
                 acknowledged append was lost"
            );
        }
        for summary in store.sessions().unwrap() {
            verify_chain(&*store, &summary.session_id).unwrap_or_else(|e| {
                panic!(
                    "cycle {cycle} (seed {seed}): chain {} broken: {e}",
                    summary.session_id
                )
            });
        }
    }
    eprintln!(
        "crash test ({backend}): {cycles} kills, {total_acks} acknowledged appends, none lost"
    );
}

/// Reads and checks a whole chain against its head. The head is read first: a killed client's
/// last transaction may still be committing on the PostgreSQL server, and since events and head
/// move together in one transaction, the events up to a head once seen never change.
fn verify_chain(store: &dyn Both, session: &str) -> Result<u64, String> {
    let head = store
        .session(session)
        .map_err(|e| e.to_string())?
        .ok_or("no head")?
        .head;
    let events = store
        .read_range(session, 0, head.next_sequence)
        .map_err(|e| e.to_string())?;
    check_chain(session, &events)?;
    if head.next_sequence != events.len() as u64
        || events
            .last()
            .is_some_and(|e| e.event_hash != head.head_hash)
    {
        return Err(format!(
            "head says {} events ending {}, {} stored",
            head.next_sequence,
            head.head_hash,
            events.len()
        ));
    }
    Ok(head.next_sequence)
}

/// The writer process: appends from four threads until killed, acknowledging each durable append
/// on stdout. Does nothing unless started by the crash test.
#[test]
fn child_writer() {
    let Some(target) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_VAR).unwrap().parse().unwrap();
    let config = StoreConfig::default().with_state_durability(StateDurability::WithNextAppend);
    let store: Arc<dyn Both> = match std::env::var(SCHEMA_VAR) {
        Ok(schema) => {
            Arc::new(PgStore::connect_with(target.to_str().unwrap(), &schema, config, 8).unwrap())
        }
        Err(_) => Arc::new(RedbStore::open_with(target, config).unwrap()),
    };
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
                    let request = format!("{seed}-{t}-{i}");
                    assert!(store.insert_request_id(&session, &request).unwrap());
                    let events = store
                        .append(&session, (0..n).map(|k| note(i * 10 + k)).collect())
                        .unwrap();
                    let last = events.last().unwrap();
                    let mut out = out.lock().unwrap();
                    if writeln!(
                        out,
                        "ACK {session} {} {} {request}",
                        last.sequence, last.event_hash
                    )
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
