//! `cra-store`: the storage backends, redb (embedded, the default) and PostgreSQL, implementing
//! the storage traits the protocol crates define, plus the TRACE collector (atomic, durable,
//! gap-free appends per session).
//!
//! Where things live:
//!
//! * [`RedbStore`] (`src/redb/`): one data directory, one `redb::Database` file (`cra.redb`)
//!   shared by every area: TRACE chains in `trace.rs`, CARP state in `carp.rs`. Other areas open
//!   their own tables on [`RedbStore::database`].
//! * [`PgStore`] (`src/pg/`): one PostgreSQL schema per deployment, a small pool of synchronous
//!   connections, and the embedded migrations of `migrations/NNNN_<area>.sql`, applied in order on
//!   start and recorded in `cra_migrations`. An area adds its schema by adding a file there.
//!   TRACE chains in `trace.rs`, CARP state in `carp.rs`.
//! * `src/collector.rs`: group commit for TRACE appends, shared by both backends (an append is
//!   answered only once the transaction holding it is durable).
//! * `src/relay/`: the Relay engineer's `cra_relay::store` implementation for both backends.
//! * [`retention`]: removing whole ended sessions, recorded in the operator audit chain.
//! * [`testing`]: per-test PostgreSQL schemas for backend test suites (skips visibly when
//!   `CRA_TEST_POSTGRES_URL` is unset).
//!
//! Every trait is synchronous; async callers use `spawn_blocking`. Time and ids are injected
//! through [`StoreConfig`].

mod chain;
mod collector;
mod error;
pub mod pg;
pub mod redb;
pub mod relay;
pub mod retention;
pub mod testing;

use std::sync::Arc;

use cra_wire::{Clock, IdGenerator, SystemClock, UuidV7Ids};

pub use collector::MAX_BATCH_APPENDS;
pub use error::StoreError;
pub use pg::PgStore;
pub use redb::RedbStore;
pub use retention::{RetentionPolicy, RetentionReport, SessionRemoval};

/// What a store needs from its surroundings: where "now" and new ids come from.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Timestamps of appended events.
    pub clock: Arc<dyn Clock>,
    /// Ids of appended events.
    pub ids: Arc<dyn IdGenerator>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidV7Ids),
        }
    }
}
