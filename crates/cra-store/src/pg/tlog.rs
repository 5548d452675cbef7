//! The transparency log in PostgreSQL (`crate::tlog`, migration `0017_tlog.sql`): the append
//! each committer makes in its batch's transaction, the backfill of a schema written before the
//! log, and [`LogStore`] for [`PgStore`].
//!
//! Leaf indexes come from the one `tlog_state` row, locked by each append after its events are
//! written and held to its commit: appends of every committer of every replica take their
//! leaves one transaction at a time, in commit order, with no gap (a rolled-back append gives
//! its indexes back). The lock is taken last so it is held for as little as possible; every
//! append takes the heads' row locks before it, so the lock order is the same for all.

use std::collections::BTreeMap;

use cra_tlog::Hash;
use postgres::Transaction;

use super::{PgStore, to_i64};
use crate::tlog::{ENTRIES, LeafPlace, LogError, LogIdentity, LogStore, NewLeaf, Settled, TileKey};

fn store(e: postgres::Error) -> LogError {
    LogError::Store(format!("postgres: {}", super::error_text(&e)))
}

/// The stored level of a tile key (entry bundles are -1).
fn sql_level(level: u8) -> i16 {
    if level == ENTRIES {
        -1
    } else {
        i16::from(level)
    }
}

/// Backfills the log of a schema written before it: when `tlog_state` has no row, every stored
/// event becomes a leaf in the order `(timestamp, session_id, sequence)` (PostgreSQL records no
/// commit order; a chain's timestamps never go back) and the row is inserted. Runs in the
/// migrations' transaction, under their lock, so one starting server does it.
pub(crate) fn backfill(tx: &mut Transaction<'_>) -> Result<(), LogError> {
    if tx
        .query_opt("SELECT size FROM tlog_state WHERE id = 1", &[])
        .map_err(store)?
        .is_some()
    {
        return Ok(());
    }
    tx.execute("INSERT INTO tlog_state (id, size) VALUES (1, 0)", &[])
        .map_err(store)?;
    let rows = tx
        .query(
            "SELECT session_id, sequence, event_hash FROM trace_events
             ORDER BY timestamp COLLATE \"C\", session_id COLLATE \"C\", sequence",
            &[],
        )
        .map_err(store)?;
    let mut leaves = Vec::with_capacity(rows.len());
    for row in &rows {
        let hash: String = row.get(2);
        leaves.push(NewLeaf {
            event_hash: cra_tlog::hash::from_hex(&hash)
                .map_err(|e| LogError::Corrupt(format!("stored event hash `{hash}`: {e}")))?,
            session_id: row.get::<_, &str>(0).into(),
            sequence: row.get::<_, i64>(1).unsigned_abs(),
        });
    }
    for chunk in leaves.chunks(64 * 1024) {
        append_leaves(tx, chunk)?;
    }
    Ok(())
}

/// Appends `leaves` to the log in `tx`, which also holds their events, and holds the log's row
/// lock until `tx` ends.
pub(crate) fn append_leaves(tx: &mut Transaction<'_>, leaves: &[NewLeaf]) -> Result<(), LogError> {
    if leaves.is_empty() {
        return Ok(());
    }
    let data: Vec<Hash> = leaves.iter().map(|l| l.event_hash).collect();
    let size = append_tiles(tx, &data)?;
    let hashes: Vec<&[u8]> = leaves.iter().map(|l| l.event_hash.as_slice()).collect();
    let places: Vec<i64> = (0..leaves.len()).map(|i| to_i64(size + i as u64)).collect();
    let sessions: Vec<&str> = leaves.iter().map(|l| &*l.session_id).collect();
    let sequences: Vec<i64> = leaves.iter().map(|l| to_i64(l.sequence)).collect();
    tx.execute(
        "INSERT INTO tlog_leaves (event_hash, leaf_index, session_id, sequence)
         SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::text[], $4::bigint[])
         ON CONFLICT (event_hash) DO NOTHING",
        &[&hashes, &places, &sessions, &sequences],
    )
    .map_err(store)?;
    Ok(())
}

/// Appends leaves with `data` to the tree in `tx` (tiles and size only; no event index), holding
/// the log's row lock until `tx` ends, and answers the size before them.
pub(crate) fn append_tiles(tx: &mut Transaction<'_>, data: &[Hash]) -> Result<u64, LogError> {
    let size = tx
        .query_one("SELECT size FROM tlog_state WHERE id = 1 FOR UPDATE", &[])
        .map_err(store)?
        .get::<_, i64>(0)
        .unsigned_abs();
    let partial = partial_tiles(tx, size)?;
    let writes = crate::tlog::append(size, data, |key| Ok(partial.get(&key).cloned()))?;
    let mut levels = Vec::with_capacity(writes.len());
    let mut indexes = Vec::with_capacity(writes.len());
    let mut bodies = Vec::with_capacity(writes.len());
    for (key, bytes) in writes {
        levels.push(sql_level(key.level));
        indexes.push(to_i64(key.index));
        bodies.push(bytes);
    }
    tx.execute(
        "INSERT INTO tlog_tiles (level, idx, data)
         SELECT * FROM unnest($1::smallint[], $2::bigint[], $3::bytea[])
         ON CONFLICT (level, idx) DO UPDATE SET data = EXCLUDED.data",
        &[&levels, &indexes, &bodies],
    )
    .map_err(store)?;
    tx.execute(
        "UPDATE tlog_state SET size = $1 WHERE id = 1",
        &[&to_i64(size + data.len() as u64)],
    )
    .map_err(store)?;
    Ok(size)
}

