//! A redb archive restored onto PostgreSQL: the move of a deployment from one server's data
//! directory to replicas sharing a schema (`specs/backup.md`, "Across backends").
//!
//! The archive's database file is extracted beside the archive and opened as a store (which
//! upgrades it when an earlier cra wrote it). Then, in one PostgreSQL transaction, the schema is
//! created with every migration of this build and each area is written in PostgreSQL's layout
//! from one read transaction of the file: chains (heads as stored, each event's wire JSON as
//! sealed), CARP state, the atlas catalog, and the transparency log, whose leaves are appended
//! in the redb log's leaf order so that its tiles, its root at every size and so its signed
//! checkpoints are the same. Relay follows through its own snapshot and restore. The schema is
//! then opened as a server opens it and verified as any restore is; one that does not verify is
//! dropped.
//!
//! Records are decrypted with the configured storage keys and written as PostgreSQL keeps them
//! (text, encrypted under the current key when one is configured). This module is the one place
//! that knows both layouts.

use std::path::{Path, PathBuf};

use ::redb::{ReadTransaction, ReadableTable, TableHandle};
use cra_carp::store::{
    ApprovalRecord, ExecutionLease, ExecutionRecord, SessionRecord, StoredResolution,
};
use cra_relay::store::RelayStore;
use postgres::Transaction;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use serde::de::DeserializeOwned;

use super::archive::Archive;
use super::redb::DATABASE_ENTRY;
use super::{BackupError, Verified};
use crate::catalog::{AtlasCatalog, encode_files};
use crate::encryption::Encryption;
use crate::pg::{check_schema_name, connect_client, pg};
use crate::redb::{RedbStore, backend, rewrite};
use crate::relay::{PgRelay, RedbRelay};
use crate::{BackendError, StoreConfig};

/// The directory the archive's database file is extracted into, beside the archive.
pub fn staging_path(archive: &Path) -> PathBuf {
    let mut name = archive.file_name().unwrap_or_default().to_os_string();
    name.push(".restoring");
    archive.with_file_name(name)
}

/// Restores the redb archive `archive` into `schema` at `url`, which must hold no table; answers
/// what was verified. `progress` is told each chain verified.
pub fn restore(
    archive: &Archive,
    url: &str,
    schema: &str,
    config: StoreConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<Verified, BackupError> {
    archive.manifest.require_backend("redb")?;
    check_schema_name(schema)?;
    let mut client = connect_client(url)?;
    let staging = staging_path(archive.path());
    // A restore that crashed leaves its staging directory: nothing else uses the name.
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| rewrite::io(&staging, &e))?;
    }
    std::fs::create_dir_all(&staging).map_err(|e| rewrite::io(&staging, &e))?;
    let moved = (|| {
        archive.extract(DATABASE_ENTRY, &staging.join(crate::redb::DATABASE_FILE))?;
        let source = RedbStore::open_with(&staging, config.clone())?;
        let relay = RedbRelay::open(&source).map_err(relay_failed)?;
        let snapshot = relay.snapshot().map_err(relay_failed)?;
        write_schema(&source, &relay, &config.encryption, &mut client, schema)?;
        drop((relay, source));
        Ok::<_, BackupError>(snapshot)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    let snapshot = moved?;
    super::pg::open_and_verify(
        &mut client,
        url,
        schema,
        config,
        archive,
        progress,
        |store| {
            PgRelay::new(store.clone())
                .restore(&snapshot)
                .map_err(relay_failed)
        },
    )
}

fn relay_failed(e: cra_relay::store::RelayStoreError) -> BackupError {
    BackupError::Store(BackendError::Backend(format!("Relay: {e}")))
}

/// Creates `schema` with every migration and writes `source`'s areas into it, in one
/// transaction; refuses a schema holding a table before it writes anything.
fn write_schema(
    source: &RedbStore,
    relay: &RedbRelay,
    enc: &Encryption,
    client: &mut postgres::Client,
    schema: &str,
) -> Result<(), BackupError> {
    let mut tx = client.transaction().map_err(pg)?;
    super::pg::create_schema_in(&mut tx, schema)?;
    crate::pg::apply_migrations(&mut tx, &std::collections::BTreeMap::new())?;
    let view = source.handle().begin_read().map_err(backend)?;
    let from = Source { view: &view, enc };
    from.chains(&mut tx)?;
    from.log(&mut tx)?;
    from.carp(&mut tx)?;
    catalog(source, &mut tx)?;
    relay_state(&from, relay, &mut tx)?;
    tx.commit().map_err(pg)?;
    Ok(())
}

/// One read transaction of the source store, and the keys its records open with.
struct Source<'a> {
    view: &'a ReadTransaction,
    enc: &'a Encryption,
}

