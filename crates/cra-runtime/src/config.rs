//! Runtime configuration: the TOML file of `cra serve --config FILE`, with command-line flags
//! laid over it. Every field has a default, so an empty file (or none) is a working local server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The default listen address.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:8421";

/// How the server logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where a server on PostgreSQL reads the time from (`clock = "database" | "local"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// The database's clock, so every replica records and orders by one clock
    /// (`cra_store::pg::clock`); the embedded store has no other clock than the local one.
    #[default]
    Database,
    /// The clock the server was started with (tests that fix the time).
    Local,
}

/// Limits that protect the server from its callers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest request body accepted, in bytes (larger: 413 `payload_too_large`).
    pub max_body_bytes: usize,
    /// Sustained requests per second allowed per key (0 disables rate limiting).
    pub requests_per_second: u32,
    /// Requests a key may make in a burst above the sustained rate.
    pub burst: u32,
    /// Events a WebSocket subscriber may have queued before it is closed as too slow.
    pub stream_queue: usize,
    /// Milliseconds a whole request head may take to arrive, the first one and each later one
    /// on a kept-alive connection (so also the keep-alive idle timeout).
    pub header_read_timeout_ms: u64,
    /// Milliseconds a request body may take to arrive whole (longer: 408 `request_timeout`).
    pub body_timeout_ms: u64,
    /// Milliseconds a write may wait for the client to read before the connection is closed.
    pub write_timeout_ms: u64,
    /// Connections served at once; absent: three quarters of the process's open-file limit. At
    /// the limit, the oldest connection without a whole request head is closed to make room.
    pub max_connections: Option<usize>,
    /// Milliseconds shutdown waits for requests in progress before closing their connections.
    pub shutdown_deadline_ms: u64,
    /// Milliseconds between the pings of a WebSocket stream; a peer silent until the next one
    /// is closed (1001).
    pub stream_ping_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            requests_per_second: 500,
            burst: 1000,
            stream_queue: 4096,
            header_read_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            write_timeout_ms: 30_000,
            max_connections: None,
            shutdown_deadline_ms: 10_000,
            stream_ping_ms: 30_000,
        }
    }
}

impl Limits {
    /// Refuses, by name, a connection limit or deadline of zero: it would close or refuse every
    /// connection.
    fn check_connections(&self) -> Result<(), ConfigError> {
        let zero = [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            ("write_timeout_ms", self.write_timeout_ms),
            ("shutdown_deadline_ms", self.shutdown_deadline_ms),
            ("stream_ping_ms", self.stream_ping_ms),
            (
                "max_connections",
                self.max_connections.map_or(1, |n| n as u64),
            ),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        match zero {
            Some((name, _)) => Err(ConfigError::Invalid(format!(
                "`limits.{name}` must be at least 1"
            ))),
            None => Ok(()),
        }
    }

    /// How long a request body may take to arrive.
    pub(crate) fn body_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.body_timeout_ms)
    }

    /// The connection limits of the listener (`crate::listen`).
    pub(crate) fn connections(&self) -> crate::listen::ConnectionLimits {
        crate::listen::ConnectionLimits {
            header_read_timeout: std::time::Duration::from_millis(self.header_read_timeout_ms),
            write_timeout: std::time::Duration::from_millis(self.write_timeout_ms),
            max_connections: self
                .max_connections
                .unwrap_or_else(crate::listen::default_max_connections),
            shutdown_deadline: std::time::Duration::from_millis(self.shutdown_deadline_ms),
        }
    }
}

/// JWT verification settings (optional; API keys work without them).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// `HS256` or `RS256`; tokens signed with any other algorithm (or `none`) are refused.
    pub algorithm: String,
    /// The HS256 shared secret.
    #[serde(default)]
    pub secret: Option<String>,
    /// A file holding the HS256 secret.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// The RS256 public key (PEM).
    #[serde(default)]
    pub public_key_file: Option<PathBuf>,
    /// Required `iss`, if set.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Required `aud`, if set.
    #[serde(default)]
    pub audience: Option<String>,
}

/// An operator-bound executor: the atlas names the executor, the operator names where it is.
/// `kind = "http"` (the default): parameters are POSTed as JSON to `url`. `kind = "mcp"`: the
/// tools of the MCP server started by `command` (stdio) or reached at `url` (Streamable HTTP).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// What the executor speaks.
    #[serde(default)]
    pub kind: ExecutorKind,
    /// Where the parameters are POSTed as JSON (`http`), or the MCP server's URL (`mcp`).
    #[serde(default)]
    pub url: String,
    /// The MCP server to start, program then arguments (`mcp` only; instead of `url`).
    #[serde(default)]
    pub command: Vec<String>,
    /// How long to wait for the endpoint, in milliseconds.
    #[serde(default = "default_executor_timeout_ms")]
    pub timeout_ms: u64,
    /// Most connections open at once to an MCP server (`mcp` only).
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
}

/// The protocol an executor speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// A JSON POST per call.
    #[default]
    Http,
    /// MCP tool calls.
    Mcp,
}

impl ExecutorConfig {
    /// An `http` executor at `url` with `timeout_ms`.
    pub fn http(url: impl Into<String>, timeout_ms: u64) -> Self {
        Self {
            kind: ExecutorKind::Http,
            url: url.into(),
            command: Vec::new(),
            timeout_ms,
            pool_size: default_pool_size(),
        }
    }

    /// An `mcp` executor that starts `command` (program, then arguments).
    pub fn mcp_command(command: Vec<String>, timeout_ms: u64) -> Self {
        Self {
            kind: ExecutorKind::Mcp,
            url: String::new(),
            command,
            timeout_ms,
            pool_size: default_pool_size(),
        }
    }

