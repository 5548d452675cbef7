//! `cra relay ...`: Relay (Agentic Protocol v0.1) against a local data directory (`--data`,
//! default `./cra-data`, the embedded redb store; a running server holds the directory, and then
//! this command says so and exits 1).
//!
//! Every command prints its result as JSON on standard output (`orient --markdown` prints the
//! briefing). A refused operation prints the wire error body on standard error and exits 2;
//! a command that could not run (unopenable store, unreadable file) exits 1.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use cra_relay::fact::{FactQuery, FactView};
use cra_relay::session::SeededCallsigns;
use cra_relay::store::{RelayStore, SearchQuery};
use cra_relay::{Actor, ActorType, Relay, RelayError};
use cra_store::RedbStore;
use cra_store::relay::RedbRelay;
use cra_wire::{ErrorBody, SystemClock, Token, UuidV7Ids};
use serde_json::{Value, json};

use crate::exit::Exit;

/// Where the data lives and who is acting.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The data directory (embedded store).
    #[arg(long, env = "CRA_DATA", default_value = "cra-data", global = true)]
    pub data: PathBuf,
    /// The acting actor's id (what `created_by.id` must equal).
    #[arg(long, env = "CRA_ACTOR", global = true)]
    pub actor: Option<String>,
    /// The acting actor's type.
    #[arg(long, value_enum, default_value_t = CliActorType::Human, global = true)]
    pub actor_type: CliActorType,
    /// The subcommand.
    #[command(subcommand)]
    pub command: RelayCommand,
}

/// Actor types on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CliActorType {
    /// A person.
    Human,
    /// An AI agent.
    Agent,
    /// A script.
    Script,
}

/// `cra relay` subcommands.
#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Create, archive or unarchive a project.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Deposit a package (JSON file, or `-` for standard input) into its `project_id`.
    Deposit {
        /// The package file, or `-`.
        file: PathBuf,
    },
    /// Read packages: the latest of a project, one by id, or the most relevant to a query.
    Pull(PullArgs),
    /// The OrientationBundle of a project (or its Markdown briefing).
    Orient {
        /// The project.
        #[arg(long)]
        project: String,
        /// The window in days.
        #[arg(long, default_value_t = 14)]
        window_days: u32,
        /// Print the Markdown briefing instead of the JSON bundle.
        #[arg(long)]
        markdown: bool,
    },
    /// Assert, invalidate or read facts.
    #[command(subcommand)]
    Facts(FactsCommand),
    /// Flag a package for review (status -> awaiting_review).
    Flag {
        /// The package.
        package_id: String,
        /// Who reviews.
        #[arg(long, default_value = "human")]
        review_type: String,
        /// A note for the reviewer.
        #[arg(long)]
        note: Option<String>,
    },
    /// Record a review outcome: complete or revision_requested.
    Review {
        /// The package.
        package_id: String,
        /// The outcome.
        #[arg(long)]
        outcome: String,
        /// The reviewer's note.
        #[arg(long)]
        note: Option<String>,
    },
    /// Export every project, package, fact, session and review record to DIR (NDJSON + manifest).
    Export {
        /// The target directory.
        dir: PathBuf,
    },
    /// Import an export directory into an empty data directory (every hash verified first).
    Import {
        /// The export directory.
        dir: PathBuf,
    },
}

/// `cra relay project ...`.
#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project.
    Create {
        /// Its id.
        project_id: String,
        /// Its name.
        name: String,
    },
    /// Archive a project (writes refused until unarchived).
    Archive {
        /// The project.
        project_id: String,
    },
    /// Unarchive a project.
    Unarchive {
        /// The project.
        project_id: String,
    },
}

/// `cra relay pull` arguments.
#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    /// The project (for --latest and --query).
    #[arg(long)]
    pub project: Option<String>,
    /// The latest packages.
    #[arg(long, conflicts_with_all = ["id", "query"])]
    pub latest: bool,
    /// One package by id.
    #[arg(long, conflicts_with = "query")]
    pub id: Option<String>,
    /// Free-text search (BM25).
    #[arg(long)]
    pub query: Option<String>,
    /// How many packages.
    #[arg(long, default_value_t = 5)]
    pub limit: usize,
}

