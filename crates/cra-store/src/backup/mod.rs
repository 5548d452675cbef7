//! Backups of a whole store and their restore (`cra backup`, `cra restore`;
//! `specs/backup.md`).
//!
//! A backup is one consistent view of the store: redb's through one read transaction copied into
//! a fresh database file ([`redb::backup_dir`], [`redb::backup_store`]), PostgreSQL's through one repeatable-read
//! transaction exported table by table ([`pg::backup`]). It is written as an [`archive`] whose
//! manifest comes last, so an archive cut short has none and is refused. Chains, CARP state,
//! Relay, the atlas catalog and the transparency log are all tables of the store, so all are in
//! it; the keys are not ([`Manifest::not_included`]). A redb archive also restores onto
//! PostgreSQL ([`transfer`]): a deployment moves from one server to replicas that way.
//!
//! Invariants:
//! - **A restore never overwrites.** It refuses a data directory holding a database and a schema
//!   holding a table, before it writes anything.
//! - **A restore reports success only for a store that verifies**: every chain (links, hashes,
//!   against its stored head), the log's root at every stored checkpoint's size equal to the
//!   checkpoint's, and as many chains as the manifest says. Until then the restored redb file is
//!   not in place, and a PostgreSQL restore is one transaction.

pub mod archive;
pub mod pg;
pub mod redb;
pub mod transfer;

use std::path::PathBuf;

use cra_trace::store::ChainStore;

use crate::tlog::{LogReader, LogStore};

/// The archive format this build writes and reads.
pub const FORMAT: &str = "cra-backup/1";

/// What an archive holds, written as its last entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// `redb` or `postgres`: the backend the archive restores onto.
    pub backend: String,
    /// When the backup's view was taken (RFC 3339, the injected clock).
    pub created_at: String,
    /// The cra that wrote it.
    pub cra_version: String,
    /// The store's format then: `data format N` or `migration N`.
    pub store_format: String,
    /// Chains (sessions, Relay projects' and the operator's) in the view.
    pub chains: u64,
    /// The transparency log's leaves in the view.
    pub log_size: u64,
    /// Secrets a restore needs that the archive does not hold, for the operator to keep.
    pub not_included: Vec<String>,
    /// Every other entry: name, bytes, SHA-256.
    pub entries: Vec<ManifestEntry>,
}

impl Manifest {
    /// Refuses an archive of another backend than `wanted`, the restore's target.
    pub fn require_backend(&self, wanted: &str) -> Result<(), BackupError> {
        if self.backend == wanted {
            Ok(())
        } else {
            Err(BackupError::Backend {
                found: self.backend.clone(),
                wanted: wanted.to_owned(),
            })
        }
    }

    fn check_format(&self) -> Result<(), BackupError> {
        if self.format == FORMAT {
            Ok(())
        } else {
            Err(BackupError::Damaged(format!(
                "its format is {}, and this cra reads {FORMAT}",
                self.format
            )))
        }
    }
}

/// One entry of an archive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestEntry {
    /// The entry's name.
    pub name: String,
    /// Its length.
    pub bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
}

/// What the keys the archive leaves out are, for every backup: the store holds none of them.
pub fn keys_not_included() -> Vec<String> {
    [
        "the API keys file (`api-keys.toml`, `[[keys]]`) and `[jwt]` secrets",
        "the log's signer key (`[log] key_file`, on redb `<data>/log.key` by default)",
        "storage keys (`[encryption]`): an encrypted store's records stay encrypted in the archive",
        "TLS certificates and keys, and webhook secrets",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// A backup or restore that did not complete; nothing it reported as done is partial.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        reason: String,
    },
    /// The archive or target already exists.
    #[error("{0} already exists; a backup or restore never replaces anything: choose another path")]
    Exists(PathBuf),
    /// The schema to restore into already holds tables.
    #[error(
        "schema {0} already holds tables; a restore never replaces anything: restore into a new schema"
    )]
    SchemaInUse(String),
    /// The archive has no manifest: the backup that wrote it did not finish.
    #[error(
        "{0} is a partial backup (it has no manifest, which a backup writes last): make a new backup"
    )]
    Partial(PathBuf),
    /// The archive does not match its manifest, or cannot be read as one.
    #[error("the archive is damaged: {0}; restore another backup")]
    Damaged(String),
    /// The archive is for another backend.
    #[error(
        "the archive holds a {found} store and the target is {wanted}, which it cannot be moved onto: restore it onto {found} (a redb archive also restores onto PostgreSQL)"
    )]
    Backend {
        /// The archive's backend.
        found: String,
        /// The target's.
        wanted: String,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] crate::BackendError),
    /// The restored store does not verify; it was not put in place.
    #[error("the restored store does not verify: {0}; nothing was put in place")]
    Verify(String),
}

