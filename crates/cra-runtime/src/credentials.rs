//! Credentials that change without a restart (issue 31, item 3): the keys file, and the `[jwt]`
//! settings of the configuration file with the secret or public key files they name, reload on
//! SIGHUP and, unless `watch_keys = false`, when any of those files changes (polled once a
//! second, by content).
//!
//! Invariants:
//! - **A reload is whole or nothing.** The new keys file, configuration and JWT key are all read
//!   and checked before the [`Authenticator`] in force is swapped; a file that does not load
//!   leaves the last good credentials in force, is logged, counted
//!   (`cra_keys_reload_failures_total`) and recorded (`keys.refused`).
//! - **The next request sees the swap.** Every request authenticates against
//!   [`Credentials::current`], read once per request, so a key revoked, expired or removed by a
//!   reload is refused from the first request that starts after the reload returns.
//! - **Every change is recorded.** A reload that changed anything appends `keys.changed` to the
//!   operator audit chain, naming each key by its fingerprint (never its token) and each
//!   certificate by its subject, with the actor, roles, expiry and revocation before and after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use cra_trace::Payload;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::auth::{ActorType, AuthSetupError, Authenticator, KeysFile, Role, fingerprint};
use crate::config::{JwtConfig, RuntimeConfig};
use crate::state::AppState;

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadSource {
    /// SIGHUP.
    Signal,
    /// The file watch saw a file change.
    Watch,
}

/// The credentials in force and where they come from.
pub struct Credentials {
    current: RwLock<Arc<Authenticator>>,
    keys_path: PathBuf,
    config_file: Option<PathBuf>,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("keys_path", &self.keys_path)
            .field("config_file", &self.config_file)
            .finish_non_exhaustive()
    }
}

/// What the credentials in force were built from.
struct Loaded {
    keys: KeysFile,
    jwt: Option<JwtConfig>,
    /// The files as they were when last read.
    digests: Digests,
}

/// The SHA-256 of each file credentials are built from (`None`: absent or unreadable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digests {
    keys: Option<[u8; 32]>,
    config: Option<[u8; 32]>,
    jwt_key: Option<[u8; 32]>,
}

impl Digests {
    /// The files as they are now: the keys file, the configuration file, and the JWT secret or
    /// public key file `jwt` names.
    fn now(keys: &Path, config: Option<&Path>, jwt: Option<&JwtConfig>) -> Self {
        Self {
            keys: digest(keys),
            config: config.and_then(digest),
            jwt_key: Self::jwt_key(jwt),
        }
    }

    /// The JWT secret or public key file `jwt` names, as it is now.
    fn jwt_key(jwt: Option<&JwtConfig>) -> Option<[u8; 32]> {
        let file = jwt.and_then(|j| j.secret_file.as_deref().or(j.public_key_file.as_deref()));
        file.and_then(digest)
    }
}

/// A credential as the audit record names it: a key by fingerprint, a certificate by subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialRecord {
    /// The key's fingerprint (`api key`), absent for a certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The certificate's subject, absent for a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The actor it authenticates.
    pub actor_id: String,
    /// agent | human | script.
    pub actor_type: ActorType,
    /// Granted roles.
    pub roles: Vec<Role>,
    /// The author's atlas namespaces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub atlas_namespaces: Vec<String>,
    /// When a key stops authenticating (wire form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// A revoked key.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
}

/// `keys.changed`: a reload changed the credentials in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeysChanged {
    /// What asked for the reload.
    pub source: ReloadSource,
    /// Credentials that authenticate now and did not exist before.
    pub added: Vec<CredentialRecord>,
    /// Credentials gone from the file (refused from now on), as they were.
    pub removed: Vec<CredentialRecord>,
    /// Credentials whose actor, roles, expiry or revocation changed, as they are now.
    pub changed: Vec<CredentialRecord>,
    /// True when the JWT settings or their key changed.
    pub jwt_changed: bool,
    /// How many keys and certificates are in force after the reload.
    pub in_force: usize,
}

impl Payload for KeysChanged {
    const EVENT_TYPE: &'static str = "keys.changed";
}

/// `keys.refused`: a reload failed; the last good credentials stay in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeysRefused {
    /// What asked for the reload.
    pub source: ReloadSource,
    /// Why (names the file; never a key).
    pub message: String,
}

