//! The transparency log in redb (`crate::tlog`): its tables, the append the committer makes in
//! each batch's write transaction, the backfill of a data directory written before the log, and
//! [`LogStore`] for [`RedbStore`].
//!
//! Tables: `tlog_tiles` maps `(level, index)` to a stored tile (level 255: entry bundles);
//! `tlog_leaves` maps an event hash (32 bytes) to its leaf index, sequence and session;
//! `tlog_meta` holds `size` (8 bytes, big-endian) and `identity`; `tlog_checkpoints` maps a
//! tree size to the signed checkpoint published for it.

use ::redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};
use cra_tlog::Hash;

use super::trace::EVENTS;
use super::{RedbStore, backend};
use crate::BackendError;
use crate::tlog::{LeafPlace, LogError, LogIdentity, LogStore, NewLeaf, TileKey};

const TILES: TableDefinition<'static, (u8, u64), &[u8]> = TableDefinition::new("tlog_tiles");
const LEAVES: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("tlog_leaves");
const META: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("tlog_meta");
const CHECKPOINTS: TableDefinition<'static, u64, &str> = TableDefinition::new("tlog_checkpoints");

const SIZE: &str = "size";
const IDENTITY: &str = "identity";

fn store(e: impl std::fmt::Display) -> LogError {
    LogError::Store(format!("redb: {e}"))
}

/// Creates the log's tables; a data directory written before the log (events, no `size`) gets
/// every stored event as a leaf first, in the order `(timestamp, session_id, sequence)`: redb
/// records no commit order, and a chain's timestamps never go back.
pub(crate) fn create_tables(db: &Database) -> Result<(), BackendError> {
    let mut txn = db.begin_write().map_err(backend)?;
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    let has_size = {
        txn.open_table(TILES).map_err(backend)?;
        txn.open_table(LEAVES).map_err(backend)?;
        txn.open_table(CHECKPOINTS).map_err(backend)?;
        let meta = txn.open_table(META).map_err(backend)?;
        meta.get(SIZE).map_err(backend)?.is_some()
    };
    if !has_size {
        let leaves = stored_events(&txn).map_err(|e| backend(e.to_string()))?;
        append_leaves(&txn, &leaves).map_err(|e| backend(e.to_string()))?;
    }
    txn.commit().map_err(backend)
}

/// Every stored event as a leaf, in backfill order.
fn stored_events(txn: &WriteTransaction) -> Result<Vec<NewLeaf>, LogError> {
    let events = txn.open_table(EVENTS).map_err(store)?;
    let mut found: Vec<(String, NewLeaf)> = Vec::new();
    for entry in events.iter().map_err(store)? {
        let (key, value) = entry.map_err(store)?;
        let (session_id, first) = key.value();
        let text =
            super::record::unpack(value.value()).map_err(|e| LogError::Corrupt(e.to_string()))?;
        for (i, line) in text.split(|b| *b == b'\n').enumerate() {
            let event = crate::chain::decode_event(session_id, first + i as u64, line)
                .map_err(|e| LogError::Corrupt(e.to_string()))?;
            found.push((event.timestamp.clone(), NewLeaf::of(&event)?));
        }
    }
    found.sort_by(|(ta, a), (tb, b)| {
        (ta, &a.session_id, a.sequence).cmp(&(tb, &b.session_id, b.sequence))
    });
    Ok(found.into_iter().map(|(_, leaf)| leaf).collect())
}

/// Appends `leaves` to the log in `txn`, which also holds their events: the leaves are stored
/// with the events or not at all.
pub(crate) fn append_leaves(txn: &WriteTransaction, leaves: &[NewLeaf]) -> Result<(), LogError> {
    let data: Vec<Hash> = leaves.iter().map(|l| l.event_hash).collect();
    let size = append_tiles(txn, &data)?;
    let mut index = txn.open_table(LEAVES).map_err(store)?;
    for (i, leaf) in leaves.iter().enumerate() {
        let place = encode_place(size + i as u64, leaf);
        // The first leaf of a hash keeps its place (two events never share a hash).
        let old = index
            .insert(leaf.event_hash.as_slice(), place.as_slice())
            .map_err(store)?
            .map(|v| v.value().to_vec());
        if let Some(old) = old {
            index
                .insert(leaf.event_hash.as_slice(), old.as_slice())
                .map_err(store)?;
        }
    }
    Ok(())
}

