//! The PostgreSQL backend: one schema per deployment (several runtime replicas may share it), a
//! pool of synchronous connections, and the embedded migrations (`migrations/NNNN_<area>.sql`)
//! applied in version order on start, each recorded in `cra_migrations` with a checksum. Replicas
//! starting together take a transaction-scoped advisory lock, so each migration runs once.
//!
//! What replicas share besides the tables: [`feed`], each commit's appends announced to every
//! replica (`LISTEN`/`NOTIFY`), [`leader`], one replica chosen by an advisory lock for
//! periodic work, [`ratelimit`], the HTTP rate limiter's buckets, `catalog`, the atlas catalog
//! (`crate::catalog`), whose new generations the feed announces, and [`clock`], the database's
//! clock every replica reads its time from. `tlog` keeps the transparency log (`crate::tlog`):
//! its one row hands out leaf indexes to every replica's commits in commit order. `keys`
//! registers the storage keys that encrypted the schema's records and re-encrypts them
//! (`crate::encryption`). [`upgrade`] plans what the next start will migrate, without writing.

pub(crate) mod carp;
mod catalog;
pub mod clock;
pub mod feed;
mod keys;
pub mod leader;
mod pool;
pub mod ratelimit;
pub(crate) mod state;
pub(crate) mod tlog;
pub(crate) mod trace;
pub mod upgrade;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::collector::Collector;
use crate::{BackendError, StoreConfig};

pub(crate) use pool::quote_ident;
pub use pool::{Pool, PooledClient};

include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// Connections a [`PgStore`] opens at most unless told otherwise.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// TRACE committer threads per store (each commits one batch at a time on its own connection).
pub const COMMITTERS: usize = 4;

/// The PostgreSQL store of one schema. Cloning is cheap and shares the pool.
#[derive(Clone, Debug)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    schema: String,
    /// The connection URL (the append feed opens a connection of its own).
    url: String,
    /// Names this store in the append feed's notifications ([`feed`]).
    origin: u64,
    pool: Arc<Pool>,
    /// Connections for CARP state writes under [`crate::StateDurability::WithNextAppend`]
    /// (`synchronous_commit` off); `None` when state writes use `pool`.
    state_pool: Option<Pool>,
    config: StoreConfig,
    collector: Collector,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to `url`, creates `schema` if needed and applies pending migrations, with the
    /// system clock, UUIDv7 ids and [`DEFAULT_POOL_SIZE`] connections.
    pub fn connect(url: &str, schema: &str) -> Result<Self, BackendError> {
        Self::connect_with(url, schema, StoreConfig::default(), DEFAULT_POOL_SIZE)
    }

    /// As [`PgStore::connect`], with the given clock, ids and pool size.
    pub fn connect_with(
        url: &str,
        schema: &str,
        config: StoreConfig,
        pool_size: usize,
    ) -> Result<Self, BackendError> {
        check_schema_name(schema)?;
        let pool = Arc::new(Pool::new(url, schema, pool_size.max(COMMITTERS + 1), true));
        let state_pool = (config.state_durability == crate::StateDurability::WithNextAppend)
            .then(|| Pool::new(url, schema, pool_size, false));
        migrate(&pool, schema)?;
        keys::admit(&pool, &config.encryption)?;
        carp::index_session_agents(&pool, &config.encryption)?;
        carp::count_open_sessions(&pool, &config.encryption)?;
        let origin = random_origin();
        let collector = {
            let (pool, config) = (pool.clone(), config.clone());
            let notify = trace::Notify {
                channel: feed::channel(schema),
                origin,
            };
            Collector::start("cra-pg-commit", COMMITTERS, move |batch| {
                trace::commit_batch(&pool, &config, &notify, batch);
            })?
        };
        Ok(Self {
            inner: Arc::new(Inner {
                schema: schema.to_owned(),
                url: url.to_owned(),
                pool,
                state_pool,
                config,
                collector,
                origin,
            }),
        })
    }

    /// What this store's committers have measured (`/metrics`).
    pub fn commit_stats(&self) -> Arc<crate::stats::CommitStats> {
        self.inner.collector.stats()
    }

    /// The schema this store lives in.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// A pooled connection whose `search_path` is this store's schema, for areas with their own
    /// tables.
    pub fn client(&self) -> Result<PooledClient<'_>, BackendError> {
        self.inner.pool.get()
    }

    /// A connection for CARP state writes: one whose commits are durable once the next TRACE
    /// append is, when the store was opened with [`crate::StateDurability::WithNextAppend`].
    pub(crate) fn state_client(&self) -> Result<PooledClient<'_>, BackendError> {
        match &self.inner.state_pool {
            Some(p) => p.get(),
            None => self.inner.pool.get(),
        }
    }

    pub(crate) fn collector(&self) -> &Collector {
        &self.inner.collector
    }

    /// The clock and ids this store was created with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The most connections this store's pools open together (the main pool and, with
    /// [`crate::StateDurability::WithNextAppend`], the state writes' pool). A server adds two of
    /// its own: the append feed's listener and the leader bid.
    pub fn pooled_connections_at_most(&self) -> usize {
        self.inner.pool.max() + self.inner.state_pool.as_ref().map_or(0, Pool::max)
    }

    /// The database server's `max_connections`.
    pub fn server_max_connections(&self) -> Result<usize, BackendError> {
        let mut client = self.client()?;
        let rows = client
            .simple_query("SHOW max_connections")
            .map_err(|e| BackendError::Connect(error_text(&e)))?;
        Ok(rows
            .iter()
            .find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => r.get(0)?.parse().ok(),
                _ => None,
            })
            .unwrap_or(0))
    }

    /// Asks the database for `SELECT 1` through the pool: whether it answers now (readiness).
    pub fn ping(&self) -> Result<(), BackendError> {
        let mut client = self.client()?;
        client
            .simple_query("SELECT 1")
            .map(drop)
            .map_err(|e| BackendError::Connect(error_text(&e)))
    }

    /// The versions and names of the migrations applied to this schema, ascending.
    pub fn applied_migrations(&self) -> Result<Vec<(u32, String)>, BackendError> {
        let mut client = self.client()?;
        let rows = client
            .query(
                "SELECT version, name FROM cra_migrations ORDER BY version",
                &[],
            )
            .map_err(pg)?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i32>(0).unsigned_abs(), r.get::<_, String>(1)))
            .collect())
    }
}

