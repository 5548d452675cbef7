//! An online backup of the running server's whole store (`GET /v1/backup`, `cra backup --url`;
//! `specs/backup.md`): the archive `cra_store::backup` writes, built in a private temporary
//! directory from one read transaction (redb) or one repeatable-read transaction (PostgreSQL)
//! while the server goes on answering, then handed to the front door to send. Admins only; each
//! backup is recorded in the operator audit chain.

use std::path::PathBuf;

use cra_store::backup::Manifest;
use serde::Serialize;

use crate::auth::{Actor, Role};
use crate::error::{ApiError, ApiResult, run_blocking};
use crate::state::Runtime;
use cra_wire::Token;

/// `store.backed_up`: an admin took an online backup (the archive itself stays with them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreBackedUp {
    /// Who asked.
    pub actor_id: String,
    /// `redb` or `postgres`.
    pub backend: String,
    /// When the backup's view was taken.
    pub created_at: String,
    /// Chains in it.
    pub chains: u64,
    /// The log's leaves in it.
    pub log_size: u64,
}

impl cra_trace::Payload for StoreBackedUp {
    const EVENT_TYPE: &'static str = "store.backed_up";
}

/// A finished archive, removed with this value.
#[derive(Debug)]
pub struct Backup {
    /// The archive file.
    pub file: PathBuf,
    /// What it holds.
    pub manifest: Manifest,
    /// The directory holding it (removed when dropped).
    pub dir: tempfile::TempDir,
}

impl Runtime {
    /// Backs up the whole store into a temporary archive for `actor` (an admin), recording it in
    /// the operator audit chain.
    pub async fn backup(&self, actor: &Actor) -> ApiResult<Backup> {
        actor.require(&[Role::Admin], "backing up the store")?;
        let dir = tempfile::tempdir().map_err(|e| {
            ApiError::new(
                Token::Unavailable,
                format!("cannot make a temporary directory for the backup: {e}"),
            )
        })?;
        let file = dir.path().join("cra.backup");
        let now = cra_wire::clock::format_timestamp(self.clock.now());
        let (redb, pg, out) = (
            self.backends.redb.clone(),
            self.backends.postgres.clone(),
            file.clone(),
        );
        let manifest = run_blocking("the backup task failed", move || {
            let quiet = &mut |_: &str, _: u64| {};
            match (redb, pg) {
                (Some(store), _) => {
                    cra_store::backup::redb::backup_store(&store, &out, &now, quiet)
                }
                (None, Some(store)) => {
                    cra_store::backup::pg::backup_store(&store, &out, &now, quiet)
                }
                (None, None) => Err(cra_store::BackendError::Backend(
                    "this server's store cannot be backed up".into(),
                )
                .into()),
            }
        })
        .await?
        .map_err(|e| ApiError::new(Token::Unavailable, e.to_string()))?;
        let recorded = StoreBackedUp {
            actor_id: actor.id.clone(),
            backend: manifest.backend.clone(),
            created_at: manifest.created_at.clone(),
            chains: manifest.chains,
            log_size: manifest.log_size,
        };
        let chain = super::operator::lock(self).await?;
        chain
            .append(vec![super::operator::draft(self, &recorded)])
            .await?;
        Ok(Backup {
            file,
            manifest,
            dir,
        })
    }
}
