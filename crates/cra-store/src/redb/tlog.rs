//! The transparency log in redb (`crate::tlog`): its tables, the append the committer makes in
//! each batch's write transaction, the backfill of a data directory written before the log, and
//! [`LogStore`] for [`RedbStore`].
//!
//! Tables: `tlog_tiles` maps `(level, index)` to a stored tile (level 255: entry bundles);
//! `tlog_runs` maps the leaf index of each run's first leaf to a [`Run`]: the sequence and session
//! of its first event (an append adds leaves to one chain in order, so every leaf's place follows
//! from the row at or before it) and, for runs past the last full entry bundle, their leaf data;
//! `tlog_meta` holds `identity`; `tlog_checkpoints` maps a tree size to the signed checkpoint
//! published for it.
//!
//! **The right edge is not stored as tiles.** `tlog_tiles` holds full level-0 tiles and entry
//! bundles only; the leaves after the last full one are the data of the runs at the table's
//! right edge, from which the partial level-0 tile and entry bundle are made when read. So the
//! log adds one row in one table to an append that does not fill a tile, where rewriting the
//! partial tiles wrote up to 24 KiB a commit (`bench/NOTES.md`, stop 56). The append that fills
//! a tile writes it and the tiles above it whole, and rewrites the runs it covered without their
//! data. Partial tiles of higher levels are still stored: they change once per 256 leaves. The
//! log's size is the last run's end when it has data, else the full bundles' count times 256.
//!
//! Stores written before `tlog_runs` (a `size` in `tlog_meta`, places in `tlog_appends`, partial
//! tiles stored) are converted when opened.

use ::redb::{Database, Durability, ReadableTable, TableDefinition, WriteTransaction};
use cra_tlog::Hash;

use super::trace::EVENTS;
use super::{RedbStore, backend};
use crate::BackendError;
use crate::tlog::{ENTRIES, LeafPlace, LogError, LogIdentity, LogStore, NewLeaf, Settled, TileKey};
use crate::upgrade::UpgradeStep;

const TILES: TableDefinition<'static, (u8, u64), &[u8]> = TableDefinition::new("tlog_tiles");
const RUNS: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("tlog_runs");
const META: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("tlog_meta");
const CHECKPOINTS: TableDefinition<'static, u64, &str> = TableDefinition::new("tlog_checkpoints");
/// Places before `tlog_runs`: the leaf index of an append's first event to its sequence (8
/// bytes, big-endian) and session; read only to convert a store.
const OLD_APPENDS: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("tlog_appends");
/// The size stored before `tlog_runs`; removed when a store is converted.
const OLD_SIZE: &str = "size";
const IDENTITY: &str = "identity";

const WIDTH: u64 = crate::tlog::TILE_WIDTH as u64;
/// Bytes of a leaf's data.
const HASH: usize = 32;

fn store(e: impl std::fmt::Display) -> LogError {
    LogError::Store(format!("redb: {e}"))
}

fn malformed() -> LogError {
    LogError::Corrupt("a stored run of the log is malformed".into())
}

/// A run: leaves of consecutive events of one chain. Stored as the sequence (8 bytes,
/// big-endian), the session's length (2 bytes, big-endian), the session, then the leaf data
/// while the run is past the last full entry bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run<'a> {
    sequence: u64,
    session: &'a str,
    data: &'a [u8],
}

impl<'a> Run<'a> {
    fn encode(&self) -> Result<Vec<u8>, LogError> {
        let len = u16::try_from(self.session.len())
            .map_err(|_| LogError::Range("a session id of over 65,535 bytes".into()))?;
        let mut out = Vec::with_capacity(10 + self.session.len() + self.data.len());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(self.session.as_bytes());
        out.extend_from_slice(self.data);
        Ok(out)
    }

    fn decode(bytes: &'a [u8]) -> Result<Self, LogError> {
        let (sequence, rest) = bytes.split_first_chunk::<8>().ok_or_else(malformed)?;
        let (len, rest) = rest.split_first_chunk::<2>().ok_or_else(malformed)?;
        let len = usize::from(u16::from_be_bytes(*len));
        if rest.len() < len || (rest.len() - len) % HASH != 0 {
            return Err(malformed());
        }
        let (session, data) = rest.split_at(len);
        Ok(Self {
            sequence: u64::from_be_bytes(*sequence),
            session: std::str::from_utf8(session).map_err(|_| malformed())?,
            data,
        })
    }

