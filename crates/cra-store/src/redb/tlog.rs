//! The transparency log in redb (`crate::tlog`): its tables, the append the committer makes in
//! each batch's write transaction, the conversions of stores written in earlier layouts, and
//! [`LogStore`] for [`RedbStore`].
//!
//! Tables: `tlog_runs` maps the leaf index of each run's first leaf to a [`Run`]: the sequence and
//! session of its first event (an append adds leaves to one chain in order, so every leaf's place
//! follows from the row at or before it) and the run's leaves. The committer's runs hold a count:
//! a leaf's data is its event's 32-byte hash, which the event's record already holds, so it is
//! read from there ([`Events`]) and not written twice. Runs of leaves with no event behind them
//! (a bulk load) and runs written before data format 5 hold the data itself. The runs are the
//! log's leaves: entry bundles are read from them, and no run crosses a multiple of
//! [`RUN_SPAN`] leaves. `tlog_retired` keeps the hashes of the events retention removes, under
//! their records' keys, so a counted run never loses its data. `tlog_tiles` maps `(level, index)` to a stored hash tile: a level-0 tile
//! only once full, and only its inner levels 4 to 7 (30 hashes); tiles of higher levels whole
//! with their inner levels, partial ones too. `tlog_meta` holds `identity` and `layout`;
//! `tlog_checkpoints` maps a tree size to the signed checkpoint published for it.
//!
//! `tlog_edge` holds the newest runs, in the same form, while they fit one page
//! ([`EDGE_BYTES`]): every key in it lies above every key in `tlog_runs`, and the two read as one
//! table ([`Runs`]). An append of a few events (one session, one event at a time) rewrites that
//! one page, not the three pages of `tlog_runs`'s path to its last leaf; the append that would
//! outgrow the page moves the edge's rows and its own into `tlog_runs`, and so does any append
//! too large for the page, so no row is written to `tlog_runs` twice. A run that continues the
//! run of the row before it in the same span joins that row (`NewRows`).
//!
//! **Each leaf's data is stored once**, in its event's record. An append that fills no level-0
//! tile adds runs (to the edge or to `tlog_runs`) and nothing else; the append that fills one also
//! stores its upper levels and the tiles above it, hashed from the partial tile's data the
//! committer keeps between commits ([`PartialTile`]). Leaf hashes and the lower four levels of a level-0 tile (at most 31 hashes for
//! any node a proof needs) are computed from the runs when read, and so is a whole level-0 tile
//! or entry bundle when one is served. The layout before this one wrote each leaf's data twice
//! (in its run, then in its entry bundle: a 16 KiB page for 8 KiB) and every level-0 tile whole,
//! over 150 bytes a leaf where a leaf's data is 32 (`bench/NOTES.md`, stops 63 and 69).
//!
//! Stores written in earlier layouts are converted in the transaction that opens them: a `size`
//! in `tlog_meta` with places in `tlog_appends` (before `tlog_runs`), and runs without their data
//! beside entry bundles and whole level-0 tiles (before `layout`).

use ::redb::{Database, Durability, ReadableTable, TableDefinition, TableHandle, WriteTransaction};
use cra_tlog::Hash;

use super::trace::EVENTS;
use super::{RedbStore, backend};
use crate::BackendError;
use crate::encryption::Encryption;
use crate::tlog::{ENTRIES, LeafPlace, LogError, LogIdentity, LogStore, NewLeaf, Settled, TileKey};
use crate::upgrade::UpgradeStep;

const TILES: TableDefinition<'static, (u8, u64), &[u8]> = TableDefinition::new("tlog_tiles");
const RUNS: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("tlog_runs");
/// The newest runs, in [`RUNS`]'s form, while they fit one page (data format 4 on).
const EDGE: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("tlog_edge");
/// The bytes of rows (keys and values) [`EDGE`] holds at most: with redb's offsets of a few
/// bytes a row, they fit one 4 KiB page.
const EDGE_BYTES: usize = 3072;
/// The leaf data of chains retention removed, whose runs are counted: each removed record's
/// key (session, first sequence) to its events' hashes, 32 bytes each (data format 5 on).
const RETIRED: TableDefinition<'static, (&str, u64), &[u8]> = TableDefinition::new("tlog_retired");
const META: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("tlog_meta");
const CHECKPOINTS: TableDefinition<'static, u64, &str> = TableDefinition::new("tlog_checkpoints");
/// Places before `tlog_runs`: the leaf index of an append's first event to its sequence (8
/// bytes, big-endian) and session; read only to convert a store.
const OLD_APPENDS: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("tlog_appends");
/// The size stored before `tlog_runs`; removed when a store is converted.
const OLD_SIZE: &str = "size";
const IDENTITY: &str = "identity";
/// The meta row naming the layout of the log's tables; absent before runs held their data.
const LAYOUT: &str = "layout";
/// The layout this module writes.
const DATA_IN_RUNS: &[u8] = b"data-in-runs";

const WIDTH: u64 = crate::tlog::TILE_WIDTH as u64;
/// Bytes of a leaf's data.
const HASH: usize = 32;
/// No run crosses a multiple of this many leaves, so a row holds at most 2 KiB of leaf data.
pub(crate) const RUN_SPAN: u64 = 64;
/// The inner levels of a level-0 tile computed from leaf data (0 to 3) rather than stored.
const LOW_LEVELS: u8 = 4;
/// Hashes a full level-0 tile keeps: its inner levels [`LOW_LEVELS`] to 7.
const UPPER_HASHES: usize = 16 + 8 + 4 + 2;

fn store(e: impl std::fmt::Display) -> LogError {
    LogError::Store(format!("redb: {e}"))
}

fn malformed() -> LogError {
    LogError::Corrupt("a stored run of the log is malformed".into())
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A run: leaves of consecutive events of one chain. Stored as the sequence (8 bytes,
/// big-endian), the session's length (2 bytes, big-endian), the session, then the leaves: their
/// data (a multiple of 32 bytes; empty only in a store not yet converted from the layout before
/// `layout`), or their count (4 bytes, big-endian) when the data is the hashes of the run's
/// events, read from their records ([`Events`]). A tail of 4 bytes is never data.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run<'a> {
    sequence: u64,
    session: &'a str,
    leaves: Leaves<'a>,
}

/// What a [`Run`] holds of its leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaves<'a> {
    /// Their data: leaves with no event behind them (a bulk load), or written before counted
    /// runs (data format 5).
    Data(&'a [u8]),
    /// How many there are: their data is the hashes their events' records hold.
    Counted(u32),
}

/// Bytes of a counted run's tail.
const COUNT: usize = 4;

impl<'a> Run<'a> {
    fn encode(&self) -> Result<Vec<u8>, LogError> {
        let len = u16::try_from(self.session.len())
            .map_err(|_| LogError::Range("a session id of over 65,535 bytes".into()))?;
        let mut out = Vec::with_capacity(10 + self.session.len() + HASH * RUN_SPAN as usize);
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(self.session.as_bytes());
        match self.leaves {
            Leaves::Data(data) => out.extend_from_slice(data),
            Leaves::Counted(n) => out.extend_from_slice(&n.to_be_bytes()),
        }
        Ok(out)
    }

    fn decode(bytes: &'a [u8]) -> Result<Self, LogError> {
        let (sequence, rest) = bytes.split_first_chunk::<8>().ok_or_else(malformed)?;
        let (len, rest) = rest.split_first_chunk::<2>().ok_or_else(malformed)?;
        let len = usize::from(u16::from_be_bytes(*len));
        if rest.len() < len {
            return Err(malformed());
        }
        let (session, tail) = rest.split_at(len);
        let leaves = match <[u8; COUNT]>::try_from(tail) {
            Ok(n) if u32::from_be_bytes(n) > 0 => Leaves::Counted(u32::from_be_bytes(n)),
            _ if tail.len() % HASH == 0 => Leaves::Data(tail),
            _ => return Err(malformed()),
        };
        Ok(Self {
            sequence: u64::from_be_bytes(*sequence),
            session: std::str::from_utf8(session).map_err(|_| malformed())?,
            leaves,
        })
    }

    /// Leaves the run holds.
    fn leaves(&self) -> u64 {
        match self.leaves {
            Leaves::Data(data) => (data.len() / HASH) as u64,
            Leaves::Counted(n) => u64::from(n),
        }
    }

    /// A run of the layout before `layout`, whose data is in entry bundles.
    fn is_bare(&self) -> bool {
        self.leaves == Leaves::Data(&[])
    }

    /// The same run's leaves `[from, to)` (counted from its first), `None` past its end.
    fn part(&self, from: u64, to: u64) -> Option<Self> {
        let leaves = match self.leaves {
            Leaves::Data(data) => {
                Leaves::Data(data.get(usize_of(from) * HASH..usize_of(to) * HASH)?)
            }
            Leaves::Counted(n) => {
                (from < to && to <= u64::from(n)).then_some(())?;
                Leaves::Counted(u32::try_from(to - from).ok()?)
            }
        };
        Some(Self {
            sequence: self.sequence + from,
            session: self.session,
            leaves,
        })
    }
}

/// Passes this area's tables to a rewrite (`super::rewrite`); `tlog_appends` too, which a store
/// not yet converted still holds.
pub(crate) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), BackendError> {
    c.copy(TILES)?;
    c.copy(RUNS)?;
    c.copy(EDGE)?;
    c.copy(RETIRED)?;
    c.copy(META)?;
    c.copy(CHECKPOINTS)?;
    c.copy(OLD_APPENDS)
}