/// The partial tiles an append to a log of `size` leaves extends, read in one statement.
fn partial_tiles(
    tx: &mut Transaction<'_>,
    size: u64,
) -> Result<BTreeMap<TileKey, Vec<u8>>, LogError> {
    let width = crate::tlog::TILE_WIDTH as u64;
    let mut keys = vec![TileKey {
        level: ENTRIES,
        index: size / width,
    }];
    let mut level = 0u8;
    while level < 8 && size >> (8 * u32::from(level)) > 0 {
        keys.push(TileKey {
            level,
            index: (size >> (8 * u32::from(level))) / width,
        });
        level += 1;
    }
    let levels: Vec<i16> = keys.iter().map(|k| sql_level(k.level)).collect();
    let indexes: Vec<i64> = keys.iter().map(|k| to_i64(k.index)).collect();
    let rows = tx
        .query(
            "SELECT t.level, t.idx, t.data FROM tlog_tiles t
             JOIN unnest($1::smallint[], $2::bigint[]) AS k(level, idx)
               ON t.level = k.level AND t.idx = k.idx",
            &[&levels, &indexes],
        )
        .map_err(store)?;
    let mut found = BTreeMap::new();
    for row in rows {
        let level: i16 = row.get(0);
        let key = TileKey {
            level: u8::try_from(level).unwrap_or(ENTRIES),
            index: row.get::<_, i64>(1).unsigned_abs(),
        };
        found.insert(key, row.get(2));
    }
    Ok(found)
}

impl LogStore for PgStore {
    fn log_size(&self) -> Result<u64, LogError> {
        let mut client = self.client().map_err(|e| LogError::Store(e.to_string()))?;
        let row = client
            .query_opt("SELECT size FROM tlog_state WHERE id = 1", &[])
            .map_err(store)?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0).unsigned_abs()))
    }

    fn leaf_place(&self, event_hash: &Hash) -> Result<Option<LeafPlace>, LogError> {
        let mut client = self.client().map_err(|e| LogError::Store(e.to_string()))?;
        let row = client
            .query_opt(
                "SELECT leaf_index, session_id, sequence FROM tlog_leaves WHERE event_hash = $1",
                &[&event_hash.as_slice()],
            )
            .map_err(store)?;
        Ok(row.map(|r| LeafPlace {
            leaf_index: r.get::<_, i64>(0).unsigned_abs(),
            session_id: r.get(1),
            sequence: r.get::<_, i64>(2).unsigned_abs(),
        }))
    }

    fn read_tile(&self, key: TileKey) -> Result<Option<Vec<u8>>, LogError> {
        let mut client = self.client().map_err(|e| LogError::Store(e.to_string()))?;
        let row = client
            .query_opt(
                "SELECT data FROM tlog_tiles WHERE level = $1 AND idx = $2",
                &[&sql_level(key.level), &to_i64(key.index)],
            )
            .map_err(store)?;
        Ok(row.map(|r| r.get(0)))
    }

    fn checkpoints(&self, limit: usize) -> Result<Vec<String>, LogError> {
        let mut client = self.client().map_err(|e| LogError::Store(e.to_string()))?;
        let rows = client
            .query(
                "SELECT note FROM tlog_checkpoints ORDER BY size DESC LIMIT $1",
                &[&to_i64(limit as u64)],
            )
            .map_err(store)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn publish_checkpoint(&self, size: u64, note: &str) -> Result<String, LogError> {
        let mut client = self.client().map_err(|e| LogError::Store(e.to_string()))?;
        let mut tx = client.transaction().map_err(store)?;
        tx.execute(
            "LOCK TABLE tlog_checkpoints IN SHARE ROW EXCLUSIVE MODE",
            &[],
        )
        .map_err(store)?;
        let latest = tx
            .query_opt(
                "SELECT size, note FROM tlog_checkpoints ORDER BY size DESC LIMIT 1",
                &[],
            )
            .map_err(store)?
            .map(|r| (r.get::<_, i64>(0).unsigned_abs(), r.get::<_, String>(1)));
        let answer = match latest {
            Some((at, text)) if at >= size => text,
            _ => {
                tx.execute(
                    "INSERT INTO tlog_checkpoints (size, note) VALUES ($1, $2)",
                    &[&to_i64(size), &note],
                )
                .map_err(store)?;
                note.to_owned()
            }
        };
        tx.commit().map_err(store)?;
        Ok(answer)
    }

    fn settle_identity(
        &self,
        identity: &LogIdentity,
        rotating: &[String],
    ) -> Result<Settled, LogError> {
        let mut client = self.client().map_err(|e| LogError::Store(e.to_string()))?;
        let mut tx = client.transaction().map_err(store)?;
        let row = tx
            .query_one(
                "SELECT origin, key FROM tlog_state WHERE id = 1 FOR UPDATE",
                &[],
            )
            .map_err(store)?;
        let stored = match (
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<String>>(1),
        ) {
            (Some(origin), Some(verifier_key)) => Some(LogIdentity {
                origin,
                verifier_key,
            }),
            _ => None,
        };
        let settled = LogIdentity::settle(stored, identity, rotating)?;
        if settled.records() {
            tx.execute(
                "UPDATE tlog_state SET origin = $1, key = $2 WHERE id = 1",
                &[&identity.origin, &identity.verifier_key],
            )
            .map_err(store)?;
        }
        tx.commit().map_err(store)?;
        Ok(settled)
    }
}