    /// An `mcp` executor at `url` (Streamable HTTP).
    pub fn mcp_url(url: impl Into<String>, timeout_ms: u64) -> Self {
        Self {
            kind: ExecutorKind::Mcp,
            ..Self::http(url, timeout_ms)
        }
    }

    /// Why this executor cannot be used, naming it as `name`.
    fn check(&self, name: &str) -> Result<(), ConfigError> {
        let web = self.url.starts_with("http://") || self.url.starts_with("https://");
        let problem = match self.kind {
            ExecutorKind::Http if !self.command.is_empty() => {
                Some("`command` is for kind = \"mcp\"; an http executor has a url".to_owned())
            }
            ExecutorKind::Http if !web => Some(format!(
                "url `{}` must start with http:// or https://",
                self.url
            )),
            ExecutorKind::Mcp if self.command.is_empty() == self.url.is_empty() => Some(
                "an mcp executor has either a command (a program and its arguments) or a url"
                    .to_owned(),
            ),
            ExecutorKind::Mcp if !self.url.is_empty() && !web => Some(format!(
                "url `{}` must start with http:// or https://",
                self.url
            )),
            _ if self.pool_size == 0 => Some("`pool_size` must be at least 1".to_owned()),
            _ => None,
        };
        match problem {
            Some(p) => Err(ConfigError::Invalid(format!("executor `{name}`: {p}"))),
            None => Ok(()),
        }
    }
}

fn default_pool_size() -> usize {
    2
}

fn default_executor_timeout_ms() -> u64 {
    10_000
}

/// `/mcp` (`[mcp]`, `specs/mcp.md`): which browser origins may call it. A request carrying an
/// `Origin` header not listed here is answered 403; requests without one (not from a browser)
/// pass. Empty (the default): no browser origin may call it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Allowed origins, each with a scheme (`https://console.example.com:443`,
    /// `http://localhost:*`).
    pub allowed_origins: Vec<String>,
}

/// Approvals (`[approvals]`, `specs/carp.md`, "Separation of duties").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// Nobody decides an approval they requested: a key that is both agent and operator (or an
    /// admin) that asked for an approval cannot grant or reject it. On by default.
    pub separation_of_duties: bool,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            separation_of_duties: true,
        }
    }
}

/// HTTPS and WSS (`[tls]`, `specs/http.md`, "TLS"): the server's certificate chain and key, and
/// optionally the CA whose client certificates it requires (mutual TLS).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file with the server's certificate, then any intermediates.
    pub cert: PathBuf,
    /// PEM file with the certificate's private key (PKCS #8, PKCS #1 or SEC1).
    pub key: PathBuf,
    /// PEM file with the CA certificates client certificates must chain to. Set, every client
    /// presents a certificate; its subject maps to an actor through the keys file's
    /// `[[certificates]]`.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// The transparency log (`[log]`, `specs/tlog.md`): every TRACE event is a leaf of one Merkle
/// tree whose signed checkpoints let anyone who saw one detect a rewritten history.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// The checkpoints' origin line and the log key's name. Absent: `<hostname>/cra-log`. Replicas
    /// of one PostgreSQL deployment must all set the same one.
    pub origin: Option<String>,
    /// A file holding the log's signer key string (`PRIVATE+KEY+<origin>+...`, made by `cra log
    /// key generate`). Absent: on the embedded store, `<data>/log.key`, created on first start;
    /// on PostgreSQL the log keeps its leaves but signs no checkpoint until one is configured
    /// (every replica must be given the same file).
    pub key_file: Option<PathBuf>,
    /// Signer key files that sign every checkpoint beside `key_file` while the log key is
    /// rotated (`specs/tlog.md`, "Rotating the log key"); each is named after the origin. The
    /// store accepts a `key_file` other than the one it recorded only when the recorded key is
    /// among these.
    pub rotation_key_files: Vec<PathBuf>,
    /// Seconds between the leader's checkpoints (cut only when the tree grew); at least 1.
    pub checkpoint_interval_seconds: u64,
    /// C2SP `tlog-witness` servers asked to cosign every checkpoint before it is published
    /// (`[[log.witnesses]]`).
    pub witnesses: Vec<WitnessConfig>,
    /// How many of `witnesses` must cosign a checkpoint before it is published; a checkpoint
    /// with fewer is not published (the timer tries again, `POST /v1/log/checkpoint` answers
    /// 503). Absent: all of them. `0` asks every witness but publishes whatever came back.
    pub witnesses_required: Option<usize>,
    /// Milliseconds one witness has to answer one request (a witness that does not answer in
    /// time counts as not cosigning); at least 1.
    pub witness_timeout_ms: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            origin: None,
            key_file: None,
            rotation_key_files: Vec::new(),
            checkpoint_interval_seconds: 60,
            witnesses: Vec::new(),
            witnesses_required: None,
            witness_timeout_ms: 10_000,
        }
    }
}

impl LogConfig {
    /// How many witness cosignatures a checkpoint needs.
    pub fn required_cosignatures(&self) -> usize {
        self.witnesses_required.unwrap_or(self.witnesses.len())
    }

    fn check_witnesses(&self) -> Result<(), ConfigError> {
        if self.witness_timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "`log.witness_timeout_ms` must be at least 1".into(),
            ));
        }
        let required = self.required_cosignatures();
        if required > self.witnesses.len() {
            return Err(ConfigError::Invalid(format!(
                "`log.witnesses_required` = {required} but only {} `[[log.witnesses]]` are configured",
                self.witnesses.len()
            )));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, w) in self.witnesses.iter().enumerate() {
            let verifier = w
                .verifier()
                .map_err(|e| ConfigError::Invalid(format!("`log.witnesses[{i}].key`: {e}")))?;
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return Err(ConfigError::Invalid(format!(
                    "`log.witnesses[{i}].url` = `{}` is not an http:// or https:// URL (the prefix before `/add-checkpoint`)",
                    w.url
                )));
            }
            if !names.insert(verifier.name().to_owned()) {
                return Err(ConfigError::Invalid(format!(
                    "`log.witnesses[{i}]`: the witness `{}` is configured twice; each witness counts once",
                    verifier.name()
                )));
            }
        }
        Ok(())
    }
}