/// `cra relay facts ...`.
#[derive(Debug, Subcommand)]
pub enum FactsCommand {
    /// Assert a fact (supersedes the current one of the same subject and predicate).
    Assert {
        /// The project.
        #[arg(long)]
        project: String,
        /// The subject.
        #[arg(long)]
        subject: String,
        /// The predicate.
        #[arg(long)]
        predicate: String,
        /// The value.
        #[arg(long)]
        value: String,
        /// When it became true (RFC 3339; default now).
        #[arg(long)]
        valid_from: Option<String>,
    },
    /// Invalidate the current fact of a subject and predicate.
    Invalidate {
        /// The project.
        #[arg(long)]
        project: String,
        /// The subject.
        #[arg(long)]
        subject: String,
        /// The predicate.
        #[arg(long)]
        predicate: String,
    },
    /// Read facts: current by default.
    Get {
        /// The project.
        #[arg(long)]
        project: String,
        /// Only this subject.
        #[arg(long)]
        subject: Option<String>,
        /// Only this predicate.
        #[arg(long)]
        predicate: Option<String>,
        /// What was true at this valid time.
        #[arg(long, conflicts_with_all = ["recorded_as_of", "history"])]
        as_of: Option<String>,
        /// What the runtime believed at this time.
        #[arg(long, conflicts_with = "history")]
        recorded_as_of: Option<String>,
        /// Every row, superseded ones included.
        #[arg(long)]
        history: bool,
    },
}

/// Runs `cra relay` with the process's standard streams.
pub fn run(args: RelayArgs) -> Exit {
    let stdout = io::stdout();
    let stderr = io::stderr();
    execute(
        args,
        &mut io::stdin(),
        &mut stdout.lock(),
        &mut stderr.lock(),
    )
}

fn open(dir: &Path) -> Result<Relay, String> {
    let store = RedbStore::open(dir).map_err(|e| e.to_string())?;
    let relay = RedbRelay::open(&store).map_err(|e| e.to_string())?;
    let seed = time_seed();
    Ok(Relay::new(
        Arc::new(relay) as Arc<dyn RelayStore>,
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
        Arc::new(SeededCallsigns::new(seed)),
    ))
}

fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

enum Failure {
    CouldNotRun(String),
    Refused(ErrorBody),
}

impl From<RelayError> for Failure {
    fn from(e: RelayError) -> Self {
        Failure::Refused(e.to_body())
    }
}