    /// The same run from its `skip`th leaf on, with `data`.
    fn tail(&self, skip: u64, data: &'a [u8]) -> Self {
        Self {
            sequence: self.sequence + skip,
            session: self.session,
            data,
        }
    }
}

/// Passes this area's tables to a rewrite (`super::rewrite`); `tlog_appends` too, which a store
/// not yet converted still holds.
pub(crate) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), BackendError> {
    c.copy(TILES)?;
    c.copy(RUNS)?;
    c.copy(META)?;
    c.copy(CHECKPOINTS)?;
    c.copy(OLD_APPENDS)
}

/// Creates the log's tables and converts a store written before `tlog_runs`; a data directory
/// written before the log (events, an empty log) gets every stored event as a leaf first, in the
/// order `(timestamp, session_id, sequence)`: redb records no commit order, and a chain's
/// timestamps never go back.
pub(crate) fn create_tables(db: &Database) -> Result<(), BackendError> {
    let mut txn = db.begin_write().map_err(backend)?;
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    {
        txn.open_table(TILES).map_err(backend)?;
        txn.open_table(RUNS).map_err(backend)?;
        txn.open_table(CHECKPOINTS).map_err(backend)?;
        txn.open_table(META).map_err(backend)?;
    }
    let log = |e: LogError| backend(e.to_string());
    if !convert_sized(&txn).map_err(log)? && size_in(&txn).map_err(log)? == 0 {
        let leaves = stored_events(&txn).map_err(log)?;
        append_leaves(&txn, &leaves).map_err(log)?;
    }
    txn.commit().map_err(backend)
}

/// The conversions [`create_tables`] will make, as read from `txn` (`super::upgrade::plan`).
pub(crate) fn pending(
    txn: &::redb::ReadTransaction,
    steps: &mut Vec<UpgradeStep>,
) -> Result<(), BackendError> {
    let converts = match txn.open_table(META) {
        Ok(meta) => meta.get(OLD_SIZE).map_err(backend)?.is_some(),
        Err(::redb::TableError::TableDoesNotExist(_)) => false,
        Err(e) => return Err(backend(e)),
    };
    if converts {
        steps.push(UpgradeStep::new(
            "tlog.convert",
            "convert the transparency log's places (tlog_appends) into runs (tlog_runs)",
        ));
        return Ok(());
    }
    let empty = super::upgrade::rows(txn, RUNS)? == 0 && super::upgrade::rows(txn, TILES)? == 0;
    let chains = super::upgrade::rows(txn, super::trace::HEADS)?;
    if empty && super::upgrade::rows(txn, EVENTS)? > 0 {
        steps.push(UpgradeStep::new(
            "tlog.backfill",
            format!(
                "add every stored event of {chains} chains to the transparency log, in \
                 (timestamp, session, sequence) order"
            ),
        ));
    }
    Ok(())
}