/// Encryption at rest (`[encryption]`, `specs/storage-encryption.md`): with a key, every TRACE
/// event body and CARP record is stored encrypted (XChaCha20-Poly1305) on either backend. Absent:
/// stored as plaintext.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EncryptionConfig {
    /// A file holding the storage key new records are encrypted with (32 bytes as 64 hex digits
    /// or base64; `cra store key generate` writes one).
    pub key_file: Option<PathBuf>,
    /// Instead of `key_file`: the name of an environment variable holding the key.
    pub key_env: Option<String>,
    /// Files of retired keys: records encrypted with them still read, nothing new is encrypted
    /// with them. A rotation adds the old key here until `cra store reencrypt` has run.
    pub retired_key_files: Vec<PathBuf>,
}

impl EncryptionConfig {
    /// The keys this configuration names, read from their files or variable.
    ///
    /// # Errors
    /// Both or neither of `key_file` and `key_env` with retired keys, a file or variable that
    /// cannot be read, or a text that is not a key; each names the setting.
    pub fn encryption(&self) -> Result<cra_store::Encryption, ConfigError> {
        let current = match (&self.key_file, &self.key_env) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid(
                    "`encryption.key_file` and `encryption.key_env` are both set; give the storage key one way".into(),
                ));
            }
            (Some(path), None) => Some(key_from_file("encryption.key_file", path)?),
            (None, Some(name)) => {
                let text = std::env::var(name).map_err(|e| {
                    ConfigError::Invalid(format!(
                        "`encryption.key_env` names `{name}`, which cannot be read ({e}); set it to the storage key"
                    ))
                })?;
                Some(parse_storage_key(&format!("the variable `{name}`"), &text)?)
            }
            (None, None) => None,
        };
        let retired = self
            .retired_key_files
            .iter()
            .map(|p| key_from_file("encryption.retired_key_files", p))
            .collect::<Result<Vec<_>, _>>()?;
        match current {
            Some(current) => Ok(cra_store::Encryption::new(current, retired)),
            None if retired.is_empty() => Ok(cra_store::Encryption::plaintext()),
            None => Err(ConfigError::Invalid(
                "`encryption.retired_key_files` is set without a current key; set `encryption.key_file` or `encryption.key_env` too".into(),
            )),
        }
    }
}

/// Field-level redaction (`[[redaction.rules]]`, `specs/redaction.md`): values of agents' requests
/// replaced by `[REDACTED]` before anything of them is decided, recorded or answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedactionConfig {
    /// The rules, applied in order.
    pub rules: Vec<RedactionRule>,
}

/// One redaction rule (`cra_atlas::redaction`): the format atlases use too.
pub use cra_atlas::redaction::RedactionRule;

impl RedactionConfig {
    /// The rules, compiled.
    ///
    /// # Errors
    /// The first rule that cannot be used, named `redaction.rules[N]`.
    pub fn redactor(&self) -> Result<cra_atlas::redaction::Redactor, ConfigError> {
        cra_atlas::redaction::Redactor::new(&self.rules).map_err(|e| {
            ConfigError::Invalid(format!("`redaction.rules[{}]`: {}", e.index, e.message))
        })
    }
}

fn key_from_file(setting: &str, path: &Path) -> Result<cra_store::StorageKey, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::Invalid(format!("`{setting}`: cannot read {}: {e}", path.display()))
    })?;
    parse_storage_key(&format!("`{setting}` {}", path.display()), &text)
}

fn parse_storage_key(what: &str, text: &str) -> Result<cra_store::StorageKey, ConfigError> {
    cra_store::StorageKey::parse(text).map_err(|e| ConfigError::Invalid(format!("{what}: {e}")))
}

/// One witness of the log (`[[log.witnesses]]`): where it answers and the key it cosigns with.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessConfig {
    /// The witness's URL prefix: requests go to `<url>/add-checkpoint`.
    pub url: String,
    /// The witness's cosignature verifier key (`<name>+<key id>+<base64>`, as `cra witness
    /// key generate` prints it).
    pub key: String,
}

impl WitnessConfig {
    /// The witness's cosignature verifier.
    ///
    /// # Errors
    /// The key is not a `cosignature/v1` verifier key string.
    pub fn verifier(&self) -> Result<cra_tlog::CosignatureVerifier, String> {
        cra_tlog::CosignatureVerifier::parse(self.key.trim()).map_err(|e| {
            format!(
                "`{}` is not a witness's cosignature verifier key (`<name>+<key id>+<base64>`): {e}",
                self.key
            )
        })
    }
}

/// Retention (TRACE §4.6): `[retention] days = N` keeps an ended session N days after its last
/// event, then `cra serve` removes it (recorded first in the operator audit chain). Absent:
/// everything is kept.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Days an ended session is kept after its last event; at least 1 (TRACE §4.6: never under
    /// 24 hours; 30 recommended).
    pub days: u32,
    /// Seconds between two runs of the scheduled job (the first runs at start); at least 60.
    #[serde(default = "default_retention_interval_seconds")]
    pub interval_seconds: u64,
}

fn default_retention_interval_seconds() -> u64 {
    3600
}