/// Creates the log's tables and converts a store written in an earlier layout; a data directory
/// written before the log (events, an empty log) gets every stored event as a leaf first, in the
/// order `(timestamp, session_id, sequence)`: redb records no commit order, and a chain's
/// timestamps never go back.
pub(crate) fn create_tables(db: &Database, enc: &Encryption) -> Result<(), BackendError> {
    let mut txn = db.begin_write().map_err(backend)?;
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    {
        txn.open_table(TILES).map_err(backend)?;
        txn.open_table(RUNS).map_err(backend)?;
        txn.open_table(EDGE).map_err(backend)?;
        txn.open_table(RETIRED).map_err(backend)?;
        txn.open_table(CHECKPOINTS).map_err(backend)?;
        txn.open_table(META).map_err(backend)?;
    }
    let log = |e: LogError| backend(e.to_string());
    convert(&txn).map_err(log)?;
    if size_in(&txn).map_err(log)? == 0 {
        let leaves = stored_events(&txn).map_err(log)?;
        append_leaves(&txn, enc, &leaves).map_err(log)?;
    }
    txn.commit().map_err(backend)
}

/// Converts a log of an earlier layout to this one, and marks the layout.
fn convert(txn: &WriteTransaction) -> Result<(), LogError> {
    let mut meta = txn.open_table(META).map_err(store)?;
    if meta.get(LAYOUT).map_err(store)?.is_some() {
        return Ok(());
    }
    drop(meta);
    let sized = convert_sized(txn)?;
    let held = txn
        .open_table(RUNS)
        .map_err(store)?
        .first()
        .map_err(store)?
        .is_some()
        || txn
            .open_table(TILES)
            .map_err(store)?
            .first()
            .map_err(store)?
            .is_some();
    if held {
        move_data_into_runs(txn, sized)?;
    }
    meta = txn.open_table(META).map_err(store)?;
    meta.insert(LAYOUT, DATA_IN_RUNS).map_err(store)?;
    Ok(())
}

/// The conversions [`create_tables`] will make, as read from `txn` (`super::upgrade::plan`).
pub(crate) fn pending(
    txn: &::redb::ReadTransaction,
    steps: &mut Vec<UpgradeStep>,
) -> Result<(), BackendError> {
    let (sized, laid_out) = match txn.open_table(META) {
        Ok(meta) => (
            meta.get(OLD_SIZE).map_err(backend)?.is_some(),
            meta.get(LAYOUT).map_err(backend)?.is_some(),
        ),
        Err(::redb::TableError::TableDoesNotExist(_)) => (false, false),
        Err(e) => return Err(backend(e)),
    };
    let empty = super::upgrade::rows(txn, RUNS)? == 0
        && super::upgrade::rows(txn, EDGE)? == 0
        && super::upgrade::rows(txn, TILES)? == 0;
    if sized {
        steps.push(UpgradeStep::new(
            "tlog.convert",
            "convert the transparency log's places (tlog_appends) into runs (tlog_runs)",
        ));
    }
    if !laid_out && (sized || !empty) {
        steps.push(UpgradeStep::new(
            "tlog.layout",
            "move the transparency log's leaf data from its entry bundles into its runs, and \
             keep the upper four levels of each level-0 tile",
        ));
    }
    let chains = super::upgrade::rows(txn, super::trace::HEADS)?;
    if !sized && empty && super::upgrade::rows(txn, EVENTS)? > 0 {
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

/// Converts a log written before `tlog_runs` into the layout before `layout`: each
/// `tlog_appends` row becomes a run without data, and the partial level-0 tile goes (its entry
/// bundle stays, for [`move_data_into_runs`]). Answers the log's size if the store was of that
/// form.
fn convert_sized(txn: &WriteTransaction) -> Result<Option<u64>, LogError> {
    let size = {
        let mut meta = txn.open_table(META).map_err(store)?;
        let removed = meta.remove(OLD_SIZE).map_err(store)?;
        match removed {
            Some(bytes) => decode_u64(bytes.value())?,
            None => return Ok(None),
        }
    };
    let partial = size / WIDTH;
    {
        let mut tiles = txn.open_table(TILES).map_err(store)?;
        let held = match tiles.get((ENTRIES, partial)).map_err(store)? {
            Some(bytes) => bytes.value().len() as u64,
            None => 0,
        };
        if held != size % WIDTH * HASH as u64 {
            return Err(LogError::Corrupt(format!(
                "entry bundle {partial} does not hold the log's last {} leaves",
                size % WIDTH
            )));
        }
        tiles.remove((0, partial)).map_err(store)?;
    }
    let mut old: Vec<(u64, Vec<u8>)> = Vec::new();
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
        let session = std::str::from_utf8(session).map_err(|_| malformed())?;
        let run = Run {
            sequence: u64::from_be_bytes(*sequence),
            session,
            leaves: Leaves::Data(&[]),
        };
        old.push((first.value(), run.encode()?));
    }
    if size > 0 && old.first().map(|o| o.0) != Some(0) || old.last().is_some_and(|o| o.0 >= size) {
        return Err(LogError::Corrupt(format!(
            "the log's places (tlog_appends) do not cover its {size} leaves"
        )));
    }
    let mut runs = txn.open_table(RUNS).map_err(store)?;
    for (first, value) in old {
        runs.insert(first, value.as_slice()).map_err(store)?;
    }
    drop(runs);
    txn.delete_table(OLD_APPENDS).map_err(store)?;
    Ok(Some(size))
}

/// Converts runs whose leaves' data is in entry bundles (the layout before `layout`; `sized`
/// when [`convert_sized`] just made them): every run takes its leaves' data, split at multiples
/// of [`RUN_SPAN`]; each full level-0 tile keeps its upper levels; entry bundles and partial
/// level-0 tiles go. Works a few thousand rows at a time, so a large log is never held whole.
fn move_data_into_runs(txn: &WriteTransaction, sized: Option<u64>) -> Result<(), LogError> {
    const CHUNK: usize = 4096;
    let mut runs = txn.open_table(RUNS).map_err(store)?;
    let mut tiles = txn.open_table(TILES).map_err(store)?;
    let size = match sized {
        Some(size) => size,
        None => old_size(&runs, &tiles)?,
    };
    let mut bundles = Bundles::default();
    let mut from = 0u64;
    loop {
        let rows = rows_from(&runs, from, CHUNK + 1)?;
        let Some(&(first, _)) = rows.first() else {
            break;
        };
        if first != from {
            return Err(gap(from));
        }
        for (i, (first, bytes)) in rows.iter().take(CHUNK).enumerate() {
            let end = rows.get(i + 1).map_or(size, |next| next.0);
            let run = Run::decode(bytes)?;
            if !run.is_bare() && run.leaves() != end - first {
                return Err(malformed());
            }
            runs.remove(*first).map_err(store)?;
            let mut at = *first;
            while at < end {
                let stop = ((at / RUN_SPAN + 1) * RUN_SPAN).min(end);
                let data;
                let piece = if run.is_bare() {
                    data = bundles.data(&tiles, at, stop)?;
                    Run {
                        sequence: run.sequence + (at - first),
                        session: run.session,
                        leaves: Leaves::Data(&data),
                    }
                } else {
                    run.part(at - first, stop - first).ok_or_else(malformed)?
                };
                runs.insert(at, piece.encode()?.as_slice()).map_err(store)?;
                at = stop;
            }
        }
        match rows.get(CHUNK) {
            Some(&(next, _)) => from = next,
            None => break,
        }
    }
    compact_level_zero(&mut tiles, CHUNK)?;
    if log_size_of(&Runs::new(&runs, None))? != size {
        return Err(LogError::Corrupt(format!(
            "the log's runs do not cover its {size} leaves"
        )));
    }
    Ok(())
}

/// Up to `n` rows of `table` from key `from` on.
fn rows_from(
    table: &impl ReadableTable<u64, &'static [u8]>,
    from: u64,
    n: usize,
) -> Result<Vec<(u64, Vec<u8>)>, LogError> {
    let mut out = Vec::new();
    for row in table.range(from..).map_err(store)?.take(n) {
        let (key, value) = row.map_err(store)?;
        out.push((key.value(), value.value().to_vec()));
    }
    Ok(out)
}

fn gap(at: u64) -> LogError {
    LogError::Corrupt(format!(
        "the log's runs do not follow each other at leaf {at}"
    ))
}

/// The size of a log in the layout before `layout`: the last run's end when it has data, else
/// the leaves of the entry bundles (the last one partial after [`convert_sized`]).
fn old_size(
    runs: &impl ReadableTable<u64, &'static [u8]>,
    tiles: &impl ReadableTable<(u8, u64), &'static [u8]>,
) -> Result<u64, LogError> {
    if let Some((first, value)) = runs.last().map_err(store)? {
        let run = Run::decode(value.value())?;
        if !run.is_bare() {
            return Ok(first.value() + run.leaves());
        }
    }
    let last = tiles
        .range((ENTRIES, 0)..)
        .map_err(store)?
        .next_back()
        .transpose()
        .map_err(store)?;
    Ok(last.map_or(0, |(key, value)| {
        key.value().1 * WIDTH + (value.value().len() / HASH) as u64
    }))
}

/// The entry bundles of a store being converted, read one at a time.
#[derive(Default)]
struct Bundles {
    held: Option<(u64, Vec<u8>)>,
}

impl Bundles {
    /// The data of leaves `[from, to)`, which lie in one entry bundle.
    fn data(
        &mut self,
        tiles: &impl ReadableTable<(u8, u64), &'static [u8]>,
        from: u64,
        to: u64,
    ) -> Result<Vec<u8>, LogError> {
        let index = from / WIDTH;
        if self.held.as_ref().is_none_or(|(b, _)| *b != index) {
            let bytes = tiles
                .get((ENTRIES, index))
                .map_err(store)?
                .map(|v| v.value().to_vec())
                .ok_or_else(|| LogError::Corrupt(format!("entry bundle {index} is missing")))?;
            self.held = Some((index, bytes));
        }
        let bundle = self.held.as_ref().map_or(&[][..], |(_, d)| d.as_slice());
        let at = |i: u64| usize_of(i - index * WIDTH) * HASH;
        bundle
            .get(at(from)..at(to))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| LogError::Corrupt(format!("entry bundle {index} is too short")))
    }
}