/// Runs `cra relay` with the given streams (the binary and the tests both call this).
pub fn execute(
    args: RelayArgs,
    stdin: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit {
    let result = (|| -> Result<Output, Failure> {
        let relay = open(&args.data).map_err(Failure::CouldNotRun)?;
        let actor = args.actor.clone().map(|id| {
            let t = match args.actor_type {
                CliActorType::Human => ActorType::Human,
                CliActorType::Agent => ActorType::Agent,
                CliActorType::Script => ActorType::Script,
            };
            Actor::new(id, t)
        });
        dispatch(&relay, actor, args.command, stdin)
    })();
    match result {
        Ok(Output::Json(v)) => {
            let text = serde_json::to_string_pretty(&v).unwrap_or_default();
            let _ = writeln!(out, "{text}");
            Exit::Success
        }
        Ok(Output::Text(t)) => {
            let _ = write!(out, "{t}");
            Exit::Success
        }
        Err(Failure::CouldNotRun(m)) => {
            let _ = writeln!(err, "cra relay: {m}");
            Exit::CouldNotRun
        }
        Err(Failure::Refused(body)) => {
            let text = serde_json::to_string(&body).unwrap_or_default();
            let _ = writeln!(err, "{text}");
            Exit::Negative
        }
    }
}

enum Output {
    Json(Value),
    Text(String),
}

fn need_actor(actor: Option<Actor>) -> Result<Actor, Failure> {
    actor.ok_or_else(|| {
        Failure::CouldNotRun(
            "this command writes: name the acting actor with --actor ID (or CRA_ACTOR)".into(),
        )
    })
}

fn to_json<T: serde::Serialize>(t: &T) -> Result<Value, Failure> {
    serde_json::to_value(t).map_err(|e| Failure::CouldNotRun(e.to_string()))
}

fn dispatch(
    relay: &Relay,
    actor: Option<Actor>,
    cmd: RelayCommand,
    stdin: &mut dyn Read,
) -> Result<Output, Failure> {
    Ok(Output::Json(match cmd {
        RelayCommand::Project(p) => match p {
            ProjectCommand::Create { project_id, name } => {
                to_json(&relay.create_project(&project_id, &name)?)?
            }
            ProjectCommand::Archive { project_id } => to_json(&relay.archive(&project_id)?)?,
            ProjectCommand::Unarchive { project_id } => to_json(&relay.unarchive(&project_id)?)?,
        },
        RelayCommand::Deposit { file } => {
            let actor = need_actor(actor)?;
            let mut bytes = Vec::new();
            let read = if file.as_os_str() == "-" {
                stdin.read_to_end(&mut bytes).map(|_| ())
            } else {
                std::fs::read(&file).map(|b| bytes = b)
            };
            read.map_err(|e| Failure::CouldNotRun(format!("{}: {e}", file.display())))?;
            let value = cra_wire::json::parse_strict(&bytes).map_err(|e| {
                Failure::Refused(ErrorBody::new(Token::InvalidSchema, e.to_string()))
            })?;
            let project = value
                .get("project_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let d = relay.deposit(&project, &actor, &value)?;
            json!({"created": d.created, "package": d.stored.to_wire()})
        }
        RelayCommand::Pull(p) => pull(relay, p)?,
        RelayCommand::Orient {
            project,
            window_days,
            markdown,
        } => {
            let bundle = relay.orient(&project, Some(window_days))?;
            if markdown {
                return Ok(Output::Text(cra_relay::digest::orientation_markdown(
                    &bundle,
                )));
            }
            to_json(&bundle)?
        }
        RelayCommand::Facts(f) => facts(relay, actor, f)?,
        RelayCommand::Flag {
            package_id,
            review_type,
            note,
        } => {
            let actor = need_actor(actor)?;
            relay
                .flag_for_review(&package_id, &review_type, note.as_deref(), &actor)?
                .to_wire()
        }
        RelayCommand::Review {
            package_id,
            outcome,
            note,
        } => {
            let actor = need_actor(actor)?;
            relay
                .review(&package_id, &outcome, note.as_deref(), &actor)?
                .to_wire()
        }
        RelayCommand::Export { dir } => {
            let snap = cra_relay::export::export_dir(&**relay.store(), &dir)
                .map_err(|e| Failure::CouldNotRun(e.to_string()))?;
            json!({"exported": dir.display().to_string(), "projects": snap.projects.len(),
                   "packages": snap.packages.len(), "facts": snap.facts.len(),
                   "sessions": snap.sessions.len(), "reviews": snap.reviews.len()})
        }
        RelayCommand::Import { dir } => {
            let snap = cra_relay::export::import_dir(&**relay.store(), &dir).map_err(|e| {
                Failure::Refused(ErrorBody::new(Token::IntegrityError, e.to_string()))
            })?;
            json!({"imported": dir.display().to_string(), "projects": snap.projects.len(),
                   "packages": snap.packages.len(), "facts": snap.facts.len(),
                   "sessions": snap.sessions.len(), "reviews": snap.reviews.len()})
        }
    }))
}

fn pull(relay: &Relay, p: PullArgs) -> Result<Value, Failure> {
    let project = || {
        p.project
            .clone()
            .ok_or_else(|| Failure::CouldNotRun("--latest and --query need --project".into()))
    };
    if let Some(id) = &p.id {
        return Ok(relay.pull_specific(id)?.to_wire());
    }
    if let Some(q) = &p.query {
        let hits = relay.pull_relevant(&SearchQuery {
            project_id: project()?,
            query: q.clone(),
            limit: p.limit,
            ..SearchQuery::default()
        })?;
        return Ok(Value::Array(
            hits.into_iter()
                .map(|h| {
                    json!({"score": h.score, "field": h.field, "chunk": h.chunk,
                           "package": h.package.to_wire()})
                })
                .collect(),
        ));
    }
    let pulled = relay.pull_latest(&project()?, Some(p.limit))?;
    Ok(json!({
        "packages": pulled.packages.iter().map(|s| s.to_wire()).collect::<Vec<_>>(),
        "quarantined": pulled.quarantined,
    }))
}

fn facts(relay: &Relay, actor: Option<Actor>, f: FactsCommand) -> Result<Value, Failure> {
    Ok(match f {
        FactsCommand::Assert {
            project,
            subject,
            predicate,
            value,
            valid_from,
        } => {
            let actor = need_actor(actor)?;
            let mut body = json!({"subject": subject, "predicate": predicate, "value": value});
            if let Some(t) = valid_from {
                body["valid_from"] = json!(t);
            }
            to_json(&relay.assert_fact(&project, &actor, &body)?.fact)?
        }
        FactsCommand::Invalidate {
            project,
            subject,
            predicate,
        } => json!({"invalidated": relay.invalidate_fact(&project, &subject, &predicate)?}),
        FactsCommand::Get {
            project,
            subject,
            predicate,
            as_of,
            recorded_as_of,
            history,
        } => {
            let view = match (as_of, recorded_as_of, history) {
                (Some(t), _, _) => FactView::AsOfValid(t),
                (_, Some(t), _) => FactView::AsOfRecorded(t),
                (_, _, true) => FactView::History,
                _ => FactView::Current,
            };
            let rows = relay.facts(
                &project,
                &FactQuery {
                    subject,
                    predicate,
                    view,
                },
            )?;
            Value::Array(
                rows.iter()
                    .map(|r| to_json(&r.fact))
                    .collect::<Result<_, _>>()?,
            )
        }
    })
}