/// A number no other store is likely to draw: the standard library's per-process random hash
/// keys, hashed with the time and the process id. It names a store in notifications only; it is
/// never stored, so it needs no injected source.
fn random_origin() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// Sleeps `d` in steps of 100 ms at most, for the store's own threads; `true` as soon as `stop`
/// is set (then it returns early).
fn pause(stop: &std::sync::atomic::AtomicBool, d: std::time::Duration) -> bool {
    use std::sync::atomic::Ordering;
    let step = std::time::Duration::from_millis(100);
    let mut left = d;
    while !left.is_zero() {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        let s = left.min(step);
        std::thread::sleep(s);
        left -= s;
    }
    stop.load(Ordering::SeqCst)
}

/// The migrations this build embeds: (version, name), ascending.
pub fn embedded_migrations() -> Vec<(u32, &'static str)> {
    MIGRATIONS.iter().map(|(v, n, _)| (*v, *n)).collect()
}

/// A count or sequence as PostgreSQL's `bigint` (one beyond it, never reached, saturates).
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Refuses schema names that would need quoting games.
pub fn check_schema_name(schema: &str) -> Result<(), BackendError> {
    let mut bytes = schema.bytes();
    let ok = matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && schema.len() <= 63;
    if ok {
        Ok(())
    } else {
        Err(BackendError::InvalidSchema(schema.to_owned()))
    }
}

pub(crate) fn pg(e: postgres::Error) -> BackendError {
    BackendError::Backend(format!("postgres: {}", error_text(&e)))
}

/// An error with its causes: `postgres::Error` prints only "db error" when the server refused a
/// statement, and the server's own message (what to act on) is its source.
pub(crate) fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A 64-bit number named by `text`, for what PostgreSQL names by number or by a short
/// identifier: advisory lock keys (migrations, the leader) and the feed's channel. It is the
/// first eight bytes of the hex SHA-256 of `text`; released lock keys never change, or replicas
/// of two builds would stop excluding each other.
pub(crate) fn name_key(text: &str) -> i64 {
    i64::from_be_bytes(
        cra_wire::hash::sha256_hex(text.as_bytes()).as_bytes()[..8]
            .try_into()
            .unwrap_or([0; 8]),
    )
}

/// One plain connection to `url` (no pool, no `search_path`): for the upgrade plan and backups,
/// which name every table with its schema.
pub(crate) fn connect_client(url: &str) -> Result<postgres::Client, BackendError> {
    postgres::Client::connect(url, postgres::NoTls)
        .map_err(|e| BackendError::Connect(e.to_string()))
}

