//! In-process Relay: a fresh redb data directory per case, the `cra_relay::Relay` operations over
//! it with the fixture's fixed clock and seeded ids, and the answers in the README's shapes.

use std::sync::Arc;

use cra_relay::fact::{FactQuery, FactView};
use cra_relay::model::{Actor, ActorType};
use cra_relay::session::SeededCallsigns;
use cra_relay::store::SearchQuery;
use cra_relay::{Relay, RelayError, RelayStore};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Map, Value, json};

/// A deliberate Relay defect (teeth tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayMutation {
    /// Reads report superseded facts as still open (`valid_to` left null).
    SupersessionNotClosing,
    /// A package is the first project's holding its id, whatever project is named.
    PackageIdsGlobal,
    /// A review is made as a human who is not the author, whoever asked (no review gate).
    ReviewGateOff,
}

/// One case's Relay world.
pub struct RelayWorld {
    _dir: tempfile::TempDir,
    store: Arc<dyn RelayStore>,
    relay: Relay,
    clock: Arc<FixedClock>,
    seed: u64,
    mutation: Option<RelayMutation>,
}

impl std::fmt::Debug for RelayWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayWorld")
    }
}

fn open_store() -> Result<(tempfile::TempDir, Arc<dyn RelayStore>), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a data directory: {e}"))?;
    let db = cra_store::RedbStore::open(dir.path()).map_err(|e| e.to_string())?;
    let relay = cra_store::relay::RedbRelay::open(&db).map_err(|e| e.to_string())?;
    Ok((dir, Arc::new(relay)))
}

fn error(e: &RelayError) -> Value {
    let mut v =
        serde_json::to_value(e.to_body()).unwrap_or_else(|_| json!({"error": e.token().as_str()}));
    v["status"] = json!(e.http_status());
    v
}

fn actor_of(v: Option<&Value>) -> Actor {
    let id = v
        .and_then(|c| c.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("jordan");
    let t = match v.and_then(|c| c.get("type")).and_then(Value::as_str) {
        Some("agent") => ActorType::Agent,
        Some("script") => ActorType::Script,
        _ => ActorType::Human,
    };
    Actor {
        id: id.to_owned(),
        actor_type: t,
    }
}

fn s<'a>(args: &'a Value, k: &str) -> Option<&'a str> {
    args.get(k).and_then(Value::as_str)
}

impl RelayWorld {
    /// Opens an empty store and applies `setup` (projects, packages, facts).
    pub fn new(
        setup: &Map<String, Value>,
        clock: Arc<FixedClock>,
        seed: u64,
        mutation: Option<RelayMutation>,
    ) -> Result<Self, String> {
        let (dir, store) = open_store()?;
        let relay = relay_over(store.clone(), clock.clone(), seed);
        let w = Self {
            _dir: dir,
            store,
            relay,
            clock,
            seed,
            mutation,
        };
        for p in setup
            .get("projects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = s(p, "project_id").unwrap_or_default();
            w.relay
                .create_project(id, s(p, "name").unwrap_or(id))
                .map_err(|e| format!("setup project {id}: {e}"))?;
            if p.get("archived_at").is_some_and(|a| !a.is_null()) {
                w.relay
                    .archive(id)
                    .map_err(|e| format!("setup archive {id}: {e}"))?;
            }
        }
        for pkg in setup
            .get("packages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let project = s(pkg, "project_id").unwrap_or_default();
            w.relay
                .deposit(project, &actor_of(pkg.get("created_by")), pkg)
                .map_err(|e| format!("setup package: {e}"))?;
        }
        for f in setup
            .get("facts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let project = s(f, "project_id").unwrap_or_default();
            w.relay
                .assert_fact(project, &actor_of(f.get("asserted_by")), f)
                .map_err(|e| format!("setup fact: {e}"))?;
        }
        Ok(w)
    }

    /// The clock the world runs on.
    pub fn clock(&self) -> &FixedClock {
        &self.clock
    }

    /// The project of package `id` (`project` when named, else the one project holding it).
    fn locate(&self, project: Option<&str>, id: &str) -> Result<String, RelayError> {
        if self.mutation == Some(RelayMutation::PackageIdsGlobal) {
            let first = self.relay.projects_of_package(id)?.into_iter().next();
            return first.ok_or_else(|| RelayError::PackageNotFound(id.into()));
        }
        self.relay.locate_package(project, id)
    }

