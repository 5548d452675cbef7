//! The one integration-test binary of `cra-store`: the backend-agnostic suite (run against redb
//! and, when `CRA_TEST_POSTGRES_URL` is set, PostgreSQL), crash recovery, retention and the
//! backend-specific checks.

// Test helpers outside `#[test]` functions fail loudly too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod backends;
mod backup;
mod carp;
mod catalog;
mod chain;
mod concurrency;
mod crash;
mod encryption;
mod relay;
mod retention;
mod specific;
mod state_log;
mod tlog;
mod upgrade;