/// A binary `COPY` into `table`'s `columns` (of `types`), in `tx`.
fn copy_in<'t>(
    tx: &'t mut Transaction<'_>,
    table: &str,
    columns: &[&str],
    types: &[Type],
) -> Result<BinaryCopyInWriter<'t>, BackupError> {
    let sql = format!(
        "COPY {table} ({}) FROM STDIN (FORMAT binary)",
        columns.join(", ")
    );
    let sink = tx.copy_in(sql.as_str()).map_err(pg)?;
    Ok(BinaryCopyInWriter::new(sink, types))
}

fn write_row(
    rows: &mut BinaryCopyInWriter<'_>,
    values: &[&(dyn ToSql + Sync)],
) -> Result<(), BackupError> {
    rows.write(values).map_err(|e| pg(e).into())
}

fn damaged(what: &str, e: impl std::fmt::Display) -> BackupError {
    BackupError::Damaged(format!("{what}: {e}"))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Source<'_> {
    /// The text of a record stored in redb's `table`, decrypted and decompressed.
    fn text(&self, table: &str, stored: &[u8]) -> Result<String, BackupError> {
        let text =
            crate::redb::record::load(self.enc, table, stored).map_err(|e| damaged(table, e))?;
        String::from_utf8(text.into_owned()).map_err(|e| damaged(table, e))
    }

    /// A record of redb's `from` as PostgreSQL's `to` stores it, with its decoded value.
    fn record<T: DeserializeOwned>(
        &self,
        from: &str,
        to: &str,
        stored: &[u8],
    ) -> Result<(T, String), BackupError> {
        let text = self.text(from, stored)?;
        let value = serde_json::from_str(&text).map_err(|e| damaged(from, e))?;
        let body = self
            .enc
            .encrypt_text(to, text)
            .map_err(|e| damaged(to, e))?;
        Ok((value, body))
    }

    /// Every chain's head as stored and every event's wire JSON as sealed.
    fn chains(&self, tx: &mut Transaction<'_>) -> Result<(), BackupError> {
        use crate::redb::trace::{EVENTS, HEADS};
        let heads = self.view.open_table(HEADS).map_err(backend)?;
        let mut rows = copy_in(
            tx,
            "trace_heads",
            &[
                "session_id",
                "next_sequence",
                "head_hash",
                "first_timestamp",
                "last_timestamp",
                "ended",
                "bytes",
            ],
            &[
                Type::TEXT,
                Type::INT8,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::BOOL,
                Type::INT8,
            ],
        )?;
        for row in heads.iter().map_err(backend)? {
            let (id, bytes) = row.map_err(backend)?;
            let id = id.value();
            let head = crate::chain::decode_head(id, bytes.value())
                .map_err(|e| damaged(HEADS.name(), e))?;
            write_row(
                &mut rows,
                &[
                    &id,
                    &to_i64(head.next_sequence),
                    &head.head_hash,
                    &head.first_timestamp,
                    &head.last_timestamp,
                    &head.ended,
                    &to_i64(head.bytes),
                ],
            )?;
        }
        rows.finish().map_err(pg)?;
        let events = self.view.open_table(EVENTS).map_err(backend)?;
        let mut rows = copy_in(
            tx,
            "trace_events",
            &[
                "session_id",
                "sequence",
                "event_type",
                "timestamp",
                "event_hash",
                "body",
            ],
            &[
                Type::TEXT,
                Type::INT8,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
            ],
        )?;
        for row in events.iter().map_err(backend)? {
            let (key, stored) = row.map_err(backend)?;
            let (id, first) = key.value();
            let text = self.text(EVENTS.name(), stored.value())?;
            for (i, line) in text.split('\n').enumerate() {
                let sequence = first.saturating_add(i as u64);
                let event = crate::chain::decode_event(id, sequence, line.as_bytes())
                    .map_err(|e| damaged(EVENTS.name(), e))?;
                let body = self
                    .enc
                    .encrypt_text(crate::pg::trace::EVENTS, line.to_owned())
                    .map_err(|e| damaged(EVENTS.name(), e))?;
                write_row(
                    &mut rows,
                    &[
                        &id,
                        &to_i64(sequence),
                        &event.event_type,
                        &event.timestamp,
                        &event.event_hash,
                        &body,
                    ],
                )?;
            }
        }
        rows.finish().map_err(pg)?;
        Ok(())
    }

    /// The log: its identity, its leaves in the redb log's order (so the same tree), and its
    /// signed checkpoints.
    fn log(&self, tx: &mut Transaction<'_>) -> Result<(), BackupError> {
        let log =
            |e: crate::tlog::LogError| BackupError::Store(BackendError::Backend(e.to_string()));
        let (identity, checkpoints) =
            crate::redb::tlog::identity_and_checkpoints(self.view).map_err(log)?;
        let (origin, key) = identity.map(|i| (i.origin, i.verifier_key)).unzip();
        tx.execute(
            "INSERT INTO tlog_state (id, size, origin, key) VALUES (1, 0, $1, $2)",
            &[&origin, &key],
        )
        .map_err(pg)?;
        crate::redb::tlog::for_each_leaf(self.view, &mut |leaves| {
            crate::pg::tlog::append_leaves(tx, &leaves)
        })
        .map_err(log)?;
        for (size, note) in &checkpoints {
            tx.execute(
                "INSERT INTO tlog_checkpoints (size, note) VALUES ($1, $2)",
                &[&to_i64(*size), note],
            )
            .map_err(pg)?;
        }
        Ok(())
    }

    /// Copies every record of redb's `from` into PostgreSQL's `to` (text `columns`), each row
    /// written by `row` from the decoded record and its stored body.
    fn records<T: DeserializeOwned>(
        &self,
        tx: &mut Transaction<'_>,
        from: ::redb::TableDefinition<'static, &'static str, &'static [u8]>,
        to: &str,
        columns: &[&str],
        row: impl Fn(&mut BinaryCopyInWriter<'_>, T, String) -> Result<(), BackupError>,
    ) -> Result<(), BackupError> {
        let mut rows = copy_in(tx, to, columns, &vec![Type::TEXT; columns.len()])?;
        let table = self.view.open_table(from).map_err(backend)?;
        for entry in table.iter().map_err(backend)? {
            let (_, stored) = entry.map_err(backend)?;
            let (value, body) = self.record(from.name(), to, stored.value())?;
            row(&mut rows, value, body)?;
        }
        rows.finish().map_err(pg)?;
        Ok(())
    }

    /// Every CARP table: records re-encoded for PostgreSQL with the columns beside them, keys
    /// and counters as they are.
    fn carp(&self, tx: &mut Transaction<'_>) -> Result<(), BackupError> {
        use crate::pg::carp as to;
        use crate::redb::carp as from;
        // The migration's marker says sessions are still to be counted; the counts come along.
        tx.execute("DELETE FROM carp_open_sessions", &[])
            .map_err(pg)?;
        let columns = ["session_id", "body", "agent_id"];
        self.records(
            tx,
            from::SESSIONS,
            to::SESSIONS,
            &columns,
            |rows, s: SessionRecord, body| {
                let agent = to::owner_column(self.enc, &s.agent_id);
                write_row(rows, &[&s.session_id, &body, &agent])
            },
        )?;
        let columns = ["resolution_id", "session_id", "body"];
        self.records(
            tx,
            from::RESOLUTIONS,
            to::RESOLUTIONS,
            &columns,
            |rows, r: StoredResolution, body| {
                write_row(rows, &[&r.resolution.resolution_id, &r.session_id, &body])
            },
        )?;
        let columns = ["execution_id", "session_id", "idempotency_key", "body"];
        self.records(
            tx,
            from::EXECUTIONS,
            to::EXECUTIONS,
            &columns,
            |rows, x: ExecutionRecord, body| {
                write_row(
                    rows,
                    &[&x.execution_id, &x.session_id, &x.idempotency_key, &body],
                )
            },
        )?;
        let columns = [
            "execution_id",
            "owner",
            "session_id",
            "idempotency_key",
            "body",
        ];
        self.records(
            tx,
            from::LEASES,
            to::LEASES,
            &columns,
            |rows, l: ExecutionLease, body| {
                write_row(
                    rows,
                    &[
                        &l.execution_id,
                        &l.owner,
                        &l.session_id,
                        &l.idempotency_key,
                        &body,
                    ],
                )
            },
        )?;
        let columns = ["approval_id", "session_id", "status", "body"];
        self.records(
            tx,
            from::APPROVALS,
            to::APPROVALS,
            &columns,
            |rows, a: ApprovalRecord, body| {
                write_row(
                    rows,
                    &[&a.approval_id, &a.session_id, &a.status.as_str(), &body],
                )
            },
        )?;
        self.counters(tx)
    }

    /// CARP's request ids, budget and rate counters and open-session counts, as they are.
    fn counters(&self, tx: &mut Transaction<'_>) -> Result<(), BackupError> {
        use crate::redb::carp as from;
        let text = [Type::TEXT; 2];
        let mut rows = copy_in(
            tx,
            "carp_request_ids",
            &["session_id", "request_id"],
            &text[..2],
        )?;
        for row in self
            .view
            .open_table(from::REQUEST_IDS)
            .map_err(backend)?
            .iter()
            .map_err(backend)?
        {
            let (key, _) = row.map_err(backend)?;
            let (session, request) = key.value();
            write_row(&mut rows, &[&session, &request])?;
        }
        rows.finish().map_err(pg)?;

        let mut rows = copy_in(
            tx,
            "carp_counters",
            &["policy_id", "scope_key", "spent"],
            &[Type::TEXT, Type::TEXT, Type::INT8],
        )?;
        for row in self
            .view
            .open_table(from::BUDGET)
            .map_err(backend)?
            .iter()
            .map_err(backend)?
        {
            let (key, spent) = row.map_err(backend)?;
            let (policy, scope) = key.value();
            write_row(&mut rows, &[&policy, &scope, &to_i64(spent.value())])?;
        }
        rows.finish().map_err(pg)?;

        let mut rows = copy_in(
            tx,
            "carp_rate_events",
            &["policy_id", "scope_key", "at_us", "n"],
            &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8],
        )?;
        for row in self
            .view
            .open_table(from::RATE)
            .map_err(backend)?
            .iter()
            .map_err(backend)?
        {
            let (key, n) = row.map_err(backend)?;
            let (policy, scope, at_us) = key.value();
            write_row(&mut rows, &[&policy, &scope, &at_us, &to_i64(n.value())])?;
        }
        rows.finish().map_err(pg)?;

        let mut rows = copy_in(
            tx,
            "carp_open_sessions",
            &["agent_key", "open"],
            &[Type::TEXT, Type::INT8],
        )?;
        for row in self
            .view
            .open_table(from::OPEN_SESSIONS)
            .map_err(backend)?
            .iter()
            .map_err(backend)?
        {
            let (key, open) = row.map_err(backend)?;
            write_row(&mut rows, &[&key.value(), &to_i64(open.value())])?;
        }
        rows.finish().map_err(pg)?;
        Ok(())
    }
}