/// Converts a log written before `tlog_runs`: each `tlog_appends` row becomes a run, those past
/// the last full entry bundle with their data from the partial bundle, which goes with the
/// partial level-0 tile. Answers whether the store was of that form.
fn convert_sized(txn: &WriteTransaction) -> Result<bool, LogError> {
    let size = {
        let mut meta = txn.open_table(META).map_err(store)?;
        let removed = meta.remove(OLD_SIZE).map_err(store)?;
        match removed {
            Some(bytes) => decode_u64(bytes.value())?,
            None => return Ok(false),
        }
    };
    let boundary = size - size % WIDTH;
    let partial = boundary / WIDTH;
    let edge = {
        let mut tiles = txn.open_table(TILES).map_err(store)?;
        let edge = match tiles.remove((ENTRIES, partial)).map_err(store)? {
            Some(bytes) => bytes.value().to_vec(),
            None => Vec::new(),
        };
        tiles.remove((0, partial)).map_err(store)?;
        edge
    };
    if edge.len() as u64 != (size - boundary) * HASH as u64 {
        return Err(LogError::Corrupt(format!(
            "entry bundle {partial} does not hold the log's last {} leaves",
            size - boundary
        )));
    }
    let mut old: Vec<(u64, u64, String)> = Vec::new();
    for row in txn
        .open_table(OLD_APPENDS)
        .map_err(store)?
        .iter()
        .map_err(store)?
    {
        let (first, value) = row.map_err(store)?;
        let (sequence, session) = value
            .value()
            .split_first_chunk::<8>()
            .ok_or_else(malformed)?;
        let session = String::from_utf8(session.to_vec()).map_err(|_| malformed())?;
        old.push((first.value(), u64::from_be_bytes(*sequence), session));
    }
    let uncovered = || {
        LogError::Corrupt(format!(
            "the log's places (tlog_appends) do not cover its {size} leaves"
        ))
    };
    if size > 0 && old.first().map(|o| o.0) != Some(0) {
        return Err(uncovered());
    }
    let mut runs = txn.open_table(RUNS).map_err(store)?;
    for (i, (first, sequence, session)) in old.iter().enumerate() {
        let end = old.get(i + 1).map_or(size, |next| next.0);
        let run = Run {
            sequence: *sequence,
            session,
            data: &[],
        };
        put_run(&mut runs, (*first, end), boundary, &run, (boundary, &edge))?;
    }
    drop(runs);
    txn.delete_table(OLD_APPENDS).map_err(store)?;
    if size_in(txn)? != size {
        return Err(uncovered());
    }
    Ok(true)
}

