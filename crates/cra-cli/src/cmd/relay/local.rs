//! `cra relay` local mode: the operations run in this process on the embedded redb store of a
//! data directory, acting as `--actor`.

use std::path::Path;
use std::sync::Arc;

use cra_relay::fact::FactQuery;
use cra_relay::session::SeededCallsigns;
use cra_relay::store::{RelayStore, SearchQuery};
use cra_relay::{Actor, Relay};
use cra_store::relay::RedbRelay;
use cra_store::{BackendError, RedbStore};
use cra_wire::{SystemClock, UuidV7Ids};
use serde_json::{Value, json};

use super::{Answer, Backend, Failure, Output, summary};

/// The local store and the acting actor.
pub(super) struct Local {
    relay: Relay,
    actor: Option<Actor>,
}

impl Local {
    /// Opens the data directory `dir`. A directory a running server holds is refused with a
    /// message naming that server's process and pointing at server mode.
    pub(super) fn open(dir: &Path, actor: Option<Actor>) -> Result<Self, Failure> {
        let store = RedbStore::open(dir).map_err(|e| match e {
            BackendError::InUse { path, holder } => Failure::CouldNotRun(format!(
                "data directory {} is held by a running cra server ({holder}); talk to that \
                 server instead: cra relay --url http://ADDR ... (or set CRA_URL), with the \
                 address `cra serve` printed",
                path.display()
            )),
            other => Failure::CouldNotRun(other.to_string()),
        })?;
        let relay = RedbRelay::open(&store).map_err(|e| Failure::CouldNotRun(e.to_string()))?;
        Ok(Self {
            relay: Relay::new(
                Arc::new(relay) as Arc<dyn RelayStore>,
                Arc::new(SystemClock),
                Arc::new(UuidV7Ids),
                Arc::new(SeededCallsigns::new(time_seed())),
            ),
            actor,
        })
    }

    /// The session `session_id` when it belongs to `project_id` (`session_not_found` otherwise,
    /// as the server answers).
    fn session_of(
        &self,
        project_id: &str,
        session_id: &str,
    ) -> Result<cra_relay::model::Session, Failure> {
        match self.relay.session(session_id) {
            Ok(s) if s.project_id == project_id => Ok(s),
            Ok(_) => Err(cra_relay::RelayError::SessionNotFound(session_id.into()).into()),
            Err(e) => Err(e.into()),
        }
    }

    fn actor(&self) -> Result<&Actor, Failure> {
        self.actor.as_ref().ok_or_else(|| {
            Failure::CouldNotRun(
                "this command writes: name the acting actor with --actor ID (or CRA_ACTOR)".into(),
            )
        })
    }
}

fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

fn to_json<T: serde::Serialize>(t: &T) -> Answer {
    serde_json::to_value(t).map_err(|e| Failure::CouldNotRun(e.to_string()))
}

impl Backend for Local {
    fn create_project(&self, project_id: &str, name: &str) -> Answer {
        to_json(&self.relay.create_project(project_id, name)?)
    }

    fn set_archived(&self, project_id: &str, archived: bool) -> Answer {
        to_json(&if archived {
            self.relay.archive(project_id)?
        } else {
            self.relay.unarchive(project_id)?
        })
    }

    fn deposit(&self, package: &Value) -> Answer {
        let actor = self.actor()?;
        let project = package
            .get("project_id")
            .and_then(Value::as_str)
            .unwrap_or("");
        let d = self.relay.deposit(project, actor, package)?;
        Ok(json!({"created": d.created, "package": d.stored.to_wire()}))
    }

    fn pull_specific(&self, package_id: &str, project: Option<&str>) -> Answer {
        let project = self.relay.locate_package(project, package_id)?;
        Ok(self.relay.pull_specific(&project, package_id)?.to_wire())
    }

    fn pull_latest(&self, query: &SearchQuery, filtered: bool) -> Answer {
        let pulled = if filtered {
            self.relay.pull_latest_matching(query)?
        } else {
            self.relay
                .pull_latest(&query.project_id, Some(query.limit))?
        };
        Ok(pulled.to_wire())
    }

    fn pull_relevant(&self, query: &SearchQuery) -> Answer {
        Ok(self.relay.search(query)?.to_wire())
    }

    fn orient(
        &self,
        project_id: &str,
        window_days: u32,
        markdown: bool,
    ) -> Result<Output, Failure> {
        let bundle = self.relay.orient(project_id, Some(window_days))?;
        Ok(if markdown {
            Output::Text(cra_relay::digest::orientation_markdown(&bundle))
        } else {
            Output::Json(to_json(&bundle)?)
        })
    }

    fn assert_fact(&self, project_id: &str, body: &Value) -> Answer {
        let actor = self.actor()?;
        Ok(self.relay.assert_fact(project_id, actor, body)?.to_wire())
    }

    fn invalidate_fact(&self, project_id: &str, subject: &str, predicate: &str) -> Answer {
        let n = self.relay.invalidate_fact(project_id, subject, predicate)?;
        Ok(json!({ "invalidated": n }))
    }

    fn facts(&self, project_id: &str, query: &FactQuery) -> Answer {
        let rows = self.relay.facts(project_id, query)?;
        Ok(Value::Array(rows.iter().map(|r| r.to_wire()).collect()))
    }

    fn flag(
        &self,
        package_id: &str,
        project: Option<&str>,
        review_type: &str,
        note: Option<&str>,
    ) -> Answer {
        let actor = self.actor()?;
        let project = self.relay.locate_package(project, package_id)?;
        Ok(self
            .relay
            .flag_for_review(&project, package_id, review_type, note, actor)?
            .to_wire())
    }

    fn review(
        &self,
        package_id: &str,
        project: Option<&str>,
        outcome: &str,
        note: Option<&str>,
    ) -> Answer {
        let actor = self.actor()?;
        let project = self.relay.locate_package(project, package_id)?;
        Ok(self
            .relay
            .review(&project, package_id, outcome, note, actor)?
            .to_wire())
    }

    fn start_session(&self, project_id: &str) -> Answer {
        let actor = self.actor()?;
        to_json(&self.relay.start_session(project_id, actor)?)
    }

    fn session(&self, project_id: &str, session_id: &str) -> Answer {
        to_json(&self.session_of(project_id, session_id)?)
    }

    fn end_session(&self, project_id: &str, session_id: &str) -> Answer {
        let actor = self.actor()?;
        self.session_of(project_id, session_id)?;
        to_json(&self.relay.end_session(session_id, actor)?)
    }

    fn export(&self, dir: &Path, project: Option<&str>) -> Answer {
        let store = &**self.relay.store();
        let snap = match project {
            Some(p) => {
                self.relay.project(p)?;
                cra_relay::export::export_project_dir(store, p, dir)
            }
            None => cra_relay::export::export_dir(store, dir),
        }
        .map_err(|e| Failure::CouldNotRun(e.to_string()))?;
        Ok(summary("exported", dir, &snap))
    }

    fn import(&self, dir: &Path, members: &[String]) -> Answer {
        if !members.is_empty() {
            return Err(Failure::CouldNotRun(
                "--member grants access on a server; a local data directory has no grants".into(),
            ));
        }
        let snap = cra_relay::export::import_dir(&**self.relay.store(), dir)
            .map_err(|e| Failure::Refused(e.to_body()))?;
        Ok(summary("imported", dir, &snap))
    }
}
