//! Starting and stopping the server: builds the [`Runtime`] from configuration (clock and ids
//! injected), binds the listener (printing the real address, so port 0 works), and shuts down
//! gracefully: in-flight requests finish (each one's events are durable before it is answered),
//! then the stores are closed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use cra_store::pg::clock::DatabaseClock;
use cra_wire::{Clock, IdGenerator};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::auth::KeysFile;
use crate::config::{ClockSource, RuntimeConfig};
use crate::credentials::Credentials;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use crate::routes;
use crate::state::{AppState, Runtime};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The keys file or JWT settings cannot be used.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthSetupError),
    /// The TLS certificate, key or client CA cannot be used.
    #[error("tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source} (is another server running there?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The store could not be opened (a running server holds the data directory, the database
    /// is unreachable, a migration failed).
    #[error("cannot open the store: {0}")]
    Store(#[from] cra_store::BackendError),
    /// Anything else while opening stores or atlases.
    #[error("{0}")]
    Other(String),
}

/// What start-up did that the operator should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartNotice {
    /// A new admin key was written to this file.
    AdminKeyCreated(std::path::PathBuf),
    /// Something worth a line at start-up (atlases loaded, store opened).
    Info(String),
}

/// Builds the shared runtime from `config`, as `cra serve` starts: keys, atlases, the store,
/// and the start-up recovery of what the last stop cut off (interrupted executions, Relay
/// events still owed).
pub fn build_runtime(
    mut config: RuntimeConfig,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
) -> Result<(AppState, Vec<StartNotice>), StartError> {
    config.validate()?;
    let mut notices = Vec::new();
    let test_clock = config
        .test_clock
        .then(|| Arc::new(crate::conformance::TestClock::new(clock.clone())));
    let clock: Arc<dyn Clock> = match &test_clock {
        Some(t) => {
            notices.push(StartNotice::Info(
                "test clock: admins may set the time (POST /v1/conformance/clock); tests only"
                    .to_owned(),
            ));
            t.clone()
        }
        None => clock,
    };
    let keys_path = config.api_keys_path();
    let keys = if config.api_keys.is_none() && !keys_path.exists() {
        let k = KeysFile::create_admin(&keys_path)?;
        notices.push(StartNotice::AdminKeyCreated(keys_path.clone()));
        k
    } else {
        KeysFile::load(&keys_path)?
    };
    let auth = Credentials::new(
        keys,
        keys_path,
        config.jwt.as_ref(),
        config.config_file.clone(),
    )?;
    let database_clock = (config.postgres.is_some()
        && config.clock == ClockSource::Database
        && test_clock.is_none())
    .then(|| Arc::new(DatabaseClock::new(clock.clone())));
    let clock: Arc<dyn Clock> = match &database_clock {
        Some(c) => c.clone(),
        None => clock,
    };
    let mut backends = crate::backend::open(&config, clock.clone(), ids.clone())?;
    if let (Some(c), Some(pg)) = (&database_clock, &backends.postgres) {
        let sample = c.sync(pg)?;
        notices.push(StartNotice::Info(format!(
            "clock: the database's ({:+} ms from this machine's, sampled in {} ms)",
            sample.offset.whole_milliseconds(),
            sample.round_trip.whole_milliseconds()
        )));
    }
    backends.database_clock = database_clock;
    let (log, notice) =
        crate::tlog::Log::open(&config, backends.log.clone()).map_err(StartError::Other)?;
    notices.push(StartNotice::Info(notice));
    let sources = crate::atlases::sources(&config.atlases);
    let trust = config.atlas_signing.trust()?;
    if let Some(t) = &trust {
        notices.push(StartNotice::Info(format!(
            "signed atlases: every atlas must be signed by one of {} trusted keys",
            t.keys().len()
        )));
    }
    let opened = crate::atlases::catalog::open(
        backends.catalog.as_ref(),
        &sources,
        config.replace_atlases,
        cra_store::retention::OPERATOR_AGENT,
        trust.as_ref(),
    );
    let atlas_state = match opened {
        Ok(state) => state,
        Err(crate::atlases::SourceError::Other(message)) => return Err(StartError::Other(message)),
        Err(crate::atlases::SourceError::Unsigned(refused)) => {
            // Fail closed, and record the refusal in the operator audit chain first, through a
            // runtime that holds no atlas and never serves.
            let parts = Parts {
                auth,
                backends,
                atlas_state: crate::atlases::AtlasState::empty(),
                catalogued: false,
                test_clock,
                log,
            };
            let rt = assemble(config, clock, ids, parts)?;
            crate::service::atlases::record_start_refusal(rt, &refused);
            return Err(StartError::Other(refused.message));
        }
    };
    notices.push(StartNotice::Info(format!(
        "atlases: {}",
        if atlas_state.loaded.is_empty() {
            "none (pass --atlas DIR or put atlases under ./atlases)".to_owned()
        } else {
            atlas_state
                .loaded
                .iter()
                .map(|a| a.id().to_owned())
                .collect::<Vec<_>>()
                .join(", ")
        }
    )));
    let owner = replica_id(&config, ids.as_ref(), &mut notices);
    close_interrupted(
        &backends,
        &atlas_state,
        clock.as_ref(),
        &owner,
        &mut notices,
    )?;
    config.replica_id = Some(owner);
    roll_relay_forward(&backends, &mut notices)?;
    notices.push(StartNotice::Info(match &config.postgres {
        Some(_) => format!(
            "store: PostgreSQL, schema `{}`{}",
            config.postgres_schema,
            connection_budget(&backends)
        ),
        None => format!("store: redb in {}", config.data.display()),
    }));
    let parts = Parts {
        auth,
        backends,
        atlas_state,
        catalogued: true,
        test_clock,
        log,
    };
    Ok((assemble(config, clock, ids, parts)?, notices))
}