/// The atlas catalog: every generation as committed, and the files of every atlas one names.
fn catalog(source: &RedbStore, tx: &mut Transaction<'_>) -> Result<(), BackupError> {
    let generations = source.history(None, usize::MAX)?;
    let mut stored = std::collections::BTreeSet::new();
    for g in generations.iter().rev() {
        for m in &g.members {
            if !stored.insert(m.digest.clone()) {
                continue;
            }
            let files = source.files(&m.digest)?.ok_or_else(|| {
                BackupError::Damaged(format!(
                    "generation {} names atlas {} {} whose files are not stored",
                    g.number, m.atlas_id, m.version
                ))
            })?;
            tx.execute(
                "INSERT INTO atlas_contents (digest, atlas_id, version, files) VALUES ($1, $2, $3, $4)",
                &[&m.digest, &m.atlas_id, &m.version, &encode_files(&files)],
            )
            .map_err(pg)?;
        }
        let members =
            serde_json::to_string(&g.members).map_err(|e| damaged("atlas_generations", e))?;
        tx.execute(
            "INSERT INTO atlas_generations (generation, members, actor, reason, recorded, committed_at)
             VALUES ($1, $2::text::jsonb, $3, $4, $5, $6::text::timestamptz)",
            &[&to_i64(g.number), &members, &g.actor, &g.reason, &g.recorded, &g.committed_at],
        )
        .map_err(pg)?;
    }
    Ok(())
}

/// What Relay keeps beside its snapshot: each project's fact clock (so no fact is recorded
/// before one already stored) and the audit outbox (events a crash left owed to a chain).
fn relay_state(
    from: &Source<'_>,
    relay: &RedbRelay,
    tx: &mut Transaction<'_>,
) -> Result<(), BackupError> {
    let clock = from
        .view
        .open_table(crate::relay::redb::FACT_CLOCK)
        .map_err(backend)?;
    for row in clock.iter().map_err(backend)? {
        let (project, at) = row.map_err(backend)?;
        tx.execute(
            "INSERT INTO relay_fact_clock (project_id, recorded_at) VALUES ($1, $2)",
            &[&project.value(), &at.value()],
        )
        .map_err(pg)?;
    }
    let owed = relay
        .outbox()
        .map_err(|e| BackupError::Damaged(format!("relay_outbox: {e}")))?;
    for entry in owed {
        let body = from
            .enc
            .encrypt_text("relay_outbox", entry.body)
            .map_err(|e| damaged("relay_outbox", e))?;
        tx.execute(
            "INSERT INTO relay_outbox (key, body) VALUES ($1, $2)",
            &[&entry.key, &body],
        )
        .map_err(pg)?;
    }
    Ok(())
}