/// Keeps the upper levels of each level-0 tile (all full: the layout before `layout` stored no
/// partial one, and [`convert_sized`] removed its partial one) and removes every entry bundle:
/// the last step of [`move_data_into_runs`].
fn compact_level_zero(
    tiles: &mut ::redb::Table<'_, (u8, u64), &'static [u8]>,
    chunk: usize,
) -> Result<(), LogError> {
    let mut from = 0u64;
    loop {
        let mut rows: Vec<(u64, Vec<u8>)> = Vec::new();
        for row in tiles
            .range((0, from)..=(0, u64::MAX))
            .map_err(store)?
            .take(chunk)
        {
            let (key, value) = row.map_err(store)?;
            rows.push((key.value().1, value.value().to_vec()));
        }
        let Some(&(last, _)) = rows.last() else {
            break;
        };
        for (index, bytes) in &rows {
            let key = TileKey {
                level: 0,
                index: *index,
            };
            let upper = crate::tlog::upper_levels(key, bytes, u32::from(LOW_LEVELS))?;
            tiles.insert((0, *index), upper.as_slice()).map_err(store)?;
        }
        from = last + 1;
    }
    loop {
        let mut keys = Vec::new();
        for row in tiles.range((ENTRIES, 0)..).map_err(store)?.take(chunk) {
            keys.push(row.map_err(store)?.0.value());
        }
        if keys.is_empty() {
            return Ok(());
        }
        for key in keys {
            tiles.remove(key).map_err(store)?;
        }
    }
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

/// Appends `leaves` to the log in `txn` with their data in their runs: leaves no event of
/// `txn`'s store has (a bulk load), or backfilled. `enc` reads the events of counted runs before
/// them. An append that fills a level-0 tile also stores its upper levels and the tiles above it.
pub(crate) fn append_leaves(
    txn: &WriteTransaction,
    enc: &Encryption,
    leaves: &[NewLeaf],
) -> Result<(), LogError> {
    append(txn, enc, leaves, None).map(drop)
}

/// The committer's append: `leaves` are the hashes of events whose records `txn` also holds, so
/// their runs hold a count, not the data again (the bytes a commit writes are its serial cost:
/// `bench/NOTES.md`, stop 73). `partial` is the data of the log's partial level-0 tile as the last
/// commit left it, which saves reading it back from the events; the answer is the tile after this
/// append, for [`PartialTile::keep`] once `txn` commits.
pub(crate) fn append_counted(
    txn: &WriteTransaction,
    enc: &Encryption,
    leaves: &[NewLeaf],
    partial: &PartialTile,
) -> Result<Option<Edge>, LogError> {
    append(txn, enc, leaves, Some(partial))
}

/// The data of a log's partial level-0 tile: its leaves from the last multiple of the tile width
/// to `size`.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    size: u64,
    data: Vec<u8>,
}

/// The committer's copy of the log's partial level-0 tile ([`Edge`]), kept between commits. It
/// is used only while the log's size is the one it was kept for: a commit that failed left the
/// size as it was, and anything else that appends (a bulk load) changes the size.
#[derive(Debug, Default)]
pub(crate) struct PartialTile(std::sync::Mutex<Option<Edge>>);

impl PartialTile {
    /// The partial tile's data when the log has `size` leaves, if this copy is of that size.
    fn at(&self, size: u64) -> Option<Vec<u8>> {
        let kept = self.0.lock().ok()?;
        kept.as_ref()
            .filter(|edge| edge.size == size)
            .map(|edge| edge.data.clone())
    }

    /// Keeps `edge`, which a commit just made the log's.
    pub(crate) fn keep(&self, edge: Edge) {
        if let Ok(mut kept) = self.0.lock() {
            *kept = Some(edge);
        }
    }
}

fn append(
    txn: &WriteTransaction,
    enc: &Encryption,
    leaves: &[NewLeaf],
    counted: Option<&PartialTile>,
) -> Result<Option<Edge>, LogError> {
    // No index by event hash here: its keys are random, and a B-tree that copies each page it
    // changes would write a page per event at every commit (the 64-client resolve lost 43% to
    // it). Event hashes are found from the runs instead (`HashIndex`).
    if leaves.is_empty() {
        return Ok(None);
    }
    let data: Vec<u8> = leaves.iter().flat_map(|l| l.event_hash).collect();
    let mut runs = txn.open_table(RUNS).map_err(store)?;
    let mut edge = txn.open_table(EDGE).map_err(store)?;
    let view = Runs::new(&runs, Some(&edge));
    let size = log_size_of(&view)?;
    let new_size = size
        .checked_add(leaves.len() as u64)
        .ok_or_else(|| LogError::Range("the log cannot grow past 2^64 leaves".into()))?;
    let fills = new_size / WIDTH > size / WIDTH;
    // The leaves of the partial level-0 tile: needed when a tile fills, and by the committer
    // for the tile it keeps.
    let held = match counted.and_then(|kept| kept.at(size)) {
        Some(held) => Some(held),
        None if fills || counted.is_some() => {
            let records = txn.open_table(EVENTS).map_err(store)?;
            let retired = txn.open_table(RETIRED).map_err(store)?;
            let events = Events::new(&records, Some(&retired), enc);
            Some(leaves_data(&view, &events, size - size % WIDTH, size)?)
        }
        None => None,
    };
    let mut tile = held.unwrap_or_default();
    // `tlog_tiles` is opened only when a level-0 tile fills: other appends leave it alone.
    if fills {
        let mut tiles = txn.open_table(TILES).map_err(store)?;
        write_full_tiles(&mut tiles, size, &tile, &data)?;
    }
    let mut rows = NewRows::after(&edge)?;
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
        let held = match counted {
            Some(_) => Leaves::Counted(
                u32::try_from(end - i)
                    .map_err(|_| LogError::Range("an append of over 2^32 events".into()))?,
            ),
            None => Leaves::Data(&data[i * HASH..end * HASH]),
        };
        let run = Run {
            sequence: head.sequence,
            session: &head.session_id,
            leaves: held,
        };
        rows.push(size + i as u64, &run)?;
        i = end;
    }
    rows.store(&mut runs, &mut edge)?;
    Ok(counted.map(|_| {
        tile.extend_from_slice(&data);
        let keep = usize_of(new_size % WIDTH) * HASH;
        Edge {
            size: new_size,
            data: tile.split_off(tile.len() - keep),
        }
    }))
}

/// Rows of runs on their way into the tables: the edge's, then an append's, each run split at
/// multiples of [`RUN_SPAN`] and joined to the row before it where it continues that row's run
/// in the same span.
struct NewRows {
    rows: Vec<(u64, Vec<u8>)>,
    /// The keys of the rows read from the edge (the first of `rows`).
    from_edge: Vec<u64>,
    /// The first row the append changed or added.
    changed: usize,
}

impl NewRows {
    /// The rows `edge` holds, to which an append's are added.
    fn after(edge: &impl ReadableTable<u64, &'static [u8]>) -> Result<Self, LogError> {
        let rows = rows_from(edge, 0, usize::MAX)?;
        Ok(Self {
            changed: rows.len(),
            from_edge: rows.iter().map(|(first, _)| *first).collect(),
            rows,
        })
    }

    /// Adds `run`, whose first leaf is `first`.
    fn push(&mut self, first: u64, run: &Run<'_>) -> Result<(), LogError> {
        let end = first + run.leaves();
        let mut at = first;
        while at < end {
            let stop = ((at / RUN_SPAN + 1) * RUN_SPAN).min(end);
            let piece = run.part(at - first, stop - first).ok_or_else(malformed)?;
            if !self.join(at, &piece)? {
                self.rows.push((at, piece.encode()?));
            }
            at = stop;
        }
        Ok(())
    }

    /// Adds `piece`, whose first leaf is `at`, to the last row if it continues that row's run
    /// in the same span; answers whether it did.
    fn join(&mut self, at: u64, piece: &Run<'_>) -> Result<bool, LogError> {
        let last = self.rows.len().saturating_sub(1);
        let Some((first, bytes)) = self.rows.last_mut() else {
            return Ok(false);
        };
        let joined = join_row(*first, bytes, at, piece)?;
        if joined {
            self.changed = self.changed.min(last);
        }
        Ok(joined)
    }

