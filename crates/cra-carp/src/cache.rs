//! The resolution cache: an identical resolve inside a resolution's ttl is answered with that
//! resolution, under its id, and recorded as `carp.resolution.cached` (TRACE §4.3.2).
//!
//! Every resolve is still evaluated in full; the cache only decides which *id* answers it. Two
//! resolves are **identical** (`specs/carp.md`, "The resolution cache") when
//!
//! 1. their requests are equal except `request_id` and `timestamp` (same session, requester,
//!    task, atlas ids, context and unknown members),
//! 2. the atlases in force have the same digests and the counters the evaluation read are the
//!    same ([`cache_key`] hashes 1 and 2 together), and
//! 3. the fresh evaluation has the same outcome as the earlier resolution: equal except ids,
//!    instants and approval ids ([`same_outcome`]; a condition on time or context that changed
//!    the answer shows here).
//!
//! The earlier resolution must also still stand: stored in the requester's session, for the same
//! agent, unexpired, and, when it opened an approval, that approval still pending (a decided
//! approval changes what an execute under it may do, so the next resolve is a fresh one).
//!
//! The map is per process and bounded ([`ResolutionCache::new`]); it holds ids only, and every
//! hit is checked against the store, so a stale or lost entry can only cost a fresh resolution.
//! Replicas do not share it: each answers a repeat it has seen.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde_json::Value;

use crate::eval::CountersSnapshot;
use crate::replay::first_difference;
use crate::store::StoredResolution;
use crate::types::{CarpRequest, Resolution};

/// The request members that do not take part in identity: each request has its own.
const PER_REQUEST: [&str; 2] = ["request_id", "timestamp"];

/// The cache key of a resolve: SHA-256 (hex) of the TRACE canonical form of the request without
/// its id and timestamp, with the atlas digests in force and the counters the evaluation read.
pub fn cache_key(
    request: &CarpRequest,
    atlas_digests: &BTreeMap<String, String>,
    counters: &CountersSnapshot,
) -> String {
    let mut request = serde_json::to_value(request).unwrap_or(Value::Null);
    if let Some(members) = request.as_object_mut() {
        for name in PER_REQUEST {
            members.remove(name);
        }
    }
    let keyed = serde_json::json!({
        "request": request,
        "atlas_digests": atlas_digests,
        "counters": counters,
    });
    let text = cra_wire::canonical::trace_canonical(&keyed);
    cra_wire::hash::sha256_hex(text.as_bytes())
}

/// Whether a fresh evaluation (`fresh`, in any form) decides what `earlier` (a stored
/// resolution) decided: their stored forms are equal except the request id, generated ids and
/// instants (the members replay ignores too).
pub fn same_outcome(fresh: &Resolution, earlier: &StoredResolution) -> bool {
    let mut fresh = StoredResolution::stored_form(fresh);
    fresh.request_id.clone_from(&earlier.resolution.request_id);
    let fresh = serde_json::to_value(fresh);
    let earlier = serde_json::to_value(&earlier.resolution);
    match (fresh, earlier) {
        (Ok(a), Ok(b)) => first_difference("", &b, &a).is_none(),
        _ => false,
    }
}

/// A cached resolution: its id and when it expires (Unix microseconds).
#[derive(Debug, Clone)]
struct Entry {
    resolution_id: String,
    expires_at_us: i64,
}

/// Resolution ids by [`cache_key`], at most `capacity` of them (see the module documentation).
#[derive(Debug)]
pub struct ResolutionCache {
    entries: Mutex<HashMap<String, Entry>>,
    capacity: usize,
}

impl ResolutionCache {
    /// An empty cache holding at most `capacity` entries (`0` caches nothing).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    /// The resolution id cached under `key`, if it has not expired at `now_us`.
    pub fn get(&self, key: &str, now_us: i64) -> Option<String> {
        let entries = self.entries.lock().ok()?;
        entries
            .get(key)
            .filter(|e| e.expires_at_us > now_us)
            .map(|e| e.resolution_id.clone())
    }

    /// Caches `resolution_id` under `key` until `expires_at_us`. When the cache is full, expired
    /// entries go first; if none has expired, every entry goes (a miss costs only a fresh
    /// resolution).
    pub fn insert(&self, key: String, resolution_id: String, expires_at_us: i64, now_us: i64) {
        if self.capacity == 0 {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, e| e.expires_at_us > now_us);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(
            key,
            Entry {
                resolution_id,
                expires_at_us,
            },
        );
    }

    /// How many entries the cache holds (expired ones included until they are evicted).
    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_answered_until_it_expires() {
        let cache = ResolutionCache::new(4);
        cache.insert("k".into(), "r1".into(), 100, 0);
        assert_eq!(cache.get("k", 99).as_deref(), Some("r1"));
        assert_eq!(cache.get("k", 100), None);
    }

    #[test]
    fn a_full_cache_evicts_expired_entries_first_and_never_grows_past_its_capacity() {
        let cache = ResolutionCache::new(2);
        cache.insert("old".into(), "r1".into(), 10, 0);
        cache.insert("live".into(), "r2".into(), 1000, 0);
        cache.insert("new".into(), "r3".into(), 1000, 50);
        assert_eq!(cache.get("live", 50).as_deref(), Some("r2"));
        assert_eq!(cache.get("new", 50).as_deref(), Some("r3"));
        cache.insert("newer".into(), "r4".into(), 1000, 50);
        assert!(cache.len() <= 2);
        assert_eq!(cache.get("newer", 50).as_deref(), Some("r4"));
    }

    #[test]
    fn a_cache_of_capacity_zero_caches_nothing() {
        let cache = ResolutionCache::new(0);
        cache.insert("k".into(), "r1".into(), 100, 0);
        assert!(cache.is_empty());
    }
}
