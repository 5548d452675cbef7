//! The transparency log's rules (`specs/tlog.md`, issue 26): the key, checkpoints, consistency
//! proofs and tiles are public; an inclusion proof by event hash goes only to a caller who may
//! read the event's chain; cutting a checkpoint on demand is for operators. A receipt binds
//! one recorded event to a signed checkpoint (`specs/tlog.md`, "Receipts").

use cra_store::tlog::{LeafPlace, LogError, LogReader};
use cra_tlog::{Hash, Tile, TlogProof};
use cra_trace::TraceEvent;
use cra_wire::Token;
use serde::Serialize;

use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult, run_blocking};
use crate::state::Runtime;
use crate::tlog::CutError;

/// `GET /v1/log/proof/inclusion`: where the event is and the hashes that prove it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct InclusionProof {
    /// The event's leaf index.
    pub leaf_index: u64,
    /// The tree size the proof is for.
    pub tree_size: u64,
    /// RFC 9162 inclusion path, lowercase hex, leaf's sibling first.
    pub hashes: Vec<String>,
}

/// `GET /v1/log/proof/consistency`: RFC 9162 consistency proof hashes, lowercase hex.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ConsistencyProof {
    /// The proof, in RFC 9162 order.
    pub hashes: Vec<String>,
}

/// A receipt: the recorded event that tells of a decision, bound to a signed checkpoint of the
/// log by a C2SP `tlog-proof@v1`. No signature of its own: every member it binds (session,
/// sequence, payload) is inside the event's hash, the leaf the proof proves.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Receipt {
    /// The TRACE event as stored; its `event_hash` is the leaf's data.
    #[schema(value_type = crate::openapi::wire::TraceEvent)]
    pub event: cra_trace::TraceEvent,
    /// `sha256:` digest of the TRACE canonical form of the event's `payload`: the decision as
    /// recorded.
    pub decision_hash: String,
    /// The event's leaf index in the log.
    pub leaf_index: u64,
    /// The C2SP `tlog-proof@v1` of the leaf in a signed (and, with witnesses, cosigned)
    /// checkpoint.
    pub tlog_proof: String,
}

fn log_failed(e: LogError) -> ApiError {
    match e {
        LogError::Range(m) => ApiError::new(Token::InvalidRequest, m),
        other => ApiError::new(
            Token::Unavailable,
            format!("the transparency log cannot be read now ({other}); try again"),
        ),
    }
}

fn cut_failed(e: CutError) -> ApiError {
    match e {
        CutError::Store(e) => log_failed(e),
        CutError::Witnesses(m) => ApiError::new(Token::Unavailable, m),
        CutError::Task(m) => ApiError::new(
            Token::Unavailable,
            format!("the checkpoint could not be cut ({m}); try again"),
        ),
    }
}

fn unsigned() -> ApiError {
    ApiError::new(
        Token::Unavailable,
        "this log signs no checkpoint: its operator has configured no `log.key_file`",
    )
}

impl Runtime {
    /// The log's verifier key string.
    pub fn log_key(&self) -> ApiResult<String> {
        self.log.verifier_key().ok_or_else(unsigned)
    }

    /// The latest published checkpoint; the first one is cut when none is yet.
    pub async fn log_checkpoint(&self) -> ApiResult<String> {
        let log = self.log.clone();
        let latest = run_blocking("the checkpoint task failed", move || log.latest())
            .await?
            .map_err(log_failed)?;
        let latest = match latest {
            Some(note) => Some(note),
            None => self.log.cut(None).await.map_err(cut_failed)?,
        };
        latest.ok_or_else(unsigned)
    }

    /// The log's leaves now and the leaves of its latest signed checkpoint (none before the
    /// first): what `/metrics` reports of the log.
    pub async fn log_sizes(&self) -> ApiResult<(u64, Option<u64>)> {
        let log = self.log.clone();
        run_blocking("reading the log's size failed", move || {
            let latest = log.latest()?;
            let covered = latest
                .as_deref()
                .and_then(crate::tlog::checkpoint_of)
                .map(|c| c.size());
            Ok((log.store.log_size()?, covered))
        })
        .await?
        .map_err(log_failed)
    }