/// A read-only `REPEATABLE READ` transaction on `client`: one consistent view of the database,
/// taken while others write (the upgrade plan, a backup).
pub(crate) fn read_only_view(
    client: &mut postgres::Client,
) -> Result<postgres::Transaction<'_>, BackendError> {
    client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(pg)
}

/// Whether `schema` holds `table`, as `tx` sees it (a schema an earlier cra migrated may lack
/// later tables).
pub(crate) fn has_table(
    tx: &mut postgres::Transaction<'_>,
    schema: &str,
    table: &str,
) -> Result<bool, BackendError> {
    let name = format!("{}.{table}", quote_ident(schema));
    let row = tx
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .map_err(pg)?;
    Ok(row.get(0))
}

/// The rows of `schema.table` matching the SQL condition `filter`, as `tx` sees them; 0 when
/// the table does not exist.
pub(crate) fn count_rows(
    tx: &mut postgres::Transaction<'_>,
    schema: &str,
    table: &str,
    filter: &str,
) -> Result<u64, BackendError> {
    if !has_table(tx, schema, table)? {
        return Ok(0);
    }
    let sql = format!(
        "SELECT count(*) FROM {}.{table} WHERE {filter}",
        quote_ident(schema)
    );
    let n: i64 = tx.query_one(&sql, &[]).map_err(pg)?.get(0);
    Ok(n.unsigned_abs())
}

/// Creates `schema` and its `cra_migrations` table when they do not exist.
pub(crate) fn schema_sql(schema: &str) -> String {
    let q = quote_ident(schema);
    format!(
        "CREATE SCHEMA IF NOT EXISTS {q};
         CREATE TABLE IF NOT EXISTS {q}.cra_migrations (
             version    integer     PRIMARY KEY,
             name       text        NOT NULL,
             checksum   text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    )
}

fn migrate(pool: &Pool, schema: &str) -> Result<(), BackendError> {
    let mut client = pool.get()?;
    let mut tx = client.transaction().map_err(pg)?;
    let key = name_key(&format!("cra-store migrations {schema}"));
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key])
        .map_err(pg)?;
    tx.batch_execute(&schema_sql(schema)).map_err(pg)?;
    let applied: BTreeMap<u32, String> = tx
        .query("SELECT version, checksum FROM cra_migrations", &[])
        .map_err(pg)?
        .iter()
        .map(|r| (r.get::<_, i32>(0).unsigned_abs(), r.get::<_, String>(1)))
        .collect();
    upgrade::check_applied(&applied)?;
    apply_migrations(&mut tx, &applied)?;
    tlog::backfill(&mut tx).map_err(|e| BackendError::Backend(e.to_string()))?;
    tx.commit().map_err(pg)
}

/// Runs in `tx` every migration of this build not in `applied`, in order, recording each in
/// `cra_migrations`; `tx`'s `search_path` is the schema's.
pub(crate) fn apply_migrations(
    tx: &mut postgres::Transaction<'_>,
    applied: &BTreeMap<u32, String>,
) -> Result<(), BackendError> {
    for (version, name, sql) in MIGRATIONS {
        if applied.contains_key(version) {
            continue;
        }
        let failed = |e: postgres::Error| BackendError::Migration {
            version: *version,
            name: (*name).to_owned(),
            reason: e.to_string(),
        };
        tx.batch_execute(sql).map_err(failed)?;
        let v = i32::try_from(*version).map_err(|_| BackendError::Migration {
            version: *version,
            name: (*name).to_owned(),
            reason: "version does not fit an integer".into(),
        })?;
        let checksum = cra_wire::hash::sha256_hex(sql.as_bytes());
        tx.execute(
            "INSERT INTO cra_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&v, name, &checksum],
        )
        .map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A refusal by the server, as `postgres::Error` carries it: the client's words on top, the
    /// server's message as the source.
    #[derive(Debug, thiserror::Error)]
    #[error("db error")]
    struct Refused(#[source] Server);

    #[derive(Debug, thiserror::Error)]
    #[error("ERROR: relation \"trace_heads\" does not exist")]
    struct Server;

    #[test]
    fn error_text_carries_every_cause() {
        assert_eq!(
            super::error_text(&Refused(Server)),
            "db error: ERROR: relation \"trace_heads\" does not exist"
        );
        assert_eq!(super::error_text(&Server), Server.to_string());
    }
}