impl Payload for KeysRefused {
    const EVENT_TYPE: &'static str = "keys.refused";
}

/// A reload's outcome: `Ok(None)` when nothing changed.
pub type ReloadOutcome = Result<Option<KeysChanged>, AuthSetupError>;

impl Credentials {
    /// The credentials of `keys` (read from `keys_path`) and `jwt` (the `[jwt]` of
    /// `config_file`, when the configuration came from one).
    pub fn new(
        keys: KeysFile,
        keys_path: PathBuf,
        jwt: Option<&JwtConfig>,
        config_file: Option<PathBuf>,
    ) -> Result<Self, AuthSetupError> {
        let authenticator = Authenticator::new(&keys, jwt)?;
        let digests = Digests::now(&keys_path, config_file.as_deref(), jwt);
        Ok(Self {
            current: RwLock::new(Arc::new(authenticator)),
            keys_path,
            config_file,
            loaded: Mutex::new(Loaded {
                keys,
                jwt: jwt.cloned(),
                digests,
            }),
        })
    }

    /// The authenticator in force; a request reads it once.
    pub fn current(&self) -> Arc<Authenticator> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The keys file this server reads.
    pub fn keys_path(&self) -> &Path {
        &self.keys_path
    }

    /// True when a file the credentials were built from has changed since the last load.
    pub fn files_changed(&self) -> bool {
        let loaded = self.lock();
        let now = Digests::now(
            &self.keys_path,
            self.config_file.as_deref(),
            loaded.jwt.as_ref(),
        );
        now != loaded.digests
    }

