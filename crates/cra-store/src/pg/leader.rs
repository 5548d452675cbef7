//! One leader among the replicas sharing a schema, for periodic work (retention today, checkpoint
//! signing next): whoever holds a session-level advisory lock on a connection of its own.
//!
//! [`PgStore::lead`] tries the lock once before it returns (so the first replica to start knows
//! at once that it leads), then a thread waits for it with a blocking `pg_advisory_lock`: the
//! wait ends the moment the holder's connection ends (its process stopped or died, or its
//! network broke), with no polling. While it leads, the thread asks its connection `SELECT 1`
//! every [`HOLD_CHECK`]; a failure means the lock may be gone with the connection, so it stops
//! leading and waits again. Each change is reported to the caller.
//!
//! Leadership is for efficiency, not safety: a lock lost with its connection may be taken by
//! another replica before the old leader's next check notices (at most [`HOLD_CHECK`]), so every
//! job must stay correct when two replicas run it at once (retention's removal checks the head it
//! recorded).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::{CancelToken, Client, NoTls};

use super::{PgStore, pause};
use crate::BackendError;

/// How often a leader checks that its lock's connection is alive.
pub const HOLD_CHECK: Duration = Duration::from_secs(1);

/// Longest wait between two attempts to reconnect.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The advisory lock key of `job` on `schema` (`super::name_key`), so each schema (and each
/// job) has its own leader; migrations lock other keys (transaction-scoped, per schema).
pub fn lock_key(schema: &str, job: &str) -> i64 {
    super::name_key(&format!("cra-store leader {schema}\0{job}"))
}

/// A replica's bid for leadership; dropping it gives leadership up (its connection closes) and
/// waits for its thread.
pub struct Leadership {
    stop: Arc<AtomicBool>,
    /// Cancels a `pg_advisory_lock` wait in progress, so a drop does not wait for the leader.
    cancel: Arc<Mutex<Option<CancelToken>>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership").finish_non_exhaustive()
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let token = self.cancel.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = token {
            let _ = t.cancel_query(NoTls);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl PgStore {
    /// Bids for the leadership of `job` among the replicas on this schema. `on_change(true)` is
    /// called when this replica becomes the leader (before this returns, when the lock was free),
    /// `on_change(false)` when it stops being one; both on the bid's thread after the first.
    pub fn lead<F>(&self, job: &str, mut on_change: F) -> Result<Leadership, BackendError>
    where
        F: FnMut(bool) + Send + 'static,
    {
        let key = lock_key(self.schema(), job);
        let url = self.inner.url.clone();
        let mut client = connect(&url)?;
        let leading = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .map_err(|e| BackendError::Connect(super::error_text(&e)))?
            .get::<_, bool>(0);
        if leading {
            on_change(true);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(Mutex::new(None));
        let bid = Bid {
            url,
            key,
            stop: stop.clone(),
            cancel: cancel.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("cra-pg-leader".into())
            .spawn(move || bid.run(client, leading, &mut on_change))
            .map_err(|e| BackendError::Connect(format!("cannot start the leader thread: {e}")))?;
        Ok(Leadership {
            stop,
            cancel,
            thread: Some(thread),
        })
    }
}

fn connect(url: &str) -> Result<Client, BackendError> {
    Client::connect(url, NoTls).map_err(|e| BackendError::Connect(e.to_string()))
}

struct Bid {
    url: String,
    key: i64,
    stop: Arc<AtomicBool>,
    cancel: Arc<Mutex<Option<CancelToken>>>,
}

impl Bid {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Leads while the lock's connection lives, waits for the lock otherwise, until stopped.
    fn run<F: FnMut(bool)>(&self, first: Client, mut leading: bool, on_change: &mut F) {
        let mut client = Some(first);
        let mut backoff = Duration::from_millis(100);
        while !self.stopped() {
            let mut c = match client.take() {
                Some(c) => c,
                None => match connect(&self.url) {
                    Ok(c) => c,
                    Err(_) => {
                        if pause(&self.stop, backoff) {
                            return;
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                },
            };
            backoff = Duration::from_millis(100);
            if !leading {
                leading = self.wait_for_lock(&mut c);
                if !leading {
                    continue;
                }
                on_change(true);
            }
            // Leading: hold the connection (and so the lock) while it answers.
            while !pause(&self.stop, HOLD_CHECK) {
                if c.simple_query("SELECT 1").is_err() {
                    break;
                }
            }
            leading = false;
            on_change(false);
        }
    }

    /// Blocks in `pg_advisory_lock` until this connection holds the lock (`true`), or the wait
    /// failed or was cancelled (`false`).
    fn wait_for_lock(&self, c: &mut Client) -> bool {
        *self.cancel.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.cancel_token());
        if self.stopped() {
            return false;
        }
        let got = c
            .query_one("SELECT pg_advisory_lock($1)", &[&self.key])
            .is_ok();
        *self.cancel.lock().unwrap_or_else(|p| p.into_inner()) = None;
        got && !self.stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_schema_and_job_has_its_own_lock() {
        assert_ne!(lock_key("cra", "periodic"), lock_key("cra2", "periodic"));
        assert_ne!(lock_key("cra", "periodic"), lock_key("cra", "other"));
        assert_ne!(lock_key("ab", "c"), lock_key("a", "bc"));
        assert_eq!(lock_key("cra", "periodic"), lock_key("cra", "periodic"));
    }
}
