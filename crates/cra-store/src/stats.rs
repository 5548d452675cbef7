//! What the committers measure for `/metrics`: how long each batch's transaction took, and how
//! many appends it carried. Group commit lives or dies by these two: a batch that takes long is
//! a slow disk or database, and batches of one under load mean appenders are not sharing
//! flushes.
//!
//! Each committer adds to [`CommitStats`] once per batch, not per append, with a few relaxed
//! atomic increments: nothing on the appenders' path waits for it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds, in seconds, of the commit latency buckets (`+Inf` is the count).
pub const COMMIT_SECONDS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Upper bounds of the batch size buckets, in appends (a batch holds at most
/// [`crate::collector::MAX_BATCH_APPENDS`]).
pub const BATCH_APPENDS: [f64; 13] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// A histogram whose observations only ever add: a bucket per bound (not cumulative), the sum in
/// millionths and the count.
#[derive(Debug)]
struct Buckets<const N: usize> {
    bounds: &'static [f64; N],
    counts: [AtomicU64; N],
    sum_millionths: AtomicU64,
    count: AtomicU64,
}

impl<const N: usize> Buckets<N> {
    fn new(bounds: &'static [f64; N]) -> Self {
        Self {
            bounds,
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_millionths: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: f64) {
        if let Some(at) = self.bounds.iter().position(|b| value <= *b) {
            self.counts[at].fetch_add(1, Ordering::Relaxed);
        }
        // `as` saturates: no commit lasts beyond u64 millionths.
        let millionths = (value * 1e6).round() as u64;
        self.sum_millionths.fetch_add(millionths, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Histogram {
        let mut running = 0;
        let cumulative = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(bound, n)| {
                running += n.load(Ordering::Relaxed);
                (*bound, running)
            })
            .collect();
        let sum = self.sum_millionths.load(Ordering::Relaxed) as f64 / 1e6;
        Histogram {
            buckets: cumulative,
            sum,
            count: self.count.load(Ordering::Relaxed).max(running),
        }
    }
}

/// A histogram as Prometheus exposes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Each bucket's upper bound and the observations at or under it (cumulative).
    pub buckets: Vec<(f64, u64)>,
    /// The observations summed.
    pub sum: f64,
    /// How many observations (the `+Inf` bucket).
    pub count: u64,
}

/// The committers' measurements, shared by every committer of a store.
#[derive(Debug)]
pub struct CommitStats {
    seconds: Buckets<{ COMMIT_SECONDS.len() }>,
    appends: Buckets<{ BATCH_APPENDS.len() }>,
}

impl Default for CommitStats {
    fn default() -> Self {
        Self {
            seconds: Buckets::new(&COMMIT_SECONDS),
            appends: Buckets::new(&BATCH_APPENDS),
        }
    }
}

impl CommitStats {
    /// Records one batch of `appends` whose commit took `took` (answered or failed alike).
    pub fn record(&self, appends: usize, took: std::time::Duration) {
        self.seconds.observe(took.as_secs_f64());
        self.appends.observe(appends as f64);
    }

    /// The commit latency histogram, in seconds.
    pub fn commit_seconds(&self) -> Histogram {
        self.seconds.snapshot()
    }

    /// The batch size histogram, in appends.
    pub fn batch_appends(&self) -> Histogram {
        self.appends.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_fall_in_cumulative_buckets() {
        let stats = CommitStats::default();
        stats.record(1, std::time::Duration::from_micros(800));
        stats.record(3, std::time::Duration::from_millis(20));
        stats.record(5000, std::time::Duration::from_secs(9));
        let seconds = stats.commit_seconds();
        assert_eq!(seconds.count, 3);
        assert_eq!(seconds.buckets[0], (0.0005, 0));
        assert_eq!(seconds.buckets[1], (0.001, 1));
        assert_eq!(seconds.buckets[5], (0.025, 2));
        assert_eq!(seconds.buckets.last(), Some(&(2.5, 2)));
        assert!((seconds.sum - 9.0208).abs() < 1e-9, "{}", seconds.sum);
        let appends = stats.batch_appends();
        assert_eq!(appends.buckets[0], (1.0, 1));
        assert_eq!(appends.buckets[2], (4.0, 2));
        assert_eq!((appends.count, appends.sum), (3, 5004.0));
    }
}