    /// Performs one Relay verb; `None` when `op` is not a Relay verb.
    pub fn perform(&self, op: &str, args: &Value) -> Option<Result<Value, String>> {
        let r = &self.relay;
        let me = Actor {
            id: "jordan".into(),
            actor_type: ActorType::Human,
        };
        let project = s(args, "project_id").unwrap_or_default();
        let wire = |x: Result<cra_relay::StoredPackage, RelayError>| match x {
            Ok(p) => p.to_wire(),
            Err(e) => error(&e),
        };
        let list = |x: Result<Vec<cra_relay::StoredPackage>, RelayError>| match x {
            Ok(ps) => {
                json!({"packages": ps.iter().map(cra_relay::StoredPackage::to_wire).collect::<Vec<_>>()})
            }
            Err(e) => error(&e),
        };
        let answer = match op {
            "deposit" => {
                let pkg = args.get("package").cloned().unwrap_or(Value::Null);
                let project = s(&pkg, "project_id").unwrap_or_default().to_owned();
                wire(
                    r.deposit(&project, &actor_of(pkg.get("created_by")), &pkg)
                        .map(|d| d.stored),
                )
            }
            "pull" => match s(args, "mode").unwrap_or("latest") {
                "specific" => {
                    let id = s(args, "package_id").unwrap_or_default();
                    wire(
                        self.locate(s(args, "project_id"), id)
                            .and_then(|p| r.pull_specific(&p, id)),
                    )
                }
                "relevant" => list(
                    r.pull_relevant(&SearchQuery {
                        project_id: project.to_owned(),
                        query: s(args, "query").unwrap_or_default().to_owned(),
                        limit: args.get("limit").and_then(Value::as_u64).unwrap_or(5) as usize,
                        ..SearchQuery::default()
                    })
                    .map(|hits| hits.into_iter().map(|h| h.package).collect()),
                ),
                "awaiting_review" => list(r.awaiting_review(project).map(|p| p.packages)),
                _ => list(
                    r.pull_latest(
                        project,
                        args.get("limit")
                            .and_then(Value::as_u64)
                            .map(|l| l as usize),
                    )
                    .map(|p| p.packages),
                ),
            },
            "orient" => {
                let window = args
                    .get("window_days")
                    .and_then(Value::as_u64)
                    .map(|w| w as u32);
                match r.orient(project, window) {
                    Ok(b) => serde_json::to_value(b).unwrap_or(Value::Null),
                    Err(e) => error(&e),
                }
            }
            "assert_fact" => match r.assert_fact(project, &actor_of(args.get("asserted_by")), args)
            {
                Ok(f) => serde_json::to_value(f.fact).unwrap_or(Value::Null),
                Err(e) => error(&e),
            },
            "invalidate_fact" => match r.invalidate_fact(
                project,
                s(args, "subject").unwrap_or_default(),
                s(args, "predicate").unwrap_or_default(),
            ) {
                Ok(n) => json!({ "invalidated": n }),
                Err(e) => error(&e),
            },
            "get_facts" => {
                let view = if args.get("history").and_then(Value::as_bool) == Some(true) {
                    FactView::History
                } else if let Some(t) = s(args, "as_of") {
                    FactView::AsOfValid(t.to_owned())
                } else if let Some(t) = s(args, "recorded_as_of") {
                    FactView::AsOfRecorded(t.to_owned())
                } else {
                    FactView::Current
                };
                let q = FactQuery {
                    subject: s(args, "subject").map(str::to_owned),
                    predicate: s(args, "predicate").map(str::to_owned),
                    view,
                };
                match r.facts(project, &q) {
                    Ok(rows) => {
                        let mut facts: Vec<Value> = rows
                            .into_iter()
                            .filter_map(|f| serde_json::to_value(f.fact).ok())
                            .collect();
                        if self.mutation == Some(RelayMutation::SupersessionNotClosing) {
                            for f in &mut facts {
                                f["valid_to"] = Value::Null;
                            }
                        }
                        json!({ "facts": facts })
                    }
                    Err(e) => error(&e),
                }
            }
            "flag_for_review" => {
                let id = s(args, "package_id").unwrap_or_default();
                wire(self.locate(s(args, "project_id"), id).and_then(|p| {
                    r.flag_for_review(
                        &p,
                        id,
                        s(args, "review_type").unwrap_or_default(),
                        s(args, "note"),
                        &me,
                    )
                }))
            }
            // The reviewer is the actor the case names (`as`, with that fixture actor's type),
            // else a human other than the fixtures' author (jordan), as over HTTP, where the
            // review is sent with the runner's admin token: a human review is never closed by
            // its author (specs/relay.md, "Review gates").
            "review" => {
                let reviewer = match s(args, "as") {
                    Some(id) => match crate::target::runtime::actor_type_of(id) {
                        Some("agent") => Actor {
                            id: id.into(),
                            actor_type: ActorType::Agent,
                        },
                        Some(_) => Actor {
                            id: id.into(),
                            actor_type: ActorType::Human,
                        },
                        None => return Some(Err(format!("`as`: `{id}` is not a fixture actor"))),
                    },
                    None => Actor {
                        id: "admin".into(),
                        actor_type: ActorType::Human,
                    },
                };
                let reviewer = if self.mutation == Some(RelayMutation::ReviewGateOff) {
                    Actor {
                        id: "gate-left-open".into(),
                        actor_type: ActorType::Human,
                    }
                } else {
                    reviewer
                };
                let id = s(args, "package_id").unwrap_or_default();
                wire(self.locate(s(args, "project_id"), id).and_then(|p| {
                    r.review(
                        &p,
                        id,
                        s(args, "outcome").unwrap_or_default(),
                        s(args, "note"),
                        &reviewer,
                    )
                }))
            }
            "export_import" => return Some(self.export_import(args)),
            _ => return None,
        };
        Some(Ok(answer))
    }

    /// Round-trips the project through the export format with the runtime's implementation.
    fn export_import(&self, args: &Value) -> Result<Value, String> {
        let project = s(args, "project_id").unwrap_or_default();
        let tamper = args.get("tamper").and_then(Value::as_bool) == Some(true);
        Ok(
            match cra_runtime::conformance::export_import(self.store.as_ref(), project, tamper) {
                Ok(v) => v,
                Err(e) => cra_runtime::conformance::error_answer(&e),
            },
        )
    }

    /// Seed of the id generator.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

fn relay_over(store: Arc<dyn RelayStore>, clock: Arc<FixedClock>, seed: u64) -> Relay {
    Relay::new(
        store,
        clock,
        Arc::new(SequentialIds::new(1_700_000_000_000, seed)),
        Arc::new(SeededCallsigns::new(seed)),
    )
}
