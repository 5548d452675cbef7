//! The data format a data directory records, and what opening a directory an earlier cra wrote
//! will change ([`plan`], `cra migrate --check`).
//!
//! The format is one number in the table `cra_format`. [`FORMAT`] is what this build writes;
//! it goes up whenever a change to the tables is one an older cra would misread (a new record
//! encoding, a table whose rows it would not keep). An open reads the number before it writes
//! anything and refuses a larger one ([`BackendError::NewerFormat`]), then converts what an
//! earlier cra wrote and records [`FORMAT`]. Directories written before the table existed hold
//! none (format 0); every conversion they need is decided by what the tables hold, which is
//! also what [`plan`] reads (the areas' `pending` functions).

use std::path::Path;

use ::redb::{
    Database, DatabaseError, Durability, Key, ReadOnlyDatabase, ReadTransaction, ReadableDatabase,
    ReadableTableMetadata, TableDefinition, TableError, TableHandle, Value,
};

use super::{DATABASE_FILE, backend, open_error};
use crate::BackendError;
use crate::upgrade::{UpgradePlan, UpgradeStep};

/// The data format this build writes. History (`specs/upgrades.md`): 0, every directory written
/// before the format was recorded; 1, the same tables, with the format recorded; 2, each
/// agent's open sessions counted in `carp_open_sessions` by every start and end (a table an
/// older binary would leave behind the records); 3, the transparency log's leaf data in its
/// runs, no entry bundles stored, level-0 tiles kept as their upper levels (an older binary would
/// find no entry bundles); 4, the log's newest runs kept in `tlog_edge` (an older binary would
/// not read them, and would append over them); 5, the committer's runs hold a count and their
/// leaves' data is read from the events' records, kept in `tlog_retired` when retention removes
/// a chain (an older binary would refuse a counted run as malformed, and would remove a chain's
/// events without keeping its leaves' data).
pub const FORMAT: u64 = 5;

const FORMAT_TABLE: TableDefinition<'static, &str, u64> = TableDefinition::new("cra_format");
const VERSION: &str = "version";

/// Tables an earlier cra wrote that an open converts and removes, so a current directory never
/// holds them.
const RETIRED_TABLES: [&str; 1] = ["tlog_appends"];

/// Passes the format table to a rewrite (`super::rewrite`).
pub(crate) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), BackendError> {
    c.copy(FORMAT_TABLE)
}

/// The records of `table`; 0 when the file never created it.
pub(crate) fn rows<K: Key + 'static, V: Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<'_, K, V>,
) -> Result<u64, BackendError> {
    match txn.open_table(table) {
        Ok(t) => t.len().map_err(backend),
        Err(TableError::TableDoesNotExist(_)) => Ok(0),
        Err(e) => Err(backend(e)),
    }
}

