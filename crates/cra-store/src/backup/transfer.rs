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
use crate::pg::{check_schema_name, connect_client, pg, to_i64};
use crate::redb::{RedbStore, backend};
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
    super::fresh_staging(&staging)?;
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

    /// Copies every row of redb's `from` into PostgreSQL's `to` (`columns`, each with its
    /// type) in one binary `COPY`; `row` writes the rows of one stored key and value.
    fn copy_table<K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
        &self,
        tx: &mut Transaction<'_>,
        from: ::redb::TableDefinition<'static, K, V>,
        to: &str,
        columns: &[(&str, Type)],
        row: impl for<'v> Fn(
            &mut BinaryCopyInWriter<'_>,
            K::SelfType<'v>,
            V::SelfType<'v>,
        ) -> Result<(), BackupError>,
    ) -> Result<(), BackupError> {
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let types: Vec<Type> = columns.iter().map(|(_, ty)| ty.clone()).collect();
        let mut rows = copy_in(tx, to, &names, &types)?;
        let table = self.view.open_table(from).map_err(backend)?;
        for entry in table.iter().map_err(backend)? {
            let (key, value) = entry.map_err(backend)?;
            row(&mut rows, key.value(), value.value())?;
        }
        rows.finish().map_err(pg)?;
        Ok(())
    }

    /// Copies the records of redb's `from` into PostgreSQL's `to` (text `columns`): `row`
    /// writes each from the decoded record and its body as PostgreSQL stores it.
    fn records<T: DeserializeOwned>(
        &self,
        tx: &mut Transaction<'_>,
        from: ::redb::TableDefinition<'static, &'static str, &'static [u8]>,
        to: &str,
        columns: &[&str],
        row: impl Fn(&mut BinaryCopyInWriter<'_>, T, String) -> Result<(), BackupError>,
    ) -> Result<(), BackupError> {
        let columns: Vec<(&str, Type)> = columns.iter().map(|c| (*c, Type::TEXT)).collect();
        self.copy_table(tx, from, to, &columns, |rows, _, stored| {
            let (value, body) = self.record(from.name(), to, stored)?;
            row(rows, value, body)
        })
    }

    /// Every chain's head as stored and every event's wire JSON as sealed.
    fn chains(&self, tx: &mut Transaction<'_>) -> Result<(), BackupError> {
        use crate::redb::trace::{EVENTS, HEADS};
        let (text, int, boolean) = (Type::TEXT, Type::INT8, Type::BOOL);
        let columns = [
            ("session_id", text.clone()),
            ("next_sequence", int.clone()),
            ("head_hash", text.clone()),
            ("first_timestamp", text.clone()),
            ("last_timestamp", text.clone()),
            ("ended", boolean),
            ("bytes", int.clone()),
        ];
        self.copy_table(tx, HEADS, "trace_heads", &columns, |rows, id, stored| {
            let head =
                crate::chain::decode_head(id, stored).map_err(|e| damaged(HEADS.name(), e))?;
            write_row(
                rows,
                &[
                    &id,
                    &to_i64(head.next_sequence),
                    &head.head_hash,
                    &head.first_timestamp,
                    &head.last_timestamp,
                    &head.ended,
                    &to_i64(head.bytes),
                ],
            )
        })?;
        let columns = [
            ("session_id", text.clone()),
            ("sequence", int),
            ("event_type", text.clone()),
            ("timestamp", text.clone()),
            ("event_hash", text.clone()),
            ("body", text),
        ];
        // A record holds an append's events, one per line, from the sequence its key names.
        self.copy_table(
            tx,
            EVENTS,
            "trace_events",
            &columns,
            |rows, (id, first), stored| {
                let text = self.text(EVENTS.name(), stored)?;
                for (i, line) in text.split('\n').enumerate() {
                    let sequence = first.saturating_add(i as u64);
                    let event = crate::chain::decode_event(id, sequence, line.as_bytes())
                        .map_err(|e| damaged(EVENTS.name(), e))?;
                    let body = self
                        .enc
                        .encrypt_text(crate::pg::trace::EVENTS, line.to_owned())
                        .map_err(|e| damaged(EVENTS.name(), e))?;
                    let (kind, at, hash) = (&event.event_type, &event.timestamp, &event.event_hash);
                    write_row(rows, &[&id, &to_i64(sequence), kind, at, hash, &body])?;
                }
                Ok(())
            },
        )
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
        crate::redb::tlog::for_each_leaf(self.view, self.enc, &mut |leaves| {
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
                let key = &l.idempotency_key;
                write_row(
                    rows,
                    &[&l.execution_id, &l.owner, &l.session_id, key, &body],
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
        let (text, int) = (Type::TEXT, Type::INT8);
        let columns = [("session_id", text.clone()), ("request_id", text.clone())];
        self.copy_table(
            tx,
            from::REQUEST_IDS,
            "carp_request_ids",
            &columns,
            |rows, (session, request), ()| write_row(rows, &[&session, &request]),
        )?;
        let columns = [
            ("policy_id", text.clone()),
            ("scope_key", text.clone()),
            ("spent", int.clone()),
        ];
        self.copy_table(
            tx,
            from::BUDGET,
            "carp_counters",
            &columns,
            |rows, (policy, scope), spent| write_row(rows, &[&policy, &scope, &to_i64(spent)]),
        )?;
        let columns = [
            ("policy_id", text.clone()),
            ("scope_key", text.clone()),
            ("at_us", int.clone()),
            ("n", int.clone()),
        ];
        self.copy_table(
            tx,
            from::RATE,
            "carp_rate_events",
            &columns,
            |rows, (policy, scope, at_us), n| {
                write_row(rows, &[&policy, &scope, &at_us, &to_i64(n)])
            },
        )?;
        let columns = [("agent_key", text), ("open", int)];
        self.copy_table(
            tx,
            from::OPEN_SESSIONS,
            "carp_open_sessions",
            &columns,
            |rows, agent, open| write_row(rows, &[&agent, &to_i64(open)]),
        )
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
    let columns = [("project_id", Type::TEXT), ("recorded_at", Type::TEXT)];
    let clock = crate::relay::redb::FACT_CLOCK;
    from.copy_table(
        tx,
        clock,
        "relay_fact_clock",
        &columns,
        |rows, project, at| write_row(rows, &[&project, &at]),
    )?;
    let owed = relay.outbox().map_err(|e| damaged("relay_outbox", e))?;
    for entry in owed {
        let body = from
            .enc
            .encrypt_text(crate::relay::pg::OUTBOX, entry.body)
            .map_err(|e| damaged(crate::relay::pg::OUTBOX, e))?;
        tx.execute(
            "INSERT INTO relay_outbox (key, body) VALUES ($1, $2)",
            &[&entry.key, &body],
        )
        .map_err(pg)?;
    }
    Ok(())
}
