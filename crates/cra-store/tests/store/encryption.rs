//! Encryption at rest on both backends: a random marker written in short and long event bodies
//! and in every kind of CARP record is found in no byte of the data directory and no PostgreSQL
//! row, yet reads back whole; a store refuses, at open, keys that are not the ones that encrypted
//! it; a rotation reads old records with the retired key, and re-encryption retires it. Relay's
//! records: `relay`; the rewrite that leaves no freed page's plaintext in a redb file: `rewrite`.

mod relay;
mod rewrite;

use std::sync::Arc;

use cra_carp::store::{ApprovalDecision, SessionRecord, StoredResolution};
use cra_carp::store_contract::{
    sample_approval, sample_execution, sample_lease, sample_resolution,
};
use cra_store::testing::{TestSchema, files_hold, postgres_url, rows_hold};
use cra_store::{BackendError, Encryption, RedbStore, StorageKey, StoreConfig};
use serde_json::json;

use crate::backends::{TestStore, draft, fixed, verify_stored};

/// Where a store lives, so that a test can reopen it with other keys.
enum Place {
    Dir(tempfile::TempDir),
    Schema(TestSchema, String),
}

impl Place {
    fn all(test: &str) -> Vec<Place> {
        let mut out = vec![Place::Dir(tempfile::tempdir().unwrap())];
        if let Some(url) = postgres_url(test) {
            out.push(Place::Schema(TestSchema::new(&url, test), url));
        }
        out
    }