/// What a restore verified.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// Chains verified.
    pub chains: u64,
    /// Their events.
    pub events: u64,
    /// The log's leaves.
    pub log_size: u64,
    /// Stored checkpoints whose root matched the log's.
    pub checkpoints: u64,
}

/// Verifies every chain of `chains` against its stored head, and every stored checkpoint of
/// `log` against the log's root at its size; `progress` is told each chain verified.
pub fn verify_store<S: LogStore + ?Sized>(
    chains: &dyn ChainStore,
    log: &S,
    progress: &mut dyn FnMut(u64),
) -> Result<Verified, BackupError> {
    let fail = |e: &dyn std::fmt::Display| BackupError::Verify(e.to_string());
    let mut done = Verified {
        chains: 0,
        events: 0,
        log_size: 0,
        checkpoints: 0,
    };
    for summary in chains.sessions().map_err(|e| fail(&e))? {
        done.events += verify_chain(chains, &summary)?;
        done.chains += 1;
        progress(done.chains);
    }
    done.log_size = log.log_size().map_err(|e| fail(&e))?;
    let reader = LogReader::at(log, done.log_size);
    for note in log.checkpoints(usize::MAX).map_err(|e| fail(&e))? {
        let text = cra_tlog::Note::parse(note.as_bytes()).map_err(|e| fail(&e))?;
        let checkpoint = cra_tlog::Checkpoint::parse(text.text()).map_err(|e| fail(&e))?;
        let root = reader.root(checkpoint.size()).map_err(|e| fail(&e))?;
        if root != *checkpoint.root() {
            return Err(BackupError::Verify(format!(
                "the log's root at {} leaves is not the one its checkpoint signed",
                checkpoint.size()
            )));
        }
        done.checkpoints += 1;
    }
    Ok(done)
}

/// Makes `dir` a new, empty directory to build a restore in; one a crashed restore left is
/// removed first (nothing it held was ever put in place).
fn fresh_staging(dir: &std::path::Path) -> Result<(), BackupError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| crate::redb::rewrite::io(dir, &e))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| crate::redb::rewrite::io(dir, &e))?;
    Ok(())
}

/// Refuses a restored store holding fewer chains, or a shorter log, than the manifest says its
/// view held (a log the restore's open backfilled from nothing may be longer).
fn check_counts(manifest: &Manifest, verified: &Verified) -> Result<(), BackupError> {
    if verified.chains != manifest.chains {
        return Err(BackupError::Verify(format!(
            "{} chains, and the manifest lists {}",
            verified.chains, manifest.chains
        )));
    }
    if verified.log_size < manifest.log_size {
        return Err(BackupError::Verify(format!(
            "a log of {} leaves, and the manifest lists {}",
            verified.log_size, manifest.log_size
        )));
    }
    Ok(())
}

/// Verifies one chain page by page; answers its events.
fn verify_chain(
    chains: &dyn ChainStore,
    summary: &cra_trace::store::SessionSummary,
) -> Result<u64, BackupError> {
    let id = &summary.session_id;
    let mut verifier = cra_trace::EventVerifier::new(&cra_trace::VerifyOptions::default());
    let (mut after, mut events, mut last_hash) = (None, 0u64, String::new());
    loop {
        let page = chains
            .read_after(id, after, 1024)
            .map_err(|e| BackupError::Verify(format!("chain {id}: {e}")))?;
        let Some(last) = page.last() else { break };
        after = Some(last.sequence);
        last_hash.clone_from(&last.event_hash);
        for event in &page {
            verifier.push(event);
        }
        events += page.len() as u64;
    }
    if let Some(f) = verifier.finish().first_error() {
        return Err(BackupError::Verify(format!(
            "chain {id}, event {}: {}",
            f.sequence, f.message
        )));
    }
    let head = &summary.head;
    if events != head.next_sequence || last_hash != head.head_hash {
        return Err(BackupError::Verify(format!(
            "chain {id} holds {events} events ending in {last_hash}, and its head says {} ending \
             in {}",
            head.next_sequence, head.head_hash
        )));
    }
    Ok(events)
}
