//! Opening the store behind every area: redb in the data directory (default) or PostgreSQL
//! (`--postgres URL`). One backend object implements every protocol crate's storage trait; the
//! runtime holds it as one `Arc<dyn ...>` per trait. On PostgreSQL the runtime's time is the
//! database's clock ([`cra_store::pg::clock::DatabaseClock`]), sampled again by [`keep_clock`]
//! while the server runs.

use std::sync::Arc;

use cra_carp::CarpStore;
use cra_carp::store::StateLog;
use cra_store::pg::clock::DatabaseClock;
use cra_store::{PgStore, RedbStore, RetentionStore, StateDurability, StoreConfig};
use cra_trace::store::ChainStore;
use cra_wire::{Clock, IdGenerator};

use crate::config::RuntimeConfig;

/// The stores of every area, sharing one backend.
#[derive(Clone)]
pub struct Backends {
    /// TRACE chains.
    pub chains: Arc<dyn ChainStore>,
    /// CARP sessions, resolutions, executions, counters, approvals.
    pub carp: Arc<dyn CarpStore>,
    /// A change of CARP state with its events (resolves, approval decisions): one transaction
    /// on either backend.
    pub state_log: Arc<dyn StateLog>,
    /// Relay projects, packages, facts.
    pub relay: Arc<dyn cra_relay::RelayStore>,
    /// The atlas catalog: the atlases in force, stored (`crate::atlases::catalog`).
    pub catalog: Arc<dyn cra_store::AtlasCatalog>,
    /// The chains again, with whole-chain removal: what retention runs on.
    pub retention: Arc<dyn RetentionStore>,
    /// The transparency log's tree and checkpoints.
    pub log: Arc<dyn cra_store::tlog::LogStore>,
    /// `redb` or `postgres`.
    pub kind: &'static str,
    /// Whether reads and queued appends return without waiting on a network or on another
    /// writer (redb: reads are MVCC snapshots, appends only queue for the committer), so the
    /// runtime makes those calls on the async worker instead of hopping to the blocking pool
    /// ([`crate::state::Runtime::quick`]). PostgreSQL answers over the network: `false`.
    pub quick_reads: bool,
    /// The PostgreSQL store itself, for what only a database shared by replicas offers (the
    /// append feed of `crate::replicas`); `None` on the embedded store.
    pub postgres: Option<PgStore>,
    /// The embedded store itself, for its write probe
    /// ([`cra_store::RedbStore::check_writable`], which also reopens it after a failed write);
    /// `None` on PostgreSQL.
    pub redb: Option<RedbStore>,
    /// The database's clock the runtime and the store read, when the server uses it
    /// ([`crate::config::ClockSource::Database`] on PostgreSQL).
    pub database_clock: Option<Arc<DatabaseClock>>,
    /// What the store's committers measure (`/metrics`).
    pub commits: Arc<cra_store::stats::CommitStats>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field("kind", &self.kind)
            .finish()
    }
}

/// Opens the configured backend with the injected clock and ids.
pub(crate) fn open(
    config: &RuntimeConfig,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
) -> Result<Backends, cra_store::BackendError> {
    // Every state write the runtime answers is followed by the TRACE append that records it, and
    // the answer waits for that append: the append's durable commit persists the state too.
    let store_config = StoreConfig::new(clock, ids)
        .with_state_durability(StateDurability::WithNextAppend)
        .with_redb_cache_bytes(config.redb_cache_mib.saturating_mul(1 << 20))
        .with_encryption(
            config
                .encryption
                .encryption()
                .map_err(|e| cra_store::BackendError::StorageKey(e.to_string()))?,
        );
    match &config.postgres {
        Some(url) => {
            let pg = PgStore::connect_with(
                url,
                &config.postgres_schema,
                store_config,
                config.postgres_pool,
            )?;
            let chains: Arc<dyn ChainStore> = Arc::new(pg.clone());
            let carp: Arc<dyn CarpStore> = Arc::new(pg.clone());
            Ok(Backends {
                retention: Arc::new(pg.clone()),
                log: Arc::new(pg.clone()),
                catalog: Arc::new(pg.clone()),
                state_log: Arc::new(pg.clone()),
                relay: Arc::new(cra_store::relay::PgRelay::new(pg.clone())),
                chains,
                carp,
                kind: "postgres",
                quick_reads: false,
                commits: pg.commit_stats(),
                postgres: Some(pg),
                redb: None,
                database_clock: None,
            })
        }
        None => {
            let redb = RedbStore::open_with(&config.data, store_config)?;
            Ok(Backends {
                retention: Arc::new(redb.clone()),
                log: Arc::new(redb.clone()),
                catalog: Arc::new(redb.clone()),
                relay: Arc::new(cra_store::relay::RedbRelay::open(&redb)?),
                chains: Arc::new(redb.clone()),
                state_log: Arc::new(redb.clone()),
                carp: Arc::new(redb.clone()),
                kind: "redb",
                quick_reads: true,
                commits: redb.commit_stats(),
                postgres: None,
                redb: Some(redb),
                database_clock: None,
            })
        }
    }
}

/// Seconds between two samples of the database's clock ([`keep_clock`]): a local clock set
/// forward or back moves the runtime's time for at most this long.
const CLOCK_SAMPLE_SECONDS: u64 = 10;

/// Samples the database's clock every [`CLOCK_SAMPLE_SECONDS`] until the server stops, when
/// the runtime reads it; a failed sample keeps the last one and is logged.
pub(crate) async fn keep_clock(state: crate::state::AppState) {
    let (Some(clock), Some(pg)) = (
        state.backends.database_clock.clone(),
        state.backends.postgres.clone(),
    ) else {
        return;
    };
    let every = std::time::Duration::from_secs(CLOCK_SAMPLE_SECONDS);
    loop {
        tokio::select! {
            () = state.stopping.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let (clock, pg) = (clock.clone(), pg.clone());
        match tokio::task::spawn_blocking(move || clock.sync(&pg)).await {
            Ok(Ok(sample)) if !sample.taken => tracing::debug!(
                round_trip_ms = sample.round_trip.whole_milliseconds(),
                "a slow sample of the database's clock was not taken"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                "cannot sample the database's clock; the last sample stays in use"
            ),
            Err(e) => tracing::warn!(error = %e, "the database clock's sample did not finish"),
        }
    }
}
