//! The transparency log as this server runs it (`specs/tlog.md`): the log's origin and signing
//! key, checkpoints cut on demand and on the leader's timer, and what the `/v1/log/*` routes
//! read. The tree itself is the store's (`cra_store::tlog`), appended with every event.
//!
//! * `witnesses`: the witnesses a checkpoint is cosigned by before it is published.

mod witnesses;

use std::path::Path;
use std::sync::Arc;

use cra_store::tlog::{LogError, LogIdentity, LogReader, LogStore, Settled};
use cra_tlog::{Checkpoint, Ed25519Signer};

use crate::config::RuntimeConfig;
pub use witnesses::Witnesses;

/// The log of this server: where its tree is, its origin and, when configured, its signer.
pub struct Log {
    /// The tree and its published checkpoints.
    pub store: Arc<dyn LogStore>,
    /// The checkpoints' origin (also the key's name).
    pub origin: String,
    /// The signer; `None` when no key is configured (PostgreSQL without `log.key_file`).
    signer: Option<Ed25519Signer>,
    /// The keys that sign every checkpoint beside `signer` during a key rotation
    /// (`log.rotation_key_files`).
    rotating: Vec<Ed25519Signer>,
    /// The verifier key the store held before this start moved it to `signer`'s (a rotation's
    /// swap), to be recorded in the operator audit chain ([`KeyRotated`]).
    rotated_from: Option<String>,
    /// The witnesses that cosign each checkpoint before it is published, if any.
    witnesses: Option<Witnesses>,
    /// Held while a checkpoint is cut, so one witness is never sent two at once by this server.
    cutting: tokio::sync::Mutex<()>,
    /// The size of the latest checkpoint a cut of this server published or found (`None`
    /// before its first cut): what [`Log::published`] subscribes to.
    published: tokio::sync::watch::Sender<Option<u64>>,
}

/// Why no checkpoint could be published.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    /// The tree or the checkpoints could not be read or written.
    #[error(transparent)]
    Store(#[from] LogError),
    /// Too few witnesses cosigned.
    #[error("{0}")]
    Witnesses(String),
    /// A blocking task did not finish.
    #[error("the checkpoint task failed: {0}")]
    Task(String),
}

/// What a cut found: the latest checkpoint already covers what was asked, or a new one to
/// publish.
enum Draft {
    /// The log has no key: nothing is cut.
    Unsigned,
    Covered(String),
    New {
        size: u64,
        note: cra_tlog::Note,
        published: u64,
    },
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("origin", &self.origin)
            .field("signed", &self.signer.is_some())
            .field("witnesses", &self.witnesses)
            .finish_non_exhaustive()
    }
}

/// `<hostname>/cra-log`: the origin when none is configured.
pub fn default_origin() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace) && !h.contains('+'))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}/cra-log")
}

/// A new signer key string for a log named `origin`, from the operating system's randomness.
///
/// # Errors
/// When `origin` cannot name a key (empty, a space or a `+`).
pub fn generate_key(origin: &str) -> Result<String, String> {
    let seed: [u8; 32] = rand::random();
    Ed25519Signer::from_seed(origin, &seed)
        .map(|s| s.to_key_string())
        .map_err(|e| format!("`log.origin` = `{origin}` cannot name a log key: {e}"))
}