    /// Stores the rows: the changed and added ones in the edge when all of them fit it, else
    /// every one in `tlog_runs` (the first joined to its last row where it continues it), the
    /// edge emptied.
    fn store(
        mut self,
        runs: &mut ::redb::Table<'_, u64, &'static [u8]>,
        edge: &mut ::redb::Table<'_, u64, &'static [u8]>,
    ) -> Result<(), LogError> {
        let bytes: usize = self.rows.iter().map(|(_, row)| 8 + row.len()).sum();
        if bytes <= EDGE_BYTES {
            for (first, row) in &self.rows[self.changed..] {
                edge.insert(*first, row.as_slice()).map_err(store)?;
            }
            return Ok(());
        }
        let settled = runs
            .last()
            .map_err(store)?
            .map(|(first, row)| (first.value(), row.value().to_vec()));
        if let (Some((first, mut bytes)), Some((at, head))) = (settled, self.rows.first())
            && join_row(first, &mut bytes, *at, &Run::decode(head)?)?
        {
            self.rows[0] = (first, bytes);
        }
        for (first, row) in &self.rows {
            runs.insert(*first, row.as_slice()).map_err(store)?;
        }
        for first in self.from_edge {
            edge.remove(first).map_err(store)?;
        }
        Ok(())
    }
}

/// Adds `piece`'s data to the stored row `bytes` when `piece`, whose first leaf is `at`,
/// continues that row's run, whose first leaf is `first`, in the same span (the same chain, the
/// next sequence, the next leaf); answers whether it did.
fn join_row(first: u64, bytes: &mut Vec<u8>, at: u64, piece: &Run<'_>) -> Result<bool, LogError> {
    let run = Run::decode(bytes)?;
    let continues = run.session == piece.session
        && run.sequence + run.leaves() == piece.sequence
        && first + run.leaves() == at
        && first / RUN_SPAN == at / RUN_SPAN;
    match (run.leaves, piece.leaves) {
        (Leaves::Data(_), Leaves::Data(data)) if continues => bytes.extend_from_slice(data),
        (Leaves::Counted(n), Leaves::Counted(more)) if continues => {
            let total = n.checked_add(more).ok_or_else(malformed)?;
            let tail = bytes.len() - COUNT;
            bytes[tail..].copy_from_slice(&total.to_be_bytes());
        }
        // Another chain, a gap, another span, or one run counted and the other not.
        _ => return Ok(false),
    }
    Ok(true)
}

/// Appends leaves with `data` and no event behind them (one run of the empty session): the bulk
/// load of proof benchmarks (`crate::testing::bulk_load_log`).
pub(crate) fn append_bare(
    txn: &WriteTransaction,
    enc: &Encryption,
    data: &[Hash],
) -> Result<(), LogError> {
    let leaves: Vec<NewLeaf> = (0u64..)
        .zip(data)
        .map(|(sequence, hash)| NewLeaf {
            event_hash: *hash,
            session_id: "".into(),
            sequence,
        })
        .collect();
    append_leaves(txn, enc, &leaves)
}

/// Stores the tiles that appending `data` to a log of `size` leaves fills, whose leaves past the
/// last full level-0 tile are `held`: each level-0 tile it fills, as its upper levels only, and
/// the tiles of higher levels whole (partial ones too), extended by the filled tiles' roots.
/// Entry bundles and the partial level-0 tile are made from the runs when read, so they are
/// neither stored nor computed here.
fn write_full_tiles(
    tiles: &mut ::redb::Table<'_, (u8, u64), &'static [u8]>,
    size: u64,
    held: &[u8],
    data: &[u8],
) -> Result<(), LogError> {
    let first = size / WIDTH;
    let filled = (size + (data.len() / HASH) as u64) / WIDTH - first;
    let start = first * WIDTH;
    if held.len() != usize_of(size - start) * HASH {
        // The runs before `size` hold fewer leaves than it counts.
        return Err(gap(start + (held.len() / HASH) as u64));
    }
    let whole_bytes = usize_of(filled * WIDTH) * HASH;
    let mut leaves = Vec::with_capacity(whole_bytes);
    leaves.extend_from_slice(held);
    leaves.extend_from_slice(data.get(..whole_bytes - held.len()).ok_or_else(malformed)?);
    let mut roots = Vec::with_capacity(usize_of(filled));
    for (index, bundle) in (first..).zip(leaves.chunks_exact(usize_of(WIDTH) * HASH)) {
        let key = TileKey { level: 0, index };
        let whole = level_zero(bundle);
        roots.push(crate::tlog::tile_root(key, &whole)?);
        let upper = crate::tlog::upper_levels(key, &whole, u32::from(LOW_LEVELS))?;
        tiles.insert((0, index), upper.as_slice()).map_err(store)?;
    }
    let mut writes = Vec::new();
    crate::tlog::append_hashes(
        size,
        1,
        roots,
        &mut |key| {
            Ok(tiles
                .get((key.level, key.index))
                .map_err(store)?
                .map(|v| v.value().to_vec()))
        },
        &mut writes,
    )?;
    for (key, bytes) in writes {
        tiles
            .insert((key.level, key.index), bytes.as_slice())
            .map_err(store)?;
    }
    Ok(())
}

/// A row of the log's runs: the first leaf's index and the stored [`Run`].
type Row<'t> = (
    ::redb::AccessGuard<'t, u64>,
    ::redb::AccessGuard<'t, &'static [u8]>,
);

/// The log's runs read as one table: the rows of `tlog_runs`, then those of `tlog_edge`, whose
/// keys all lie above them (none in a store not yet opened by a cra that keeps an edge).
struct Runs<'t, T> {
    settled: &'t T,
    edge: Option<&'t T>,
}

impl<'t, T: ReadableTable<u64, &'static [u8]>> Runs<'t, T> {
    fn new(settled: &'t T, edge: Option<&'t T>) -> Self {
        Self { settled, edge }
    }

    /// The last row.
    fn last(&self) -> Result<Option<Row<'t>>, LogError> {
        if let Some(edge) = self.edge
            && let Some(row) = edge.last().map_err(store)?
        {
            return Ok(Some(row));
        }
        self.settled.last().map_err(store)
    }

    /// The last row whose key is at most `at`: that of the run holding leaf `at`, if any does.
    fn at_or_before(&self, at: u64) -> Result<Option<Row<'t>>, LogError> {
        for table in self.edge.into_iter().chain([self.settled]) {
            if let Some(row) = table.range(..=at).map_err(store)?.next_back() {
                return row.map(Some).map_err(store);
            }
        }
        Ok(None)
    }

    /// The rows whose keys lie in `keys`, in order.
    fn range(
        &self,
        keys: impl std::ops::RangeBounds<u64> + Clone + 't,
    ) -> Result<impl Iterator<Item = Result<Row<'t>, LogError>>, LogError> {
        let settled = self.settled.range(keys.clone()).map_err(store)?;
        let edge = match self.edge {
            Some(edge) => Some(edge.range(keys).map_err(store)?),
            None => None,
        };
        Ok(settled
            .chain(edge.into_iter().flatten())
            .map(|row| row.map_err(store)))
    }
}

/// `tlog_runs` and `tlog_edge` opened in a read transaction, for a [`Runs`] view.
struct ReadRuns {
    settled: ::redb::ReadOnlyTable<u64, &'static [u8]>,
    edge: Option<::redb::ReadOnlyTable<u64, &'static [u8]>>,
}

/// A read transaction's tables for leaf data: the runs, and the events and retired chains that
/// counted runs read theirs from.
struct ReadLeaves {
    runs: ReadRuns,
    records: ::redb::ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    retired: Option<::redb::ReadOnlyTable<(&'static str, u64), &'static [u8]>>,
}

impl ReadLeaves {
    fn open(txn: &::redb::ReadTransaction) -> Result<Self, LogError> {
        let retired = match txn.open_table(RETIRED) {
            Ok(retired) => Some(retired),
            Err(::redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(store(e)),
        };
        Ok(Self {
            runs: ReadRuns::open(txn)?,
            records: txn.open_table(EVENTS).map_err(store)?,
            retired,
        })
    }

    /// The data of leaves `[from, to)`, or of those of them the log holds.
    fn data(&self, enc: &Encryption, from: u64, to: u64) -> Result<Vec<u8>, LogError> {
        let events = Events::new(&self.records, self.retired.as_ref(), enc);
        leaves_data(&self.runs.view(), &events, from, to)
    }
}

impl ReadRuns {
    /// The tables in `txn`: an error when the log has no runs table, no edge in a file opened
    /// only by a cra that kept none.
    fn open(txn: &::redb::ReadTransaction) -> Result<Self, LogError> {
        Self::open_any(txn)?.ok_or_else(|| store("the table tlog_runs does not exist"))
    }

