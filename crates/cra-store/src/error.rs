//! The errors of opening and running a store, shared by both backends.

use std::path::PathBuf;

use cra_wire::Token;

/// A store could not be opened, migrated or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The data directory could not be created or read.
    #[error(
        "cannot use data directory {path}: {reason}; check that it exists or can be created and is writable"
    )]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// What the operating system said.
        reason: String,
    },
    /// Another process holds the data directory's database.
    #[error(
        "data directory {path} is in use by another process ({holder}); stop that process, or talk to it over HTTP (CRA_URL) instead of opening the directory"
    )]
    InUse {
        /// The directory.
        path: PathBuf,
        /// Who holds it, as recorded in the directory's `owner` file when there is one.
        holder: String,
    },
    /// redb refused the database file.
    #[error("cannot open database {path}: {reason}")]
    Redb {
        /// The database file.
        path: PathBuf,
        /// What redb said.
        reason: String,
    },
    /// PostgreSQL could not be reached.
    #[error("cannot connect to PostgreSQL: {0}; check the URL and that the server is running")]
    Connect(String),
    /// The schema name cannot be used.
    #[error(
        "schema name `{0}` is not usable: use 1 to 63 lowercase letters, digits and `_`, starting with a letter or `_`"
    )]
    InvalidSchema(String),
    /// A migration failed; its transaction was rolled back.
    #[error("migration {version} ({name}) failed: {reason}; nothing of it was applied")]
    Migration {
        /// The migration's version.
        version: u32,
        /// Its name.
        name: String,
        /// What PostgreSQL said.
        reason: String,
    },
    /// A migration recorded as applied has different SQL now.
    #[error(
        "migration {version} ({name}) was applied with different SQL than this build embeds; released migrations must not change, add a new one instead"
    )]
    MigrationChanged {
        /// The migration's version.
        version: u32,
        /// Its name.
        name: String,
    },
    /// The database holds migrations this build does not know: it was written by a newer build.
    #[error(
        "the database has migration {version}, which this build of cra does not know: a newer cra wrote it. Nothing was changed; run that cra (or a newer one), or restore a backup this version made"
    )]
    UnknownMigration {
        /// The unknown version.
        version: u32,
    },
    /// The data directory records a data format above this build's: a newer cra wrote it.
    #[error(
        "data directory {path} holds data format {found}, written by a newer cra than this one (which knows formats up to {known}). Nothing was changed; run that cra (or a newer one), or restore a backup this version made"
    )]
    NewerFormat {
        /// The directory.
        path: PathBuf,
        /// The format it records.
        found: u64,
        /// The newest format this build knows.
        known: u64,
    },
    /// The data directory's database was not closed cleanly, and a read-only look cannot repair
    /// it.
    #[error(
        "the database of data directory {path} was not closed cleanly (a server stopped without its clean shutdown), so it cannot be read without redb's repair: `cra migrate` (without --check) repairs it first, as does the next `cra serve`"
    )]
    NeedsRepair {
        /// The directory.
        path: PathBuf,
    },
    /// The configured storage keys do not fit the store (`encryption`): a key that encrypted its records
    /// is missing, or a key is not the one registered under its id.
    #[error("storage key: {0}")]
    StorageKey(String),
    /// A backend operation failed.
    #[error("storage operation failed: {0}")]
    Backend(String),
}

impl BackendError {
    /// The wire error token for this error.
    pub fn token(&self) -> Token {
        match self {
            Self::InvalidSchema(_) => Token::InvalidRequest,
            _ => Token::Unavailable,
        }
    }
}