    /// Reads every file again and swaps the credentials in force when they load; blocking I/O.
    pub fn reload(&self, source: ReloadSource) -> ReloadOutcome {
        let mut loaded = self.lock();
        // The files' digests are taken before they are read: a write after this is seen by the
        // next poll. A refused reload remembers them too, so the watch retries only once the
        // files change again (SIGHUP always retries).
        let (loaded_jwt, config_file) = (loaded.jwt.clone(), self.config_file.as_deref());
        let mut digests = Digests::now(&self.keys_path, config_file, loaded_jwt.as_ref());
        let mut read = || -> Result<_, AuthSetupError> {
            let keys = KeysFile::load(&self.keys_path)?;
            let jwt = match config_file {
                Some(file) => RuntimeConfig::from_file(file)
                    .map_err(|e| AuthSetupError::Jwt(e.to_string()))?
                    .jwt
                    .clone(),
                None => loaded_jwt.clone(),
            };
            // The JWT key file may be another one now.
            digests.jwt_key = Digests::jwt_key(jwt.as_ref());
            let authenticator = Authenticator::new(&keys, jwt.as_ref())?;
            Ok((keys, jwt, authenticator))
        };
        let (keys, jwt, authenticator) = match read() {
            Ok(read) => read,
            Err(e) => {
                loaded.digests = digests;
                return Err(e);
            }
        };
        let jwt_changed = jwt != loaded.jwt || digests.jwt_key != loaded.digests.jwt_key;
        let change = diff(&loaded.keys, &keys, source, jwt_changed);
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(authenticator);
        *loaded = Loaded { keys, jwt, digests };
        Ok(change)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The SHA-256 of a file's bytes, `None` when it cannot be read (or the path is empty).
fn digest(path: &Path) -> Option<[u8; 32]> {
    if path.as_os_str().is_empty() {
        return None;
    }
    std::fs::read(path).ok().map(|b| Sha256::digest(&b).into())
}

/// Every credential of `file`, by what identifies it (a key's fingerprint, a certificate's
/// subject).
fn records(file: &KeysFile) -> BTreeMap<String, CredentialRecord> {
    let keys = file.keys.iter().map(|k| {
        let key = fingerprint(&k.token);
        let record = CredentialRecord {
            key: Some(key.clone()),
            subject: None,
            actor_id: k.actor_id.clone(),
            actor_type: k.actor_type,
            roles: k.roles.clone(),
            atlas_namespaces: k.atlas_namespaces.clone(),
            expires_at: k.expires_at.map(|e| e.to_string()),
            revoked: k.revoked,
        };
        (format!("key {key}"), record)
    });
    let certificates = file.certificates.iter().map(|c| {
        let record = CredentialRecord {
            key: None,
            subject: Some(c.subject.clone()),
            actor_id: c.actor_id.clone(),
            actor_type: c.actor_type,
            roles: c.roles.clone(),
            atlas_namespaces: c.atlas_namespaces.clone(),
            expires_at: None,
            revoked: false,
        };
        (format!("certificate {}", c.subject), record)
    });
    keys.chain(certificates).collect()
}

/// What changed from `before` to `after`; `None` when nothing did.
fn diff(
    before: &KeysFile,
    after: &KeysFile,
    source: ReloadSource,
    jwt_changed: bool,
) -> Option<KeysChanged> {
    let (old, new) = (records(before), records(after));
    let added: Vec<_> = new
        .iter()
        .filter(|(id, _)| !old.contains_key(*id))
        .map(|(_, r)| r.clone())
        .collect();
    let removed: Vec<_> = old
        .iter()
        .filter(|(id, _)| !new.contains_key(*id))
        .map(|(_, r)| r.clone())
        .collect();
    let changed: Vec<_> = new
        .iter()
        .filter(|(id, r)| old.get(*id).is_some_and(|was| was != *r))
        .map(|(_, r)| r.clone())
        .collect();
    if added.is_empty() && removed.is_empty() && changed.is_empty() && !jwt_changed {
        return None;
    }
    Some(KeysChanged {
        source,
        added,
        removed,
        changed,
        jwt_changed,
        in_force: new.len(),
    })
}

/// Reloads on the blocking pool, logs the outcome, and records it in the operator audit chain.
/// Returns what changed (`Ok(None)`: nothing) or why the reload was refused.
pub async fn reload_recorded(
    state: &AppState,
    source: ReloadSource,
) -> Result<Option<KeysChanged>, String> {
    let rt = state.0.clone();
    let outcome = tokio::task::spawn_blocking(move || rt.auth.reload(source))
        .await
        .map_err(|e| format!("the credentials reload panicked: {e}"))?;
    let failed = outcome.as_ref().err().map(ToString::to_string);
    state.problem(crate::state::Problem::KeysReload, failed);
    let draft = match &outcome {
        Ok(None) => {
            tracing::info!(?source, "credentials reloaded: nothing changed");
            return Ok(None);
        }
        Ok(Some(change)) => {
            tracing::info!(
                ?source,
                added = change.added.len(),
                removed = change.removed.len(),
                changed = change.changed.len(),
                jwt_changed = change.jwt_changed,
                in_force = change.in_force,
                "credentials reloaded"
            );
            crate::service::operator::draft(state, change)
        }
        Err(e) => {
            state
                .metrics
                .keys_reload_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(?source, error = %e, "credentials reload refused; the last good keys stay in force");
            let refused = KeysRefused {
                source,
                message: e.to_string(),
            };
            crate::service::operator::draft(state, &refused)
        }
    };
    let chain = crate::service::operator::lock(state)
        .await
        .map_err(|e| e.body.message)?;
    chain
        .append(vec![draft])
        .await
        .map_err(|e| e.body.message)?;
    outcome.map_err(|e| e.to_string())
}

/// Reloads the credentials on SIGHUP and, with `watch_keys`, when their files change; ends when
/// the server stops.
pub async fn watch(state: AppState) {
    let mut hangups = hangup_signals();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stopping = state.stopping.clone();
    loop {
        let source = tokio::select! {
            () = stopping.cancelled() => return,
            Some(()) = next_hangup(&mut hangups) => ReloadSource::Signal,
            _ = tick.tick(), if state.config.watch_keys => {
                let rt = state.0.clone();
                let changed = tokio::task::spawn_blocking(move || rt.auth.files_changed())
                    .await
                    .unwrap_or(false);
                if !changed {
                    continue;
                }
                ReloadSource::Watch
            }
        };
        if let Err(e) = reload_recorded(&state, source).await {
            tracing::warn!(error = %e, "credentials not reloaded");
        }
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = Option<()>;

#[cfg(unix)]
fn hangup_signals() -> Hangups {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; credentials reload on file changes only");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangup_signals() -> Hangups {
    None
}

/// The next SIGHUP; never, when there is no listener.
async fn next_hangup(hangups: &mut Hangups) -> Option<()> {
    #[cfg(unix)]
    if let Some(s) = hangups {
        return s.recv().await;
    }
    let _ = hangups;
    std::future::pending().await
}