impl Log {
    /// The log of a server configured with `config` over `store`: its key from `log.key_file`,
    /// else (embedded store) `<data>/log.key`, created on first start; the identity is checked
    /// against what the store recorded. Answers the log and what to tell the operator.
    ///
    /// # Errors
    /// An unreadable or malformed key, a key named other than the origin, or a store that
    /// belongs to another log.
    pub fn open(
        config: &RuntimeConfig,
        store: Arc<dyn LogStore>,
    ) -> Result<(Self, String), String> {
        let key_file = match (&config.log.key_file, &config.postgres) {
            (Some(f), _) => Some(f.clone()),
            (None, None) => Some(config.data.join("log.key")),
            (None, Some(_)) => None,
        };
        let configured_origin = config.log.origin.clone();
        let signer = match &key_file {
            Some(path) => Some(load_or_create(
                path,
                config.log.key_file.is_none(),
                configured_origin.as_deref(),
            )?),
            None => None,
        };
        let rotating = config
            .log
            .rotation_key_files
            .iter()
            .map(|path| load_or_create(path, false, None))
            .collect::<Result<Vec<_>, _>>()?;
        if signer.is_none() && !rotating.is_empty() {
            return Err(
                "`log.rotation_key_files` sign beside `log.key_file`, which is not configured; configure it, or move the key there".to_owned(),
            );
        }
        let origin = match (&configured_origin, &signer) {
            (Some(o), _) => o.clone(),
            (None, Some(s)) => s.name().to_owned(),
            (None, None) => default_origin(),
        };
        if let Some(s) = &signer
            && s.name() != origin
        {
            return Err(format!(
                "the log key is named `{}` but `log.origin` is `{origin}`; a checkpoint's key is named after its origin (make a key with `cra log key generate --origin {origin}`)",
                s.name()
            ));
        }
        let rotating_keys = rotation_keys(&origin, signer.as_ref(), &rotating)?;
        let mut rotated_from = None;
        let notice = match &signer {
            Some(s) => {
                let verifier = s.verifier().to_key_string();
                let settled = store
                    .settle_identity(
                        &LogIdentity {
                            origin: origin.clone(),
                            verifier_key: verifier.clone(),
                        },
                        &rotating_keys,
                    )
                    .map_err(|e| e.to_string())?;
                let mut notice = format!("transparency log `{origin}`, verifier key {verifier}");
                if let Settled::Moved { previous_key } = settled {
                    notice.push_str(&format!(" (rotated from {previous_key})"));
                    rotated_from = Some(previous_key);
                }
                for key in &rotating_keys {
                    notice.push_str(&format!("; rotating: checkpoints are also signed by {key}"));
                }
                notice
            }
            None => format!(
                "transparency log `{origin}`: leaves are recorded, but no checkpoint is signed until `log.key_file` is configured"
            ),
        };
        let witnesses = Witnesses::from_config(&config.log)?;
        let notice = match &witnesses {
            Some(w) if signer.is_some() => format!(
                "{notice}; each checkpoint needs {} of {} witness cosignatures",
                w.required(),
                config.log.witnesses.len()
            ),
            _ => notice,
        };
        Ok((
            Self {
                store,
                origin,
                signer,
                rotating,
                rotated_from,
                witnesses,
                cutting: tokio::sync::Mutex::new(()),
                published: tokio::sync::watch::Sender::new(None),
            },
            notice,
        ))
    }

    /// `log.key_rotated`, when this start moved the store's log key (a rotation's swap).
    pub fn rotation(&self) -> Option<KeyRotated> {
        let previous_key = self.rotated_from.clone()?;
        Some(KeyRotated {
            origin: self.origin.clone(),
            previous_key,
            key: self.verifier_key()?,
            rotating: self
                .rotating
                .iter()
                .map(|s| s.verifier().to_key_string())
                .collect(),
        })
    }

    /// The verifier key string auditors check checkpoints with, when the log signs.
    pub fn verifier_key(&self) -> Option<String> {
        self.signer.as_ref().map(|s| s.verifier().to_key_string())
    }

    /// The latest published checkpoint (a signed note), if any.
    ///
    /// # Errors
    /// [`LogError`] when the store cannot be read.
    pub fn latest(&self) -> Result<Option<String>, LogError> {
        Ok(self.store.checkpoints(1)?.into_iter().next())
    }