    /// The tables in `txn`, or none in a file without the log's tables.
    fn open_any(txn: &::redb::ReadTransaction) -> Result<Option<Self>, LogError> {
        let settled = match txn.open_table(RUNS) {
            Ok(settled) => settled,
            Err(::redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(store(e)),
        };
        let edge = match txn.open_table(EDGE) {
            Ok(edge) => Some(edge),
            Err(::redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(store(e)),
        };
        Ok(Some(Self { settled, edge }))
    }

    fn view(&self) -> Runs<'_, ::redb::ReadOnlyTable<u64, &'static [u8]>> {
        Runs::new(&self.settled, self.edge.as_ref())
    }
}

/// The log's size: the last run's end (every run holds its leaves' data or their count).
fn log_size_of<T: ReadableTable<u64, &'static [u8]>>(runs: &Runs<'_, T>) -> Result<u64, LogError> {
    let Some((first, value)) = runs.last()? else {
        return Ok(0);
    };
    let run = Run::decode(value.value())?;
    if run.is_bare() {
        return Err(malformed());
    }
    Ok(first.value() + run.leaves())
}

/// The log's size as `txn` reads it (0 for a file without the log's tables).
pub(crate) fn size_read(txn: &::redb::ReadTransaction) -> Result<u64, BackendError> {
    let log = |e: LogError| backend(e.to_string());
    match ReadRuns::open_any(txn).map_err(log)? {
        Some(runs) => log_size_of(&runs.view()).map_err(log),
        None => Ok(0),
    }
}

fn size_in(txn: &WriteTransaction) -> Result<u64, LogError> {
    let runs = txn.open_table(RUNS).map_err(store)?;
    let edge = txn.open_table(EDGE).map_err(store)?;
    log_size_of(&Runs::new(&runs, Some(&edge)))
}

/// The data of leaves `[from, to)`, or of those of them the log holds, read from the runs and,
/// for counted runs, from `events`.
fn leaves_data<T, E>(
    runs: &Runs<'_, T>,
    events: &Events<'_, E>,
    from: u64,
    to: u64,
) -> Result<Vec<u8>, LogError>
where
    T: ReadableTable<u64, &'static [u8]>,
    E: ReadableTable<(&'static str, u64), &'static [u8]>,
{
    let mut out = Vec::with_capacity(usize_of(to.saturating_sub(from)).min(1 << 16) * HASH);
    let start = match runs.at_or_before(from)? {
        Some(row) => row.0.value(),
        None => from,
    };
    let mut next = from;
    for row in runs.range(start..to)? {
        let (first, value) = row?;
        let first = first.value();
        let run = Run::decode(value.value())?;
        let end = first + run.leaves();
        if run.is_bare() || first > next {
            return Err(gap(next));
        }
        if end <= next {
            continue;
        }
        let stop = end.min(to);
        match run.part(next - first, stop - first).ok_or_else(malformed)? {
            Run {
                leaves: Leaves::Data(data),
                ..
            } => out.extend_from_slice(data),
            Run {
                sequence, session, ..
            } => events.hashes(session, sequence, stop - next, &mut out)?,
        }
        next = stop;
    }
    Ok(out)
}

/// A row of the events' records or of `tlog_retired`: its first sequence and its value.
type KeyedRow<'r> = (u64, ::redb::AccessGuard<'r, &'static [u8]>);

/// Where the data of a counted run's leaves is read: the `event_hash` of each event in its
/// append's record (decrypted and decompressed as the chain's reads do), or, once retention
/// removed the chain, the hashes it kept in `tlog_retired`.
struct Events<'t, E> {
    records: &'t E,
    retired: Option<&'t E>,
    enc: &'t Encryption,
}

impl<'t, E: ReadableTable<(&'static str, u64), &'static [u8]>> Events<'t, E> {
    fn new(records: &'t E, retired: Option<&'t E>, enc: &'t Encryption) -> Self {
        Self {
            records,
            retired,
            enc,
        }
    }

    /// Appends to `out` the hashes of `n` events of `session` from `sequence` on.
    fn hashes(
        &self,
        session: &str,
        sequence: u64,
        n: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), LogError> {
        let end = sequence.saturating_add(n);
        let mut next = sequence;
        while next < end {
            let mut got = self.in_record(session, next, end, out)?;
            if got == 0 {
                got = self.in_retired(session, next, end, out)?;
            }
            if got == 0 {
                return Err(LogError::Corrupt(format!(
                    "the log's leaf for event {next} of session {session} has neither its \
                     event nor its kept hash"
                )));
            }
            next += got;
        }
        Ok(())
    }

    /// The stored row whose key is the last at or before `(session, sequence)` in `table`, if it
    /// is the session's.
    fn row_at<'r>(
        table: &'r E,
        session: &str,
        sequence: u64,
    ) -> Result<Option<KeyedRow<'r>>, LogError> {
        match table
            .range((session, 0)..=(session, sequence))
            .map_err(store)?
            .next_back()
        {
            Some(row) => {
                let (key, value) = row.map_err(store)?;
                Ok(Some((key.value().1, value)))
            }
            None => Ok(None),
        }
    }

    /// Hashes of events `[next, end)` read from the record holding `next`; answers how many.
    fn in_record(
        &self,
        session: &str,
        next: u64,
        end: u64,
        out: &mut Vec<u8>,
    ) -> Result<u64, LogError> {
        let Some((first, value)) = Self::row_at(self.records, session, next)? else {
            return Ok(0);
        };
        record_hashes(
            self.enc,
            session,
            first,
            value.value(),
            next - first..end - first,
            out,
        )
    }

    /// Hashes of events `[next, end)` kept when their chain was removed; answers how many.
    fn in_retired(
        &self,
        session: &str,
        next: u64,
        end: u64,
        out: &mut Vec<u8>,
    ) -> Result<u64, LogError> {
        let Some(table) = self.retired else {
            return Ok(0);
        };
        let Some((first, value)) = Self::row_at(table, session, next)? else {
            return Ok(0);
        };
        let kept = value.value();
        let from = usize_of(next - first).saturating_mul(HASH);
        let to = usize_of(end - first).saturating_mul(HASH).min(kept.len());
        let Some(hashes) = kept.get(from..to.max(from)) else {
            return Ok(0);
        };
        out.extend_from_slice(hashes);
        Ok((hashes.len() / HASH) as u64)
    }
}

/// Appends to `out` the hashes of the events at `lines` (counted from its first) in the stored
/// record of `session` whose first event is `first`; answers how many it holds of them.
fn record_hashes(
    enc: &Encryption,
    session: &str,
    first: u64,
    stored: &[u8],
    lines: std::ops::Range<u64>,
    out: &mut Vec<u8>,
) -> Result<u64, LogError> {
    let text = super::record::load(enc, EVENTS.name(), stored).map_err(|e| {
        LogError::Corrupt(format!(
            "the record of session {session} from event {first} does not read: {e}"
        ))
    })?;
    let mut got = 0;
    let wanted = text.split(|b| *b == b'\n').skip(usize_of(lines.start));
    for line in wanted.take(usize_of(lines.end - lines.start)) {
        let at = first + lines.start + got;
        let hash = hash_in_line(line).map_err(|reason| {
            LogError::Corrupt(format!("event {at} of session {session}: {reason}"))
        })?;
        out.extend_from_slice(&hash);
        got += 1;
    }
    Ok(got)
}

/// The `event_hash` of an event's wire JSON, as 32 bytes.
fn hash_in_line(line: &[u8]) -> Result<Hash, String> {
    #[derive(serde::Deserialize)]
    struct Hashed<'a> {
        #[serde(borrow)]
        event_hash: &'a str,
    }
    let hashed: Hashed<'_> = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    cra_tlog::hash::from_hex(hashed.event_hash).map_err(|e| e.to_string())
}

/// Keeps the log's data of `session`'s events, whose records `txn` is about to remove with the
/// chain: under each record's key, its events' hashes. Retention removes chains, never leaves,
/// and a counted run reads its data from the events. Nothing is kept when the log is empty.
pub(crate) fn retire_chain(
    txn: &WriteTransaction,
    enc: &Encryption,
    session: &str,
) -> Result<(), LogError> {
    if size_in(txn)? == 0 {
        return Ok(());
    }
    let records = txn.open_table(EVENTS).map_err(store)?;
    let mut retired = txn.open_table(RETIRED).map_err(store)?;
    for row in records
        .range((session, 0)..=(session, u64::MAX))
        .map_err(store)?
    {
        let (key, value) = row.map_err(store)?;
        let first = key.value().1;
        let mut hashes = Vec::new();
        record_hashes(enc, session, first, value.value(), 0..u64::MAX, &mut hashes)?;
        retired
            .insert((session, first), hashes.as_slice())
            .map_err(store)?;
    }
    Ok(())
}

/// The stored form of the level-0 tile over `entries` (leaf data), made whole.
fn level_zero(entries: &[u8]) -> Vec<u8> {
    let hashes: Vec<Hash> = entries
        .chunks_exact(HASH)
        .map(cra_tlog::leaf_hash)
        .collect();
    crate::tlog::encode_tile(&hashes)
}

/// The tile at `key` as [`LogStore::read_tile`] answers it: entry bundles and level-0 tiles made
/// from the runs (a partial one as wide as the log), higher tiles as stored.
fn tile_in(
    txn: &::redb::ReadTransaction,
    enc: &Encryption,
    key: TileKey,
) -> Result<Option<Vec<u8>>, LogError> {
    if key.level != 0 && key.level != ENTRIES {
        let tiles = txn.open_table(TILES).map_err(store)?;
        return Ok(tiles
            .get((key.level, key.index))
            .map_err(store)?
            .map(|v| v.value().to_vec()));
    }
    let first = key.index.saturating_mul(WIDTH);
    let data = ReadLeaves::open(txn)?.data(enc, first, first.saturating_add(WIDTH))?;
    if data.is_empty() {
        return Ok(None);
    }
    Ok(Some(if key.level == ENTRIES {
        data
    } else {
        level_zero(&data)
    }))
}

