//! The storage contract, run against the in-memory test store.

use cra_carp::memory::MemoryStore;
use cra_carp::store::CarpStore;

#[test]
fn memory_store_keeps_the_store_contract() {
    cra_carp::store_contract::check_all(&|| Box::new(MemoryStore::new()) as Box<dyn CarpStore>);
}