impl RetentionConfig {
    /// The policy: [`RetentionConfig::days`] days; fewer than one is refused, naming the key.
    pub fn policy(&self) -> Result<cra_store::RetentionPolicy, ConfigError> {
        cra_store::RetentionPolicy::days(self.days)
            .map_err(|e| ConfigError::Invalid(format!("`retention.days` = {}: {e}", self.days)))
    }
}

/// Signed atlases (`[atlas_signing]`, `specs/atlas-signing.md`). With at least one trusted key,
/// every atlas the server takes in (at start, on a `--watch` reload, over `POST`/`PUT
/// /v1/atlases`) must carry a `cra-atlas` SSH signature over its digest by one of them, or it
/// is refused; without one (the default) nothing is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AtlasSigningConfig {
    /// Trusted Ed25519 public keys, each in the one-line OpenSSH form (`ssh-ed25519 AAAA...`).
    pub trusted_keys: Vec<String>,
    /// An `allowed_signers` file (as `ssh-keygen -Y verify -f` reads it) whose Ed25519 keys
    /// allowed the `cra-atlas` namespace are trusted too. Read at start and at each check, so an
    /// edit applies without a restart; a file that cannot be read refuses every atlas.
    pub allowed_signers: Option<PathBuf>,
}

impl AtlasSigningConfig {
    /// The trusted keys, or `None` when signing is not configured (nothing is checked). A key or
    /// file that cannot be used is an error naming it; so is a configuration that names a file
    /// holding no Ed25519 key for `cra-atlas` (it would refuse every atlas).
    pub fn trust(&self) -> Result<Option<cra_atlas::signing::Trust>, ConfigError> {
        if self.trusted_keys.is_empty() && self.allowed_signers.is_none() {
            return Ok(None);
        }
        let bad = |e: cra_atlas::signing::SigningError| {
            ConfigError::Invalid(format!("`atlas_signing`: {e}"))
        };
        let mut trust = cra_atlas::signing::Trust::new();
        for (i, key) in self.trusted_keys.iter().enumerate() {
            trust
                .add_public_key(key, &format!("atlas_signing.trusted_keys[{i}]"))
                .map_err(bad)?;
        }
        if let Some(path) = &self.allowed_signers {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::Invalid(format!(
                    "`atlas_signing.allowed_signers`: cannot read {}: {e}",
                    path.display()
                ))
            })?;
            trust
                .add_allowed_signers(&text, &path.display().to_string())
                .map_err(bad)?;
        }
        if trust.is_empty() {
            return Err(ConfigError::Invalid(
                "`atlas_signing` trusts no Ed25519 key for the `cra-atlas` namespace: add one, or remove the section to run without signed atlases".to_owned(),
            ));
        }
        Ok(Some(trust))
    }
}

/// Everything `cra serve` can be told.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Listen address (`127.0.0.1:0` picks a free port, which is printed).
    pub addr: String,
    /// The embedded store's data directory.
    pub data: PathBuf,
    /// A PostgreSQL URL; when set the server uses PostgreSQL instead of the embedded store.
    pub postgres: Option<String>,
    /// The PostgreSQL schema holding this deployment's tables.
    pub postgres_schema: String,
    /// PostgreSQL connections in each of this replica's two pools (reads and TRACE commits, at
    /// least 5; deferred CARP state writes): a server opens at most `max(postgres_pool, 5) +
    /// postgres_pool + 2` (the append feed's listener and the leader bid), and logs the figure
    /// at start (`specs/deployment.md` has a worked example).
    pub postgres_pool: usize,
    /// MiB of pages the embedded store (redb) keeps in memory
    /// ([`cra_store::DEFAULT_REDB_CACHE_BYTES`] says why the default is small).
    pub redb_cache_mib: usize,
    /// Atlas directories or packed archives to load. Empty: every atlas under `./atlases`.
    pub atlases: Vec<PathBuf>,
    /// Reload atlases when their files change.
    pub watch: bool,
    /// At start, let a directory atlas replace the stored atlas with the same id and version
    /// and other content (otherwise the start fails: a published version never changes).
    pub replace_atlases: bool,
    /// Log line format.
    pub log_format: LogFormat,
    /// The API keys file. Absent: `<data>/api-keys.toml`, created with one admin key on first start.
    pub api_keys: Option<PathBuf>,
    /// Default resolution lifetime.
    pub resolution_ttl_seconds: u64,
    /// How many resolutions the resolution cache remembers (`0` turns it off: every resolve is a
    /// fresh resolution; `specs/carp.md`, "The resolution cache").
    pub resolution_cache_entries: usize,
    /// Largest accepted difference between a request's timestamp and the runtime clock.
    pub clock_skew_seconds: u64,
    /// On PostgreSQL, whose clock the server's times come from: the database's (the default;
    /// replicas then agree however far their own clocks are off) or the local one.
    pub clock: ClockSource,
    /// Request limits.
    pub limits: Limits,
    /// Optional JWT verification.
    pub jwt: Option<JwtConfig>,
    /// Reload the keys file and the JWT settings when their files change (checked once a
    /// second); SIGHUP reloads them whatever this says.
    pub watch_keys: bool,
    /// The file this configuration was read from (`cra serve --config`): a credentials reload
    /// reads its `[jwt]` again. Set by [`RuntimeConfig::from_file`], never written in the file.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
    /// Executors by name (`[executors.NAME] url = ..., timeout_ms = ...`; `kind = "mcp"` with a
    /// `command` or `url` for an MCP server's tools).
    pub executors: BTreeMap<String, ExecutorConfig>,
    /// Tests only: admins may set the clock with `POST /v1/conformance/clock`.
    pub test_clock: bool,
    /// This server instance's name, owner of the executions it runs: on restart it closes the
    /// ones it left in flight, and only those. Replicas sharing a PostgreSQL schema need distinct,
    /// stable ids. Absent: `local` on the embedded store (one process owns a data directory); on
    /// PostgreSQL a new id per start, whose executions cut off by a crash stay open.
    pub replica_id: Option<String>,
    /// Retention of ended sessions (`[retention]`); absent, nothing is ever removed.
    pub retention: Option<RetentionConfig>,
    /// The MCP door `/mcp` (`[mcp]`).
    pub mcp: McpConfig,
    /// The transparency log (`[log]`).
    pub log: LogConfig,
    /// Signed atlases (`[atlas_signing]`); absent, atlases are not checked for signatures.
    pub atlas_signing: AtlasSigningConfig,
    /// Encryption at rest (`[encryption]`); absent, records are stored as plaintext.
    pub encryption: EncryptionConfig,
    /// Field-level redaction (`[[redaction.rules]]`); absent, nothing is redacted.
    pub redaction: RedactionConfig,
    /// Approvals (`[approvals]`): separation of duties, on by default.
    pub approvals: ApprovalsConfig,
    /// HTTPS (`[tls]`); absent, the server speaks plain HTTP.
    pub tls: Option<TlsConfig>,
    /// Approver notifications (`[[notifications.webhooks]]`); absent, nobody is told.
    pub notifications: NotificationsConfig,
    /// What one agent may make the server keep (`[quotas]`, `specs/quotas.md`).
    pub quotas: QuotasConfig,
    /// OpenTelemetry export (`[otlp]`, `--otlp-endpoint`; `specs/otlp.md`); absent, nothing is
    /// exported.
    pub otlp: Option<OtlpConfig>,
}

