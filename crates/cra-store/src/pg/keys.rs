//! Storage keys in PostgreSQL: the `storage_keys` table (migration 0018) registering each key
//! that encrypted the deployment's records, checked by every replica as it starts
//! ([`crate::encryption::Encryption::admit`]), and re-encryption of every record with the
//! current key after a rotation ([`PgStore::reencrypt`]), which can run while replicas serve.

use super::{PgStore, Pool, PooledClient};
use crate::encryption::Encryption;
use crate::{BackendError, ReencryptReport};

/// Rows re-encrypted per statement batch.
const CHUNK: i64 = 256;

/// The tables holding encrypted bodies, all in a `body` column.
const TABLES: [&str; 12] = [
    "trace_events",
    "carp_sessions",
    "carp_resolutions",
    "carp_executions",
    "carp_approvals",
    "carp_execution_leases",
    "relay_projects",
    "relay_packages",
    "relay_reviews",
    "relay_facts",
    "relay_sessions",
    "relay_outbox",
];

/// Relay's full-text search chunks: plaintext, which a store with a key does not write (it
/// searches in memory, `crate::relay::search::SyncedIndex`). Re-encryption deletes those written
/// before the key.
const CHUNKS: &str = "relay_chunks";

fn be(e: impl std::fmt::Display) -> BackendError {
    BackendError::Backend(format!("postgres: {e}"))
}

/// Checks the registered keys against `enc` and registers its current key when new.
pub(super) fn admit(pool: &Pool, enc: &Encryption) -> Result<(), BackendError> {
    let mut c = pool.get()?;
    let rows = c
        .query("SELECT key_id, canary FROM storage_keys", &[])
        .map_err(be)?;
    let registered: Vec<(String, Vec<u8>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    if let Some((id, canary)) = enc.admit(&registered)? {
        c.execute(
            "INSERT INTO storage_keys (key_id, canary) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&id, &canary],
        )
        .map_err(be)?;
    }
    Ok(())
}

impl PgStore {
    /// Encrypts every event body, CARP record and Relay record not encrypted with the current
    /// key (plaintext, or a retired key's), a batch of rows per transaction, deletes Relay's
    /// plaintext search chunks (`relay_chunks`), then forgets every other registered key. Safe
    /// while replicas serve: a row changed meanwhile is left to the next pass, and every
    /// replica must already know the current key (rotate in the order
    /// `specs/storage-encryption.md` gives). `progress` is told each table and its count so far.
    pub fn reencrypt(
        &self,
        progress: &mut dyn FnMut(&str, u64),
    ) -> Result<ReencryptReport, BackendError> {
        let enc = &self.config().encryption;
        let (Some(current), Some(pattern)) = (enc.current(), enc.current_text_pattern()) else {
            return Err(BackendError::StorageKey(
                "re-encryption needs a current storage key; configure one".into(),
            ));
        };
        let mut report = ReencryptReport::default();
        let mut c = self.client()?;
        for table in TABLES {
            let mut done = 0;
            // Passes until one finds nothing left: a row a replica changed between this reading
            // and the rewrite is met again by the next pass.
            loop {
                let (stale, rewritten) =
                    reencrypt_pass(&mut c, enc, table, &pattern, done, progress)?;
                done += rewritten;
                if stale == 0 {
                    break;
                }
            }
            report.tables.push((table.to_owned(), done));
        }
        // A derived index, not records: deleted, and not counted among the records rewritten.
        c.execute(&format!("DELETE FROM {CHUNKS}"), &[])
            .map_err(be)?;
        let rows = c
            .query(
                "DELETE FROM storage_keys WHERE key_id <> $1 RETURNING key_id",
                &[&current.to_string()],
            )
            .map_err(be)?;
        report.retired = rows.iter().map(|r| r.get(0)).collect();
        Ok(report)
    }
}

/// One pass over `table` in physical order, rewriting each row not encrypted with the current
/// key (`pattern` matches those that are). Answers the rows found stale and those rewritten.
fn reencrypt_pass(
    c: &mut PooledClient<'_>,
    enc: &Encryption,
    table: &str,
    pattern: &str,
    before: u64,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<(u64, u64), BackendError> {
    let (mut stale, mut rewritten) = (0, 0);
    // Item numbers start at 1: every row's ctid is above this one.
    let mut after = "(0,0)".to_owned();
    let select = format!(
        "SELECT ctid::text, body FROM {table}
         WHERE ctid > $1::text::tid AND body NOT LIKE $2 ORDER BY ctid LIMIT $3"
    );
    let update = format!("UPDATE {table} SET body = $1 WHERE ctid = $2::text::tid AND body = $3");
    loop {
        let rows = c.query(&select, &[&after, &pattern, &CHUNK]).map_err(be)?;
        let Some(last) = rows.last() else {
            return Ok((stale, rewritten));
        };
        after = last.get(0);
        stale += rows.len() as u64;
        let mut tx = c.transaction().map_err(be)?;
        for row in &rows {
            let (at, stored): (&str, &str) = (row.get(0), row.get(1));
            if let Some(new) = enc.reencrypt_text(table, stored)? {
                rewritten += tx.execute(&update, &[&new, &at, &stored]).map_err(be)?;
            }
        }
        tx.commit().map_err(be)?;
        progress(table, before + rewritten);
    }
}