    /// Another, empty place of the same kind.
    fn fresh(&self, test: &str) -> Place {
        match self {
            Place::Dir(_) => Place::Dir(tempfile::tempdir().unwrap()),
            Place::Schema(_, url) => Place::Schema(TestSchema::new(url, test), url.clone()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Place::Dir(_) => "redb",
            Place::Schema(..) => "postgres",
        }
    }

    fn open(&self, enc: Encryption) -> Result<Arc<dyn TestStore>, BackendError> {
        let config = fixed().1.with_encryption(enc);
        Ok(match self {
            Place::Dir(dir) => Arc::new(RedbStore::open_with(dir.path().join("data"), config)?),
            Place::Schema(schema, _) => Arc::new(schema.store(config)?),
        })
    }

    /// Whether `marker` is anywhere in the stored bytes: any file of the data directory, or
    /// any row of any table of the schema. The store must be closed (redb) first.
    fn holds(&self, marker: &str) -> bool {
        match self {
            Place::Dir(dir) => files_hold(&dir.path().join("data"), marker),
            Place::Schema(schema, url) => rows_hold(url, schema.name(), marker),
        }
    }
}

impl Place {
    /// Entries of the owner index (`carp_sessions_by_agent` on redb, `carp_sessions.agent_id`
    /// on PostgreSQL), read with the store closed.
    fn owner_index_entries(&self) -> u64 {
        match self {
            Place::Dir(dir) => {
                use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
                const INDEX: TableDefinition<'_, (&str, &str), ()> =
                    TableDefinition::new("carp_sessions_by_agent");
                let file = dir.path().join("data").join(cra_store::redb::DATABASE_FILE);
                let db = redb::Database::open(file).unwrap();
                let txn = db.begin_read().unwrap();
                txn.open_table(INDEX).unwrap().len().unwrap()
            }
            Place::Schema(schema, url) => {
                let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
                let sql = format!(
                    "SELECT count(*) FROM \"{}\".carp_sessions WHERE agent_id IS NOT NULL",
                    schema.name()
                );
                let n: i64 = c.query_one(&sql, &[]).unwrap().get(0);
                u64::try_from(n).unwrap()
            }
        }
    }
}

pub(crate) fn key() -> StorageKey {
    StorageKey::parse(&StorageKey::generate_text()).unwrap()
}

fn marker() -> String {
    let seed: u64 = rand::random();
    eprintln!("marker seed {seed:016x}");
    format!("mk{seed:016x}")
}

/// Writes the marker in a short and a long event, a session, a resolution, an approval (then
/// decides it), a lease and an execution.
pub(crate) fn write_everything(s: &dyn TestStore, session: &str, marker: &str) {
    let long = format!("{}{marker}", "long record ".repeat(2_000));
    s.append(
        session,
        vec![
            draft("test.note", json!({"short": marker})),
            draft("test.note", json!({"long": long})),
        ],
    )
    .unwrap();
    let agent = format!("agent-{marker}");
    s.create_session(&SessionRecord {
        session_id: session.into(),
        agent_id: agent.clone(),
        parent_session_id: None,
        created_at: "2026-03-01T00:00:00.000000Z".into(),
        ended_at: None,
    })
    .unwrap();
    s.put_resolution(&StoredResolution {
        resolution: sample_resolution(&format!("res-{session}")),
        session_id: session.into(),
        agent_id: agent.clone(),
        expires_at_us: 0,
        origins: Default::default(),
        atlas_digests: Default::default(),
    })
    .unwrap();
    let mut approval = sample_approval(&format!("ap-{session}"));
    approval.session_id = session.into();
    approval.agent_id.clone_from(&agent);
    s.create_approval(&approval).unwrap();
    s.decide_approval(
        &approval.approval_id,
        ApprovalDecision::Grant,
        "operator",
        Some(marker),
        "2026-03-01T00:00:01.000000Z",
    )
    .unwrap();
    let mut lease = sample_lease(&format!("ex-{session}"), "owner", session, Some("k1"));
    lease.agent_id = agent;
    s.claim_execution(&lease).unwrap();
    let mut execution = sample_execution(&format!("ex-done-{session}"), session, None);
    execution.response.result = Some(json!({"secret": marker}));
    s.record_execution(&execution).unwrap();
}

/// Reads back what [`write_everything`] wrote and checks the marker is in each record.
pub(crate) fn read_everything(s: &dyn TestStore, session: &str, marker: &str) {
    assert_eq!(verify_stored(s, session), Ok(2));
    let events = s.read_range(session, 0, 2).unwrap();
    assert_eq!(events[0].payload["short"], marker);
    assert!(
        events[1].payload["long"]
            .as_str()
            .unwrap()
            .ends_with(marker)
    );
    let agent = format!("agent-{marker}");
    assert_eq!(s.get_session(session).unwrap().unwrap().agent_id, agent);
    let resolution = s
        .get_resolution(&format!("res-{session}"))
        .unwrap()
        .unwrap();
    assert_eq!(resolution.agent_id, agent);
    let approval = s.get_approval(&format!("ap-{session}")).unwrap().unwrap();
    assert_eq!(approval.note.as_deref(), Some(marker));
    assert_eq!(s.leases_of("owner").unwrap()[0].agent_id, agent);
}

#[test]
fn with_a_key_no_stored_byte_holds_the_plaintext_and_everything_reads_back() {
    for place in Place::all("encryption_no_stored_byte_holds_the_plaintext") {
        let (secret, visible) = (marker(), marker());
        let store = place.open(Encryption::new(key(), Vec::new())).unwrap();
        write_everything(&*store, "s-secret", &secret);
        read_everything(&*store, "s-secret", &secret);
        drop(store);
        assert!(
            !place.holds(&secret),
            "{}: the marker is stored",
            place.name()
        );

        // The same records without a key are found: the check above can fail.
        let plain = place.open(Encryption::plaintext());
        assert!(
            plain.is_err(),
            "{}: a plaintext open is refused",
            place.name()
        );
        let control = place.fresh("encryption_control");
        let unencrypted = control.open(Encryption::plaintext()).unwrap();
        write_everything(&*unencrypted, "s-visible", &visible);
        drop(unencrypted);
        assert!(
            control.holds(&visible),
            "{}: the control holds it",
            place.name()
        );
    }
}

#[test]
fn a_store_refuses_at_open_keys_that_did_not_encrypt_it() {
    for place in Place::all("encryption_refuses_other_keys") {
        let first = key();
        let store = place
            .open(Encryption::new(first.clone(), Vec::new()))
            .unwrap();
        write_everything(&*store, "s", &marker());
        drop(store);
        let none = place
            .open(Encryption::plaintext())
            .err()
            .unwrap()
            .to_string();
        assert!(
            none.contains("no storage key is configured"),
            "{}: {none}",
            place.name()
        );
        assert!(none.contains(&first.id().to_string()), "{none}");
        let other = place
            .open(Encryption::new(key(), Vec::new()))
            .err()
            .unwrap();
        let other = other.to_string();
        assert!(
            other.contains("not among the configured keys"),
            "{}: {other}",
            place.name()
        );
        // A key given under the right id but with other bytes cannot exist short of a SHA-256
        // prefix collision; the canary is what would catch it, and a changed one is refused.
        drop(place.open(Encryption::new(first, Vec::new())).unwrap());
    }
}

#[test]
fn a_rotation_reads_old_records_and_reencryption_retires_the_old_key() {
    for place in Place::all("encryption_rotation") {
        let (old, new) = (key(), key());
        let m = marker();
        let store = place
            .open(Encryption::new(old.clone(), Vec::new()))
            .unwrap();
        write_everything(&*store, "before", &m);
        drop(store);

        let rotated = place
            .open(Encryption::new(new.clone(), vec![old.clone()]))
            .unwrap();
        read_everything(&*rotated, "before", &m);
        write_everything(&*rotated, "after", &m);
        drop(rotated);
        // The old key still encrypts records: it cannot be dropped yet.
        let early = place
            .open(Encryption::new(new.clone(), Vec::new()))
            .err()
            .unwrap();
        assert!(early.to_string().contains(&old.id().to_string()), "{early}");

        let mut seen = Vec::new();
        let report = match &place {
            Place::Dir(dir) => RedbStore::open_with(
                dir.path().join("data"),
                fixed()
                    .1
                    .with_encryption(Encryption::new(new.clone(), vec![old.clone()])),
            )
            .unwrap()
            .reencrypt(&mut |t, n| seen.push((t.to_owned(), n))),
            Place::Schema(schema, _) => schema
                .store(
                    StoreConfig::default()
                        .with_encryption(Encryption::new(new.clone(), vec![old.clone()])),
                )
                .unwrap()
                .reencrypt(&mut |t, n| seen.push((t.to_owned(), n))),
        }
        .unwrap();
        assert_eq!(
            report.retired,
            vec![old.id().to_string()],
            "{}",
            place.name()
        );
        let total: u64 = report.tables.iter().map(|(_, n)| n).sum();
        // Two events in one record (redb) or two rows (PostgreSQL), and six CARP records, less
        // the lease the execution did not release.
        assert!(total >= 6, "{}: {report:?}", place.name());
        assert!(!seen.is_empty(), "progress is told");

        let store = place
            .open(Encryption::new(new.clone(), Vec::new()))
            .unwrap();
        read_everything(&*store, "before", &m);
        read_everything(&*store, "after", &m);
        drop(store);
        let retired = place.open(Encryption::new(old, Vec::new())).err().unwrap();
        assert!(
            retired.to_string().contains(&new.id().to_string()),
            "{retired}"
        );
    }
}

/// The owner index would hold agent ids in the clear, so a store with a storage key keeps none:
/// an index built before the key was configured is emptied when the store opens with it, new
/// sessions add nothing to it, and `sessions_of` answers `None` (an agent's listing then reads
/// every session, as before the index).
#[test]
fn a_store_opened_with_a_key_keeps_no_owner_index() {
    let at = || "2026-01-01T00:00:00.000000Z".to_owned();
    for place in Place::all("encryption_owner_index") {
        let plain = place.open(Encryption::plaintext()).unwrap();
        plain
            .create_session(&SessionRecord::opened("s1", "agent-ix", at()))
            .unwrap();
        let listed = plain.sessions_of("agent-ix").unwrap();
        assert_eq!(listed, Some(vec!["s1".to_owned()]), "{}", place.name());
        drop(plain);
        assert_eq!(place.owner_index_entries(), 1, "{}", place.name());

        let keyed = place.open(Encryption::new(key(), Vec::new())).unwrap();
        assert_eq!(
            keyed.sessions_of("agent-ix").unwrap(),
            None,
            "{}",
            place.name()
        );
        keyed
            .create_session(&SessionRecord::opened("s2", "agent-ix", at()))
            .unwrap();
        assert!(keyed.get_session("s1").unwrap().is_some());
        drop(keyed);
        assert_eq!(place.owner_index_entries(), 0, "{}", place.name());
    }
}