    /// Publishes a checkpoint of the tree as it is now, signed and (with witnesses configured)
    /// cosigned, unless the latest published one already covers `at_least` leaves (`None`: the
    /// whole tree); answers the latest. `None` when the log has no key.
    ///
    /// # Errors
    /// [`CutError`]: the store failed, or too few witnesses cosigned (nothing is published).
    pub async fn cut(self: &Arc<Self>, at_least: Option<u64>) -> Result<Option<String>, CutError> {
        let _turn = self.cutting.lock().await;
        let log = self.clone();
        let draft = blocking(move || log.draft(at_least)).await??;
        let (size, note, published) = match draft {
            Draft::Unsigned => return Ok(None),
            Draft::Covered(latest) => return Ok(Some(self.seen(latest))),
            Draft::New {
                size,
                note,
                published,
            } => (size, note, published),
        };
        let note = match &self.witnesses {
            Some(w) => w.cosign(self, note, size, published).await?,
            None => note,
        };
        let log = self.clone();
        let latest =
            blocking(move || log.store.publish_checkpoint(size, &note.to_text())).await??;
        Ok(Some(self.seen(latest)))
    }

    /// Subscribes to the size of the latest checkpoint this server's cuts published or found
    /// published (`None` before its first cut): a test or a metric waits on it, never on a timer.
    pub fn published(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.published.subscribe()
    }

    /// `latest`, the latest published checkpoint a cut answers, after telling subscribers its size.
    fn seen(&self, latest: String) -> String {
        let size = checkpoint_of(&latest).map(|c| c.size());
        self.published.send_if_modified(|now| {
            let newer = size > *now;
            if newer {
                *now = size;
            }
            newer
        });
        latest
    }

    /// The latest checkpoint when it covers `at_least` leaves (else the tree's size), or a
    /// new one of the whole tree, signed by the log; [`Draft::Unsigned`] when the log has no key.
    fn draft(&self, at_least: Option<u64>) -> Result<Draft, CutError> {
        let Some(signer) = &self.signer else {
            return Ok(Draft::Unsigned);
        };
        let size = self.store.log_size()?;
        let wanted = at_least.unwrap_or(size);
        let latest = self.latest()?;
        let mut published = 0;
        if let Some(latest) = latest {
            let latest_size = checkpoint_of(&latest).map_or(0, |c| c.size());
            if latest_size >= wanted {
                return Ok(Draft::Covered(latest));
            }
            published = latest_size;
        }
        let root = LogReader::at(self.store.as_ref(), size).root(size)?;
        let mut note = Checkpoint::new(&self.origin, size, root)
            .and_then(|c| c.sign(signer))
            .map_err(|e| LogError::Range(e.to_string()))?;
        for other in &self.rotating {
            note.sign(other)
                .map_err(|e| LogError::Range(e.to_string()))?;
        }
        Ok(Draft::New {
            size,
            note,
            published,
        })
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CutError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CutError::Task(e.to_string()))
}

/// The checkpoint a published note holds (`None` when it does not parse: never for a note
/// this server wrote).
pub(crate) fn checkpoint_of(note: &str) -> Option<Checkpoint> {
    let note = cra_tlog::Note::parse(note.as_bytes()).ok()?;
    Checkpoint::parse(note.text()).ok()
}

/// `log.key_rotated`: a start moved the log's key (the swap of a rotation, `specs/tlog.md`,
/// "Rotating the log key"), recorded in the operator audit chain before the server serves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyRotated {
    /// The log's origin (unchanged).
    pub origin: String,
    /// The verifier key the log signed with before.
    pub previous_key: String,
    /// The verifier key it signs with now.
    pub key: String,
    /// The keys still signing beside it (the previous one among them).
    pub rotating: Vec<String>,
}

impl cra_trace::Payload for KeyRotated {
    const EVENT_TYPE: &'static str = "log.key_rotated";
}

