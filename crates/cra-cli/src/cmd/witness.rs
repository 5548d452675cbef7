//! `cra witness`: a C2SP `tlog-witness` (issue 26). `cra witness key generate` makes the
//! cosigner key; `cra witness serve` answers `POST /add-checkpoint` with `cosignature/v1`
//! cosignatures and `GET /<origin hash>/checkpoint` with the latest cosigned checkpoint.
//!
//! The decisions are `cra_tlog::witness`'s; this module keeps the state. Per origin it stores
//! the latest cosigned checkpoint note (with the log's signature and ours) in
//! `<state>/<SHA-256 of the origin, hex>`, written to a temporary file, synced, renamed over
//! the old one and the directory synced. Deciding and persisting happen under the origin's
//! mutex, and the answer is sent only after the rename is durable: two submissions against the
//! same old size are decided one after the other, so the second sees the first's size (409)
//! and the stored size never goes back, nor are two roots cosigned for one size.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::{Args, Subcommand};
use cra_tlog::witness::{LogState, SIZE_CONTENT_TYPE, Submission, origin_hash};
use cra_tlog::{
    Checkpoint, CosignatureSigner, Ed25519Verifier, Note, Witness, WitnessError, witness::Accepted,
};
use serde_json::json;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra witness` subcommands.
#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Run the witness: `POST /add-checkpoint` and `GET /<origin hash>/checkpoint`.
    Serve(ServeArgs),
    /// The witness's cosigner key.
    #[command(subcommand)]
    Key(KeyCommand),
}

/// `cra witness key` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Write a new cosigner key to a file (mode 0600) and print its verifier key.
    Generate(GenerateArgs),
}

/// `cra witness key generate` options.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The cosigner's name, a schema-less URL such as witness.example/w1.
    #[arg(long)]
    pub name: String,
    /// The file to write the signer key to; an existing file is never overwritten.
    #[arg(long)]
    pub out: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `cra witness serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen address; `127.0.0.1:0` picks a free port (the real one is printed).
    #[arg(long, default_value = "127.0.0.1:7381")]
    pub addr: String,
    /// The state directory (one file per witnessed log; created if missing).
    #[arg(long)]
    pub state: PathBuf,
    /// The cosigner key file written by `cra witness key generate`.
    #[arg(long)]
    pub key: PathBuf,
    /// A log to witness, as its verifier key string `<origin>+<key ID>+<key>` (repeatable; give
    /// several keys of one origin for a key rotation).
    #[arg(long = "log", required = true)]
    pub logs: Vec<String>,
}

/// Runs a `cra witness` subcommand.
pub fn run(command: WitnessCommand) -> Exit {
    match command {
        WitnessCommand::Serve(args) => serve(&args),
        WitnessCommand::Key(KeyCommand::Generate(args)) => match generate(&args) {
            Ok(vkey) => {
                match args.output {
                    OutputFormat::Text => println!("{vkey}"),
                    OutputFormat::Json => println!(
                        "{}",
                        json!({"name": args.name, "vkey": vkey, "key_file": args.out})
                    ),
                }
                Exit::Success
            }
            Err(e) => {
                eprintln!("cra witness key generate: {e}");
                Exit::CouldNotRun
            }
        },
    }
}

/// Why the witness could not start or persist.
#[derive(Debug, thiserror::Error)]
pub enum WitnessSetupError {
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// A key is malformed.
    #[error("{0}")]
    Key(String),
    /// A stored state file does not parse.
    #[error(
        "{path} is not a cosigned checkpoint of {origin}: {why}; restore it from a backup (starting without it would let the log roll back)"
    )]
    CorruptState {
        /// The file.
        path: PathBuf,
        /// The origin it is for.
        origin: String,
        /// What is wrong.
        why: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> WitnessSetupError + '_ {
    move |error| WitnessSetupError::Io {
        path: path.to_owned(),
        error,
    }
}

/// Makes a cosigner key from OS randomness, writes its signer key string to `args.out` (new
/// file, mode 0600) and returns its verifier key string.
///
/// # Errors
/// A bad name, or the file exists or cannot be written.
pub fn generate(args: &GenerateArgs) -> Result<String, WitnessSetupError> {
    let seed: [u8; 32] = rand::random();
    let signer = CosignatureSigner::from_seed(&args.name, &seed)
        .map_err(|e| WitnessSetupError::Key(e.to_string()))?;
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&args.out).map_err(io_error(&args.out))?;
    file.write_all(format!("{}\n", signer.to_key_string()).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error(&args.out))?;
    Ok(signer.verifier().to_key_string())
}

/// A point in [`WitnessService::add_checkpoint`] where a test hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    /// The request passed the stateless checks and is about to take its origin's lock.
    Opened,
    /// The origin's lock is held by another request: this one waits for it.
    Waiting,
    /// Under the lock: decided and cosigned, not yet persisted.
    Decided,
}