/// A runtime on the data directory `data` for a front door in this process (the CLI's local
/// mode, `cra mcp serve`): the same store, rules and events as `cra serve` on that directory,
/// with the atlases of `atlases` (none when empty), no listener, no executors but the built-in
/// ones and no keys (the caller names its actor, [`crate::auth::Actor::local`]). It rolls
/// forward the Relay events a stopped server still owed, as a start would, and, when atlases
/// are named, closes the executions the directory's last process left in flight (every process
/// on an embedded store leases as `local`; closing one writes its executor, which only the
/// atlases name).
///
/// A running server holds the directory: the answer is then [`StartError::Store`] with
/// [`cra_store::BackendError::InUse`], which names that server's process.
pub fn open_local(
    data: &std::path::Path,
    atlases: &[std::path::PathBuf],
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
) -> Result<(AppState, Vec<StartNotice>), StartError> {
    let plain = crate::config::EncryptionConfig::default();
    open_local_with(data, atlases, BTreeMap::new(), plain, clock, ids)
}

/// [`open_local`] with `executors` bound as `[executors]` would bind them for `cra serve`
/// (`cra mcp proxy` binds its upstream so), on a directory whose records are encrypted at rest
/// with the keys `encryption` names (`[encryption]`; the default for a plaintext directory,
/// `cra relay --storage-key-file` otherwise). A missing or wrong key is [`StartError::Store`]
/// with [`cra_store::BackendError::StorageKey`], naming the key needed.
///
/// # Errors
/// As [`open_local`], and when an executor's configuration or a key file cannot be used.
pub fn open_local_with(
    data: &std::path::Path,
    atlases: &[std::path::PathBuf],
    executors: BTreeMap<String, crate::config::ExecutorConfig>,
    encryption: crate::config::EncryptionConfig,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
) -> Result<(AppState, Vec<StartNotice>), StartError> {
    let config = RuntimeConfig {
        data: data.to_owned(),
        atlases: atlases.to_vec(),
        executors,
        encryption,
        ..RuntimeConfig::default()
    };
    config.validate()?;
    // Only the atlases named: a front door never picks up `./atlases` on its own.
    let atlas_state = if config.atlases.is_empty() {
        crate::atlases::AtlasState::empty()
    } else {
        crate::atlases::load_all(&config.atlases).map_err(StartError::Other)?
    };
    let mut notices = Vec::new();
    let backends = crate::backend::open(&config, clock.clone(), ids.clone())?;
    // Executions this directory's last process (a server or a front door, all `local` on the
    // embedded store) left in flight are closed as a server's start closes them; their events
    // name the executor, which only the atlases know, so a door without atlases leaves them.
    if !config.atlases.is_empty() {
        let owner = replica_id(&config, ids.as_ref(), &mut notices);
        close_interrupted(
            &backends,
            &atlas_state,
            clock.as_ref(),
            &owner,
            &mut notices,
        )?;
    }
    roll_relay_forward(&backends, &mut notices)?;
    let (log, _) =
        crate::tlog::Log::open(&config, backends.log.clone()).map_err(StartError::Other)?;
    let parts = Parts {
        log,
        auth: Credentials::new(KeysFile::default(), std::path::PathBuf::new(), None, None)?,
        backends,
        atlas_state,
        catalogued: false,
        test_clock: None,
    };
    Ok((assemble(config, clock, ids, parts)?, notices))
}