/// Appends leaves with `data` to the tree in `txn` (tiles and size only; no event index) and
/// answers the size before them.
pub(crate) fn append_tiles(txn: &WriteTransaction, data: &[Hash]) -> Result<u64, LogError> {
    let mut meta = txn.open_table(META).map_err(store)?;
    let size = match meta.get(SIZE).map_err(store)? {
        Some(bytes) => decode_u64(bytes.value())?,
        None => 0,
    };
    let mut tiles = txn.open_table(TILES).map_err(store)?;
    let writes = crate::tlog::append(size, data, |key| {
        Ok(tiles
            .get((key.level, key.index))
            .map_err(store)?
            .map(|v| v.value().to_vec()))
    })?;
    for (key, bytes) in writes {
        tiles
            .insert((key.level, key.index), bytes.as_slice())
            .map_err(store)?;
    }
    let new_size = size + data.len() as u64;
    meta.insert(SIZE, new_size.to_be_bytes().as_slice())
        .map_err(store)?;
    Ok(size)
}

fn decode_u64(bytes: &[u8]) -> Result<u64, LogError> {
    Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| {
        LogError::Corrupt(format!("stored log size of {} bytes", bytes.len()))
    })?))
}

/// A leaf's place: leaf index and sequence (8 bytes each, big-endian), then the session id.
fn encode_place(leaf_index: u64, leaf: &NewLeaf) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + leaf.session_id.len());
    out.extend_from_slice(&leaf_index.to_be_bytes());
    out.extend_from_slice(&leaf.sequence.to_be_bytes());
    out.extend_from_slice(leaf.session_id.as_bytes());
    out
}

fn decode_place(bytes: &[u8]) -> Result<LeafPlace, LogError> {
    let bad = || LogError::Corrupt("a stored leaf place is malformed".into());
    let (index, rest) = bytes.split_first_chunk::<8>().ok_or_else(bad)?;
    let (sequence, session) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
    Ok(LeafPlace {
        leaf_index: u64::from_be_bytes(*index),
        sequence: u64::from_be_bytes(*sequence),
        session_id: String::from_utf8(session.to_vec()).map_err(|_| bad())?,
    })
}

impl LogStore for RedbStore {
    fn log_size(&self) -> Result<u64, LogError> {
        let txn = self.database().begin_read().map_err(store)?;
        let meta = txn.open_table(META).map_err(store)?;
        match meta.get(SIZE).map_err(store)? {
            Some(bytes) => decode_u64(bytes.value()),
            None => Ok(0),
        }
    }

    fn leaf_place(&self, event_hash: &Hash) -> Result<Option<LeafPlace>, LogError> {
        let txn = self.database().begin_read().map_err(store)?;
        let leaves = txn.open_table(LEAVES).map_err(store)?;
        let found = leaves.get(event_hash.as_slice()).map_err(store)?;
        found.map(|v| decode_place(v.value())).transpose()
    }

    fn read_tile(&self, key: TileKey) -> Result<Option<Vec<u8>>, LogError> {
        let txn = self.database().begin_read().map_err(store)?;
        let tiles = txn.open_table(TILES).map_err(store)?;
        let found = tiles.get((key.level, key.index)).map_err(store)?;
        Ok(found.map(|v| v.value().to_vec()))
    }

    fn checkpoints(&self, limit: usize) -> Result<Vec<String>, LogError> {
        let txn = self.database().begin_read().map_err(store)?;
        let table = txn.open_table(CHECKPOINTS).map_err(store)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(store)?.rev().take(limit) {
            out.push(entry.map_err(store)?.1.value().to_owned());
        }
        Ok(out)
    }

    fn publish_checkpoint(&self, size: u64, note: &str) -> Result<String, LogError> {
        let mut txn = self.database().begin_write().map_err(store)?;
        txn.set_durability(Durability::Immediate).map_err(store)?;
        let latest = {
            let mut table = txn.open_table(CHECKPOINTS).map_err(store)?;
            let last = table
                .last()
                .map_err(store)?
                .map(|(k, v)| (k.value(), v.value().to_owned()));
            match last {
                Some((at, text)) if at >= size => text,
                _ => {
                    table.insert(size, note).map_err(store)?;
                    note.to_owned()
                }
            }
        };
        txn.commit().map_err(store)?;
        Ok(latest)
    }

    fn settle_identity(&self, identity: &LogIdentity) -> Result<(), LogError> {
        let mut txn = self.database().begin_write().map_err(store)?;
        txn.set_durability(Durability::Immediate).map_err(store)?;
        {
            let mut meta = txn.open_table(META).map_err(store)?;
            let stored = meta
                .get(IDENTITY)
                .map_err(store)?
                .map(|v| LogIdentity::decode(&String::from_utf8_lossy(v.value())))
                .transpose()?;
            if LogIdentity::settle(stored, identity)? {
                meta.insert(IDENTITY, identity.encode().as_bytes())
                    .map_err(store)?;
            }
        }
        txn.commit().map_err(store)
    }
}