/// Stores `run`, whose leaves are `[first, end)`, as one row, or as two when it crosses
/// `boundary` (the first leaf past the last full entry bundle): leaves from `boundary` on carry
/// their data, taken from `edge` (the data of the leaves from leaf `edge.0` on).
fn put_run(
    runs: &mut ::redb::Table<'_, u64, &'static [u8]>,
    (first, end): (u64, u64),
    boundary: u64,
    run: &Run<'_>,
    (start, edge): (u64, &[u8]),
) -> Result<(), LogError> {
    if first < boundary {
        runs.insert(first, run.tail(0, &[]).encode()?.as_slice())
            .map_err(store)?;
    }
    if end > boundary {
        let at = first.max(boundary);
        let offset = |i: u64| usize::try_from(i - start).unwrap_or(usize::MAX) * HASH;
        let data = edge.get(offset(at)..offset(end)).ok_or_else(malformed)?;
        runs.insert(at, run.tail(at - first, data).encode()?.as_slice())
            .map_err(store)?;
    }
    Ok(())
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
/// with the events or not at all. Leaves that do not fill a tile are new runs with their data;
/// the append that fills one writes the full tiles and strips the data from the runs they cover.
pub(crate) fn append_leaves(txn: &WriteTransaction, leaves: &[NewLeaf]) -> Result<(), LogError> {
    // No index by event hash here: its keys are random, and a B-tree that copies each page it
    // changes would write a page per event at every commit (the 64-client resolve lost 43% to
    // it). Event hashes are found from the entry bundles instead (`HashIndex`).
    if leaves.is_empty() {
        return Ok(());
    }
    let data: Vec<u8> = leaves.iter().flat_map(|l| l.event_hash).collect();
    let mut runs = txn.open_table(RUNS).map_err(store)?;
    // `tlog_tiles` is opened only when needed: an append within a tile leaves it alone.
    let size = match edge_end(&runs)? {
        Some(size) => size,
        None => bundles_end(&txn.open_table(TILES).map_err(store)?)?,
    };
    let new_size = size
        .checked_add(leaves.len() as u64)
        .ok_or_else(|| LogError::Range("the log cannot grow past 2^64 leaves".into()))?;
    let old_boundary = size - size % WIDTH;
    let boundary = new_size - new_size % WIDTH;
    // The data of the leaves from `start` on, which covers every new run's leaves.
    let (start, edge) = if boundary > old_boundary {
        let mut held = edge_data(&runs, old_boundary / WIDTH)?;
        let mut tiles = txn.open_table(TILES).map_err(store)?;
        write_full_tiles(&mut tiles, size, &held, &data)?;
        strip_runs(&mut runs, old_boundary)?;
        held.extend_from_slice(&data);
        (old_boundary, held)
    } else {
        (size, data)
    };
    let mut i = 0;
    while i < leaves.len() {
        let head = &leaves[i];
        let mut end = i + 1;
        while end < leaves.len()
            && leaves[end].session_id == head.session_id
            && leaves[end].sequence == leaves[end - 1].sequence + 1
        {
            end += 1;
        }
        let run = Run {
            sequence: head.sequence,
            session: &head.session_id,
            data: &[],
        };
        let leaves = (size + i as u64, size + end as u64);
        put_run(&mut runs, leaves, boundary, &run, (start, &edge))?;
        i = end;
    }
    Ok(())
}

/// Appends leaves with `data` and no event behind them (one run of the empty session): the bulk
/// load of proof benchmarks (`crate::testing::bulk_load_log`).
pub(crate) fn append_bare(txn: &WriteTransaction, data: &[Hash]) -> Result<(), LogError> {
    let leaves: Vec<NewLeaf> = (0u64..)
        .zip(data)
        .map(|(sequence, hash)| NewLeaf {
            event_hash: *hash,
            session_id: String::new(),
            sequence,
        })
        .collect();
    append_leaves(txn, &leaves)
}

/// Writes the full tiles (and the partial tiles of higher levels) of appending `data` to a log of
/// `size` leaves whose leaves past the last full entry bundle are `held`; the partial level-0
/// tile and entry bundle the append leaves behind are not stored.
fn write_full_tiles(
    tiles: &mut ::redb::Table<'_, (u8, u64), &'static [u8]>,
    size: u64,
    held: &[u8],
    data: &[u8],
) -> Result<(), LogError> {
    let partial = size / WIDTH;
    let hashes: Vec<Hash> = data
        .chunks_exact(HASH)
        .filter_map(|c| Hash::try_from(c).ok())
        .collect();
    let writes = crate::tlog::append(size, &hashes, |key| match key.level {
        ENTRIES if key.index == partial => Ok(Some(held.to_vec())),
        0 if key.index == partial => Ok(Some(level_zero(held))),
        _ => Ok(tiles
            .get((key.level, key.index))
            .map_err(store)?
            .map(|v| v.value().to_vec())),
    })?;
    let new_size = size + hashes.len() as u64;
    for (key, bytes) in writes {
        let at_edge = (key.level == 0 || key.level == ENTRIES) && key.index == new_size / WIDTH;
        if !at_edge {
            tiles
                .insert((key.level, key.index), bytes.as_slice())
                .map_err(store)?;
        }
    }
    Ok(())
}

/// Rewrites the runs from leaf `from` on without their data (their leaves are in full bundles
/// now, or about to be stored again as the new edge).
fn strip_runs(runs: &mut ::redb::Table<'_, u64, &'static [u8]>, from: u64) -> Result<(), LogError> {
    let mut bare = Vec::new();
    for row in runs.range(from..).map_err(store)? {
        let (first, value) = row.map_err(store)?;
        let run = Run::decode(value.value())?;
        bare.push((first.value(), run.tail(0, &[]).encode()?));
    }
    for (first, value) in bare {
        runs.insert(first, value.as_slice()).map_err(store)?;
    }
    Ok(())
}

/// The log's size: the last run's end when it has data, else every full entry bundle's leaves.
fn log_size_of(
    runs: &impl ReadableTable<u64, &'static [u8]>,
    tiles: &impl ReadableTable<(u8, u64), &'static [u8]>,
) -> Result<u64, LogError> {
    match edge_end(runs)? {
        Some(size) => Ok(size),
        None => bundles_end(tiles),
    }
}

/// The leaves of every full entry bundle.
fn bundles_end(tiles: &impl ReadableTable<(u8, u64), &'static [u8]>) -> Result<u64, LogError> {
    let last = tiles
        .range((ENTRIES, 0)..)
        .map_err(store)?
        .next_back()
        .transpose()
        .map_err(store)?;
    Ok(last.map_or(0, |(key, _)| (key.value().1 + 1) * WIDTH))
}

/// The log's size when the last run has data (the log is not at a full bundle's end).
fn edge_end(runs: &impl ReadableTable<u64, &'static [u8]>) -> Result<Option<u64>, LogError> {
    let Some((first, value)) = runs.last().map_err(store)? else {
        return Ok(None);
    };
    let run = Run::decode(value.value())?;
    Ok((!run.data.is_empty()).then(|| first.value() + (run.data.len() / HASH) as u64))
}

/// The log's size as `txn` reads it (0 for a file without the log's tables).
pub(crate) fn size_read(txn: &::redb::ReadTransaction) -> Result<u64, BackendError> {
    let (runs, tiles) = match (txn.open_table(RUNS), txn.open_table(TILES)) {
        (Ok(runs), Ok(tiles)) => (runs, tiles),
        (Err(::redb::TableError::TableDoesNotExist(_)), _)
        | (_, Err(::redb::TableError::TableDoesNotExist(_))) => return Ok(0),
        (Err(e), _) | (_, Err(e)) => return Err(backend(e)),
    };
    log_size_of(&runs, &tiles).map_err(|e| backend(e.to_string()))
}

fn size_in(txn: &WriteTransaction) -> Result<u64, LogError> {
    let runs = txn.open_table(RUNS).map_err(store)?;
    let tiles = txn.open_table(TILES).map_err(store)?;
    log_size_of(&runs, &tiles)
}

/// The leaf data of the runs from entry bundle `bundle`'s first leaf on (the edge, when `bundle`
/// is the partial one; empty when no run starts there).
fn edge_data(
    runs: &impl ReadableTable<u64, &'static [u8]>,
    bundle: u64,
) -> Result<Vec<u8>, LogError> {
    let start = bundle * WIDTH;
    let mut out = Vec::new();
    for row in runs.range(start..).map_err(store)? {
        let (first, value) = row.map_err(store)?;
        let run = Run::decode(value.value())?;
        if first.value() != start + (out.len() / HASH) as u64 || run.data.is_empty() {
            return Err(LogError::Corrupt(format!(
                "the log's run at leaf {} does not follow the one before it",
                first.value()
            )));
        }
        out.extend_from_slice(run.data);
    }
    Ok(out)
}

/// The stored form of the partial level-0 tile over `entries` (leaf data).
fn level_zero(entries: &[u8]) -> Vec<u8> {
    let hashes: Vec<Hash> = entries
        .chunks_exact(HASH)
        .map(cra_tlog::leaf_hash)
        .collect();
    crate::tlog::encode_tile(&hashes)
}

/// The tile at `key` as [`LogStore::read_tile`] answers it: stored, or the partial level-0 tile
/// or entry bundle made from the runs at the edge.
fn tile_in(txn: &::redb::ReadTransaction, key: TileKey) -> Result<Option<Vec<u8>>, LogError> {
    let tiles = txn.open_table(TILES).map_err(store)?;
    if let Some(v) = tiles.get((key.level, key.index)).map_err(store)? {
        return Ok(Some(v.value().to_vec()));
    }
    if key.level != 0 && key.level != ENTRIES {
        return Ok(None);
    }
    let runs = txn.open_table(RUNS).map_err(store)?;
    let data = edge_data(&runs, key.index)?;
    if data.is_empty() {
        return Ok(None);
    }
    Ok(Some(if key.level == ENTRIES {
        data
    } else {
        level_zero(&data)
    }))
}

fn decode_u64(bytes: &[u8]) -> Result<u64, LogError> {
    Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| {
        LogError::Corrupt(format!("stored log size of {} bytes", bytes.len()))
    })?))
}

