//! The transparency log in redb (`crate::tlog`): its tables, the append the committer makes in
//! each batch's write transaction, the backfill of a data directory written before the log, and
//! [`LogStore`] for [`RedbStore`].
//!
//! Tables: `tlog_tiles` maps `(level, index)` to a stored tile (level 255: entry bundles);
//! `tlog_appends` maps the leaf index of each append's first event to that event's sequence and
//! session (one row per append, at the table's right edge: an append adds leaves to one chain,
//! in order, so every leaf's place follows from the row at or before it);
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
const APPENDS: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("tlog_appends");
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
        txn.open_table(APPENDS).map_err(backend)?;
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
    // No index by event hash here: its keys are random, and a B-tree that copies each page it
    // changes would write a page per event at every commit (the 64-client resolve lost 43% to
    // it). Event hashes are found from the entry bundles instead (`HashIndex`).
    let mut appends = txn.open_table(APPENDS).map_err(store)?;
    let mut i = 0;
    while i < leaves.len() {
        let first = &leaves[i];
        let mut end = i + 1;
        while end < leaves.len()
            && leaves[end].session_id == first.session_id
            && leaves[end].sequence == leaves[end - 1].sequence + 1
        {
            end += 1;
        }
        let mut place = first.sequence.to_be_bytes().to_vec();
        place.extend_from_slice(first.session_id.as_bytes());
        appends
            .insert(size + i as u64, place.as_slice())
            .map_err(store)?;
        i = end;
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

/// The place of leaf `leaf_index`, from the append row at or before it.
fn place_of(txn: &::redb::ReadTransaction, leaf_index: u64) -> Result<Option<LeafPlace>, LogError> {
    let appends = txn.open_table(APPENDS).map_err(store)?;
    let Some(row) = appends.range(..=leaf_index).map_err(store)?.next_back() else {
        return Ok(None);
    };
    let (first, value) = row.map_err(store)?;
    let bad = || LogError::Corrupt("a stored append row is malformed".into());
    let (sequence, session) = value.value().split_first_chunk::<8>().ok_or_else(bad)?;
    Ok(Some(LeafPlace {
        leaf_index,
        sequence: u64::from_be_bytes(*sequence) + (leaf_index - first.value()),
        session_id: String::from_utf8(session.to_vec()).map_err(|_| bad())?,
    }))
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
        let Some(index) = self.hash_index().find(self, event_hash)? else {
            return Ok(None);
        };
        let txn = self.database().begin_read().map_err(store)?;
        place_of(&txn, index)
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

/// Event hashes to leaf indexes, in memory, read from the entry bundles on first use and extended
/// as the log grows: an index stored with every append would cost a random B-tree insert per
/// event (see [`append_leaves`]). About 24 bytes a leaf while it is in use; only the inclusion
/// route by event hash needs it.
#[derive(Debug, Default)]
pub(crate) struct HashIndex(std::sync::Mutex<IndexedLeaves>);

#[derive(Debug, Default)]
struct IndexedLeaves {
    /// Leaves indexed so far (`[0, upto)`).
    upto: u64,
    /// The first eight bytes of a leaf's data to its index (the first such leaf).
    first: std::collections::HashMap<u64, u64>,
    /// Later leaves whose first eight bytes an earlier leaf already has.
    more: std::collections::HashMap<u64, Vec<u64>>,
}

fn prefix(hash: &[u8]) -> u64 {
    let mut p = [0u8; 8];
    p.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(p)
}

impl HashIndex {
    /// The leaf index of the leaf whose data is `hash`, if `store`'s log holds it.
    pub(crate) fn find(&self, store: &RedbStore, hash: &Hash) -> Result<Option<u64>, LogError> {
        let mut leaves = self
            .0
            .lock()
            .map_err(|_| LogError::Store("the event hash index was poisoned".into()))?;
        let size = store.log_size()?;
        let txn = store.database().begin_read().map_err(store_err)?;
        let tiles = txn.open_table(TILES).map_err(store_err)?;
        let width = crate::tlog::TILE_WIDTH as u64;
        while leaves.upto < size {
            let bundle = leaves.upto / width;
            let data = tiles
                .get((crate::tlog::ENTRIES, bundle))
                .map_err(store_err)?
                .ok_or_else(|| LogError::Corrupt(format!("entry bundle {bundle} is missing")))?;
            let data = data.value();
            let end = ((bundle + 1) * width).min(size);
            for index in leaves.upto..end {
                let at = usize::try_from(index - bundle * width).unwrap_or(usize::MAX) * 32;
                let entry = data.get(at..at + 32).ok_or_else(|| {
                    LogError::Corrupt(format!("entry bundle {bundle} is too short"))
                })?;
                let p = prefix(entry);
                let IndexedLeaves { first, more, .. } = &mut *leaves;
                match first.entry(p) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        more.entry(p).or_default().push(index);
                    }
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(index);
                    }
                }
            }
            leaves.upto = end;
        }
        let p = prefix(hash);
        let candidates = leaves
            .first
            .get(&p)
            .into_iter()
            .chain(leaves.more.get(&p).into_iter().flatten());
        for &index in candidates {
            let bundle = index / width;
            let data = tiles
                .get((crate::tlog::ENTRIES, bundle))
                .map_err(store_err)?
                .ok_or_else(|| LogError::Corrupt(format!("entry bundle {bundle} is missing")))?;
            let at = usize::try_from(index - bundle * width).unwrap_or(usize::MAX) * 32;
            if data.value().get(at..at + 32) == Some(hash.as_slice()) {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }
}

fn store_err(e: impl std::fmt::Display) -> LogError {
    store(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaves whose data share their first eight bytes are told apart by the whole hash; a hash
    /// the log does not hold is not found, and leaves appended after a lookup are found by the
    /// next.
    #[test]
    fn the_hash_index_tells_apart_leaves_with_one_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let leaf = |tail: u8| {
            let mut h = [7u8; 32];
            h[31] = tail;
            h
        };
        let filler: Vec<Hash> = (0..300u64)
            .map(|i| cra_tlog::leaf_hash(&i.to_be_bytes()))
            .collect();
        crate::testing::bulk_load_log(&store, &[leaf(1)]).unwrap();
        crate::testing::bulk_load_log(&store, &filler).unwrap();
        crate::testing::bulk_load_log(&store, &[leaf(2)]).unwrap();
        let index = store.hash_index();
        assert_eq!(index.find(&store, &leaf(1)).unwrap(), Some(0));
        assert_eq!(index.find(&store, &leaf(2)).unwrap(), Some(301));
        assert_eq!(index.find(&store, &leaf(3)).unwrap(), None);
        crate::testing::bulk_load_log(&store, &[leaf(3)]).unwrap();
        assert_eq!(index.find(&store, &leaf(3)).unwrap(), Some(302));
        assert_eq!(index.find(&store, &filler[299]).unwrap(), Some(300));
    }
}
