//! `cra-store`: the storage backends, redb (embedded, the default) and PostgreSQL, implementing
//! the storage traits the protocol crates define, plus the TRACE collector (atomic, durable,
//! gap-free appends per session).
//!
//! Where things live:
//!
//! * [`redb`] ([`RedbStore`]): one data directory, one `redb::Database` file (`cra.redb`)
//!   shared by every area: TRACE chains in `trace.rs`, CARP state in `carp.rs`. Other areas open
//!   their own tables through [`RedbStore::handle`].
//! * [`pg`] ([`PgStore`]): one PostgreSQL schema per deployment, a small pool of synchronous
//!   connections, and the embedded migrations of `migrations/NNNN_<area>.sql`, applied in order on
//!   start and recorded in `cra_migrations`. An area adds its schema by adding a file there.
//!   TRACE chains in `trace.rs`, CARP state in `carp.rs`.
//! * `collector`: group commit for TRACE appends, shared by both backends (an append is
//!   answered only once the transaction holding it is durable); `chain`: the chain-store
//!   plumbing both backends share; `error`: the store's errors.
//! * [`catalog`] ([`AtlasCatalog`]): the atlases in force, stored as numbered generations,
//!   so they survive restarts and replicas share them.
//! * [`relay`]: the `cra_relay::store` implementation for both backends.
//! * [`retention`]: removing whole ended sessions, recorded in the operator audit chain.
//! * [`stats`] ([`stats::CommitStats`]): what the committers measure for `/metrics`, each
//!   batch's commit time and appends.
//! * [`tlog`]: the transparency log over every TRACE event (an RFC 6962 tree kept as C2SP
//!   tiles, appended in the same transaction as the events), read through [`tlog::LogStore`].
//! * [`encryption`] ([`Encryption`]): encryption at rest of event bodies and CARP records, with the
//!   current and retired storage keys; every backend passes stored bodies through it.
//! * [`fault`]: the declared fault points where the crash suite stops a server
//!   ([`fault_point!`]), armed only with the `fault-points` feature.
//! * [`backup`]: a whole store written to an archive (one consistent view, the manifest last) and
//!   restored from one, verified before it is reported done.
//! * [`upgrade`]: what opening a store an earlier cra wrote will change (`cra migrate
//!   --check`), planned by [`redb::upgrade`] (which also keeps the data format that stops an
//!   older cra opening a newer directory) and [`pg::upgrade`].
//! * [`testing`]: per-test PostgreSQL schemas for backend test suites (skips visibly when
//!   `CRA_TEST_POSTGRES_URL` is unset).
//!
//! Every trait is synchronous; async callers use `spawn_blocking`. Time and ids are injected
//! through [`StoreConfig`].

pub mod backup;
pub mod catalog;
mod chain;
mod collector;
pub mod encryption;
mod error;
pub mod fault;
pub mod pg;
pub mod redb;
pub mod relay;
pub mod retention;
pub mod stats;
pub mod testing;
pub mod tlog;
pub mod upgrade;

use std::sync::Arc;

use cra_wire::{Clock, IdGenerator, SystemClock, UuidV7Ids};

pub use catalog::AtlasCatalog;
pub use collector::MAX_BATCH_APPENDS;
pub use encryption::{Encryption, ReencryptReport, StorageKey};
pub use error::BackendError;
pub use pg::PgStore;
pub use redb::RedbStore;
pub use retention::{RetentionPolicy, RetentionReport, RetentionStore, SessionRemoval};

/// When a write to the CARP state (sessions, request ids, resolutions, executions, counters,
/// approvals) is on disk.
///
/// TRACE appends are always durable before they are answered; this setting is only about the
/// state writes beside them. See `docs/architecture.md`
/// ("Internals: storage group commit").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateDurability {
    /// Every state write is durable when the call returns (redb fsyncs the commit; PostgreSQL
    /// commits with `synchronous_commit` on). For callers that acknowledge a state write by itself.
    #[default]
    Immediate,
    /// A state write is durable once the next TRACE append made through the same store is: redb
    /// commits it without fsync and the next durable commit (the collector's) persists it with
    /// everything before it; PostgreSQL commits it with `synchronous_commit` off and the next
    /// synchronous commit flushes the write-ahead log past it. Only for callers that answer no
    /// state write before recording it in a chain, as the runtime does; a crash before that
    /// append may lose the state write, which nobody was told about.
    WithNextAppend,
}

/// What a store needs from its surroundings: where "now" and new ids come from, and how state
/// writes are flushed.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Timestamps of appended events.
    pub clock: Arc<dyn Clock>,
    /// Ids of appended events.
    pub ids: Arc<dyn IdGenerator>,
    /// When CARP state writes are durable.
    pub state_durability: StateDurability,
    /// The most bytes of pages redb keeps in memory ([`DEFAULT_REDB_CACHE_BYTES`]).
    pub redb_cache_bytes: usize,
    /// How stored bodies are encrypted: plaintext unless a storage key is configured.
    pub encryption: Encryption,
    /// Whether redb appends add their events to the transparency log: always, except in the
    /// append benchmark's baseline ([`testing::without_log`]), which measures what the log costs.
    pub(crate) log_appends: bool,
}

/// redb's page cache size unless told otherwise: 64 MiB.
///
/// redb's own default is 1 GiB, and it keeps every page a commit writes until the cache is full.
/// On a TRACE workload almost every written page is a new event record that is rarely read again,
/// so that cache only grows: each new page is fresh memory the kernel must fault in and zero
/// (about ten page faults per resolve on the committer, the one thread every append waits for).
/// With a cache that is soon full, pages written past it are freed and their memory reused.
/// `docs/architecture.md` ("Internals: storage group commit") has the measurement.
pub const DEFAULT_REDB_CACHE_BYTES: usize = 64 << 20;

impl StoreConfig {
    /// The system clock, UUIDv7 ids and immediately durable state writes.
    pub fn new(clock: Arc<dyn Clock>, ids: Arc<dyn IdGenerator>) -> Self {
        Self {
            clock,
            ids,
            state_durability: StateDurability::Immediate,
            redb_cache_bytes: DEFAULT_REDB_CACHE_BYTES,
            encryption: Encryption::plaintext(),
            log_appends: true,
        }
    }

    /// The same, with redb keeping at most `bytes` of pages in memory.
    #[must_use]
    pub fn with_redb_cache_bytes(mut self, bytes: usize) -> Self {
        self.redb_cache_bytes = bytes;
        self
    }

    /// The same, with stored bodies encrypted by `encryption`.
    #[must_use]
    pub fn with_encryption(mut self, encryption: Encryption) -> Self {
        self.encryption = encryption;
        self
    }

    /// The same, with state writes flushed as `durability` says.
    #[must_use]
    pub fn with_state_durability(mut self, durability: StateDurability) -> Self {
        self.state_durability = durability;
        self
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock), Arc::new(UuidV7Ids))
    }
}