/// The place of leaf `leaf_index`, from the run at or before it.
fn place_of(txn: &::redb::ReadTransaction, leaf_index: u64) -> Result<Option<LeafPlace>, LogError> {
    let runs = txn.open_table(RUNS).map_err(store)?;
    let Some(row) = runs.range(..=leaf_index).map_err(store)?.next_back() else {
        return Ok(None);
    };
    let (first, value) = row.map_err(store)?;
    let run = Run::decode(value.value())?;
    Ok(Some(LeafPlace {
        leaf_index,
        sequence: run.sequence + (leaf_index - first.value()),
        session_id: run.session.to_owned(),
    }))
}

/// Every leaf of the log in the view `txn`, in log order, with its place, passed to `sink` a
/// few thousand at a time: what a move to another backend appends there to rebuild the same
/// tree (`crate::backup::transfer`).
pub(crate) fn for_each_leaf(
    txn: &::redb::ReadTransaction,
    sink: &mut dyn FnMut(Vec<NewLeaf>) -> Result<(), LogError>,
) -> Result<(), LogError> {
    const BATCH: usize = 4096;
    let size = size_read(txn).map_err(store)?;
    let runs = txn.open_table(RUNS).map_err(store)?;
    let mut rows = runs.iter().map_err(store)?.peekable();
    let mut bundle: Option<(u64, Vec<u8>)> = None;
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(row) = rows.next() {
        let (first, value) = row.map_err(store)?;
        let first = first.value();
        let run = Run::decode(value.value())?;
        let end = match rows.peek() {
            Some(Ok((next, _))) => next.value(),
            Some(Err(e)) => return Err(store(e)),
            None => size,
        };
        for index in first..end {
            let at = index / WIDTH;
            if bundle.as_ref().is_none_or(|(b, _)| *b != at) {
                bundle = Some((at, bundle_in(txn, at)?));
            }
            let data = bundle.as_ref().map_or(&[][..], |(_, d)| d.as_slice());
            let offset = usize::try_from(index - at * WIDTH).unwrap_or(usize::MAX) * HASH;
            let hash: Hash = data
                .get(offset..offset + HASH)
                .and_then(|h| h.try_into().ok())
                .ok_or_else(|| LogError::Corrupt(format!("entry bundle {at} is too short")))?;
            batch.push(NewLeaf {
                event_hash: hash,
                session_id: run.session.to_owned(),
                sequence: run.sequence + (index - first),
            });
            if batch.len() == BATCH {
                sink(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))?;
            }
        }
    }
    if !batch.is_empty() {
        sink(batch)?;
    }
    Ok(())
}

