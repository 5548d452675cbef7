//! `cra relay` local mode: a front door in this process onto the runtime's service layer
//! ([`cra_runtime::service::relay`]) over the embedded store of a data directory, acting as
//! `--actor`. The rules and the TRACE events are those of `cra serve`: a project created here
//! has its audit chain, and every write is recorded in the same transaction as the change (the
//! outbox), so a server started later on the directory serves and verifies it all.
//!
//! Who acts: `--actor ID` names the actor of writes (`created_by.id` of a deposit, the owner of
//! a project, the reviewer). Whoever can open the data directory can change anything in it, so
//! the local actor holds the admin role ([`Actor::local`]); reads without `--actor` act as
//! `local`.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use cra_relay::fact::FactQuery;
use cra_relay::store::SearchQuery;
use cra_runtime::auth::{Actor, ActorType};
use cra_runtime::config::EncryptionConfig;
use cra_runtime::server::StartError;
use cra_runtime::service::relay::{CreateProject, Flag, PackageListing, Review};
use cra_runtime::{ApiError, AppState};
use cra_store::BackendError;
use cra_wire::{SystemClock, UuidV7Ids};
use serde_json::{Value, json};

use super::{Answer, Backend, Failure, Output, deposit_project, import_files, write_export};
use crate::cmd::trace_io::in_flag_terms;

/// The id reads act as when no `--actor` is named.
const LOCAL_READER: &str = "local";

/// The runtime on the local store, the executor its operations run on, and the acting actor.
pub(super) struct Local {
    // Declared first, so it is dropped (and the store closed) before the executor.
    state: AppState,
    executor: tokio::runtime::Runtime,
    actor: Option<Actor>,
    reader: Actor,
}

/// Why the directory did not open, as the command reports it.
fn start_failure(e: StartError) -> Failure {
    match e {
        StartError::Store(BackendError::InUse { path, holder }) => Failure::CouldNotRun(format!(
            "data directory {} is held by a running cra server ({holder}); talk to that server \
             instead: cra relay --url http://ADDR ... (or set CRA_URL), with the address `cra \
             serve` printed",
            path.display()
        )),
        // A key the flags named (not a server's `[encryption]`) is said in their terms.
        other => Failure::CouldNotRun(in_flag_terms(&other.to_string())),
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure::Refused(e.body)
    }
}

impl Local {
    /// Opens the data directory `dir` as `cra serve` would, without a listener, with the
    /// storage keys `keys` names. A directory a running server holds is refused with a message
    /// naming that server's process and pointing at server mode; a key file that cannot be read,
    /// and a missing or wrong key, with a message naming the flag or the key needed.
    pub(super) fn open(
        dir: &Path,
        keys: EncryptionConfig,
        actor: Option<(String, ActorType)>,
        notes: &mut dyn Write,
    ) -> Result<Self, Failure> {
        let executor = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::CouldNotRun(format!("cannot start the executor: {e}")))?;
        let (state, notices) = cra_runtime::open_local_with(
            dir,
            &[],
            BTreeMap::new(),
            keys,
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
        )
        .map_err(start_failure)?;
        for n in notices {
            if let cra_runtime::StartNotice::Info(line) = n {
                let _ = writeln!(notes, "cra relay: {line}");
            }
        }
        let actor = actor.map(|(id, t)| Actor::local(id, t));
        let reader = actor
            .clone()
            .unwrap_or_else(|| Actor::local(LOCAL_READER, ActorType::Human));
        Ok(Self {
            state,
            executor,
            actor,
            reader,
        })
    }

    /// Runs one service operation to its answer.
    fn run<T>(&self, op: impl Future<Output = Result<T, ApiError>>) -> Result<T, Failure> {
        Ok(self.executor.block_on(op)?)
    }

    /// The actor of a write.
    fn writer(&self) -> Result<&Actor, Failure> {
        self.actor.as_ref().ok_or_else(|| {
            Failure::CouldNotRun(
                "this command writes: name the acting actor with --actor ID (or CRA_ACTOR)".into(),
            )
        })
    }
}

fn to_json<T: serde::Serialize>(t: &T) -> Answer {
    serde_json::to_value(t).map_err(|e| Failure::CouldNotRun(e.to_string()))
}

impl Backend for Local {
    fn create_project(&self, project_id: &str, name: &str) -> Answer {
        let input = CreateProject {
            project_id: project_id.to_owned(),
            name: name.to_owned(),
            members: Vec::new(),
        };
        to_json(&self.run(self.state.create_project(self.writer()?, input))?)
    }

