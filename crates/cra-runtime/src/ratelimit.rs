//! Per-key request rate limiting: a token bucket per credential fingerprint. On the embedded
//! store the buckets are in memory, refilled from the injected clock (so tests control time and
//! never sleep); on PostgreSQL they are in the database (`cra_store::pg::ratelimit`), refilled at
//! its clock, so the replicas sharing a schema enforce one limit between them. Should the
//! database not answer, a request is limited by this replica's own buckets meanwhile (the
//! request itself will then most likely fail at the store, with a clearer error).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cra_wire::Clock;
use time::OffsetDateTime;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: OffsetDateTime,
}

/// Token buckets, one per key.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    clock: Arc<dyn Clock>,
    buckets: Mutex<HashMap<String, Bucket>>,
    /// The buckets every replica shares, on PostgreSQL.
    shared: Option<cra_store::PgStore>,
}

impl RateLimiter {
    /// `per_second` sustained, `burst` at most; `per_second == 0` disables limiting.
    pub fn new(per_second: u32, burst: u32, clock: Arc<dyn Clock>) -> Self {
        Self {
            per_second: f64::from(per_second),
            burst: f64::from(burst.max(1)),
            clock,
            buckets: Mutex::new(HashMap::new()),
            shared: None,
        }
    }

    /// As [`RateLimiter::new`], with the buckets in `pg`'s schema, shared by its replicas.
    pub fn shared(
        per_second: u32,
        burst: u32,
        clock: Arc<dyn Clock>,
        pg: cra_store::PgStore,
    ) -> Self {
        Self {
            shared: Some(pg),
            ..Self::new(per_second, burst, clock)
        }
    }

    /// Takes one request from `key`'s bucket, shared or local. `Err(seconds)` says when to retry.
    pub async fn admit(&self, key: &str) -> Result<(), u64> {
        let Some(pg) = self.shared.clone().filter(|_| self.per_second > 0.0) else {
            return self.check(key);
        };
        let (k, rate, burst) = (key.to_owned(), self.per_second, self.burst);
        let taken = tokio::task::spawn_blocking(move || pg.take_request_token(&k, rate, burst))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        match taken {
            Ok(cra_store::pg::ratelimit::Admission::Admitted) => Ok(()),
            Ok(cra_store::pg::ratelimit::Admission::Refused { retry_after }) => {
                Err(whole_seconds(retry_after))
            }
            Err(error) => {
                tracing::warn!(%error, "the shared rate limit could not be read; this replica's own applies");
                self.check(key)
            }
        }
    }

    /// Takes one request from `key`'s bucket. `Err(seconds)` says when to retry.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        if self.per_second <= 0.0 {
            return Ok(());
        }
        let now = self.clock.now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = (now - b.at).as_seconds_f64().max(0.0);
        b.tokens = (b.tokens + elapsed * self.per_second).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(whole_seconds((1.0 - b.tokens) / self.per_second))
        }
    }
}

/// A wait in seconds as `Retry-After` says it: whole, at least 1.
fn whole_seconds(wait: f64) -> u64 {
    let wait = wait.ceil();
    if wait < 1.0 { 1 } else { wait as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cra_wire::FixedClock;

    #[test]
    fn burst_then_refill_by_the_clock() {
        let clock = Arc::new(FixedClock::parse("2026-01-01T00:00:00Z").unwrap());
        let rl = RateLimiter::new(2, 3, clock.clone());
        for _ in 0..3 {
            assert!(rl.check("k").is_ok());
        }
        assert_eq!(rl.check("k"), Err(1));
        assert!(rl.check("other").is_ok(), "buckets are per key");
        clock.advance(time::Duration::milliseconds(500));
        assert!(rl.check("k").is_ok());
        assert!(rl.check("k").is_err());
    }

    #[test]
    fn zero_rate_disables() {
        let rl = RateLimiter::new(0, 0, Arc::new(cra_wire::SystemClock));
        for _ in 0..10_000 {
            assert!(rl.check("k").is_ok());
        }
    }
}