/// Closes the executions `owner` left in flight ([`crate::inflight::close_interrupted`]), and
/// says how many when there were some.
fn close_interrupted(
    backends: &crate::Backends,
    atlases: &crate::atlases::AtlasState,
    clock: &dyn Clock,
    owner: &str,
    notices: &mut Vec<StartNotice>,
) -> Result<(), StartError> {
    let closed = crate::inflight::close_interrupted(
        backends.carp.as_ref(),
        backends.chains.as_ref(),
        atlases,
        clock,
        owner,
    )
    .map_err(|e| StartError::Other(e.to_string()))?;
    if closed > 0 {
        notices.push(StartNotice::Info(format!(
            "closed {closed} execution(s) cut off by the last stop as `{owner}` (action.failed, {}): check their target systems",
            crate::inflight::INTERRUPTED
        )));
    }
    Ok(())
}

/// Appends the events of the Relay writes the last stop cut off before their append (the
/// outbox, `service/relay/outbox.rs`), and says how many.
fn roll_relay_forward(
    backends: &crate::Backends,
    notices: &mut Vec<StartNotice>,
) -> Result<(), StartError> {
    cra_store::fault_point!("start.executions.closed");
    let rolled = crate::service::relay::outbox::roll_forward(
        backends.relay.as_ref(),
        backends.carp.as_ref(),
        backends.state_log.as_ref(),
    )
    .map_err(|e| StartError::Other(e.to_string()))?;
    if rolled > 0 {
        notices.push(StartNotice::Info(format!(
            "appended the events of {rolled} Relay write(s) the last stop cut off before their append"
        )));
    }
    Ok(())
}

/// What differs between the runtimes [`build_runtime`] and [`open_local`] put together.
struct Parts {
    auth: Credentials,
    backends: crate::Backends,
    atlas_state: crate::atlases::AtlasState,
    /// Whether atlas changes are committed to the store's catalog (a server) or not (a door).
    catalogued: bool,
    test_clock: Option<Arc<crate::conformance::TestClock>>,
    log: crate::tlog::Log,
}

/// The runtime of `config` over opened stores.
fn assemble(
    config: RuntimeConfig,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    parts: Parts,
) -> Result<AppState, StartError> {
    let limiter = match &parts.backends.postgres {
        Some(pg) => RateLimiter::shared(
            config.limits.requests_per_second,
            config.limits.burst,
            clock.clone(),
            pg.clone(),
        ),
        None => RateLimiter::new(
            config.limits.requests_per_second,
            config.limits.burst,
            clock.clone(),
        ),
    };
    let relay = cra_relay::Relay::new(
        parts.backends.relay.clone(),
        clock.clone(),
        ids.clone(),
        Arc::new(cra_relay::session::SeededCallsigns::new(
            clock.now().unix_timestamp_nanos() as u64,
        )),
    );
    let resolution_cache = (config.resolution_cache_entries > 0).then(|| {
        Arc::new(cra_carp::cache::ResolutionCache::new(
            config.resolution_cache_entries,
        ))
    });
    let mcp = crate::executor::mcp::McpExecutors::from_config(&config.executors);
    let embedded = parts.backends.postgres.is_none();
    let atlas_catalog = parts.catalogued.then(|| parts.backends.catalog.clone());
    let config_redaction = config.redaction.clone();
    let runtime = Runtime {
        relay,
        resolution_cache,
        started_at: cra_wire::clock::format_timestamp(clock.now()),
        config,
        clock,
        ids,
        auth: parts.auth,
        limiter,
        metrics: Metrics::default(),
        backends: parts.backends,
        hub: Arc::new(crate::tracelog::Hub::default()),
        atlas_state: std::sync::RwLock::new(Arc::new(parts.atlas_state)),
        atlas_catalog,
        test_clock: parts.test_clock,
        http: crate::tls::http_client().build().map_err(|e| {
            StartError::Other(format!("cannot build the executors' HTTP client: {e}"))
        })?,
        operator_chain: tokio::sync::Mutex::new(false),
        stopping: tokio_util::sync::CancellationToken::new(),
        mcp,
        tool_lists: tokio::sync::watch::Sender::new(0),
        leading: Arc::new(tokio::sync::watch::Sender::new(embedded)),
        log: Arc::new(parts.log),
        // `config.validate()`, which every start runs first, has compiled these rules once.
        redactor: config_redaction.redactor().unwrap_or_default(),
        problems: std::sync::Mutex::default(),
    };
    Ok(AppState(Arc::new(runtime)))
}

