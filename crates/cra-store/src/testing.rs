//! Helpers for backend test suites (this crate's and other areas'): a fresh PostgreSQL schema per
//! test, dropped when the guard goes, the visible skip when no server is configured, and a
//! replica's wrong clock ([`SkewedClock`]), a transparency log bulk-loaded for proof
//! benchmarks ([`bulk_load_log`]), the append benchmark's baseline without the log
//! ([`without_log`]), and the byte scans of encryption and redaction tests
//! ([`files_hold`], [`rows_hold`]).

use crate::{BackendError, PgStore, StoreConfig};

/// The variable naming the PostgreSQL server tests may use.
pub const POSTGRES_URL_VAR: &str = "CRA_TEST_POSTGRES_URL";

/// The test server's URL, or `None` after printing the skip notice for `test`.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("{test}: skipped: {POSTGRES_URL_VAR} not set");
            None
        }
    }
}

/// A schema made for one test; dropping the guard drops the schema and everything in it.
#[derive(Debug)]
pub struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// Makes a unique schema name from `prefix`, the process id and a counter (no schema is
    /// created until a store connects).
    pub fn new(url: &str, prefix: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let clean: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(32)
            .collect();
        Self {
            url: url.to_owned(),
            name: format!("t_{clean}_{}_{n}", std::process::id()),
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A store in this schema.
    pub fn store(&self, config: StoreConfig) -> Result<PgStore, BackendError> {
        PgStore::connect_with(&self.url, &self.name, config, 16)
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                crate::pg::quote_ident(&self.name)
            ));
        }
    }
}

/// The system's clock off by a fixed amount: a replica whose own clock is wrong.
#[derive(Debug, Clone, Copy)]
pub struct SkewedClock(pub time::Duration);

impl cra_wire::Clock for SkewedClock {
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc() + self.0
    }
}

/// The redb tables that hold the transparency log: dropping them all leaves a data directory as
/// one written before the log, which the next open backfills from its events.
pub const REDB_LOG_TABLES: [&str; 6] = [
    "tlog_tiles",
    "tlog_runs",
    "tlog_edge",
    "tlog_retired",
    "tlog_meta",
    "tlog_checkpoints",
];

/// `config` with redb appends that leave the transparency log alone: the baseline of the append
/// benchmark, which measures what the log costs a durable append. A store opened so holds events
/// no leaf has, which a real store never does; use it only on a store made for the purpose.
#[must_use]
pub fn without_log(mut config: crate::StoreConfig) -> crate::StoreConfig {
    config.log_appends = false;
    config
}

/// Appends `leaves` (leaf data) to `store`'s transparency log with no event behind them, in
/// transactions of at most 65,536 leaves: for benchmarks of proofs over large trees ("bulk
/// loaded through the tree store"). The log then holds leaves no event has, which a real store
/// never does; use it only on a store made for the purpose.
///
/// # Errors
/// What the store met.
pub fn bulk_load_log(
    store: &crate::RedbStore,
    leaves: &[cra_tlog::Hash],
) -> Result<(), crate::tlog::LogError> {
    let failed = |e: &dyn std::fmt::Display| crate::tlog::LogError::Store(e.to_string());
    for chunk in leaves.chunks(1 << 16) {
        let txn = store.handle().begin_write().map_err(|e| failed(&e))?;
        crate::redb::tlog::append_bare(&txn, &store.config().encryption, chunk)?;
        txn.commit().map_err(|e| failed(&e))?;
    }
    Ok(())
}

/// [`bulk_load_log`] on PostgreSQL.
///
/// # Errors
/// What the store met.
pub fn bulk_load_log_pg(
    store: &PgStore,
    leaves: &[cra_tlog::Hash],
) -> Result<(), crate::tlog::LogError> {
    let failed = |e: &dyn std::fmt::Display| crate::tlog::LogError::Store(e.to_string());
    let mut client = store.client().map_err(|e| failed(&e))?;
    for chunk in leaves.chunks(1 << 16) {
        let mut tx = client.transaction().map_err(|e| failed(&e))?;
        crate::pg::tlog::append_tiles(&mut tx, chunk)?;
        tx.commit().map_err(|e| failed(&e))?;
    }
    Ok(())
}

/// Whether any file under `dir` (recursively) holds the bytes of `needle`.
///
/// # Panics
/// A directory or file that cannot be read (tests only).
#[allow(clippy::unwrap_used)]
pub fn files_hold(dir: &std::path::Path, needle: &str) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        let path = entry.unwrap().path();
        if path.is_dir() {
            return files_hold(&path, needle);
        }
        let bytes = std::fs::read(&path).unwrap();
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    })
}

/// Whether any row of any table of `schema` (at `url`) holds `needle` in its text form.
///
/// # Panics
/// PostgreSQL cannot be reached, or the schema has almost no tables (a wrong name would make
/// every scan pass).
#[allow(clippy::unwrap_used)]
pub fn rows_hold(url: &str, schema: &str, needle: &str) -> bool {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let tables = c
        .query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .unwrap();
    assert!(tables.len() > 10, "the schema's tables are listed");
    tables.iter().any(|t| {
        let table: &str = t.get(0);
        let sql = format!(
            "SELECT count(*) FROM {}.{} AS r WHERE r::text LIKE $1",
            crate::pg::quote_ident(schema),
            crate::pg::quote_ident(table)
        );
        let n: i64 = c.query_one(&sql, &[&format!("%{needle}%")]).unwrap().get(0);
        n > 0
    })
}
