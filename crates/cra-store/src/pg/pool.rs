//! A small pool of synchronous PostgreSQL connections, each with its `search_path` set to the
//! store's schema and `synchronous_commit` on (a commit returns only once its WAL is flushed) or,
//! for a pool of deferred state writes, off (a later synchronous commit flushes the WAL past it).

use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex};

use postgres::{Client, NoTls};

use crate::BackendError;

/// Up to `max` connections, opened on demand and reused.
pub struct Pool {
    url: String,
    schema: String,
    max: usize,
    synchronous_commit: bool,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    idle: Vec<Client>,
    open: usize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("schema", &self.schema)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub(crate) fn new(url: &str, schema: &str, max: usize, synchronous_commit: bool) -> Self {
        Self {
            url: url.to_owned(),
            schema: schema.to_owned(),
            max: max.max(1),
            synchronous_commit,
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// The most connections this pool opens.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A connection, waiting for one to come back when `max` are in use.
    pub fn get(&self) -> Result<PooledClient<'_>, BackendError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(client) = state.idle.pop() {
                return Ok(PooledClient {
                    pool: self,
                    client: Some(client),
                });
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                return match self.connect() {
                    Ok(client) => Ok(PooledClient {
                        pool: self,
                        client: Some(client),
                    }),
                    Err(e) => {
                        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                        state.open -= 1;
                        self.freed.notify_one();
                        Err(e)
                    }
                };
            }
            state = self.freed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn connect(&self) -> Result<Client, BackendError> {
        let mut client =
            Client::connect(&self.url, NoTls).map_err(|e| BackendError::Connect(e.to_string()))?;
        client
            .batch_execute(&format!(
                "SET search_path TO {}; SET synchronous_commit TO {}",
                quote_ident(&self.schema),
                if self.synchronous_commit { "on" } else { "off" }
            ))
            .map_err(|e| BackendError::Connect(e.to_string()))?;
        Ok(client)
    }

    fn give_back(&self, client: Client) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if client.is_closed() {
            state.open -= 1;
        } else {
            state.idle.push(client);
        }
        self.freed.notify_one();
    }
}

/// A connection borrowed from a [`Pool`]; it goes back when dropped (a closed one is discarded).
pub struct PooledClient<'a> {
    pool: &'a Pool,
    client: Option<Client>,
}

impl std::fmt::Debug for PooledClient<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledClient").finish_non_exhaustive()
    }
}

impl Deref for PooledClient<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        // Invariant: `client` is `Some` until `drop`.
        self.client.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl DerefMut for PooledClient<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for PooledClient<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.pool.give_back(client);
        }
    }
}

/// `name` as a double-quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
