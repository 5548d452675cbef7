//! Storage keys in the embedded backend: the `storage_keys` table registering each key that
//! encrypted records here (id -> canary), checked when the store opens
//! ([`crate::encryption::Encryption::admit`]), and re-encryption of every record with the
//! current key after a rotation ([`RedbStore::reencrypt`]): TRACE event records, CARP records,
//! and Relay's records and outbox (`crate::relay::redb`).

use ::redb::{Database, ReadableTable, TableDefinition, TableError, TableHandle};

use super::{RedbStore, backend as be};
use crate::encryption::{Encryption, EncryptionError, KeyId};
use crate::relay::redb as relay;
use crate::{BackendError, ReencryptReport};

const STORAGE_KEYS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new(crate::encryption::REGISTRY);

/// Records re-encrypted per write transaction.
const CHUNK: usize = 256;

/// Passes this area's table to a rewrite (`super::rewrite`).
pub(super) fn copy_tables(c: &mut super::rewrite::Copier<'_>) -> Result<(), BackendError> {
    c.copy(STORAGE_KEYS)
}

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
    /// Encrypts every event record, CARP record and Relay record that is not encrypted with the
    /// current key (plaintext, or a retired key's), then forgets every other registered key, so
    /// that the retired keys can be removed from the configuration. `progress` is told each
    /// table's name and the records rewritten in it so far. Refused without a current key.
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
        Ok(ReencryptReport {
            tables: self.reencrypt_tables(enc, progress)?,
            retired: self.forget_keys_but(current)?,
        })
    }

    /// Re-encrypts each table holding records; answers each table's name and count.
    fn reencrypt_tables(
        &self,
        enc: &Encryption,
        progress: &mut dyn FnMut(&str, u64),
    ) -> Result<Vec<(String, u64)>, BackendError> {
        let mut tables = Vec::new();
        let mut done = |name: &str, n: u64| tables.push((name.to_owned(), n));
        let events = super::trace::EVENTS;
        done(
            events.name(),
            self.reencrypt_table::<(String, u64), _>(enc, events, progress)?,
        );
        for table in super::carp::RECORDS.into_iter().chain(relay::RECORDS) {
            done(
                table.name(),
                self.reencrypt_table::<String, _>(enc, table, progress)?,
            );
        }
        let reviews = relay::REVIEWS;
        done(
            reviews.name(),
            self.reencrypt_table::<(String, u64), _>(enc, reviews, progress)?,
        );
        let outbox = relay::OUTBOX;
        done(
            outbox.name(),
            self.reencrypt_table::<String, _>(enc, outbox, progress)?,
        );
        Ok(tables)
    }

    /// Removes every registered key but `current`; answers their ids.
    fn forget_keys_but(&self, current: KeyId) -> Result<Vec<String>, BackendError> {
        let txn = self.handle().begin_write().map_err(be)?;
        let retired = {
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
            retired
        };
        txn.commit().map_err(be)?;
        Ok(retired)
    }

    /// Rewrites each record of `table` not encrypted with the current key, `CHUNK` per write
    /// transaction; answers how many. A table not created yet (Relay never opened) has none.
    fn reencrypt_table<O: OwnedKey, V: StoredForm>(
        &self,
        enc: &Encryption,
        table: TableDefinition<'static, O::Key, V>,
        progress: &mut dyn FnMut(&str, u64),
    ) -> Result<u64, BackendError> {
        let stale: Vec<O> = {
            let txn = self.handle().begin_read().map_err(be)?;
            let t = match txn.open_table(table) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(0),
                Err(e) => return Err(be(e)),
            };
            let mut out = Vec::new();
            for entry in t.iter().map_err(be)? {
                let (k, v) = entry.map_err(be)?;
                if !enc.is_current(V::bytes(&v.value())) {
                    out.push(O::own(k.value()));
                }
            }
            out
        };
        let mut done = 0;
        for chunk in stale.chunks(CHUNK) {
            let txn = self.handle().begin_write().map_err(be)?;
            {
                let mut t = txn.open_table(table).map_err(be)?;
                for key in chunk {
                    let new = match t.get(key.key()).map_err(be)? {
                        Some(stored) => V::reencrypt(enc, table.name(), stored.value())?,
                        None => None,
                    };
                    if let Some(new) = new {
                        t.insert(key.key(), V::borrow(&new)).map_err(be)?;
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

/// A table's value type as re-encryption reads and rewrites it: bytes (the binary form of
/// [`Encryption::encrypt`]) or text (the text form of [`Encryption::encrypt_text`]).
trait StoredForm: redb::Value + 'static {
    /// A value as re-encrypted.
    type Owned;
    /// The stored bytes, for [`Encryption::is_current`].
    fn bytes<'a>(value: &'a Self::SelfType<'_>) -> &'a [u8];
    /// The value encrypted with the current key; `None` when it already is.
    fn reencrypt(
        enc: &Encryption,
        area: &str,
        value: Self::SelfType<'_>,
    ) -> Result<Option<Self::Owned>, EncryptionError>;
    /// The value to insert.
    fn borrow(owned: &Self::Owned) -> Self::SelfType<'_>;
}

impl StoredForm for &'static [u8] {
    type Owned = Vec<u8>;
    fn bytes<'a>(value: &'a &[u8]) -> &'a [u8] {
        value
    }
    fn reencrypt(
        enc: &Encryption,
        area: &str,
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, EncryptionError> {
        enc.reencrypt(area, value)
    }
    fn borrow(owned: &Vec<u8>) -> &[u8] {
        owned
    }
}

impl StoredForm for &'static str {
    type Owned = String;
    fn bytes<'a>(value: &'a &str) -> &'a [u8] {
        value.as_bytes()
    }
    fn reencrypt(
        enc: &Encryption,
        area: &str,
        value: &str,
    ) -> Result<Option<String>, EncryptionError> {
        enc.reencrypt_text(area, value)
    }
    fn borrow(owned: &String) -> &str {
        owned
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