/// A test hook, called with the point reached and the submission.
pub type Hook = Arc<dyn Fn(HookPoint, &Submission) + Send + Sync>;

/// The clock of cosignature timestamps (POSIX seconds).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The latest cosigned checkpoint of one log, as stored.
#[derive(Debug, Clone)]
struct Latest {
    state: LogState,
    note: String,
}

/// What an add-checkpoint call ends in, beyond the spec's refusals.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The witness refuses the checkpoint (the spec's status).
    #[error(transparent)]
    Refused(#[from] WitnessError),
    /// The new state could not be persisted; nothing was cosigned.
    #[error("the witness could not persist its state, so it does not cosign: {0}")]
    Storage(WitnessSetupError),
    /// A previous request panicked under the origin's lock.
    #[error("the state of {origin} is unavailable after an internal failure; restart the witness")]
    Poisoned {
        /// The origin.
        origin: String,
    },
}

impl AddError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::Refused(e) => e.status(),
            Self::Storage(_) | Self::Poisoned { .. } => 500,
        }
    }
}

/// A witness with its durable state: what `cra witness serve` runs.
pub struct WitnessService {
    witness: Witness,
    dir: PathBuf,
    logs: HashMap<String, Mutex<Option<Latest>>>,
    by_hash: HashMap<String, String>,
    clock: Clock,
    hook: Option<Hook>,
}

impl std::fmt::Debug for WitnessService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WitnessService")
            .field("witness", &self.witness)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The system clock in POSIX seconds.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    })
}

impl WitnessService {
    /// Opens the state directory (creating it) for the witness, reading each log's latest
    /// cosigned checkpoint.
    ///
    /// # Errors
    /// The directory cannot be made or read, or a state file is corrupt.
    pub fn open(witness: Witness, dir: &Path, clock: Clock) -> Result<Self, WitnessSetupError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let mut logs = HashMap::new();
        let mut by_hash = HashMap::new();
        for origin in witness.origins() {
            let hash = origin_hash(origin);
            let path = dir.join(&hash);
            let latest = match fs::read(&path) {
                Ok(bytes) => Some(read_latest(&bytes, origin).map_err(|why| {
                    WitnessSetupError::CorruptState {
                        path: path.clone(),
                        origin: origin.to_owned(),
                        why,
                    }
                })?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_error(&path)(e)),
            };
            logs.insert(origin.to_owned(), Mutex::new(latest));
            by_hash.insert(hash, origin.to_owned());
        }
        Ok(Self {
            witness,
            dir: dir.to_owned(),
            logs,
            by_hash,
            clock,
            hook: None,
        })
    }

    /// The same service with a test hook.
    #[must_use]
    pub fn with_hook(mut self, hook: Hook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The cosigner's verifier key string.
    pub fn verifier_key(&self) -> String {
        self.witness.cosigner().verifier().to_key_string()
    }

    /// The latest cosigned size of `origin`, if it ever cosigned one.
    pub fn latest_size(&self, origin: &str) -> Option<u64> {
        let log = self.logs.get(origin)?;
        let guard = log.lock().ok()?;
        guard.as_ref().map(|l| l.state.size)
    }

    /// The latest cosigned checkpoint note of the log whose origin hashes to `hash`.
    pub fn checkpoint_by_hash(&self, hash: &str) -> Option<String> {
        let origin = self.by_hash.get(hash)?;
        let guard = self.logs.get(origin)?.lock().ok()?;
        guard.as_ref().map(|l| l.note.clone())
    }

    /// One add-checkpoint call: the stateless checks, then, under the origin's lock, the
    /// decision, the durable write and the state update. Returns the cosignature line(s).
    ///
    /// # Errors
    /// [`AddError`], whose [`AddError::status`] is the HTTP status.
    pub fn add_checkpoint(&self, body: &[u8]) -> Result<Accepted, AddError> {
        let submission = self.witness.open(body)?;
        let origin = submission.checkpoint.origin();
        if let Some(hook) = &self.hook {
            hook(HookPoint::Opened, &submission);
        }
        let Some(log) = self.logs.get(origin) else {
            // `open` found the origin among the witness's logs, which are these
            return Err(WitnessError::UnknownOrigin {
                origin: origin.to_owned(),
            }
            .into());
        };
        let poisoned = || AddError::Poisoned {
            origin: origin.to_owned(),
        };
        let mut latest = match log.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => {
                if let Some(hook) = &self.hook {
                    hook(HookPoint::Waiting, &submission);
                }
                log.lock().map_err(|_| poisoned())?
            }
            Err(TryLockError::Poisoned(_)) => return Err(poisoned()),
        };
        let accepted = self.witness.decide(
            &submission,
            latest.as_ref().map(|l| &l.state),
            (self.clock)(),
        )?;
        if let Some(hook) = &self.hook {
            hook(HookPoint::Decided, &submission);
        }
        let note = accepted.cosigned.to_text();
        write_durably(&self.dir, &origin_hash(origin), note.as_bytes())
            .map_err(AddError::Storage)?;
        *latest = Some(Latest {
            state: accepted.state,
            note,
        });
        Ok(accepted)
    }
}

