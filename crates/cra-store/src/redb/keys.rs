//! Storage keys in the embedded backend: the `storage_keys` table registering each key that
//! encrypted records here (id -> canary), checked when the store opens
//! ([`crate::encryption::Encryption::admit`]), and re-encryption of every record with the
//! current key after a rotation ([`RedbStore::reencrypt`]).

use ::redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

use super::{RedbStore, backend as be};
use crate::encryption::Encryption;
use crate::{BackendError, ReencryptReport};

const STORAGE_KEYS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new(crate::encryption::REGISTRY);

/// Records re-encrypted per write transaction.
const CHUNK: usize = 256;

/// Checks the registered keys against `enc` and registers its current key when new.
pub(super) fn admit(db: &Database, enc: &Encryption) -> Result<(), BackendError> {
    let txn = db.begin_write().map_err(be)?;
    {
        let mut t = txn.open_table(STORAGE_KEYS).map_err(be)?;
        let mut registered = Vec::new();
        for entry in t.iter().map_err(be)? {
            let (id, canary) = entry.map_err(be)?;
            registered.push((id.value().to_owned(), canary.value().to_vec()));
        }
        if let Some((id, canary)) = enc.admit(&registered)? {
            t.insert(id.as_str(), canary.as_slice()).map_err(be)?;
        }
    }
    txn.commit().map_err(be)
}

impl RedbStore {
    /// Encrypts every event record and CARP record that is not encrypted with the current key
    /// (plaintext, or a retired key's), then forgets every other registered key, so that the
    /// retired keys can be removed from the configuration. `progress` is told each table's name
    /// and the records rewritten in it so far. Refused without a current key.
    pub fn reencrypt(
        &self,
        progress: &mut dyn FnMut(&str, u64),
    ) -> Result<ReencryptReport, BackendError> {
        let enc = &self.config().encryption;
        let Some(current) = enc.current() else {
            return Err(BackendError::StorageKey(
                "re-encryption needs a current storage key; configure one".into(),
            ));
        };
        let mut report = ReencryptReport::default();
        let n = self.reencrypt_table::<(String, u64)>(enc, super::trace::EVENTS, progress)?;
        report
            .tables
            .push((super::trace::EVENTS.name().to_owned(), n));
        for table in [
            super::carp::SESSIONS,
            super::carp::RESOLUTIONS,
            super::carp::EXECUTIONS,
            super::carp::APPROVALS,
            super::carp::LEASES,
        ] {
            let n = self.reencrypt_table::<String>(enc, table, progress)?;
            report.tables.push((table.name().to_owned(), n));
        }
        let txn = self.database().begin_write().map_err(be)?;
        {
            let mut t = txn.open_table(STORAGE_KEYS).map_err(be)?;
            let current = current.to_string();
            let retired: Vec<String> = t
                .iter()
                .map_err(be)?
                .filter_map(Result::ok)
                .map(|(id, _)| id.value().to_owned())
                .filter(|id| *id != current)
                .collect();
            for id in &retired {
                t.remove(id.as_str()).map_err(be)?;
            }
            report.retired = retired;
        }
        txn.commit().map_err(be)?;
        Ok(report)
    }

    /// Rewrites each record of `table` not encrypted with the current key, `CHUNK` per write
    /// transaction; answers how many.
    fn reencrypt_table<O: OwnedKey>(
        &self,
        enc: &Encryption,
        table: TableDefinition<'static, O::Key, &'static [u8]>,
        progress: &mut dyn FnMut(&str, u64),
    ) -> Result<u64, BackendError> {
        let stale: Vec<O> = {
            let txn = self.database().begin_read().map_err(be)?;
            let t = txn.open_table(table).map_err(be)?;
            let mut out = Vec::new();
            for entry in t.iter().map_err(be)? {
                let (k, v) = entry.map_err(be)?;
                if !enc.is_current(v.value()) {
                    out.push(O::own(k.value()));
                }
            }
            out
        };
        let mut done = 0;
        for chunk in stale.chunks(CHUNK) {
            let txn = self.database().begin_write().map_err(be)?;
            {
                let mut t = txn.open_table(table).map_err(be)?;
                for key in chunk {
                    let found = t.get(key.key()).map_err(be)?.map(|v| v.value().to_vec());
                    let Some(stored) = found else { continue };
                    if let Some(new) = enc.reencrypt(table.name(), &stored)? {
                        t.insert(key.key(), new.as_slice()).map_err(be)?;
                        done += 1;
                    }
                }
            }
            txn.commit().map_err(be)?;
            progress(table.name(), done);
        }
        Ok(done)
    }
}

/// A table's key kept between the read that finds a stale record and the write that replaces it.
trait OwnedKey: Sized {
    /// The table's key type.
    type Key: redb::Key + 'static;
    /// The key as read.
    fn own(key: <Self::Key as redb::Value>::SelfType<'_>) -> Self;
    /// The key to look up again.
    fn key(&self) -> <Self::Key as redb::Value>::SelfType<'_>;
}

impl OwnedKey for String {
    type Key = &'static str;
    fn own(key: &str) -> Self {
        key.to_owned()
    }
    fn key(&self) -> &str {
        self
    }
}

impl OwnedKey for (String, u64) {
    type Key = (&'static str, u64);
    fn own((session, first): (&str, u64)) -> Self {
        (session.to_owned(), first)
    }
    fn key(&self) -> (&str, u64) {
        (&self.0, self.1)
    }
}
