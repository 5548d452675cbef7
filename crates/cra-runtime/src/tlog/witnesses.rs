//! The log's side of C2SP `tlog-witness`: before a checkpoint is published, each configured
//! witness is sent it (`POST <url>/add-checkpoint`, with a consistency proof from the size the
//! witness last cosigned) and its `cosignature/v1` line is verified against the configured key;
//! the checkpoint is published only with at least `log.witnesses_required` of them.
//!
//! What each witness last cosigned is remembered per witness while the server runs. A server
//! that does not know it (first start, or a witness another replica kept up to date) sends the
//! latest published size; a witness that had another answers 409 with its size
//! (`text/x.tlog.size`), and the request is made once more from that size.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cra_store::tlog::LogReader;
use cra_tlog::witness::{AddCheckpoint, SIZE_CONTENT_TYPE};
use cra_tlog::{CosignatureVerifier, Note, Signature};

use super::{CutError, Log};
use crate::config::LogConfig;

/// `known` when no size is remembered.
const UNKNOWN: u64 = u64::MAX;

/// The witnesses a checkpoint is sent to, and how many must cosign it.
#[derive(Debug)]
pub struct Witnesses {
    required: usize,
    peers: Vec<Peer>,
    http: reqwest::Client,
}

#[derive(Debug)]
struct Peer {
    url: String,
    verifier: CosignatureVerifier,
    /// The size this witness last cosigned, as far as this server knows ([`UNKNOWN`]: not).
    known: AtomicU64,
}

impl Witnesses {
    /// The witnesses of `config`; `None` when none is configured.
    ///
    /// # Errors
    /// A witness key that does not parse (the configuration's check names it first).
    pub fn from_config(config: &LogConfig) -> Result<Option<Self>, String> {
        if config.witnesses.is_empty() {
            return Ok(None);
        }
        let peers = config
            .witnesses
            .iter()
            .map(|w| {
                Ok(Peer {
                    url: w.url.trim_end_matches('/').to_owned(),
                    verifier: w.verifier()?,
                    known: AtomicU64::new(UNKNOWN),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let http = crate::tls::http_client()
            .timeout(Duration::from_millis(config.witness_timeout_ms))
            .build()
            .map_err(|e| format!("cannot make the witnesses' HTTP client: {e}"))?;
        Ok(Some(Self {
            required: config.required_cosignatures(),
            peers,
            http,
        }))
    }

    /// How many cosignatures a checkpoint needs.
    pub fn required(&self) -> usize {
        self.required
    }

    /// Sends `note` (a checkpoint of `size` leaves; `published` is the latest published size)
    /// to every witness at once and answers it with the verified cosignatures added, in the
    /// configured order.
    ///
    /// # Errors
    /// [`CutError::Witnesses`] when fewer than the required number cosigned, naming why each
    /// other witness did not.
    pub async fn cosign(
        &self,
        log: &Arc<Log>,
        mut note: Note,
        size: u64,
        published: u64,
    ) -> Result<Note, CutError> {
        let asked = self
            .peers
            .iter()
            .map(|p| p.submit(&self.http, log, &note, size, published));
        let answers = futures::future::join_all(asked).await;
        let mut failures = Vec::new();
        let mut cosigned = 0;
        for (peer, answer) in self.peers.iter().zip(answers) {
            match answer {
                Ok(line) => {
                    note.add_signature(line).map_err(|e| {
                        CutError::Witnesses(format!("cannot add a cosignature to the note: {e}"))
                    })?;
                    cosigned += 1;
                }
                Err(why) => {
                    failures.push(format!("{} ({}): {why}", peer.verifier.name(), peer.url))
                }
            }
        }
        for failure in &failures {
            tracing::warn!(witness = %failure, size, "a witness did not cosign the checkpoint");
        }
        if cosigned < self.required {
            return Err(CutError::Witnesses(format!(
                "the checkpoint of {size} leaves was not published: {cosigned} of the {} required witness cosignatures came back ({}); it is tried again at the next checkpoint",
                self.required,
                failures.join("; ")
            )));
        }
        Ok(note)
    }
}

impl Peer {
    /// Asks this witness to cosign; at most twice (the second time from the size a 409 named).
    async fn submit(
        &self,
        http: &reqwest::Client,
        log: &Arc<Log>,
        note: &Note,
        size: u64,
        published: u64,
    ) -> Result<Signature, String> {
        let mut old = match self.known.load(Ordering::Acquire) {
            UNKNOWN => published,
            known => known,
        };
        for _ in 0..2 {
            if old > size {
                return Err(format!(
                    "it has cosigned a tree of {old} leaves, larger than this log's {size}: it saw another tree under this origin"
                ));
            }
            match self.add_checkpoint(http, log, note, old, size).await? {
                Answer::Cosigned(line) => {
                    self.known.store(size, Ordering::Release);
                    return Ok(line);
                }
                Answer::HasSize(latest) => {
                    self.known.store(latest, Ordering::Release);
                    old = latest;
                }
            }
        }
        Err(format!(
            "it answered 409 twice; it last cosigned {old} leaves"
        ))
    }

    /// One `add-checkpoint` request from `old` leaves.
    async fn add_checkpoint(
        &self,
        http: &reqwest::Client,
        log: &Arc<Log>,
        note: &Note,
        old: u64,
        size: u64,
    ) -> Result<Answer, String> {
        let proof = if old == 0 {
            Vec::new()
        } else {
            let log = log.clone();
            tokio::task::spawn_blocking(move || {
                LogReader::at(log.store.as_ref(), size).consistency(old, size)
            })
            .await
            .map_err(|e| format!("the proof task failed: {e}"))?
            .map_err(|e| format!("cannot prove consistency from {old} leaves: {e}"))?
        };
        let body = AddCheckpoint {
            old_size: old,
            proof,
            checkpoint: note.to_text().into_bytes(),
        }
        .to_body();
        let response = http
            .post(format!("{}/add-checkpoint", self.url))
            .body(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "no answer within `log.witness_timeout_ms`".to_owned()
                } else {
                    format!("no answer: {e}")
                }
            })?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response
            .text()
            .await
            .map_err(|e| format!("the answer could not be read: {e}"))?;
        match status {
            200 => self.verified_line(note, &text).map(Answer::Cosigned),
            409 if content_type.as_deref() == Some(SIZE_CONTENT_TYPE) => text
                .trim_end_matches('\n')
                .parse()
                .map(Answer::HasSize)
                .map_err(|_| format!("409 with a size that is not a number: {text:?}")),
            _ => Err(format!("{status}: {}", text.trim())),
        }
    }

    /// This witness's cosignature among the lines of a 200 answer, verified over the note.
    fn verified_line(&self, note: &Note, answer: &str) -> Result<Signature, String> {
        let cosigned = Note::parse(format!("{}{answer}", note.to_text()).as_bytes())
            .map_err(|e| format!("the answer is not cosignature lines: {e}"))?;
        self.verifier
            .verify_note(&cosigned)
            .map_err(|e| format!("its cosignature does not verify: {e}"))?;
        cosigned
            .signatures()
            .iter()
            .find(|s| s.name() == self.verifier.name() && s.key_id() == self.verifier.key_id())
            .cloned()
            .ok_or_else(|| "the answer holds no line by its key".to_owned())
    }
}

/// What a witness answered.
enum Answer {
    /// Its cosignature line, verified.
    Cosigned(Signature),
    /// 409: the size it last cosigned.
    HasSize(u64),
}
