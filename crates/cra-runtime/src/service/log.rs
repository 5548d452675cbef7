//! The transparency log's rules (`specs/tlog.md`, issue 26): the key, checkpoints, consistency
//! proofs and tiles are public; an inclusion proof by event hash goes only to a caller who may
//! read the event's chain; cutting a checkpoint on demand is for operators.

use cra_store::tlog::{LogError, LogReader};
use cra_tlog::Tile;
use cra_wire::Token;
use serde::Serialize;

use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult, run_blocking};
use crate::state::Runtime;

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

fn log_failed(e: LogError) -> ApiError {
    match e {
        LogError::Range(m) => ApiError::new(Token::InvalidRequest, m),
        other => ApiError::new(
            Token::Unavailable,
            format!("the transparency log cannot be read now ({other}); try again"),
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
        let latest = run_blocking("the checkpoint task failed", move || {
            match log.latest()? {
                Some(note) => Ok(Some(note)),
                None => log.cut(),
            }
        })
        .await?
        .map_err(log_failed)?;
        latest.ok_or_else(unsigned)
    }

    /// Cuts a checkpoint of the tree as it is now (operators), answering the latest.
    pub async fn cut_log_checkpoint(&self, actor: &Actor) -> ApiResult<String> {
        actor.require(
            &[Role::Operator],
            "cutting a checkpoint of the transparency log",
        )?;
        let log = self.log.clone();
        run_blocking("the checkpoint task failed", move || log.cut())
            .await?
            .map_err(log_failed)?
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
        let log = self.log.clone();
        let place = run_blocking("the log task failed", move || log.store.leaf_place(&hash))
            .await?
            .map_err(log_failed)?
            .ok_or_else(|| ApiError::not_found("no event with this hash is in the log"))?;
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
        let log = self.log.clone();
        let index = place.leaf_index;
        let hashes = run_blocking("the proof task failed", move || {
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
        .map_err(log_failed)?;
        Ok(InclusionProof {
            leaf_index: index,
            tree_size,
            hashes: cra_tlog::proof::proof_to_hex(&hashes),
        })
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