    /// Cuts a checkpoint of the tree as it is now (operators), answering the latest.
    pub async fn cut_log_checkpoint(&self, actor: &Actor) -> ApiResult<String> {
        actor.require(
            &[Role::Operator],
            "cutting a checkpoint of the transparency log",
        )?;
        self.log
            .cut(None)
            .await
            .map_err(cut_failed)?
            .ok_or_else(unsigned)
    }

    /// The inclusion proof of the event whose hash is `event_hash` in the tree of `tree_size`
    /// leaves, to a caller who may read the event's chain.
    pub async fn log_inclusion(
        &self,
        actor: &Actor,
        event_hash: &str,
        tree_size: u64,
    ) -> ApiResult<InclusionProof> {
        let place = self.readable_leaf(actor, event_hash).await?;
        let index = place.leaf_index;
        let hashes = self.inclusion_hashes(index, tree_size).await?;
        Ok(InclusionProof {
            leaf_index: index,
            tree_size,
            hashes: cra_tlog::proof::proof_to_hex(&hashes),
        })
    }

    /// The receipt of the event whose hash is `event_hash`, to a caller who may read its chain.
    pub async fn log_receipt(&self, actor: &Actor, event_hash: &str) -> ApiResult<Receipt> {
        let place = self.readable_leaf(actor, event_hash).await?;
        let event = self.event_at(&place.session_id, place.sequence).await?;
        self.receipt_at(event, place.leaf_index).await
    }

    /// The receipt of event `sequence` of the chain `session_id`: a checkpoint covering it is
    /// cut (and cosigned) first when the latest does not. The caller has been authorised.
    pub async fn receipt(&self, session_id: &str, sequence: u64) -> ApiResult<Receipt> {
        let event = self.event_at(session_id, sequence).await?;
        let hash = cra_tlog::hash::from_hex(&event.event_hash)
            .map_err(|e| ApiError::internal("a stored event's hash is not hex", e))?;
        let place = self.leaf_of(hash).await?;
        self.receipt_at(event, place.leaf_index).await
    }

    /// The receipt of what the resolve or execute request `body` recorded last: `recorded`, the
    /// sequence of that event in the request's session. 503 `unavailable` when it recorded
    /// nothing. The caller has been authorised (it made the request).
    pub async fn request_receipt(
        &self,
        body: &serde_json::Value,
        recorded: Option<u64>,
    ) -> ApiResult<Receipt> {
        let session = body
            .pointer("/requester/session_id")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let sequence = recorded.ok_or_else(|| {
            ApiError::new(
                Token::Unavailable,
                "nothing was recorded for this request, so it has no receipt",
            )
        })?;
        self.receipt(session, sequence).await
    }

    /// Event `sequence` of the chain `session_id`.
    async fn event_at(&self, session_id: &str, sequence: u64) -> ApiResult<TraceEvent> {
        self.read_events_after(session_id, sequence.checked_sub(1), 1)
            .await?
            .into_iter()
            .find(|e| e.sequence == sequence)
            .ok_or_else(|| ApiError::not_found("no such event in the chain"))
    }

    /// The receipt of `event`, leaf `leaf_index` of the log.
    async fn receipt_at(&self, event: TraceEvent, leaf_index: u64) -> ApiResult<Receipt> {
        let note = self
            .log
            .cut(Some(leaf_index + 1))
            .await
            .map_err(cut_failed)?
            .ok_or_else(unsigned)?;
        let size = crate::tlog::checkpoint_of(&note)
            .ok_or_else(|| {
                ApiError::new(
                    Token::Unavailable,
                    "the log's latest checkpoint does not parse; its operator should check the store",
                )
            })?
            .size();
        let hashes = self.inclusion_hashes(leaf_index, size).await?;
        let proof = TlogProof::new(None, leaf_index, hashes, &note)
            .map_err(|e| ApiError::internal("a published checkpoint is not a note", e))?;
        Ok(Receipt {
            decision_hash: cra_wire::hash::canonical_digest(&event.payload),
            event,
            leaf_index,
            tlog_proof: proof.to_text(),
        })
    }