/// The verifier keys of the rotation signers, each checked: named after `origin`, and neither
/// the primary key nor another rotation key.
fn rotation_keys(
    origin: &str,
    primary: Option<&Ed25519Signer>,
    rotating: &[Ed25519Signer],
) -> Result<Vec<String>, String> {
    let mut keys: Vec<String> = primary
        .map(|s| s.verifier().to_key_string())
        .into_iter()
        .collect();
    for (i, signer) in rotating.iter().enumerate() {
        if signer.name() != origin {
            return Err(format!(
                "`log.rotation_key_files[{i}]` is named `{}`, not the origin `{origin}`; a rotation keeps the origin (a new origin is a new log)",
                signer.name()
            ));
        }
        let key = signer.verifier().to_key_string();
        if keys.contains(&key) {
            return Err(format!(
                "`log.rotation_key_files[{i}]` repeats a key already configured; each key signs once"
            ));
        }
        keys.push(key);
    }
    Ok(keys.split_off(usize::from(primary.is_some())))
}

/// Reads the signer key in `path`; when `create` and the file does not exist, makes one named
/// `origin` (or the default origin) and writes it, readable by its owner only.
fn load_or_create(
    path: &Path,
    create: bool,
    origin: Option<&str>,
) -> Result<Ed25519Signer, String> {
    if create && !path.exists() {
        let origin = origin.map_or_else(default_origin, str::to_owned);
        let key = generate_key(&origin)?;
        write_key_file(path, &key)
            .map_err(|e| format!("cannot write the log key {}: {e}", path.display()))?;
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the log key {}: {e}; make one with `cra log key generate`",
            path.display()
        )
    })?;
    Ed25519Signer::parse(text.trim()).map_err(|e| {
        format!(
            "the log key {} is not a signer key string (`PRIVATE+KEY+<origin>+<id>+<key>`): {e}",
            path.display()
        )
    })
}

/// Writes a secret key string and a newline to a new file `path`, readable by its owner only
/// (mode 0600), synced; an existing file is never overwritten.
///
/// # Errors
/// The file exists or cannot be written.
pub fn write_key_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// While this replica leads, cuts a checkpoint every `log.checkpoint_interval_seconds` when the
/// tree grew (one at once when it starts leading); a failure is logged and tried at the next
/// tick. Returns once `stopping` is cancelled and no cut is running, so a server that awaits it
/// holds no handle on the store after (a cut's store work runs on a blocking thread, which an
/// abort would not stop). A cut waiting on witnesses is not interrupted: their requests time out.
pub(crate) async fn keep_checkpoints(
    log: Arc<Log>,
    mut leading: tokio::sync::watch::Receiver<bool>,
    every: std::time::Duration,
    stopping: tokio_util::sync::CancellationToken,
) {
    loop {
        tokio::select! {
            led = leading.wait_for(|l| *l) => if led.is_err() { return },
            () = stopping.cancelled() => return,
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = log.cut(None).await {
                        tracing::warn!(error = %e, "cutting a checkpoint failed; retrying at the next tick");
                    }
                }
                changed = leading.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = stopping.cancelled() => return,
            }
            if !*leading.borrow() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(name: &str, seed: u8) -> Ed25519Signer {
        Ed25519Signer::from_seed(name, &[seed; 32]).unwrap()
    }

    /// A rotation key keeps the origin and signs once: one named for another log, or repeating
    /// the primary or another rotation key, stops the start with a message naming it.
    #[test]
    fn rotation_keys_keep_the_origin_and_sign_once() {
        let origin = "log.example/cra";
        let primary = signer(origin, 1);
        let keys = rotation_keys(origin, Some(&primary), &[signer(origin, 2)]).unwrap();
        assert_eq!(keys, [signer(origin, 2).verifier().to_key_string()]);
        for (rotating, says) in [
            (vec![signer("other.example/cra", 2)], "not the origin"),
            (vec![signer(origin, 1)], "repeats"),
            (vec![signer(origin, 2), signer(origin, 2)], "repeats"),
        ] {
            let e = rotation_keys(origin, Some(&primary), &rotating).unwrap_err();
            assert!(e.contains(says) && e.contains("rotation_key_files["), "{e}");
        }
    }
}