    fn set_archived(&self, project_id: &str, archived: bool) -> Answer {
        let op = self
            .state
            .set_archived(self.writer()?, project_id, archived);
        to_json(&self.run(op)?)
    }

    fn deposit(&self, package: &Value) -> Answer {
        let actor = self.writer()?;
        let project = deposit_project(package)?;
        let d = self.run(self.state.deposit(actor, project, package.clone()))?;
        Ok(json!({"created": d.created, "package": d.stored.to_wire()}))
    }

    fn pull_specific(&self, package_id: &str, project: Option<&str>) -> Answer {
        let op = self.state.package(&self.reader, package_id, project);
        Ok(self.run(op)?.to_wire())
    }

    fn pull_latest(&self, query: &SearchQuery, filtered: bool) -> Answer {
        let listing = if filtered {
            PackageListing::LatestMatching(query.clone())
        } else {
            PackageListing::Latest {
                limit: Some(query.limit),
            }
        };
        let op = self
            .state
            .packages(&self.reader, &query.project_id, listing);
        Ok(self.run(op)?.to_wire())
    }

    fn pull_relevant(&self, query: &SearchQuery) -> Answer {
        let listing = PackageListing::Relevant(query.clone());
        let op = self
            .state
            .packages(&self.reader, &query.project_id, listing);
        Ok(self.run(op)?.to_wire())
    }

    fn orient(
        &self,
        project_id: &str,
        window_days: u32,
        markdown: bool,
    ) -> Result<Output, Failure> {
        let op = self
            .state
            .orient(&self.reader, project_id, Some(window_days));
        let bundle = self.run(op)?;
        Ok(if markdown {
            Output::Text(cra_relay::digest::orientation_markdown(&bundle))
        } else {
            Output::Json(to_json(&bundle)?)
        })
    }

    fn assert_fact(&self, project_id: &str, body: &Value) -> Answer {
        let op = self
            .state
            .assert_fact(self.writer()?, project_id, body.clone());
        Ok(self.run(op)?.to_wire())
    }

    fn invalidate_fact(&self, project_id: &str, subject: &str, predicate: &str) -> Answer {
        let op = self
            .state
            .invalidate_fact(self.writer()?, project_id, subject, predicate);
        Ok(json!({ "invalidated": self.run(op)? }))
    }

    fn facts(&self, project_id: &str, query: &FactQuery) -> Answer {
        let rows = self.run(self.state.facts(&self.reader, project_id, query.clone()))?;
        Ok(Value::Array(rows.iter().map(|r| r.to_wire()).collect()))
    }

    fn flag(
        &self,
        package_id: &str,
        project: Option<&str>,
        review_type: &str,
        note: Option<&str>,
    ) -> Answer {
        let flag = Flag {
            review_type: review_type.to_owned(),
            note: note.map(str::to_owned),
        };
        let op = self.state.flag(self.writer()?, package_id, project, flag);
        Ok(self.run(op)?.to_wire())
    }

    fn review(
        &self,
        package_id: &str,
        project: Option<&str>,
        outcome: &str,
        note: Option<&str>,
    ) -> Answer {
        let review = Review {
            outcome: outcome.to_owned(),
            note: note.map(str::to_owned),
        };
        let op = self
            .state
            .review(self.writer()?, package_id, project, review);
        Ok(self.run(op)?.to_wire())
    }

    fn start_session(&self, project_id: &str) -> Answer {
        let op = self.state.start_relay_session(self.writer()?, project_id);
        to_json(&self.run(op)?)
    }

    fn session(&self, project_id: &str, session_id: &str) -> Answer {
        let op = self
            .state
            .relay_session(&self.reader, project_id, session_id);
        to_json(&self.run(op)?)
    }

    fn end_session(&self, project_id: &str, session_id: &str) -> Answer {
        let op = self
            .state
            .end_relay_session(self.writer()?, project_id, session_id);
        to_json(&self.run(op)?)
    }

    fn export(&self, dir: &Path, project: Option<&str>) -> Answer {
        let op = self.state.export(&self.reader, project.map(str::to_owned));
        write_export(dir, &self.run(op)?)
    }

    fn import(&self, dir: &Path, members: &[String]) -> Answer {
        let actor = self.writer()?;
        let (bundle, answer) = import_files(dir)?;
        self.run(self.state.import(actor, members.to_vec(), bundle))?;
        Ok(answer)
    }
}