    /// Where the event whose hash is `event_hash` (64 lowercase hex digits) is in the log, to a
    /// caller who may read its chain.
    async fn readable_leaf(&self, actor: &Actor, event_hash: &str) -> ApiResult<LeafPlace> {
        let hash = cra_tlog::hash::from_hex(event_hash)
            .ok()
            .filter(|_| event_hash.bytes().all(|b| !b.is_ascii_uppercase()))
            .ok_or_else(|| {
                ApiError::field(
                    Token::InvalidRequest,
                    "/event_hash",
                    "query parameter `event_hash`: 64 lowercase hex digits of a TRACE event hash",
                )
            })?;
        let place = self.leaf_of(hash).await?;
        if !actor.reads_all() {
            let readable = match self.session_record(&place.session_id).await {
                Ok(record) => crate::service::sessions::can_read(actor, &record),
                Err(_) => false,
            };
            if !readable {
                return Err(ApiError::forbidden(
                    "this event belongs to a chain you may not read; its owner, auditors and operators may ask",
                ));
            }
        }
        Ok(place)
    }

    /// Where the event whose hash is `hash` is in the log.
    async fn leaf_of(&self, hash: Hash) -> ApiResult<LeafPlace> {
        let log = self.log.clone();
        run_blocking("the log task failed", move || log.store.leaf_place(&hash))
            .await?
            .map_err(log_failed)?
            .ok_or_else(|| ApiError::not_found("no event with this hash is in the log"))
    }

    /// The inclusion proof of leaf `index` in the tree of `tree_size` leaves.
    async fn inclusion_hashes(&self, index: u64, tree_size: u64) -> ApiResult<Vec<Hash>> {
        let log = self.log.clone();
        run_blocking("the proof task failed", move || {
            let size = log.store.log_size()?;
            if tree_size > size {
                return Err(LogError::Range(format!(
                    "query parameter `tree_size`: {tree_size} is past the log's {size} leaves"
                )));
            }
            if index >= tree_size {
                return Err(LogError::Range(format!(
                    "the event is leaf {index}, not in a tree of {tree_size} leaves; ask with a larger `tree_size`"
                )));
            }
            LogReader::at(log.store.as_ref(), size).inclusion(index, tree_size)
        })
        .await?
        .map_err(log_failed)
    }

    /// The consistency proof from the tree of `from` leaves to that of `to`.
    pub async fn log_consistency(&self, from: u64, to: u64) -> ApiResult<ConsistencyProof> {
        let log = self.log.clone();
        let hashes = run_blocking("the proof task failed", move || {
            let size = log.store.log_size()?;
            if to > size || from > to {
                return Err(LogError::Range(format!(
                    "query parameters `from` and `to`: need from <= to <= {size} (the log's size), got {from} and {to}"
                )));
            }
            LogReader::at(log.store.as_ref(), size).consistency(from, to)
        })
        .await?
        .map_err(log_failed)?;
        Ok(ConsistencyProof {
            hashes: cra_tlog::proof::proof_to_hex(&hashes),
        })
    }

    /// The bytes of the C2SP tile at `path` (`tile/...`), if the tree holds it.
    pub async fn log_tile(&self, path: &str) -> ApiResult<Vec<u8>> {
        let tile = Tile::parse_path(path)
            .map_err(|e| ApiError::not_found(format!("`{path}` is not a tile path: {e}")))?;
        let log = self.log.clone();
        run_blocking("the tile task failed", move || {
            LogReader::new(log.store.as_ref())?.served_tile(&tile)
        })
        .await?
        .map_err(log_failed)?
        .ok_or_else(|| ApiError::not_found(format!("the log holds no tile `{path}` yet")))
    }
}
