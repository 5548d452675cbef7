//! The atlas catalog on PostgreSQL (`migrations/0014_atlas_catalog.sql`): files in
//! `atlas_contents`, generations in `atlas_generations`. A commit inserts generation `n + 1`;
//! the primary key makes that insert the compare-and-set (a unique violation means another
//! replica committed first). The commit announces the generation on the feed channel
//! ([`super::feed::encode_generation`]) inside its transaction, so the announcement goes out
//! only if the generation exists. Commits are synchronous (the catalog is not CARP state).

use std::collections::BTreeMap;

use postgres::error::SqlState;

use super::{PgStore, pg};
use crate::BackendError;
use crate::catalog::{
    AtlasCatalog, CatalogChange, CatalogEntry, CommitError, Generation, decode_files, encode_files,
    sorted_members,
};

impl AtlasCatalog for PgStore {
    fn head(&self) -> Result<Option<Generation>, BackendError> {
        self.newest_generation("")
    }

    fn last_recorded(&self) -> Result<Option<Generation>, BackendError> {
        self.newest_generation("WHERE recorded")
    }

    fn history(&self, before: Option<u64>, limit: usize) -> Result<Vec<Generation>, BackendError> {
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        self.generations("WHERE generation < $1", &[&before], limit)
    }

    fn mark_recorded(&self, number: u64) -> Result<bool, BackendError> {
        let mut client = self.client()?;
        let n = client
            .execute(
                "UPDATE atlas_generations SET recorded = true
                 WHERE generation = $1 AND NOT recorded",
                &[&(number as i64)],
            )
            .map_err(pg)?;
        Ok(n == 1)
    }

    fn files(&self, digest: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, BackendError> {
        let mut client = self.client()?;
        let row = client
            .query_opt(
                "SELECT files FROM atlas_contents WHERE digest = $1",
                &[&digest],
            )
            .map_err(pg)?;
        row.map(|r| decode_files(r.get::<_, &[u8]>(0))).transpose()
    }

    fn commit(&self, change: &CatalogChange<'_>) -> Result<u64, CommitError> {
        let members = sorted_members(change.members)?;
        let number = change.after.unwrap_or(0) + 1;
        let members_json = serde_json::to_string(&members)
            .map_err(|e| BackendError::Backend(format!("cannot encode a generation: {e}")))?;
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(pg)?;
        for m in &members {
            let stored = tx
                .query_opt(
                    "SELECT 1 FROM atlas_contents WHERE digest = $1",
                    &[&m.digest],
                )
                .map_err(pg)?
                .is_some();
            if stored {
                continue;
            }
            let files = change.files_of(m)?;
            tx.execute(
                "INSERT INTO atlas_contents (digest, atlas_id, version, files)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING",
                &[&m.digest, &m.atlas_id, &m.version, &encode_files(files)],
            )
            .map_err(pg)?;
        }
        let inserted = tx.execute(
            "INSERT INTO atlas_generations (generation, members, actor, reason, recorded)
             VALUES ($1, $2::text::jsonb, $3, $4, $5)",
            &[
                &(number as i64),
                &members_json,
                &change.actor,
                &change.reason,
                &change.recorded,
            ],
        );
        match inserted {
            Ok(_) => {}
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                drop(tx);
                return Err(CommitError::Stale {
                    newest: self.head()?.map(|g| g.number),
                });
            }
            Err(e) => return Err(pg(e).into()),
        }
        let announcement = super::feed::encode_generation(self.origin(), number);
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&super::feed::channel(self.schema()), &announcement],
        )
        .map_err(pg)?;
        tx.commit().map_err(pg)?;
        Ok(number)
    }
}

impl PgStore {
    /// The newest generation passing `filter` (a `WHERE` clause, or empty).
    fn newest_generation(&self, filter: &str) -> Result<Option<Generation>, BackendError> {
        Ok(self.generations(filter, &[], 1)?.pop())
    }

    /// Up to `limit` generations matching `filter` (a `WHERE` clause over `params`), newest first.
    fn generations(
        &self,
        filter: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
        limit: usize,
    ) -> Result<Vec<Generation>, BackendError> {
        let mut client = self.client()?;
        let sql = format!(
            "SELECT generation, members::text, actor, reason, recorded,
                    to_char(committed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
             FROM atlas_generations {filter} ORDER BY generation DESC LIMIT {limit}"
        );
        let rows = client.query(&sql, params).map_err(pg)?;
        rows.iter()
            .map(|row| {
                let members: Vec<CatalogEntry> = serde_json::from_str(row.get::<_, &str>(1))
                    .map_err(|e| {
                        BackendError::Backend(format!("a stored generation is unreadable: {e}"))
                    })?;
                Ok(Generation {
                    number: row.get::<_, i64>(0).unsigned_abs(),
                    members,
                    actor: row.get(2),
                    reason: row.get(3),
                    recorded: row.get(4),
                    committed_at: row.get(5),
                })
            })
            .collect()
    }
}