/// Reads a stored state file: a note whose text is a checkpoint of `origin`.
fn read_latest(bytes: &[u8], origin: &str) -> Result<Latest, String> {
    let note = Note::parse(bytes).map_err(|e| e.to_string())?;
    let checkpoint = Checkpoint::parse(note.text()).map_err(|e| e.to_string())?;
    if checkpoint.origin() != origin {
        return Err(format!("it is of origin {:?}", checkpoint.origin()));
    }
    Ok(Latest {
        state: LogState {
            size: checkpoint.size(),
            root: *checkpoint.root(),
        },
        note: note.to_text(),
    })
}

/// Writes `dir/name` so a crash leaves the old or the new content: a temporary file, synced,
/// renamed over `name`, then the directory synced.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), WitnessSetupError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut file = File::create(&tmp).map_err(io_error(&tmp))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io_error(&tmp))?;
    fs::rename(&tmp, &path).map_err(io_error(&path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// The witness's HTTP routes.
pub fn router(service: Arc<WitnessService>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/{origin_hash}/checkpoint", get(checkpoint))
        .with_state(service)
}

fn text(status: u16, content_type: &'static str, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn add_checkpoint(State(service): State<Arc<WitnessService>>, body: Bytes) -> Response {
    let outcome = tokio::task::spawn_blocking(move || service.add_checkpoint(&body)).await;
    match outcome {
        Ok(Ok(accepted)) => text(200, "text/plain; charset=utf-8", accepted.response_body()),
        Ok(Err(AddError::Refused(e))) if e.conflict_body().is_some() => text(
            409,
            SIZE_CONTENT_TYPE,
            e.conflict_body().unwrap_or_default(),
        ),
        Ok(Err(e)) => text(e.status(), "text/plain; charset=utf-8", format!("{e}\n")),
        Err(e) => text(
            500,
            "text/plain; charset=utf-8",
            format!("the witness failed: {e}\n"),
        ),
    }
}

async fn checkpoint(
    State(service): State<Arc<WitnessService>>,
    UrlPath(hash): UrlPath<String>,
) -> Response {
    match service.checkpoint_by_hash(&hash) {
        Some(note) => text(200, "text/plain; charset=utf-8", note),
        None => text(
            404,
            "text/plain; charset=utf-8",
            "this witness has cosigned no checkpoint of a log with that origin hash\n".to_owned(),
        ),
    }
}

/// Reads the key file and the log keys into a witness.
///
/// # Errors
/// An unreadable or malformed key, or no log.
pub fn load_witness(key: &Path, logs: &[String]) -> Result<Witness, WitnessSetupError> {
    let skey = fs::read_to_string(key).map_err(io_error(key))?;
    let cosigner = CosignatureSigner::parse(skey.trim_end())
        .map_err(|e| WitnessSetupError::Key(format!("{}: {e}", key.display())))?;
    let mut verifiers = Vec::with_capacity(logs.len());
    for vkey in logs {
        let verifier = Ed25519Verifier::parse(vkey)
            .map_err(|e| WitnessSetupError::Key(format!("--log {vkey}: {e}")))?;
        verifiers.push(verifier);
    }
    Witness::new(cosigner, verifiers).map_err(|e| WitnessSetupError::Key(e.to_string()))
}

/// A running witness server.
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Waits for the server to stop (after its shutdown future resolves).
    ///
    /// # Errors
    /// The server's I/O error, or its task failed.
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// Binds `addr` and serves the witness until `shutdown` resolves.
///
/// # Errors
/// The address cannot be bound.
pub async fn start(
    service: Arc<WitnessService>,
    addr: &str,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<Running> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let app = router(service);
    let task = tokio::spawn(async move {
        axum::serve(listener, app.into_make_service())
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(Running { addr, task })
}

fn serve(args: &ServeArgs) -> Exit {
    let service = load_witness(&args.key, &args.logs)
        .and_then(|w| WitnessService::open(w, &args.state, system_clock()));
    let service = match service {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("cra witness serve: {e}");
            return Exit::CouldNotRun;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cra witness serve: cannot start the async runtime: {e}");
            return Exit::CouldNotRun;
        }
    };
    rt.block_on(async move {
        println!("cra witness: cosigning as {}", service.verifier_key());
        let shutdown = cra_runtime::server::shutdown_signal();
        let running = match start(service, &args.addr, shutdown).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cra witness serve: cannot listen on {}: {e}", args.addr);
                return Exit::CouldNotRun;
            }
        };
        println!("cra witness: listening on http://{}", running.addr);
        match running.wait().await {
            Ok(()) => {
                println!("cra witness: stopped");
                Exit::Success
            }
            Err(e) => {
                eprintln!("cra witness serve: {e}");
                Exit::CouldNotRun
            }
        }
    })
}