/// A log's identity (none before a server signed for it) and its signed checkpoints by size.
pub(crate) type Published = (Option<LogIdentity>, Vec<(u64, String)>);

/// The log's identity and its signed checkpoints in the view `txn`.
pub(crate) fn identity_and_checkpoints(
    txn: &::redb::ReadTransaction,
) -> Result<Published, LogError> {
    let meta = txn.open_table(META).map_err(store)?;
    let identity = meta
        .get(IDENTITY)
        .map_err(store)?
        .map(|v| LogIdentity::decode(&String::from_utf8_lossy(v.value())))
        .transpose()?;
    let table = txn.open_table(CHECKPOINTS).map_err(store)?;
    let mut checkpoints = Vec::new();
    for row in table.iter().map_err(store)? {
        let (size, note) = row.map_err(store)?;
        checkpoints.push((size.value(), note.value().to_owned()));
    }
    Ok((identity, checkpoints))
}

impl LogStore for RedbStore {
    fn log_size(&self) -> Result<u64, LogError> {
        let txn = self.handle().begin_read().map_err(store)?;
        let runs = txn.open_table(RUNS).map_err(store)?;
        let tiles = txn.open_table(TILES).map_err(store)?;
        log_size_of(&runs, &tiles)
    }

    fn leaf_place(&self, event_hash: &Hash) -> Result<Option<LeafPlace>, LogError> {
        let Some(index) = self.hash_index().find(self, event_hash)? else {
            return Ok(None);
        };
        let txn = self.handle().begin_read().map_err(store)?;
        place_of(&txn, index)
    }

    fn read_tile(&self, key: TileKey) -> Result<Option<Vec<u8>>, LogError> {
        let txn = self.handle().begin_read().map_err(store)?;
        tile_in(&txn, key)
    }

    fn checkpoints(&self, limit: usize) -> Result<Vec<String>, LogError> {
        let txn = self.handle().begin_read().map_err(store)?;
        let table = txn.open_table(CHECKPOINTS).map_err(store)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(store)?.rev().take(limit) {
            out.push(entry.map_err(store)?.1.value().to_owned());
        }
        Ok(out)
    }

