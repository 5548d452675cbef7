//! One clock for every replica: [`DatabaseClock`] reads the time from the database's clock, so
//! every time a replica records (TRACE timestamps, Relay recorded times, session, approval and
//! lease times, retention cut-offs) agrees with the other replicas' however far their own clocks
//! are off.
//!
//! Asking the database on every read would add a round trip to every event, so the clock keeps
//! an anchor instead: one sample of `clock_timestamp()`, paired with the local clock's reading
//! at the middle of that round trip. The time is then the sample plus what the local clock says
//! has elapsed since. Its error is at most half the sample's round trip plus the local clock's
//! drift since the sample; the server samples again every few seconds
//! ([`DatabaseClock::sync`]) and keeps the old anchor when the database does not answer.
//!
//! Invariant: once synchronized, the offset from the local clock changes only by a new sample;
//! a local clock set forward or back moves this clock until the next sample, never further.
//! Times that decide a limit inside one transaction (CARP counters, the HTTP rate limiter) do not
//! use this clock: they read `clock_timestamp()` under their locks.

use std::sync::{Arc, RwLock};

use cra_wire::Clock;
use time::{Duration, OffsetDateTime};

use super::{PgStore, error_text};
use crate::BackendError;

/// A sample whose round trip took longer than this does not replace an anchor (a loaded
/// database answers late, and the error is half the round trip); the first sample is always
/// taken.
pub const MAX_SAMPLE_ROUND_TRIP: Duration = Duration::milliseconds(100);

/// The database's clock, read through the local clock's elapsed time since the last sample.
#[derive(Debug)]
pub struct DatabaseClock {
    local: Arc<dyn Clock>,
    anchor: RwLock<Option<Anchor>>,
}

/// One sample: the database's instant, and the local clock's at the middle of the round trip.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    database: OffsetDateTime,
    local: OffsetDateTime,
}

/// What a sample found ([`DatabaseClock::sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The database's clock minus the local clock.
    pub offset: Duration,
    /// The sample's round trip (twice its largest error).
    pub round_trip: Duration,
    /// Whether the sample became the anchor (see [`MAX_SAMPLE_ROUND_TRIP`]).
    pub taken: bool,
}

impl DatabaseClock {
    /// A clock reading `local` until the first [`DatabaseClock::sync`].
    pub fn new(local: Arc<dyn Clock>) -> Self {
        Self {
            local,
            anchor: RwLock::new(None),
        }
    }

    /// Samples the database's clock through `store` and anchors this clock on it.
    pub fn sync(&self, store: &PgStore) -> Result<Sample, BackendError> {
        let mut client = store.client()?;
        let before = self.local.now();
        let row = client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
                &[],
            )
            .map_err(|e| BackendError::Connect(error_text(&e)))?;
        let after = self.local.now();
        let micros: i64 = row.get(0);
        let database = OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000)
            .map_err(|e| {
                BackendError::Backend(format!(
                    "the database's clock reads {micros} µs, not an instant: {e}"
                ))
            })?;
        Ok(self.anchor_on(database, before, after))
    }

    /// Anchors on a database instant read between the local instants `before` and `after`.
    fn anchor_on(
        &self,
        database: OffsetDateTime,
        before: OffsetDateTime,
        after: OffsetDateTime,
    ) -> Sample {
        let round_trip = (after - before).max(Duration::ZERO);
        let local = before + round_trip / 2;
        let mut anchor = self.anchor.write().unwrap_or_else(|p| p.into_inner());
        let taken = anchor.is_none() || round_trip <= MAX_SAMPLE_ROUND_TRIP;
        if taken {
            *anchor = Some(Anchor { database, local });
        }
        Sample {
            offset: database - local,
            round_trip,
            taken,
        }
    }

    /// The database's clock minus the local clock, by the anchor (`None` before the first sample).
    pub fn offset(&self) -> Option<Duration> {
        let anchor = *self.anchor.read().unwrap_or_else(|p| p.into_inner());
        anchor.map(|a| a.database - a.local)
    }
}

impl Clock for DatabaseClock {
    fn now(&self) -> OffsetDateTime {
        let local = self.local.now();
        match *self.anchor.read().unwrap_or_else(|p| p.into_inner()) {
            Some(a) => a.database + (local - a.local),
            None => local,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cra_wire::FixedClock;

    fn at(s: &str) -> OffsetDateTime {
        cra_wire::clock::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn before_a_sample_it_reads_the_local_clock() {
        let local = Arc::new(FixedClock::parse("2026-01-01T00:00:00Z").unwrap());
        let clock = DatabaseClock::new(local);
        assert_eq!(clock.now(), at("2026-01-01T00:00:00Z"));
        assert_eq!(clock.offset(), None);
    }

    #[test]
    fn a_skewed_local_clock_reads_the_database_s_time_and_elapses_locally() {
        // The local clock is an hour ahead; the sample's round trip is 2 ms.
        let local = Arc::new(FixedClock::parse("2026-01-01T01:00:00.002Z").unwrap());
        let clock = DatabaseClock::new(local.clone());
        let sample = clock.anchor_on(
            at("2026-01-01T00:00:00.001Z"),
            at("2026-01-01T01:00:00Z"),
            at("2026-01-01T01:00:00.002Z"),
        );
        assert!(sample.taken);
        assert_eq!(sample.offset, Duration::hours(-1));
        assert_eq!(sample.round_trip, Duration::milliseconds(2));
        assert_eq!(clock.now(), at("2026-01-01T00:00:00.002Z"));
        local.advance(Duration::seconds(5));
        assert_eq!(clock.now(), at("2026-01-01T00:00:05.002Z"));
    }

    #[test]
    fn a_slow_sample_keeps_the_anchor_but_the_first_is_always_taken() {
        let local = Arc::new(FixedClock::parse("2026-01-01T00:00:00Z").unwrap());
        let clock = DatabaseClock::new(local);
        let slow = Duration::milliseconds(500);
        let first = clock.anchor_on(
            at("2026-01-01T00:00:10Z"),
            at("2026-01-01T00:00:00Z"),
            at("2026-01-01T00:00:00Z") + slow,
        );
        assert!(first.taken);
        let offset = clock.offset();
        let second = clock.anchor_on(
            at("2026-01-01T00:00:20Z"),
            at("2026-01-01T00:00:00Z"),
            at("2026-01-01T00:00:00Z") + slow,
        );
        assert!(!second.taken);
        assert_eq!(clock.offset(), offset);
    }
}