/// The hash of the complete subtree `(level, index)` inside a level-0 tile: from the tile's
/// stored upper levels when it has them, else from the leaves' data (at most 31 hashes below
/// level 4; up to 255 in the partial tile at the edge), and whether it was computed so.
fn low_hash_in(
    txn: &::redb::ReadTransaction,
    enc: &Encryption,
    blocks: &LowBlocks,
    level: u8,
    index: u64,
) -> Result<(Hash, bool), LogError> {
    let width = 1u64 << level;
    let first = index.saturating_mul(width);
    if level >= LOW_LEVELS {
        let tiles = txn.open_table(TILES).map_err(store)?;
        if let Some(upper) = tiles.get((0, first / WIDTH)).map_err(store)? {
            let upper = upper.value();
            let before: u64 = (LOW_LEVELS..level).map(|h| WIDTH >> h).sum();
            let at = usize_of(before + ((first % WIDTH) >> level)) * HASH;
            if upper.len() != UPPER_HASHES * HASH {
                return Err(LogError::Corrupt(format!(
                    "stored level-0 tile {} has {} bytes, not {}",
                    first / WIDTH,
                    upper.len(),
                    UPPER_HASHES * HASH
                )));
            }
            let hash = upper[at..at + HASH].try_into().map_err(|_| malformed())?;
            return Ok((hash, false));
        }
    }
    let data = if level < LOW_LEVELS {
        blocks.leaves(txn, enc, first, width)?
    } else {
        ReadLeaves::open(txn)?.data(enc, first, first.saturating_add(width))?
    };
    if data.len() as u64 != width * HASH as u64 {
        return Err(LogError::Corrupt(format!(
            "the log holds {} of the {width} leaves from leaf {first}",
            data.len() / HASH
        )));
    }
    let hashes: Vec<Hash> = data.chunks_exact(HASH).map(cra_tlog::leaf_hash).collect();
    Ok((cra_tlog::root_of(&hashes), true))
}

/// The data of whole blocks of 16 leaves (the leaves under one node of level [`LOW_LEVELS`]),
/// as read for the lower levels of proofs. An inclusion proof asks for a leaf and its siblings
/// of levels 0 to 3, all in one block, one at a time; counted runs read that block from up to 16
/// events' records, so it is read once and kept. A whole block never changes; the cache is
/// emptied when it holds [`LowBlocks::LIMIT`] blocks.
#[derive(Debug, Default)]
pub(crate) struct LowBlocks(std::sync::Mutex<std::collections::HashMap<u64, Vec<u8>>>);

impl LowBlocks {
    /// Blocks kept: a few proofs' worth (512 bytes each).
    const LIMIT: usize = 64;

    /// The data of leaves `[first, first + width)`, which lie in one block, or of those of them
    /// the log holds.
    fn leaves(
        &self,
        txn: &::redb::ReadTransaction,
        enc: &Encryption,
        first: u64,
        width: u64,
    ) -> Result<Vec<u8>, LogError> {
        let block = first >> LOW_LEVELS;
        let start = block << LOW_LEVELS;
        let kept = self.0.lock().ok().and_then(|map| map.get(&block).cloned());
        let data = match kept {
            Some(data) => data,
            None => {
                let data = ReadLeaves::open(txn)?.data(enc, start, start + (1 << LOW_LEVELS))?;
                if data.len() == HASH << LOW_LEVELS
                    && let Ok(mut map) = self.0.lock()
                {
                    if map.len() >= Self::LIMIT {
                        map.clear();
                    }
                    map.insert(block, data.clone());
                }
                data
            }
        };
        let at = usize_of(first - start) * HASH;
        let to = (at + usize_of(width) * HASH).min(data.len());
        Ok(data.get(at..to).unwrap_or_default().to_vec())
    }
}

/// Hashes of complete subtrees of level [`LOW_LEVELS`] and up computed from leaf data: those of
/// the partial level-0 tile at the edge, which every proof of a tree of that size reads (the
/// 128-leaf subtree alone is 255 hashes). A complete subtree's hash never changes, so an entry
/// is never stale; the cache is emptied when it holds [`EdgeHashes::LIMIT`] entries.
#[derive(Debug, Default)]
pub(crate) struct EdgeHashes(std::sync::Mutex<std::collections::HashMap<(u8, u64), Hash>>);

impl EdgeHashes {
    /// More entries than the partial tiles of a few sizes hold (30 a tile).
    const LIMIT: usize = 256;

    fn get(&self, level: u8, index: u64) -> Option<Hash> {
        self.0.lock().ok()?.get(&(level, index)).copied()
    }

    fn put(&self, level: u8, index: u64, hash: Hash) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= Self::LIMIT {
                map.clear();
            }
            map.insert((level, index), hash);
        }
    }
}

fn decode_u64(bytes: &[u8]) -> Result<u64, LogError> {
    Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| {
        LogError::Corrupt(format!("stored log size of {} bytes", bytes.len()))
    })?))
}