/// What a replica may take of the database server's connections, for the start log: each replica
/// opens at most this many (its pools, the feed's listener, the leader bid), and the replicas
/// together must stay under the server's `max_connections` (`specs/deployment.md`).
fn connection_budget(backends: &crate::Backends) -> String {
    let Some(pg) = &backends.postgres else {
        return String::new();
    };
    let mine = pg.pooled_connections_at_most() + 2;
    match pg.server_max_connections() {
        Ok(limit) => format!(
            "; this replica opens at most {mine} connections, the server allows {limit} (replicas x {mine} must stay under it)"
        ),
        Err(_) => format!("; this replica opens at most {mine} connections"),
    }
}

/// The lease owner of this instance: the configured `replica_id`, else `local` on the embedded
/// store (one process owns a data directory), else (PostgreSQL) a new id, with a warning that
/// its interrupted executions will not be closed by a later start.
fn replica_id(
    config: &RuntimeConfig,
    ids: &dyn IdGenerator,
    notices: &mut Vec<StartNotice>,
) -> String {
    match (&config.replica_id, &config.postgres) {
        (Some(id), _) => id.clone(),
        (None, None) => cra_carp::engine::DEFAULT_LEASE_OWNER.to_owned(),
        (None, Some(_)) => {
            let id = ids.new_id();
            notices.push(StartNotice::Info(format!(
                "replica_id not set: this start is `{id}`; set a stable replica_id per replica so a restart closes the executions a crash cut off"
            )));
            id
        }
    }
}

/// A server running on a tokio task.
#[derive(Debug)]
pub struct RunningServer {
    /// The address actually bound.
    pub addr: SocketAddr,
    /// The shared state (tests read counters and stores through it).
    pub state: AppState,
    /// The outcome of the scheduled retention's latest run (`None` before the first, and
    /// always without `[retention]`); a test awaits a run on it.
    pub retention_runs: RetentionRuns,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The scheduled retention, stopped with the server.
    retention: Option<tokio::task::JoinHandle<()>>,
    /// The leader's checkpoint timer, stopped with the server.
    checkpoints: tokio::task::JoinHandle<()>,
    /// Other replicas' appends, followed while the server runs (PostgreSQL).
    replicas: Option<crate::replicas::ReplicaFeed>,
    /// This replica's bid to lead periodic work (PostgreSQL).
    leader: Option<cra_store::pg::leader::Leadership>,
    /// Closed once every connection's service is dropped ([`ServiceGuard`]).
    services_gone: tokio::sync::mpsc::Receiver<()>,
    /// The keys watch, the webhooks, the atlas watch and the clock sampler: ended (aborted) by
    /// the shutdown before it drops the state.
    background: Vec<tokio::task::JoinHandle<()>>,
}

/// Carried by every clone of the router (one per connection): the serving task can end while a
/// connection's task is still dropping its service, and with it a handle on the state (so on
/// the store). [`RunningServer::shutdown`] waits for the last guard, so that when it returns the
/// store is closed as soon as the caller lets go of its own handles.
#[derive(Clone)]
struct ServiceGuard {
    _open: tokio::sync::mpsc::Sender<()>,
}

/// Where the scheduled retention reports each run.
pub type RetentionRuns = tokio::sync::watch::Receiver<
    Option<crate::error::ApiResult<crate::service::retention::RetentionRun>>,
>;

impl RunningServer {
    /// The server's base URL: `https://ADDR` with TLS, else `http://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.state.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, and waits.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.finish().await
    }

    /// Waits until the server stops by itself (it does not, unless told).
    pub async fn wait(mut self) -> std::io::Result<()> {
        let _keep = self.shutdown.take();
        self.finish().await
    }

    /// Waits for the serving task, then lets go of the runtime's state on a blocking thread: the
    /// PostgreSQL backend's connections are synchronous clients that must not be dropped on an
    /// async worker (their drop blocks on a runtime of their own).
    async fn finish(self) -> std::io::Result<()> {
        let RunningServer {
            state,
            task,
            retention,
            checkpoints,
            background,
            replicas,
            leader,
            mut services_gone,
            ..
        } = self;
        if let Some(job) = retention {
            job.abort();
            let _ = job.await;
        }
        let result = match task.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        };
        // The serving task has ended (its signal cancelled `stopping`): the checkpoint timer
        // returns once a cut it is running is done, and with it its handle on the store.
        state.stopping.cancel();
        let _ = checkpoints.await;
        for task in background {
            task.abort();
            let _ = task.await;
        }
        // No message is ever sent: this returns `None` once the last connection's service (and
        // the state it holds) is dropped.
        while services_gone.recv().await.is_some() {}
        state.mcp.close().await;
        let _ = tokio::task::spawn_blocking(move || drop((leader, replicas, state))).await;
        result
    }
}

