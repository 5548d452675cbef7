//! The HTTP rate limiter's buckets in the database (`migrations/0013_http_rate_limits.sql`), so
//! replicas sharing a schema enforce one limit between them. Each request is one call of the
//! migration's `http_rate_take`: the bucket's row is created full, locked, refilled for the time
//! elapsed at the database's `clock_timestamp()` (one clock for every replica, whatever their
//! own clocks say), then a token is taken if there is one. The row lock orders concurrent
//! requests for one key. Buckets are
//! written with `synchronous_commit` off when the store defers state writes: a crash may give a
//! key back a few tokens, never take an acknowledged write.

use super::PgStore;
use crate::BackendError;

/// One request's answer from its bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// A token was taken.
    Admitted,
    /// None left; one will be in this many seconds.
    Refused {
        /// Seconds until a token is back (more than 0).
        retry_after: f64,
    },
}

impl PgStore {
    /// Takes one token from `key`'s bucket, which holds at most `burst` and refills at
    /// `per_second` (more than 0).
    pub fn take_request_token(
        &self,
        key: &str,
        per_second: f64,
        burst: f64,
    ) -> Result<Admission, BackendError> {
        let mut client = self.state_client()?;
        let row = client
            .query_one(
                "SELECT admitted, tokens FROM http_rate_take($1, $2, $3)",
                &[&key, &per_second, &burst],
            )
            .map_err(|e| BackendError::Connect(super::error_text(&e)))?;
        let (admitted, tokens): (bool, f64) = (row.get(0), row.get(1));
        Ok(if admitted {
            Admission::Admitted
        } else {
            Admission::Refused {
                retry_after: ((1.0 - tokens) / per_second).max(f64::MIN_POSITIVE),
            }
        })
    }
}