/// Where and how spans are exported: OTLP over HTTP with protobuf bodies.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The collector (`http://` or `https://`); spans go to its `/v1/traces` (added unless the
    /// path already ends with it).
    pub endpoint: String,
    /// Spans waiting to be sent, at most (more are dropped and counted).
    #[serde(default = "default_otlp_queue")]
    pub queue_spans: usize,
    /// Spans sent in one request, at most.
    #[serde(default = "default_otlp_batch")]
    pub batch_spans: usize,
    /// Milliseconds one export request may take.
    #[serde(default = "default_otlp_timeout_ms")]
    pub timeout_ms: u64,
    /// Headers sent with every export (a collector's API key, say).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl OtlpConfig {
    /// The export to `endpoint` with every other setting at its default.
    pub fn to(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            queue_spans: default_otlp_queue(),
            batch_spans: default_otlp_batch(),
            timeout_ms: default_otlp_timeout_ms(),
            headers: BTreeMap::new(),
        }
    }

    fn check(&self) -> Result<(), ConfigError> {
        let url = reqwest::Url::parse(&self.endpoint).map_err(|e| {
            ConfigError::Invalid(format!(
                "`otlp.endpoint` `{}` is not a URL: {e}",
                self.endpoint
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::Invalid(format!(
                "`otlp.endpoint` `{}` must be http:// or https:// (OTLP over HTTP)",
                self.endpoint
            )));
        }
        if self.queue_spans == 0 || self.batch_spans == 0 || self.timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "`otlp.queue_spans`, `otlp.batch_spans` and `otlp.timeout_ms` must be at least 1"
                    .into(),
            ));
        }
        for (name, value) in &self.headers {
            let ok = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
                && reqwest::header::HeaderValue::from_str(value).is_ok();
            if !ok {
                return Err(ConfigError::Invalid(format!(
                    "`otlp.headers`: `{name}` is not a header name with a header value"
                )));
            }
        }
        Ok(())
    }
}

fn default_otlp_queue() -> usize {
    8_192
}

fn default_otlp_batch() -> usize {
    512
}

fn default_otlp_timeout_ms() -> u64 {
    5_000
}

/// Quotas: how much one agent may make the server keep, whatever its request rate. Each is
/// refused with 429 `quota_exceeded` and changes nothing; 0 turns one off.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotasConfig {
    /// Sessions one agent may have open at once, counted in the store with every start and
    /// end, so replicas sharing a schema enforce one count between them.
    pub max_open_sessions: u64,
    /// Events one session's chain may hold: past it, the session's resolves and executes are
    /// refused (its end, and decisions on its approvals, are still recorded).
    pub max_session_events: u64,
    /// Bytes one session's chain may hold (its events' wire JSON): past it, as past
    /// `max_session_events`.
    pub max_session_bytes: u64,
    /// Candidate actions (allowed and denied) one resolve may weigh: each is recorded, so
    /// this bounds what one resolve writes (a 5,000-action atlas wrote 7.9 MB per resolve).
    /// Past it the resolve is refused (400 `invalid_request` at `/task/required_capabilities`)
    /// and asked to name fewer capabilities or atlases.
    pub max_resolve_actions: u64,
}

impl Default for QuotasConfig {
    fn default() -> Self {
        Self {
            max_open_sessions: 1000,
            max_session_events: 100_000,
            max_session_bytes: 256 << 20,
            max_resolve_actions: 1000,
        }
    }
}

impl QuotasConfig {
    /// The open-sessions quota, `None` when off.
    pub fn open_sessions(&self) -> Option<u64> {
        (self.max_open_sessions > 0).then_some(self.max_open_sessions)
    }

    /// The candidate-actions bound of one resolve, `None` when off.
    pub fn resolve_actions(&self) -> Option<usize> {
        (self.max_resolve_actions > 0)
            .then(|| usize::try_from(self.max_resolve_actions).unwrap_or(usize::MAX))
    }