/// The format `txn`'s database records; `None` before formats were recorded.
fn recorded(txn: &ReadTransaction) -> Result<Option<u64>, BackendError> {
    let table = match txn.open_table(FORMAT_TABLE) {
        Ok(t) => t,
        Err(TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(backend(e)),
    };
    Ok(table.get(VERSION).map_err(backend)?.map(|v| v.value()))
}

/// The format `txn`'s database records, in words: `data format N`, or `none` before formats
/// were recorded.
pub(crate) fn recorded_text(txn: &ReadTransaction) -> Result<String, BackendError> {
    Ok(recorded(txn)?.map_or_else(|| "none".to_owned(), |f| format!("data format {f}")))
}

/// Refuses the database file `file` of `dir` when a newer cra wrote it, before anything opens
/// it for writing: read-only, so a refused file is left byte for byte as it was. A file this
/// look cannot read (none yet, one that needs redb's repair after an unclean stop, or a lock it
/// cannot take) is left to the open for writing, which reports its own errors, and [`admit`]
/// checks it once it is open.
pub(crate) fn admit_file(dir: &Path, file: &Path) -> Result<(), BackendError> {
    if !file.is_file() {
        return Ok(());
    }
    match ReadOnlyDatabase::open(file) {
        Ok(db) => {
            let found = recorded(&db.begin_read().map_err(backend)?)?;
            drop(db);
            check_known(found, dir)
        }
        Err(_) => Ok(()),
    }
}

/// Refuses the open database of `dir` when a newer cra wrote it; reads only.
pub(crate) fn admit(db: &Database, dir: &Path) -> Result<(), BackendError> {
    let txn = db.begin_read().map_err(backend)?;
    check_known(recorded(&txn)?, dir)
}

fn check_known(found: Option<u64>, dir: &Path) -> Result<(), BackendError> {
    match found {
        Some(found) if found > FORMAT => Err(BackendError::NewerFormat {
            path: dir.to_path_buf(),
            found,
            known: FORMAT,
        }),
        _ => Ok(()),
    }
}

/// Records [`FORMAT`] once the open's conversions are committed (durably: the next open of an
/// older cra must see it).
pub(crate) fn record(db: &Database) -> Result<(), BackendError> {
    if recorded(&db.begin_read().map_err(backend)?)? == Some(FORMAT) {
        return Ok(());
    }
    let mut txn = db.begin_write().map_err(backend)?;
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    txn.open_table(FORMAT_TABLE)
        .map_err(backend)?
        .insert(VERSION, FORMAT)
        .map_err(backend)?;
    txn.commit().map_err(backend)
}

/// What opening the data directory `dir` (no server may hold it) will change, read through a
/// read-only open that leaves the file as it was.
///
/// # Errors
/// [`BackendError::DataDir`] when `dir` holds no database, [`BackendError::InUse`] while a
/// process holds it, [`BackendError::NeedsRepair`] after an unclean stop (redb repairs the file
/// on the next open for writing, [`repair`]), [`BackendError::NewerFormat`] when a newer cra
/// wrote it.
pub fn plan(dir: &Path) -> Result<UpgradePlan, BackendError> {
    let db = open_read_only(dir)?;
    let txn = db.begin_read().map_err(backend)?;
    let found = recorded(&txn)?;
    check_known(found, dir)?;
    let mut steps = Vec::new();
    missing_tables(&txn, &mut steps)?;
    super::tlog::pending(&txn, &mut steps)?;
    super::carp::pending(&txn, &mut steps)?;
    crate::relay::redb::pending(&txn, &mut steps)?;
    if found != Some(FORMAT) {
        steps.push(UpgradeStep::new(
            "redb.format",
            format!("record data format {FORMAT}"),
        ));
    }
    Ok(UpgradePlan {
        backend: "redb",
        location: dir.display().to_string(),
        found: recorded_text(&txn)?,
        target: format!("data format {FORMAT}"),
        steps,
    })
}

/// The database of the data directory `dir`, opened read-only: the file is not changed, and
/// several readers may hold it (no process may hold it for writing).
///
/// # Errors
/// [`BackendError::DataDir`] when `dir` holds no database, [`BackendError::InUse`] while a
/// process holds it, [`BackendError::NeedsRepair`] after an unclean stop.
pub(crate) fn open_read_only(dir: &Path) -> Result<ReadOnlyDatabase, BackendError> {
    let file = dir.join(DATABASE_FILE);
    if !file.is_file() {
        return Err(BackendError::DataDir {
            path: dir.to_path_buf(),
            reason: format!("it holds no cra database ({DATABASE_FILE} is missing)"),
        });
    }
    ReadOnlyDatabase::open(&file).map_err(|e| match e {
        DatabaseError::RepairAborted => BackendError::NeedsRepair {
            path: dir.to_path_buf(),
        },
        e => open_error(dir, &file, e),
    })
}

/// Lets redb repair the database of `dir` after an unclean stop (its own recovery, which every
/// open for writing runs), changing none of cra's tables, so that [`plan`] can read it.
pub fn repair(dir: &Path) -> Result<(), BackendError> {
    let file = dir.join(DATABASE_FILE);
    let db = Database::open(&file).map_err(|e| open_error(dir, &file, e))?;
    drop(db);
    Ok(())
}

/// The tables this build keeps that the file does not have yet (an open creates them empty, or
/// fills them in the steps after this one).
fn missing_tables(txn: &ReadTransaction, steps: &mut Vec<UpgradeStep>) -> Result<(), BackendError> {
    let present: std::collections::BTreeSet<String> = txn
        .list_tables()
        .map_err(backend)?
        .map(|t| t.name().to_owned())
        .collect();
    let missing: Vec<String> = super::rewrite::known_tables(txn)?
        .into_iter()
        .filter(|t| !present.contains(t) && !RETIRED_TABLES.contains(&t.as_str()))
        .filter(|t| t != super::WRITE_PROBE.name() && t != FORMAT_TABLE.name())
        .collect();
    if !missing.is_empty() {
        steps.push(UpgradeStep::new(
            "redb.tables",
            format!("create the tables {}", missing.join(", ")),
        ));
    }
    Ok(())
}
