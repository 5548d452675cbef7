//! What the `cra trace` commands share: reading a `.trace.jsonl` (a file or standard input) into
//! events, reporting a failure to run (the standard error body on standard output under
//! `-o json`, a sentence on standard error always), and opening a store read-only-in-spirit
//! (a redb data directory or a PostgreSQL schema) for `state`, `export` and `retention`.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use cra_carp::CarpStore;
use cra_runtime::config::EncryptionConfig;
use cra_store::{Encryption, PgStore, RedbStore, RetentionStore, StoreConfig};
use cra_trace::TraceEvent;
use cra_trace::store::ChainStore;
use cra_wire::{ErrorBody, Token};

use crate::exit::Exit;
use crate::output::OutputFormat;

/// Why a command could not run: a wire token and a sentence that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The token of the error body.
    pub token: Token,
    /// For people.
    pub message: String,
}

impl Failure {
    /// A failure with this token and message.
    pub fn new(token: Token, message: impl Into<String>) -> Self {
        Self {
            token,
            message: message.into(),
        }
    }

    /// Prints the failure (`cmd: message` on `err`; the error body on `out` under `-o json`)
    /// and returns exit status 1.
    pub fn report(
        &self,
        cmd: &str,
        output: OutputFormat,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Exit {
        if output == OutputFormat::Json {
            let body = ErrorBody::new(self.token, self.message.clone());
            let _ = writeln!(out, "{}", serde_json::to_string(&body).unwrap_or_default());
        }
        let _ = writeln!(err, "{cmd}: {}", self.message);
        Exit::CouldNotRun
    }
}

/// True when `file` means standard input (`-` or absent).
pub fn is_stdin(file: Option<&Path>) -> bool {
    file.is_none_or(|p| p.as_os_str() == "-")
}

/// A readable name for the input.
pub fn input_name(file: Option<&Path>) -> String {
    match file {
        Some(p) if !is_stdin(Some(p)) => p.display().to_string(),
        _ => "standard input".to_owned(),
    }
}

/// Reads `file` (or `stdin` for `-` / none) and parses every line as a TRACE event.
pub fn read_events(file: Option<&Path>, stdin: impl Read) -> Result<Vec<TraceEvent>, Failure> {
    let name = input_name(file);
    let bytes = if is_stdin(file) {
        let mut buf = Vec::new();
        let mut stdin = stdin;
        stdin.read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(file.unwrap_or(Path::new("-")))
    };
    let bytes = bytes.map_err(|e| {
        let token = if e.kind() == io::ErrorKind::NotFound {
            Token::NotFound
        } else {
            Token::InvalidRequest
        };
        Failure::new(token, format!("cannot read {name}: {e}"))
    })?;
    cra_trace::diff::parse_events(&bytes)
        .map_err(|e| Failure::new(Token::InvalidRequest, format!("{name}: {e}")))
}

/// Where a command finds stored state: a redb data directory or a PostgreSQL schema.
#[derive(Debug, Clone, Args, Default)]
pub struct StoreArgs {
    /// The data directory of the embedded (redb) store. A running server holds it; stop the
    /// server first (or export over HTTP with --url).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Read PostgreSQL at this URL instead of a data directory.
    #[arg(long, env = "CRA_POSTGRES_URL", conflicts_with = "data")]
    pub postgres: Option<String>,
    /// The PostgreSQL schema of the deployment.
    #[arg(long, default_value = "cra")]
    pub postgres_schema: String,
    /// The store's storage keys.
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// The storage keys of an encrypted store (`specs/storage-encryption.md`), for every command
/// that opens one offline or as a local front door.
#[derive(Debug, Clone, Args, Default)]
pub struct KeyArgs {
    /// The storage key the store's records are encrypted with (the server's
    /// `encryption.key_file`); needed to read an encrypted store.
    #[arg(long, env = "CRA_STORAGE_KEY_FILE")]
    pub storage_key_file: Option<PathBuf>,
    /// A retired storage key (`encryption.retired_key_files`) that older records are still
    /// encrypted with; repeatable.
    #[arg(long = "retired-key-file")]
    pub retired_key_files: Vec<PathBuf>,
}

impl KeyArgs {
    /// The `[encryption]` settings these flags stand for.
    pub fn config(&self) -> EncryptionConfig {
        key_flags(self.storage_key_file.as_deref(), &self.retired_key_files)
    }
}

/// An opened store: the trace chains and the CARP records of one backend.
#[derive(Clone)]
pub struct OpenedStore {
    /// `redb` or `postgres`.
    pub kind: &'static str,
    /// Where (the directory, or the schema).
    pub location: String,
    /// TRACE chains.
    pub chains: Arc<dyn ChainStore>,
    /// CARP records.
    pub carp: Arc<dyn CarpStore>,
    /// The chains again, with whole-chain removal (`cra trace retention`).
    pub retention: Arc<dyn RetentionStore>,
    /// The transparency log (`cra trace export --with-proofs`).
    pub log: Arc<dyn cra_store::tlog::LogStore>,
}

impl std::fmt::Debug for OpenedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedStore")
            .field("kind", &self.kind)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl StoreArgs {
    /// Whether a store was named.
    pub fn given(&self) -> bool {
        self.data.is_some() || self.postgres.is_some()
    }

    /// The encryption the key flags describe (plaintext without them).
    pub fn encryption(&self) -> Result<Encryption, Failure> {
        self.keys
            .config()
            .encryption()
            .map_err(|e| Failure::new(Token::InvalidRequest, in_flag_terms(&e.to_string())))
    }

    fn store_config(&self) -> Result<StoreConfig, Failure> {
        Ok(StoreConfig::default().with_encryption(self.encryption()?))
    }

    /// Opens the named PostgreSQL deployment, if one was named.
    pub fn open_postgres(&self) -> Result<Option<PgStore>, Failure> {
        let Some(url) = &self.postgres else {
            return Ok(None);
        };
        PgStore::connect_with(
            url,
            &self.postgres_schema,
            self.store_config()?,
            cra_store::pg::DEFAULT_POOL_SIZE,
        )
        .map(Some)
        .map_err(|e| Failure::new(e.token(), e.to_string()))
    }

    /// Opens the data directory `dir`, which must already hold a database (nothing is created).
    pub fn open_redb(&self, dir: &Path) -> Result<RedbStore, Failure> {
        require_database(dir)?;
        RedbStore::open_with(dir, self.store_config()?)
            .map_err(|e| Failure::new(e.token(), e.to_string()))
    }

    /// Opens the named store; `default_data` is used when neither `--data` nor `--postgres`
    /// was given. A data directory must already hold a database (nothing is created).
    pub fn open(&self, default_data: Option<&Path>) -> Result<Option<OpenedStore>, Failure> {
        if let Some(pg) = self.open_postgres()? {
            return Ok(Some(OpenedStore {
                kind: "postgres",
                location: format!("schema {}", self.postgres_schema),
                chains: Arc::new(pg.clone()),
                retention: Arc::new(pg.clone()),
                log: Arc::new(pg.clone()),
                carp: Arc::new(pg),
            }));
        }
        let Some(dir) = self.data.as_deref().or(default_data) else {
            return Ok(None);
        };
        let redb = self.open_redb(dir)?;
        Ok(Some(OpenedStore {
            kind: "redb",
            location: dir.display().to_string(),
            chains: Arc::new(redb.clone()),
            retention: Arc::new(redb.clone()),
            log: Arc::new(redb.clone()),
            carp: Arc::new(redb),
        }))
    }
}

/// The `[encryption]` settings that `--storage-key-file` and `--retired-key-file` stand for.
pub fn key_flags(key_file: Option<&Path>, retired_key_files: &[PathBuf]) -> EncryptionConfig {
    EncryptionConfig {
        key_file: key_file.map(Path::to_path_buf),
        key_env: None,
        retired_key_files: retired_key_files.to_vec(),
    }
}

/// An error about the `[encryption]` settings, naming the flags that gave them instead.
pub fn in_flag_terms(message: &str) -> String {
    message
        .replace("`encryption.key_file`", "--storage-key-file")
        .replace("`encryption.retired_key_files`", "--retired-key-file")
}

/// Every event of `session_id` from `chains`, page by page, calling `progress` with the count
/// read so far.
pub fn read_session(
    chains: &dyn ChainStore,
    session_id: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<TraceEvent>, Failure> {
    let mut out: Vec<TraceEvent> = Vec::new();
    loop {
        let after = out.last().map(|e| e.sequence);
        let page = chains
            .read_after(session_id, after, 4096)
            .map_err(|e| Failure::new(e.token(), e.to_string()))?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
        progress(out.len() as u64);
    }
}

/// The events of `session_id` up to the first one that cannot be read, and why that one cannot
/// (`None` when the whole chain was read): a chain holding an event an earlier version stored
/// in a form that no longer parses (`integrity_error`) still yields what comes before it
/// (issue 29, item 4). Any other failure (a store that cannot answer) is returned as it was.
pub fn read_readable_prefix(
    chains: &dyn ChainStore,
    session_id: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<(Vec<TraceEvent>, Option<Failure>), Failure> {
    let mut out: Vec<TraceEvent> = Vec::new();
    loop {
        let from = out.last().map_or(0, |e| e.sequence + 1);
        let page = cra_trace::store::read_page(chains, session_id, from, from + 4096)
            .map_err(|e| Failure::new(e.token(), e.to_string()))?;
        let read = page.events.len();
        out.extend(page.events);
        progress(out.len() as u64);
        if let Some(e) = page.unreadable {
            let n = out.len();
            let why = format!(
                "{e}; the {n} event{} before it {} read",
                if n == 1 { "" } else { "s" },
                if n == 1 { "was" } else { "were" },
            );
            return Ok((out, Some(Failure::new(e.token(), why))));
        }
        if read == 0 {
            return Ok((out, None));
        }
    }
}

/// Refuses a data directory that holds no database: offline commands never create one.
pub fn require_database(dir: &Path) -> Result<(), Failure> {
    let file = dir.join(cra_store::redb::DATABASE_FILE);
    if file.is_file() {
        return Ok(());
    }
    Err(Failure::new(
        Token::NotFound,
        format!(
            "{} holds no cra database ({} is missing); give the data directory of a cra server with --data",
            dir.display(),
            file.display()
        ),
    ))
}