    /// Whether a session holding `events` events of `bytes` bytes is full: the setting it
    /// reached, and its limit.
    pub fn session_full(&self, events: u64, bytes: u64) -> Option<(&'static str, u64)> {
        let reached = |limit: u64, held: u64| limit > 0 && held >= limit;
        if reached(self.max_session_events, events) {
            Some(("max_session_events", self.max_session_events))
        } else if reached(self.max_session_bytes, bytes) {
            Some(("max_session_bytes", self.max_session_bytes))
        } else {
            None
        }
    }

    /// Whether any per-session quota is on.
    pub fn bounds_sessions(&self) -> bool {
        self.max_session_events > 0 || self.max_session_bytes > 0
    }
}

/// Approver notifications: webhooks told when an approval opens, is decided or expires
/// (`specs/http.md`, "Approver notifications").
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotificationsConfig {
    /// Every webhook (`[[notifications.webhooks]]`).
    pub webhooks: Vec<WebhookConfig>,
}

/// One webhook: where approval notifications are POSTed, signed as Standard Webhooks sign.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The receiver's URL (`http://` or `https://`).
    pub url: String,
    /// The signing secret, `whsec_` and the base64 of 24 to 64 random bytes.
    #[serde(default)]
    pub secret: Option<String>,
    /// A file holding the secret instead.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// Which notifications: any of `approval.requested`, `approval.granted`,
    /// `approval.rejected`, `approval.expired` (absent: all).
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// Attempts before a delivery is given up (1 to 20).
    #[serde(default = "default_webhook_attempts")]
    pub max_attempts: u32,
    /// Milliseconds before the first retry; each later one waits twice as long, at most a
    /// minute.
    #[serde(default = "default_webhook_retry_ms")]
    pub retry_initial_ms: u64,
    /// Milliseconds one attempt may take.
    #[serde(default = "default_webhook_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_webhook_attempts() -> u32 {
    5
}
fn default_webhook_retry_ms() -> u64 {
    1_000
}
fn default_webhook_timeout_ms() -> u64 {
    10_000
}

/// The notifications a webhook may ask for.
pub const WEBHOOK_EVENTS: [&str; 4] = [
    "approval.requested",
    "approval.granted",
    "approval.rejected",
    "approval.expired",
];

impl WebhookConfig {
    /// The secret's bytes, read and checked.
    ///
    /// # Errors
    /// Neither or both of `secret` and `secret_file`, an unreadable file, or a secret that is
    /// not `whsec_` and base64 of 24 to 64 bytes.
    pub fn secret_bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        let text = match (&self.secret, &self.secret_file) {
            (Some(s), None) => s.clone(),
            (None, Some(p)) => std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read secret_file {}: {e}", p.display()))?,
            _ => return Err("needs exactly one of `secret` or `secret_file`".into()),
        };
        let encoded = text.trim().strip_prefix("whsec_").ok_or(
            "the secret must start with `whsec_` (Standard Webhooks), then base64 of 24 to 64 random bytes: `echo whsec_$(openssl rand -base64 32)`",
        )?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| format!("the secret after `whsec_` is not base64: {e}"))?;
        if !(24..=64).contains(&bytes.len()) {
            return Err(format!(
                "the secret holds {} bytes; use 24 to 64 random bytes",
                bytes.len()
            ));
        }
        Ok(bytes)
    }

    /// Whether this webhook asks for the notification `kind`.
    pub fn wants(&self, kind: &str) -> bool {
        self.events
            .as_ref()
            .is_none_or(|events| events.iter().any(|e| e == kind))
    }

    fn check(&self, i: usize) -> Result<(), ConfigError> {
        let invalid =
            |m: String| ConfigError::Invalid(format!("`notifications.webhooks[{i}]`: {m}"));
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(invalid(format!(
                "url `{}` is not http:// or https://",
                self.url
            )));
        }
        self.secret_bytes().map_err(invalid)?;
        if let Some(unknown) = self
            .events
            .iter()
            .flatten()
            .find(|e| !WEBHOOK_EVENTS.contains(&e.as_str()))
        {
            return Err(invalid(format!(
                "event `{unknown}` is not one of {}",
                WEBHOOK_EVENTS.join(", ")
            )));
        }
        if !(1..=20).contains(&self.max_attempts) {
            return Err(invalid("max_attempts must be 1 to 20".into()));
        }
        if self.timeout_ms == 0 || self.retry_initial_ms == 0 {
            return Err(invalid(
                "timeout_ms and retry_initial_ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            addr: DEFAULT_ADDR.to_owned(),
            data: PathBuf::from("./cra-data"),
            postgres: None,
            postgres_schema: "cra".to_owned(),
            postgres_pool: 16,
            redb_cache_mib: cra_store::DEFAULT_REDB_CACHE_BYTES >> 20,
            atlases: Vec::new(),
            watch: false,
            replace_atlases: false,
            log_format: LogFormat::Text,
            api_keys: None,
            resolution_ttl_seconds: 3600,
            resolution_cache_entries: 10_000,
            clock_skew_seconds: 300,
            clock: ClockSource::Database,
            limits: Limits::default(),
            jwt: None,
            watch_keys: true,
            config_file: None,
            executors: BTreeMap::new(),
            test_clock: false,
            replica_id: None,
            retention: None,
            mcp: McpConfig::default(),
            log: LogConfig::default(),
            atlas_signing: AtlasSigningConfig::default(),
            encryption: EncryptionConfig::default(),
            redaction: RedactionConfig::default(),
            approvals: ApprovalsConfig::default(),
            tls: None,
            notifications: NotificationsConfig::default(),
            quotas: QuotasConfig::default(),
            otlp: None,
        }
    }
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("the configuration file {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said (names the key).
        message: String,
    },
    /// A value is out of range.
    #[error("configuration: {0}")]
    Invalid(String),
}

