//! The atlas catalog on redb: files by digest in `atlas_contents`, generations by number in
//! `atlas_generations` (each a JSON [`Generation`]). One process owns the file, and redb runs
//! one write transaction at a time, so a commit reads the newest generation and writes the next
//! in the same transaction; it is durable (fsynced) before it returns. Times come from the
//! store's clock.

use std::collections::BTreeMap;

use redb::{Database, ReadableTable, TableDefinition};

use super::{RedbStore, backend};
use crate::BackendError;
use crate::catalog::{
    AtlasCatalog, CatalogChange, CommitError, Generation, decode_files, encode_files,
    sorted_members,
};

const CONTENTS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("atlas_contents");
const GENERATIONS: TableDefinition<'static, u64, &[u8]> = TableDefinition::new("atlas_generations");

/// Passes this area's tables to a rewrite (`super::rewrite`).
pub(crate) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), BackendError> {
    c.copy(CONTENTS)?;
    c.copy(GENERATIONS)
}

/// Creates the catalog's tables (empty) if the file has none yet.
pub(crate) fn create_tables(db: &Database) -> Result<(), BackendError> {
    let txn = db.begin_write().map_err(backend)?;
    txn.open_table(CONTENTS).map_err(backend)?;
    txn.open_table(GENERATIONS).map_err(backend)?;
    txn.commit().map_err(backend)
}

fn decode_generation(bytes: &[u8]) -> Result<Generation, BackendError> {
    serde_json::from_slice(bytes)
        .map_err(|e| BackendError::Backend(format!("a stored generation is unreadable: {e}")))
}

impl AtlasCatalog for RedbStore {
    fn head(&self) -> Result<Option<Generation>, BackendError> {
        let txn = self.handle().begin_read().map_err(backend)?;
        let t = txn.open_table(GENERATIONS).map_err(backend)?;
        let last = t.last().map_err(backend)?;
        last.map(|(_, v)| decode_generation(v.value())).transpose()
    }

    fn last_recorded(&self) -> Result<Option<Generation>, BackendError> {
        let txn = self.handle().begin_read().map_err(backend)?;
        let t = txn.open_table(GENERATIONS).map_err(backend)?;
        for entry in t.iter().map_err(backend)?.rev() {
            let (_, v) = entry.map_err(backend)?;
            let g = decode_generation(v.value())?;
            if g.recorded {
                return Ok(Some(g));
            }
        }
        Ok(None)
    }

    fn history(&self, before: Option<u64>, limit: usize) -> Result<Vec<Generation>, BackendError> {
        let txn = self.handle().begin_read().map_err(backend)?;
        let t = txn.open_table(GENERATIONS).map_err(backend)?;
        let range = t.range(..before.unwrap_or(u64::MAX)).map_err(backend)?;
        range
            .rev()
            .take(limit)
            .map(|entry| {
                let (_, v) = entry.map_err(backend)?;
                decode_generation(v.value())
            })
            .collect()
    }

    fn mark_recorded(&self, number: u64) -> Result<bool, BackendError> {
        let txn = self.handle().begin_write().map_err(backend)?;
        let changed = {
            let mut t = txn.open_table(GENERATIONS).map_err(backend)?;
            let found = t
                .get(number)
                .map_err(backend)?
                .map(|v| decode_generation(v.value()))
                .transpose()?;
            let Some(mut g) = found else {
                return Ok(false);
            };
            if g.recorded {
                false
            } else {
                g.recorded = true;
                let bytes = serde_json::to_vec(&g).map_err(|e| {
                    BackendError::Backend(format!("cannot encode a generation: {e}"))
                })?;
                t.insert(number, bytes.as_slice()).map_err(backend)?;
                true
            }
        };
        txn.commit().map_err(backend)?;
        Ok(changed)
    }

    fn files(&self, digest: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, BackendError> {
        let txn = self.handle().begin_read().map_err(backend)?;
        let t = txn.open_table(CONTENTS).map_err(backend)?;
        let found = t.get(digest).map_err(backend)?;
        found.map(|v| decode_files(v.value())).transpose()
    }

    fn commit(&self, change: &CatalogChange<'_>) -> Result<u64, CommitError> {
        let members = sorted_members(change.members)?;
        let txn = self.handle().begin_write().map_err(backend)?;
        let newest = {
            let t = txn.open_table(GENERATIONS).map_err(backend)?;
            let last = t.last().map_err(backend)?;
            last.map(|(k, _)| k.value())
        };
        if newest != change.after {
            return Err(CommitError::Stale { newest });
        }
        {
            let mut contents = txn.open_table(CONTENTS).map_err(backend)?;
            for m in &members {
                if contents.get(m.digest.as_str()).map_err(backend)?.is_some() {
                    continue;
                }
                let files = change.files_of(m)?;
                contents
                    .insert(m.digest.as_str(), encode_files(files).as_slice())
                    .map_err(backend)?;
            }
        }
        let number = newest.unwrap_or(0) + 1;
        let generation = Generation {
            number,
            members,
            actor: change.actor.to_owned(),
            reason: change.reason.to_owned(),
            committed_at: cra_wire::clock::format_timestamp(self.config().clock.now()),
            recorded: change.recorded,
        };
        let bytes = serde_json::to_vec(&generation)
            .map_err(|e| BackendError::Backend(format!("cannot encode a generation: {e}")))?;
        txn.open_table(GENERATIONS)
            .map_err(backend)?
            .insert(number, bytes.as_slice())
            .map_err(backend)?;
        txn.commit().map_err(backend)?;
        Ok(number)
    }
}
