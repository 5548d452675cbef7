//! Relay's storage ([`cra_relay::store::RelayStore`]) on both backends: [`RedbRelay`] in the
//! shared redb database of a data directory (with a tantivy BM25 index for `pull` relevant) and
//! [`PgRelay`] in the PostgreSQL schema of a [`crate::PgStore`] (with PostgreSQL full-text
//! search). Both pass the same suite (`cra_relay::testkit`).

pub mod pg;
pub mod redb;
pub mod search;

pub use pg::PgRelay;
pub use redb::RedbRelay;

impl From<cra_relay::store::RelayStoreError> for crate::BackendError {
    fn from(e: cra_relay::store::RelayStoreError) -> Self {
        crate::BackendError::Backend(format!("relay: {e}"))
    }
}