impl RuntimeConfig {
    /// Reads a TOML configuration file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })?;
        config.config_file = Some(path.to_owned());
        Ok(config)
    }

    /// Parses configuration text.
    pub(crate) fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<SocketAddr, ConfigError> {
        let addr: SocketAddr = self.addr.parse().map_err(|e| {
            ConfigError::Invalid(format!(
                "`addr` = `{}` is not HOST:PORT (e.g. 127.0.0.1:8421): {e}",
                self.addr
            ))
        })?;
        if self.limits.max_body_bytes == 0 {
            return Err(ConfigError::Invalid(
                "`limits.max_body_bytes` must be at least 1".into(),
            ));
        }
        if self.limits.stream_queue == 0 {
            return Err(ConfigError::Invalid(
                "`limits.stream_queue` must be at least 1".into(),
            ));
        }
        self.limits.check_connections()?;
        if let Some(r) = &self.retention {
            r.policy()?;
            if r.interval_seconds < 60 {
                return Err(ConfigError::Invalid(format!(
                    "`retention.interval_seconds` = {} is under 60; retention runs at most once a minute",
                    r.interval_seconds
                )));
            }
        }
        for (i, hook) in self.notifications.webhooks.iter().enumerate() {
            hook.check(i)?;
        }
        if self.log.checkpoint_interval_seconds == 0 {
            return Err(ConfigError::Invalid(
                "`log.checkpoint_interval_seconds` must be at least 1".into(),
            ));
        }
        self.log.check_witnesses()?;
        for (name, ex) in &self.executors {
            ex.check(name)?;
        }
        self.atlas_signing.trust()?;
        if let Some(otlp) = &self.otlp {
            otlp.check()?;
        }
        self.encryption.encryption()?;
        self.redaction.redactor()?;
        Ok(addr)
    }

    /// The keys file in force.
    pub(crate) fn api_keys_path(&self) -> PathBuf {
        self.api_keys
            .clone()
            .unwrap_or_else(|| self.data.join(crate::auth::DEFAULT_KEYS_FILE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(
            RuntimeConfig::from_toml("").unwrap(),
            RuntimeConfig::default()
        );
    }

    #[test]
    fn full_file_parses() {
        let c = RuntimeConfig::from_toml(
            r#"
addr = "127.0.0.1:0"
data = "/tmp/x"
redb_cache_mib = 8
watch = true
log_format = "json"
[limits]
max_body_bytes = 10
[jwt]
algorithm = "HS256"
secret = "s"
[executors.deploy]
url = "http://127.0.0.1:9/deploy"
timeout_ms = 50
[retention]
days = 30
"#,
        )
        .unwrap();
        let retention = c.retention.as_ref().unwrap();
        assert_eq!(retention.interval_seconds, 3600);
        assert_eq!(
            retention.policy().unwrap().max_age(),
            time::Duration::days(30)
        );
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.redb_cache_mib, 8);
        assert_eq!(RuntimeConfig::default().redb_cache_mib, 64);
        assert_eq!(c.limits.max_body_bytes, 10);
        assert_eq!(c.limits.burst, Limits::default().burst);
        assert_eq!(c.executors["deploy"].timeout_ms, 50);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = RuntimeConfig::from_toml("adr = \"x\"").unwrap_err();
        assert!(e.contains("adr"), "{e}");
        let c = RuntimeConfig {
            addr: "nowhere".into(),
            ..RuntimeConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("addr"));
    }

    #[test]
    fn encryption_keys_are_read_at_start_and_each_refusal_names_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.key");
        std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "not a key").unwrap();
        let parse = |text: String| RuntimeConfig::from_toml(&text).unwrap();
        let c = parse(format!("[encryption]\nkey_file = {good:?}\n"));
        assert!(c.validate().is_ok());
        assert!(c.encryption.encryption().unwrap().current().is_some());
        assert!(
            RuntimeConfig::default()
                .encryption
                .encryption()
                .unwrap()
                .current()
                .is_none()
        );
        let refusals = [
            (format!("key_file = {bad:?}"), "`encryption.key_file`"),
            (
                format!("key_file = {:?}", dir.path().join("missing")),
                "cannot read",
            ),
            (format!("key_file = {good:?}\nkey_env = \"X\""), "both set"),
            (
                "key_env = \"CRA_TEST_NO_SUCH_VARIABLE\"".into(),
                "CRA_TEST_NO_SUCH_VARIABLE",
            ),
            (
                format!("retired_key_files = [{good:?}]"),
                "without a current key",
            ),
        ];
        for (body, says) in refusals {
            let c = parse(format!("[encryption]\n{body}\n"));
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn redaction_rules_parse_and_a_bad_one_is_named_at_start() {
        let good =
            "[[redaction.rules]]\npointer = \"/execution/parameters/card\"\nreason = \"pci\"\n";
        let c = RuntimeConfig::from_toml(good).unwrap();
        assert!(c.validate().is_ok());
        assert!(!c.redaction.redactor().unwrap().is_empty());
        let bad = format!("{good}[[redaction.rules]]\npattern = \"(\"\nreason = \"x\"\n");
        let e = RuntimeConfig::from_toml(&bad)
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`redaction.rules[1]`") && e.contains("does not compile"),
            "{e}"
        );
        let e = RuntimeConfig::from_toml("[[redaction.rules]]\nreason = \"x\"\nwhat = 1\n");
        assert!(e.unwrap_err().contains("what"));
    }

    #[test]
    fn witnesses_are_checked_at_start_and_each_refusal_names_its_key() {
        let key = cra_tlog::CosignatureSigner::from_seed("witness.example/w1", &[1; 32])
            .unwrap()
            .verifier()
            .to_key_string();
        let config = |body: &str| RuntimeConfig::from_toml(body).unwrap().validate();
        let one = format!("[[log.witnesses]]\nurl = \"http://w.example\"\nkey = \"{key}\"\n");
        assert!(config(&one).is_ok());
        let too_many = format!("[log]\nwitnesses_required = 2\n{one}");
        let e = config(&too_many).unwrap_err().to_string();
        assert!(e.contains("log.witnesses_required"), "{e}");
        let e = config(&format!("{one}{one}")).unwrap_err().to_string();
        assert!(e.contains("configured twice"), "{e}");
        let e = config(&one.replace("http://", "ftp://"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.witnesses[0].url"), "{e}");
        let e = config(&one.replace(&key, "not-a-key"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.witnesses[0].key"), "{e}");
        let e = config("[log]\nwitness_timeout_ms = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("log.witness_timeout_ms"), "{e}");
    }

    #[test]
    fn a_connection_limit_or_deadline_of_zero_is_refused_by_name() {
        for name in [
            "header_read_timeout_ms",
            "body_timeout_ms",
            "write_timeout_ms",
            "shutdown_deadline_ms",
            "stream_ping_ms",
            "max_connections",
        ] {
            let c = RuntimeConfig::from_toml(&format!("[limits]\n{name} = 0\n")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(&format!("limits.{name}")), "{e}");
        }
        assert!(RuntimeConfig::default().validate().is_ok());
    }

    #[test]
    fn a_retention_under_a_day_or_a_minute_is_refused_by_name() {
        let c = RuntimeConfig::from_toml("[retention]\ndays = 0").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("retention.days")
        );
        let c = RuntimeConfig::from_toml("[retention]\ndays = 1\ninterval_seconds = 5").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("retention.interval_seconds"), "{e}");
        assert!(RuntimeConfig::from_toml("[retention]\nday = 3").is_err());
    }

    #[test]
    fn atlas_signing_names_its_keys_and_refuses_a_section_that_trusts_nothing() {
        let key = cra_atlas::sshsig::PrivateKey::from_seed([1; 32])
            .public_key()
            .to_openssh();
        let c = RuntimeConfig::from_toml(&format!("[atlas_signing]\ntrusted_keys = [\"{key}\"]"))
            .unwrap();
        assert_eq!(c.atlas_signing.trust().unwrap().unwrap().keys().len(), 1);
        assert!(
            RuntimeConfig::default()
                .atlas_signing
                .trust()
                .unwrap()
                .is_none()
        );
        let c = RuntimeConfig::from_toml("[atlas_signing]\ntrusted_keys = [\"ssh-ed25519 nope\"]")
            .unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("atlas_signing.trusted_keys[0]"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("allowed_signers");
        std::fs::write(&file, format!("ci@example.com namespaces=\"git\" {key}\n")).unwrap();
        let c = RuntimeConfig {
            atlas_signing: AtlasSigningConfig {
                trusted_keys: Vec::new(),
                allowed_signers: Some(file),
            },
            ..RuntimeConfig::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("trusts no Ed25519 key")
        );
        assert!(RuntimeConfig::from_toml("[atlas_signing]\ntrusted = []").is_err());
    }

    #[test]
    fn otlp_export_is_configured_with_an_http_endpoint() {
        let c = RuntimeConfig::from_toml(
            "[otlp]\nendpoint = \"http://collector:4318\"\nheaders = { \"x-api-key\" = \"k\" }",
        )
        .unwrap();
        assert!(c.validate().is_ok());
        let otlp = c.otlp.unwrap();
        assert_eq!(otlp.queue_spans, 8_192);
        assert_eq!(otlp.headers["x-api-key"], "k");
        for (toml, says) in [
            ("endpoint = \"grpc://c:4317\"", "http:// or https://"),
            ("endpoint = \"not a url\"", "is not a URL"),
            ("endpoint = \"http://c\"\nqueue_spans = 0", "at least 1"),
            (
                "endpoint = \"http://c\"\nheaders = { \"bad name\" = \"v\" }",
                "header name",
            ),
        ] {
            let c = RuntimeConfig::from_toml(&format!("[otlp]\n{toml}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("otlp") && e.contains(says), "{toml}: {e}");
        }
    }

    #[test]
    fn an_mcp_executor_has_a_command_or_a_url_and_says_which_is_missing() {
        let c = RuntimeConfig::from_toml(
            "[executors.fs]\nkind = \"mcp\"\ncommand = [\"node\", \"server.js\"]\n[mcp]\nallowed_origins = [\"https://console.example:443\"]",
        )
        .unwrap();
        assert!(c.validate().is_ok());
        assert_eq!(c.executors["fs"].kind, ExecutorKind::Mcp);
        assert_eq!(c.executors["fs"].pool_size, 2);
        assert_eq!(c.mcp.allowed_origins, ["https://console.example:443"]);
        for (toml, says) in [
            ("kind = \"mcp\"", "either a command"),
            (
                "kind = \"mcp\"\ncommand = [\"x\"]\nurl = \"http://h\"",
                "either a command",
            ),
            ("kind = \"mcp\"\nurl = \"ftp://h\"", "http://"),
            (
                "command = [\"x\"]\nurl = \"http://h\"",
                "`command` is for kind = \"mcp\"",
            ),
            (
                "kind = \"mcp\"\nurl = \"http://h\"\npool_size = 0",
                "pool_size",
            ),
        ] {
            let c = RuntimeConfig::from_toml(&format!("[executors.fs]\n{toml}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(
                e.contains("executor `fs`") && e.contains(says),
                "{toml}: {e}"
            );
        }
    }
}