    fn publish_checkpoint(&self, size: u64, note: &str) -> Result<String, LogError> {
        let mut txn = self.handle().begin_write().map_err(store)?;
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

    fn settle_identity(
        &self,
        identity: &LogIdentity,
        rotating: &[String],
    ) -> Result<Settled, LogError> {
        let mut txn = self.handle().begin_write().map_err(store)?;
        txn.set_durability(Durability::Immediate).map_err(store)?;
        let settled = {
            let mut meta = txn.open_table(META).map_err(store)?;
            let stored = meta
                .get(IDENTITY)
                .map_err(store)?
                .map(|v| LogIdentity::decode(&String::from_utf8_lossy(v.value())))
                .transpose()?;
            let settled = LogIdentity::settle(stored, identity, rotating)?;
            if settled.records() {
                meta.insert(IDENTITY, identity.encode().as_bytes())
                    .map_err(store)?;
            }
            settled
        };
        txn.commit().map_err(store)?;
        Ok(settled)
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
        let txn = store.handle().begin_read().map_err(store_err)?;
        let width = crate::tlog::TILE_WIDTH as u64;
        while leaves.upto < size {
            let bundle = leaves.upto / width;
            let data = bundle_in(&txn, bundle)?;
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
            let data = bundle_in(&txn, bundle)?;
            let at = usize::try_from(index - bundle * width).unwrap_or(usize::MAX) * 32;
            if data.get(at..at + 32) == Some(hash.as_slice()) {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }
}

fn store_err(e: impl std::fmt::Display) -> LogError {
    store(e)
}

/// Entry bundle `bundle`, full or at the edge.
fn bundle_in(txn: &::redb::ReadTransaction, bundle: u64) -> Result<Vec<u8>, LogError> {
    tile_in(
        txn,
        TileKey {
            level: ENTRIES,
            index: bundle,
        },
    )?
    .ok_or_else(|| LogError::Corrupt(format!("entry bundle {bundle} is missing")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::redb::ReadableDatabase;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;

    /// Every tile of a log, as the shared append writes them when each is stored whole (the
    /// form before `tlog_edge`), and its size.
    #[derive(Default)]
    struct Whole {
        tiles: BTreeMap<TileKey, Vec<u8>>,
        size: u64,
    }

    impl Whole {
        fn push(&mut self, data: &[Hash]) {
            let writes =
                crate::tlog::append(self.size, data, |k| Ok(self.tiles.get(&k).cloned())).unwrap();
            self.tiles.extend(writes);
            self.size += data.len() as u64;
        }
    }

    fn leaves(from: u64, n: u64) -> Vec<Hash> {
        (from..from + n)
            .map(|i| cra_tlog::leaf_hash(&i.to_le_bytes()))
            .collect()
    }

    /// The store answers the size and every tile of `whole`.
    fn same_log(store: &RedbStore, whole: &Whole) {
        assert_eq!(store.log_size().unwrap(), whole.size);
        for (key, bytes) in &whole.tiles {
            assert_eq!(
                store.read_tile(*key).unwrap().as_ref(),
                Some(bytes),
                "tile {key:?}"
            );
        }
    }

    /// Invariant: however appends fall across tile boundaries (one leaf, a tile's rest, many
    /// tiles at once), the log reads as the same tree as one whose every tile is stored whole,
    /// and the edge holds only leaves past the last full entry bundle.
    #[test]
    fn appends_of_every_shape_read_as_the_whole_tree() {
        let seed = rand::random::<u64>();
        eprintln!("seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut whole = Whole::default();
        for _ in 0..60 {
            let n = match rng.random_range(0..4) {
                0 => 1,
                1 => WIDTH - whole.size % WIDTH,
                2 => rng.random_range(1..40),
                _ => rng.random_range(200..700),
            };
            let data = leaves(whole.size, n);
            crate::testing::bulk_load_log(&store, &data).unwrap();
            whole.push(&data);
            same_log(&store, &whole);
            let txn = store.handle().begin_read().unwrap();
            let runs = txn.open_table(RUNS).unwrap();
            let held = edge_data(&runs, whole.size / WIDTH).unwrap();
            assert_eq!(held.len() as u64, whole.size % WIDTH * HASH as u64);
        }
    }

    /// The places of the old form's test log: leaves of `a` from 0, `b` from 400, `c` from 900.
    const OLD_PLACES: [(u64, u64, &str); 3] = [(0, 0, "a"), (400, 10, "b"), (900, 0, "c")];

    /// Writes, in the store at `dir`, a log of `whole` in the form before `tlog_runs`: every
    /// tile whole but `left_out`, its size in `tlog_meta`, and `places` in `tlog_appends`.
    fn write_sized(
        dir: &std::path::Path,
        whole: &Whole,
        left_out: &[TileKey],
        places: &[(u64, u64, &str)],
    ) {
        let store = RedbStore::open(dir).unwrap();
        let txn = store.handle().begin_write().unwrap();
        {
            let mut tiles = txn.open_table(TILES).unwrap();
            for (key, bytes) in whole.tiles.iter().filter(|(k, _)| !left_out.contains(k)) {
                tiles
                    .insert((key.level, key.index), bytes.as_slice())
                    .unwrap();
            }
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(OLD_SIZE, whole.size.to_be_bytes().as_slice())
                .unwrap();
            let mut appends = txn.open_table(OLD_APPENDS).unwrap();
            for (first, sequence, session) in places {
                let mut place = sequence.to_be_bytes().to_vec();
                place.extend_from_slice(session.as_bytes());
                appends.insert(first, place.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }

    /// Whether the store at `dir` still holds its log's size in the old form.
    fn still_sized(dir: &std::path::Path) -> bool {
        let db = Database::open(dir.join(super::super::DATABASE_FILE)).unwrap();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        meta.get(OLD_SIZE).unwrap().is_some()
    }

    /// Invariant: a log in the old form that does not hold together (its partial entry bundle
    /// missing, or places that do not cover its leaves) is refused at open, naming what is
    /// wrong, and the store is left as it was.
    #[test]
    fn a_sized_log_that_does_not_hold_together_is_refused_and_left_as_it_was() {
        let mut whole = Whole::default();
        whole.push(&leaves(0, 1000));
        let bundle = TileKey {
            level: ENTRIES,
            index: 3,
        };
        for (left_out, places, says) in [
            (vec![bundle], &OLD_PLACES[..], "entry bundle 3"),
            (Vec::new(), &OLD_PLACES[..0], "do not cover its 1000 leaves"),
            (Vec::new(), &OLD_PLACES[1..], "do not cover its 1000 leaves"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write_sized(dir.path(), &whole, &left_out, places);
            let Err(e) = RedbStore::open(dir.path()) else {
                panic!("the store opened");
            };
            assert!(e.to_string().contains(says), "{e}");
            assert!(
                still_sized(dir.path()),
                "the refused conversion wrote nothing"
            );
        }
    }

    /// A log written with its size stored and its partial tiles whole is converted when the
    /// store opens: the same tree, its partial entry bundle in the edge, and appends go on.
    #[test]
    fn a_log_with_its_size_stored_is_converted_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut whole = Whole::default();
        whole.push(&leaves(0, 1000));
        write_sized(dir.path(), &whole, &[], &OLD_PLACES);
        let store = RedbStore::open(dir.path()).unwrap();
        same_log(&store, &whole);
        {
            let txn = store.handle().begin_read().unwrap();
            let meta = txn.open_table(META).unwrap();
            assert!(meta.get(OLD_SIZE).unwrap().is_none());
            let tiles = txn.open_table(TILES).unwrap();
            assert!(tiles.get((ENTRIES, 3)).unwrap().is_none());
            assert!(tiles.get((0, 3)).unwrap().is_none());
            // The run of `b` crosses the last full bundle's end: two rows, one place each.
            for (leaf, sequence, session) in [(399, 399, "a"), (800, 410, "b"), (950, 50, "c")] {
                let place = place_of(&txn, leaf).unwrap().unwrap();
                assert_eq!(
                    (place.sequence, place.session_id.as_str()),
                    (sequence, session)
                );
            }
        }
        let more = leaves(1000, 300);
        crate::testing::bulk_load_log(&store, &more).unwrap();
        whole.push(&more);
        same_log(&store, &whole);
    }

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
