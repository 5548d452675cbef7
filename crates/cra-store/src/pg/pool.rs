//! A small pool of synchronous PostgreSQL connections, each with its `search_path` set to the
//! store's schema and `synchronous_commit` on (a commit returns only once its WAL is flushed) or,
//! for a pool of deferred state writes, off (a later synchronous commit flushes the WAL past it).
//!
//! Each connection keeps the statements run through [`PooledClient`]'s own `query`, `query_one`,
//! `query_opt` and `execute` prepared (up to [`CACHED_STATEMENTS`]): a statement is parsed and
//! planned once per connection, and each later use is one round trip instead of two (prepare,
//! then execute). Statements inside a transaction are prepared for each use, as before.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex};

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};

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

/// Statements one connection keeps prepared at most; any other is prepared for each use (so a
/// statement whose text varies cannot grow the cache without bound).
pub(crate) const CACHED_STATEMENTS: usize = 64;

struct State {
    idle: Vec<Conn>,
    open: usize,
}

/// An open connection and the statements prepared on it, by their text.
struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
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
                        client: Some(Conn {
                            client,
                            statements: HashMap::new(),
                        }),
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

    fn give_back(&self, client: Conn) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if client.client.is_closed() {
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
    client: Option<Conn>,
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
        &self
            .client
            .as_ref()
            .unwrap_or_else(|| unreachable!())
            .client
    }
}

impl DerefMut for PooledClient<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.conn().client
    }
}

/// Parameters of a statement.
type Params<'p> = [&'p (dyn ToSql + Sync)];

impl PooledClient<'_> {
    fn conn(&mut self) -> &mut Conn {
        self.client.as_mut().unwrap_or_else(|| unreachable!())
    }

    /// `sql` prepared on this connection: from its cache, or prepared now (and kept while the
    /// cache has room).
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        let conn = self.conn();
        if let Some(s) = conn.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = conn.client.prepare(sql)?;
        if conn.statements.len() < CACHED_STATEMENTS {
            conn.statements.insert(sql.to_owned(), s.clone());
        }
        Ok(s)
    }

    /// [`Client::query`] with `sql` prepared once per connection.
    pub fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, postgres::Error> {
        let st = self.statement(sql)?;
        self.conn().client.query(&st, params)
    }

    /// [`Client::query_one`] with `sql` prepared once per connection.
    pub fn query_one(&mut self, sql: &str, params: &Params<'_>) -> Result<Row, postgres::Error> {
        let st = self.statement(sql)?;
        self.conn().client.query_one(&st, params)
    }

    /// [`Client::query_opt`] with `sql` prepared once per connection.
    pub fn query_opt(
        &mut self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, postgres::Error> {
        let st = self.statement(sql)?;
        self.conn().client.query_opt(&st, params)
    }

    /// [`Client::execute`] with `sql` prepared once per connection.
    pub fn execute(&mut self, sql: &str, params: &Params<'_>) -> Result<u64, postgres::Error> {
        let st = self.statement(sql)?;
        self.conn().client.execute(&st, params)
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