/// Binds `state.config.addr` and serves until [`RunningServer::shutdown`] or `stop` resolves.
pub async fn start(
    state: AppState,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<RunningServer, StartError> {
    let addr = state.config.validate()?;
    let tls = match &state.config.tls {
        Some(t) => Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(
            t,
        )?)),
        None => None,
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let (guard, services_gone) = tokio::sync::mpsc::channel(1);
    let app = routes::router(state.clone()).layer(axum::Extension(ServiceGuard { _open: guard }));
    // What can refuse the start comes before anything is spawned or recorded.
    let hooks = state
        .config
        .notifications
        .webhooks
        .iter()
        .cloned()
        .map(crate::webhooks::Webhook::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Other(format!("a webhook: {e}")))?;
    record_log_rotation(&state).await?;
    // Each holds the state (and so the store) until it ends: the shutdown ends them before it
    // lets the store go, so a stopped server's data directory is free when `shutdown` returns.
    let mut background = vec![tokio::spawn(crate::credentials::watch(state.clone()))];
    if !hooks.is_empty() {
        background.push(tokio::spawn(crate::webhooks::run(state.clone(), hooks)));
    }
    if let Some(otlp) = state.config.otlp.clone() {
        background.push(tokio::spawn(crate::otlp::run(state.clone(), otlp)));
    }
    if state.config.watch {
        background.push(tokio::spawn(crate::atlases::watch(state.clone())));
    }
    background.push(tokio::spawn(crate::backend::keep_clock(state.clone())));
    crate::service::atlases::record_unrecorded(&state.0).await;
    let replicas = crate::replicas::start(&state).await?;
    let leader = crate::leader::bid(&state).await?;
    let (runs, retention_runs) = tokio::sync::watch::channel(None);
    let retention = match &state.config.retention {
        Some(r) => {
            let job = crate::service::retention::scheduled(
                state.0.clone(),
                state.leading.subscribe(),
                r.policy()?,
                std::time::Duration::from_secs(r.interval_seconds),
                runs,
            );
            Some(tokio::spawn(job))
        }
        None => None,
    };
    let checkpoints = tokio::spawn(crate::tlog::keep_checkpoints(
        state.log.clone(),
        state.leading.subscribe(),
        std::time::Duration::from_secs(state.config.log.checkpoint_interval_seconds),
        state.stopping.clone(),
    ));
    let (tx, rx) = oneshot::channel::<()>();
    let stopping = state.stopping.clone();
    let limits = state.config.limits.connections();
    let task = tokio::spawn(async move {
        let signal = async move {
            tokio::select! {
                _ = rx => {}
                () = stop => {}
            }
            stopping.cancel();
        };
        crate::listen::serve(listener, app, limits, tls, signal).await;
        Ok(())
    });
    Ok(RunningServer {
        addr: bound,
        state,
        retention_runs,
        shutdown: Some(tx),
        task,
        retention,
        checkpoints,
        background,
        replicas,
        leader,
        services_gone,
    })
}

/// Records `log.key_rotated` in the operator audit chain when this start moved the log's key,
/// before anything is served under the new key.
async fn record_log_rotation(state: &AppState) -> Result<(), StartError> {
    let Some(rotated) = state.log.rotation() else {
        return Ok(());
    };
    let chain = crate::service::operator::lock(state)
        .await
        .map_err(|e| StartError::Other(e.body.message))?;
    let draft = crate::service::operator::draft(state, &rotated);
    chain
        .append(vec![draft])
        .await
        .map_err(|e| StartError::Other(e.body.message))?;
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Installs the global log subscriber (`RUST_LOG` filters; default `info`, with the MCP
/// transport's own lines at `error`: it logs each connection and each client mistake, which cra
/// answers and records itself). Keys never appear in log lines: requests are logged with the
/// key's fingerprint only. Lines carry colour codes only when stderr is a terminal.
pub fn init_logging(format: crate::config::LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=error"));
    // Colour codes only for a person at a terminal: a file or a log collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = match format {
        crate::config::LogFormat::Json => builder.json().try_init(),
        crate::config::LogFormat::Text => builder.try_init(),
    };
}