/// The place of leaf `leaf_index`, from the run that holds it.
fn place_of(txn: &::redb::ReadTransaction, leaf_index: u64) -> Result<Option<LeafPlace>, LogError> {
    let runs = ReadRuns::open(txn)?;
    let Some((first, value)) = runs.view().at_or_before(leaf_index)? else {
        return Ok(None);
    };
    let run = Run::decode(value.value())?;
    if leaf_index >= first.value() + run.leaves() {
        return Ok(None);
    }
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
    enc: &Encryption,
    sink: &mut dyn FnMut(Vec<NewLeaf>) -> Result<(), LogError>,
) -> Result<(), LogError> {
    const BATCH: usize = 4096;
    let tables = ReadLeaves::open(txn)?;
    let events = Events::new(&tables.records, tables.retired.as_ref(), enc);
    let mut batch = Vec::with_capacity(BATCH);
    let mut next = 0u64;
    let mut counted = Vec::new();
    for row in tables.runs.view().range(..)? {
        let (first, value) = row?;
        let run = Run::decode(value.value())?;
        if first.value() != next || run.is_bare() {
            return Err(gap(next));
        }
        next += run.leaves();
        let data = match run.leaves {
            Leaves::Data(data) => data,
            Leaves::Counted(n) => {
                counted.clear();
                events.hashes(run.session, run.sequence, u64::from(n), &mut counted)?;
                &counted
            }
        };
        for (i, hash) in (0u64..).zip(data.chunks_exact(HASH)) {
            batch.push(NewLeaf {
                event_hash: hash.try_into().map_err(|_| malformed())?,
                session_id: run.session.into(),
                sequence: run.sequence + i,
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
        log_size_of(&ReadRuns::open(&txn)?.view())
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
        tile_in(&txn, &self.config().encryption, key)
    }

    fn low_subtree_hash(&self, level: u8, index: u64) -> Result<Option<Hash>, LogError> {
        let cached = level >= LOW_LEVELS;
        if let Some(hash) = cached
            .then(|| self.edge_hashes().get(level, index))
            .flatten()
        {
            return Ok(Some(hash));
        }
        let txn = self.handle().begin_read().map_err(store)?;
        let enc = &self.config().encryption;
        let (hash, computed) = low_hash_in(&txn, enc, self.low_blocks(), level, index)?;
        if computed && cached {
            self.edge_hashes().put(level, index, hash);
        }
        Ok(Some(hash))
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

/// Event hashes to leaf indexes, in memory, read from the runs on first use and extended
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
            let data = bundle_in(&txn, &store.config().encryption, bundle)?;
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
            let data = bundle_in(&txn, &store.config().encryption, bundle)?;
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
fn bundle_in(
    txn: &::redb::ReadTransaction,
    enc: &Encryption,
    bundle: u64,
) -> Result<Vec<u8>, LogError> {
    tile_in(
        txn,
        enc,
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

    /// Checks the layout: every run holds its leaves (their data or their count) and crosses no
    /// multiple of `RUN_SPAN`, no entry bundle is stored, and a level-0 tile is stored, as its
    /// upper levels, exactly when it is full.
    fn laid_out(store: &RedbStore, size: u64) {
        let txn = store.handle().begin_read().unwrap();
        let runs = ReadRuns::open(&txn).unwrap();
        let edge = runs.edge.as_ref().unwrap();
        let edge_bytes: usize = edge
            .iter()
            .unwrap()
            .map(|row| 8 + row.unwrap().1.value().len())
            .sum();
        assert!(
            edge_bytes <= EDGE_BYTES,
            "the edge holds {edge_bytes} bytes"
        );
        if let (Some(last), Some(first)) = (runs.settled.last().unwrap(), edge.first().unwrap()) {
            assert!(
                last.0.value() < first.0.value(),
                "the edge lies above the runs"
            );
        }
        let mut next = 0;
        for row in runs.view().range(..).unwrap() {
            let (first, value) = row.unwrap();
            let run = Run::decode(value.value()).unwrap();
            assert_eq!(first.value(), next, "runs follow each other");
            assert!(run.leaves() > 0, "run at {next} has no data");
            next += run.leaves();
            assert!(
                (next - 1) / RUN_SPAN == first.value() / RUN_SPAN,
                "run at {} crosses a span",
                first.value()
            );
        }
        assert_eq!(next, size);
        let tiles = txn.open_table(TILES).unwrap();
        assert!(tiles.range((ENTRIES, 0)..).unwrap().next().is_none());
        let level_zero: Vec<(u64, usize)> = tiles
            .range((0, 0)..=(0, u64::MAX))
            .unwrap()
            .map(|r| r.unwrap())
            .map(|(k, v)| (k.value().1, v.value().len()))
            .collect();
        let full: Vec<(u64, usize)> = (0..size / WIDTH)
            .map(|i| (i, UPPER_HASHES * HASH))
            .collect();
        assert_eq!(level_zero, full);
    }

    /// A random source whose seed is printed (to replay a failure), and a directory for a store.
    fn seeded() -> (rand::rngs::StdRng, tempfile::TempDir) {
        let seed = rand::random::<u64>();
        eprintln!("seed {seed}");
        (
            rand::rngs::StdRng::seed_from_u64(seed),
            tempfile::tempdir().unwrap(),
        )
    }

    /// Invariant: however appends fall across tile boundaries (one leaf, a tile's rest, many
    /// tiles at once), the log reads as the same tree as one whose every tile is stored whole,
    /// answers the same proofs as the tree in memory, and keeps its layout.
    #[test]
    fn appends_of_every_shape_read_as_the_whole_tree() {
        let (mut rng, dir) = seeded();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut whole = Whole::default();
        let mut tree = cra_tlog::MemoryTree::new();
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
            for leaf in &data {
                tree.append(cra_tlog::leaf_hash(leaf));
            }
            same_log(&store, &whole);
            laid_out(&store, whole.size);
            let reader = crate::tlog::LogReader::new(&store).unwrap();
            let size = whole.size;
            for index in [0, rng.random_range(0..size), size - 1] {
                assert_eq!(
                    reader.inclusion(index, size).unwrap(),
                    cra_tlog::inclusion_proof(&tree, index, size).unwrap(),
                    "leaf {index} of {size}"
                );
            }
            let old = rng.random_range(1..=size);
            assert_eq!(
                reader.consistency(old, size).unwrap(),
                cra_tlog::consistency_proof(&tree, old, size).unwrap()
            );
        }
    }

    /// Invariant: past a full level-1 tile (65,536 leaves) and a second one, with appends
    /// landing on and beside each boundary, the log serves every C2SP tile as the tree in
    /// memory makes it and answers its proofs, across the boundaries too: the level-1 and
    /// level-2 tiles, extended a few roots at a time, stay exact.
    #[test]
    fn a_log_past_a_full_level_one_tile_answers_the_trees_proofs() {
        let (mut rng, dir) = seeded();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut tree = cra_tlog::MemoryTree::new();
        let mut size = 0u64;
        let mut seen = Vec::new();
        for target in [65_535, 65_536, 65_537, 131_071, 131_072, 136_000] {
            while size < target {
                let n = rng.random_range(1..3_000).min(target - size);
                let data = leaves(size, n);
                crate::testing::bulk_load_log(&store, &data).unwrap();
                for leaf in &data {
                    tree.append(cra_tlog::leaf_hash(leaf));
                }
                size += n;
            }
            let reader = crate::tlog::LogReader::new(&store).unwrap();
            assert_eq!(reader.root(size).unwrap(), tree.root(), "root at {size}");
            for index in [0, 65_535, 65_536, rng.random_range(0..size), size - 1] {
                if index < size {
                    assert_eq!(
                        reader.inclusion(index, size).unwrap(),
                        cra_tlog::inclusion_proof(&tree, index, size).unwrap(),
                        "leaf {index} of {size}"
                    );
                }
            }
            for &old in &seen {
                assert_eq!(
                    reader.consistency(old, size).unwrap(),
                    cra_tlog::consistency_proof(&tree, old, size).unwrap(),
                    "{old} to {size}"
                );
            }
            seen.push(size);
        }
        laid_out(&store, size);
        let reader = crate::tlog::LogReader::new(&store).unwrap();
        for tile in cra_tlog::tiles::tiles_for_size(size) {
            assert_eq!(
                reader.served_tile(&tile).unwrap().unwrap(),
                cra_tlog::tiles::tile_data(&tree, &tile).unwrap(),
                "{tile:?}"
            );
        }
    }

    /// Invariant: the edge's hash cache stays bounded: at [`EdgeHashes::LIMIT`] entries it is
    /// emptied, and the hash just put is kept and answered.
    #[test]
    fn the_edge_hash_cache_never_holds_more_than_its_limit() {
        let cache = EdgeHashes::default();
        let hash = |i: u64| cra_tlog::leaf_hash(&i.to_be_bytes());
        for i in 0..3 * EdgeHashes::LIMIT as u64 {
            cache.put(1, i, hash(i));
            let held = cache.0.lock().unwrap().len();
            assert!(held <= EdgeHashes::LIMIT, "{held} entries after {i}");
            assert_eq!(cache.get(1, i), Some(hash(i)));
        }
        let limit = EdgeHashes::LIMIT as u64;
        assert_eq!(cache.get(1, 2 * limit - 1), None, "emptied at the limit");
        assert_eq!(cache.get(1, 2 * limit), Some(hash(2 * limit)));
    }

    /// Invariant: the proofs' block cache never holds more than its limit of blocks, and a
    /// block read from it is the block's data.
    #[test]
    fn the_low_block_cache_never_holds_more_than_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let blocks = 3 * LowBlocks::LIMIT as u64;
        let data = leaves(0, blocks << LOW_LEVELS);
        crate::testing::bulk_load_log(&store, &data).unwrap();
        let txn = store.handle().begin_read().unwrap();
        let enc = &store.config().encryption;
        let cache = LowBlocks::default();
        for block in 0..blocks {
            let first = block << LOW_LEVELS;
            let read = cache.leaves(&txn, enc, first + 2, 2).unwrap();
            assert_eq!(
                read,
                data[usize_of(first) + 2..usize_of(first) + 4].concat()
            );
            let held = cache.0.lock().unwrap().len();
            assert!(held <= LowBlocks::LIMIT, "{held} blocks after {block}");
        }
    }

    /// The bytes the log's tables hold (redb's count of stored keys and values, without page
    /// padding or branch pages).
    fn log_bytes(store: &RedbStore) -> u64 {
        use ::redb::ReadableTableMetadata;
        let txn = store.handle().begin_read().unwrap();
        let runs = txn.open_table(RUNS).unwrap().stats().unwrap();
        let edge = txn.open_table(EDGE).unwrap().stats().unwrap();
        let tiles = txn.open_table(TILES).unwrap().stats().unwrap();
        runs.stored_bytes() + edge.stored_bytes() + tiles.stored_bytes()
    }

    /// Invariant: the log stores each leaf's data once. Eight chains appending runs of 32
    /// events leave at most 40 bytes a leaf in the log's tables (32 of data, a run's place
    /// shared by its leaves, the upper levels of full level-0 tiles); the layout before
    /// `layout` held 97.8 here (the data again in entry bundles, level-0 tiles whole).
    #[test]
    fn the_log_stores_each_leafs_data_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut size = 0;
        for round in 0..16u64 {
            let leaves: Vec<NewLeaf> = (0..8u64)
                .flat_map(|chain| {
                    (0..32u64).map(move |i| NewLeaf {
                        event_hash: cra_tlog::leaf_hash(
                            &(round * 1000 + chain * 32 + i).to_be_bytes(),
                        ),
                        session_id: format!("0196b5a0-0000-7000-8000-00000000000{chain}").into(),
                        sequence: round * 32 + i,
                    })
                })
                .collect();
            let txn = store.handle().begin_write().unwrap();
            append_leaves(&txn, &store.config().encryption, &leaves).unwrap();
            txn.commit().unwrap();
            size += leaves.len() as u64;
        }
        laid_out(&store, size);
        let per_leaf = log_bytes(&store) as f64 / size as f64;
        eprintln!("the log holds {per_leaf:.1} bytes a leaf over {size} leaves");
        assert!(per_leaf <= 40.0, "{per_leaf:.1} bytes a leaf");
    }

    /// The tables a test drops to make a directory written before the log are the log's.
    #[test]
    fn the_testing_list_of_log_tables_names_every_table_of_the_log() {
        use ::redb::TableHandle;
        let names = [
            TILES.name(),
            RUNS.name(),
            EDGE.name(),
            RETIRED.name(),
            META.name(),
            CHECKPOINTS.name(),
        ];
        assert_eq!(crate::testing::REDB_LOG_TABLES, names);
    }

    /// Rows `store`'s `table` holds.
    fn rows_in(store: &RedbStore, table: TableDefinition<'static, u64, &'static [u8]>) -> u64 {
        use ::redb::ReadableTableMetadata;
        let txn = store.handle().begin_read().unwrap();
        txn.open_table(table).unwrap().len().unwrap()
    }

    /// Invariant: a chain's one-event appends go to the edge, joined into one row a span, and
    /// reach `tlog_runs` together when the edge would outgrow its page: over 1,000 of them
    /// `tlog_runs` is written at most once a span, and the runs are one row a span. An append too
    /// large for the page goes to `tlog_runs` at once with the edge's rows, leaving it empty.
    #[test]
    fn small_appends_reach_the_runs_together_and_large_ones_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let session: std::sync::Arc<str> = "0196b5a0-0000-7000-8000-000000000001".into();
        let append = |leaves: &[NewLeaf]| {
            let txn = store.handle().begin_write().unwrap();
            append_leaves(&txn, &store.config().encryption, leaves).unwrap();
            txn.commit().unwrap();
        };
        let (mut writes, mut settled) = (0u64, 0u64);
        for i in 0..1000u64 {
            append(&[NewLeaf {
                event_hash: cra_tlog::leaf_hash(&i.to_be_bytes()),
                session_id: session.clone(),
                sequence: i,
            }]);
            let now = rows_in(&store, RUNS);
            if now != settled {
                writes += 1;
                settled = now;
            }
            laid_out(&store, i + 1);
        }
        assert!(
            (1..=1000 / RUN_SPAN).contains(&writes),
            "tlog_runs written {writes} times"
        );
        assert!(
            rows_in(&store, EDGE) > 0,
            "the last appends wait in the edge"
        );

        let large: Vec<NewLeaf> = (0..200u64)
            .map(|i| NewLeaf {
                event_hash: cra_tlog::leaf_hash(&(5000 + i).to_be_bytes()),
                session_id: format!("0196b5a0-0000-7000-8000-00000000010{}", i % 2).into(),
                sequence: i / 2,
            })
            .collect();
        append(&large);
        assert_eq!(rows_in(&store, EDGE), 0, "a large append empties the edge");
        laid_out(&store, 1200);
        let txn = store.handle().begin_read().unwrap();
        let chain = txn.open_table(RUNS).unwrap().range(..1000).unwrap().count();
        assert_eq!(chain as u64, 1000u64.div_ceil(RUN_SPAN), "one row a span");
        let mut tree = cra_tlog::MemoryTree::new();
        let reader = crate::tlog::LogReader::new(&store).unwrap();
        for (i, leaf) in (0u64..).zip(for_each(&store)) {
            tree.append(cra_tlog::leaf_hash(&leaf.event_hash));
            let place = store.leaf_place(&leaf.event_hash).unwrap().unwrap();
            assert_eq!((place.leaf_index, place.sequence), (i, leaf.sequence));
        }
        assert_eq!(reader.root(1200).unwrap(), tree.root());
    }

    /// Every leaf of `store`'s log, in order, through [`for_each_leaf`].
    fn for_each(store: &RedbStore) -> Vec<NewLeaf> {
        let txn = store.handle().begin_read().unwrap();
        let mut all = Vec::new();
        for_each_leaf(&txn, &store.config().encryption, &mut |batch| {
            all.extend(batch);
            Ok(())
        })
        .unwrap();
        all
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
            meta.remove(LAYOUT).unwrap();
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
    /// store opens: the same tree, every leaf's data in its run, and appends go on.
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
        laid_out(&store, 1000);
        let more = leaves(1000, 300);
        crate::testing::bulk_load_log(&store, &more).unwrap();
        whole.push(&more);
        same_log(&store, &whole);
        laid_out(&store, 1300);
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

    /// The size a backup's manifest records (`size_read`): 0 in a file that holds none of the
    /// log's tables (a store written before the log), the end of the last run in one that holds
    /// `tlog_runs` but no edge (written before `tlog_edge`), and the log's own size otherwise.
    #[test]
    fn the_size_a_backup_records_reads_files_of_every_layout() {
        let dir = tempfile::tempdir().unwrap();
        let bare = ::redb::Database::create(dir.path().join("bare.redb")).unwrap();
        assert_eq!(size_read(&bare.begin_read().unwrap()).unwrap(), 0);

        let no_edge = ::redb::Database::create(dir.path().join("no-edge.redb")).unwrap();
        let data: Vec<u8> = leaves(0, 3).concat();
        let run = Run {
            sequence: 4,
            session: "s",
            leaves: Leaves::Data(&data),
        };
        let txn = no_edge.begin_write().unwrap();
        txn.open_table(RUNS)
            .unwrap()
            .insert(10, run.encode().unwrap().as_slice())
            .unwrap();
        txn.commit().unwrap();
        assert_eq!(size_read(&no_edge.begin_read().unwrap()).unwrap(), 13);

        let store = RedbStore::open(dir.path().join("store")).unwrap();
        crate::testing::bulk_load_log(&store, &leaves(0, 300)).unwrap();
        // Two leaves more wait in the edge, above the runs.
        crate::testing::bulk_load_log(&store, &leaves(300, 2)).unwrap();
        assert!(rows_in(&store, EDGE) > 0);
        let txn = store.handle().begin_read().unwrap();
        assert_eq!(size_read(&txn).unwrap(), store.log_size().unwrap());
        assert_eq!(size_read(&txn).unwrap(), 302);
    }

    /// Drafts of `n` notes for an append, each with a payload that makes a record of 32 of them
    /// large enough to be compressed.
    fn notes(from: u64, n: u64) -> Vec<cra_trace::EventDraft> {
        (from..from + n)
            .map(|i| cra_trace::EventDraft {
                trace_id: "0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d70".into(),
                span_id: "0190f5d2-8a4e-7b3c-9d1e-100000000001".into(),
                parent_span_id: None,
                event_type: "test.note".into(),
                payload: serde_json::json!({ "n": i, "text": "counted runs ".repeat(8) }),
            })
            .collect()
    }

    /// A store whose records are encrypted, so that counted runs read their data through the
    /// same decryption and decompression as the chains' reads.
    fn encrypted(dir: &std::path::Path) -> RedbStore {
        let key = crate::encryption::StorageKey::from_bytes(&[7; crate::encryption::KEY_BYTES]);
        let config = crate::StoreConfig {
            encryption: Encryption::new(key, Vec::new()),
            ..crate::StoreConfig::default()
        };
        RedbStore::open_with(dir, config).unwrap()
    }

    /// The tree of the hashes of `events` in order, and each hash.
    fn tree_of(events: &[cra_trace::TraceEvent]) -> (cra_tlog::MemoryTree, Vec<Hash>) {
        let mut tree = cra_tlog::MemoryTree::new();
        let data: Vec<Hash> = events
            .iter()
            .map(|e| cra_tlog::hash::from_hex(&e.event_hash).unwrap())
            .collect();
        for leaf in &data {
            tree.append(cra_tlog::leaf_hash(leaf));
        }
        (tree, data)
    }

    /// Whether every run of `store`'s log is counted.
    fn all_counted(store: &RedbStore) -> bool {
        let txn = store.handle().begin_read().unwrap();
        let runs = ReadRuns::open(&txn).unwrap();
        runs.view().range(..).unwrap().all(|row| {
            let (_, value) = row.unwrap();
            matches!(
                Run::decode(value.value()).unwrap().leaves,
                Leaves::Counted(_)
            )
        })
    }

    /// Invariant: the committer's runs hold counts, not data, and the log reads each leaf's data
    /// from its event's record (encrypted and compressed here), so it answers the tree of the
    /// events' hashes in commit order: its root, every tile, every leaf's place, the leaves a
    /// move to another backend reads. A store opened again (no kept partial tile) appends on
    /// from its events.
    #[test]
    fn counted_runs_read_their_leaves_from_the_events_records() {
        use cra_trace::store::ChainStore;
        let (mut rng, dir) = seeded();
        let mut events = Vec::new();
        let mut next = [0u64; 3];
        let sessions = [
            "0196b5a0-0000-7000-8000-000000000001",
            "0196b5a0-0000-7000-8000-000000000002",
            "0196b5a0-0000-7000-8000-000000000003",
        ];
        for round in 0..2 {
            let store = encrypted(dir.path());
            for _ in 0..40 {
                let chain = rng.random_range(0..3);
                let n = [1, 3, 32, 70][rng.random_range(0..4)];
                events.extend(
                    store
                        .append(sessions[chain], notes(next[chain], n))
                        .unwrap(),
                );
                next[chain] += n;
            }
            let (tree, data) = tree_of(&events);
            let size = events.len() as u64;
            assert!(all_counted(&store), "round {round}");
            laid_out(&store, size);
            let reader = crate::tlog::LogReader::new(&store).unwrap();
            assert_eq!(reader.root(size).unwrap(), tree.root());
            for (i, leaf) in (0u64..).zip(&data).step_by(37) {
                let place = store.leaf_place(leaf).unwrap().unwrap();
                assert_eq!(place.leaf_index, i);
                let proof = reader.inclusion(i, size).unwrap();
                assert_eq!(
                    proof,
                    cra_tlog::proof::inclusion_proof(&tree, i, size).unwrap()
                );
            }
            let read: Vec<Hash> = for_each(&store).iter().map(|l| l.event_hash).collect();
            assert_eq!(read, data);
        }
    }

    /// Invariant: the committer's kept partial tile is used only at the size it was kept for:
    /// leaves appended past it by anything else (a bulk load) are read from the runs.
    #[test]
    fn the_kept_partial_tile_is_not_used_after_another_append() {
        use cra_trace::store::ChainStore;
        let dir = tempfile::tempdir().unwrap();
        let store = encrypted(dir.path());
        let session = "0196b5a0-0000-7000-8000-000000000001";
        let mut tree = cra_tlog::MemoryTree::new();
        let mut push = |data: &[Hash]| {
            for leaf in data {
                tree.append(cra_tlog::leaf_hash(leaf));
            }
        };
        let first = store.append(session, notes(0, 100)).unwrap();
        push(&tree_of(&first).1);
        let bulk = leaves(0, 100);
        crate::testing::bulk_load_log(&store, &bulk).unwrap();
        push(&bulk);
        let second = store.append(session, notes(100, 100)).unwrap();
        push(&tree_of(&second).1);
        let reader = crate::tlog::LogReader::new(&store).unwrap();
        assert_eq!(reader.root(300).unwrap(), tree.root());
        laid_out(&store, 300);
    }

    /// Invariant: the committer's log holds no leaf's data, only its place: eight chains
    /// appending 32 events at a time leave at most 10 bytes a leaf in the log's tables (a run's
    /// place and count shared by its leaves, the upper levels of full level-0 tiles), where runs
    /// holding their data take 32 more (`the_log_stores_each_leafs_data_once`).
    #[test]
    fn the_committers_log_holds_no_leafs_data() {
        use cra_trace::store::ChainStore;
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        for round in 0..16u64 {
            for chain in 0..8u64 {
                let session = format!("0196b5a0-0000-7000-8000-00000000000{chain}");
                store.append(&session, notes(round * 32, 32)).unwrap();
            }
        }
        let size = 16 * 8 * 32;
        assert!(all_counted(&store));
        laid_out(&store, size);
        let per_leaf = log_bytes(&store) as f64 / size as f64;
        eprintln!("the log holds {per_leaf:.1} bytes a leaf over {size} leaves");
        assert!(per_leaf <= 10.0, "{per_leaf:.1} bytes a leaf");
    }
}
