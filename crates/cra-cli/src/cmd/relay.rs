//! `cra relay ...`: Relay (Agentic Protocol v0.1) against a running server or a local data
//! directory.
//!
//! * **Server mode** when `--url URL` (or `CRA_URL`) is given: every subcommand is one or two
//!   HTTP calls to the runtime's Relay routes (`remote`). The credential is `--token` (or
//!   `CRA_TOKEN`), else the admin key the server wrote into its data directory (`--data`,
//!   default `./cra-data`), as `cra trace tail` does. The acting actor is the token's actor;
//!   `--actor` is not used.
//! * **Local mode** otherwise: the runtime's service layer in this process, over the embedded
//!   store in `--data` (`local`), acting as `--actor` with the admin role. The rules and the
//!   TRACE events are a server's: every write is recorded, so a server started later on the
//!   directory serves and verifies it. Writes need `--actor`. A running server holds that
//!   directory; opening it then fails with an error that names the server's process and says
//!   to use `--url`. A directory encrypted at rest needs its keys, as the server's
//!   `[encryption]` gives them: `--storage-key-file` (or `CRA_STORAGE_KEY_FILE`) and
//!   `--retired-key-file`; a missing or wrong key is refused at open, naming the key needed.
//!
//! Both modes print the same JSON for the same operation (`orient --markdown` prints the
//! briefing). A refused operation prints the wire error body on standard error and exits 2;
//! a command that could not run (unopenable store, unreachable server, unreadable file) exits 1.

mod local;
mod remote;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use cra_relay::fact::{FactQuery, FactView};
use cra_relay::store::SearchQuery;
use cra_relay::{RelayError, export};
use cra_runtime::auth::ActorType;
use cra_wire::{ErrorBody, Token};
use serde_json::{Value, json};

use crate::exit::Exit;

/// Where the data lives and who is acting.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The server to talk to (server mode); without it, the local data directory is opened.
    #[arg(long, env = "CRA_URL", global = true)]
    pub url: Option<String>,
    /// The bearer token for the server (default: the admin key in `<data>/api-keys.toml`).
    #[arg(long, env = "CRA_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The data directory (embedded store; in server mode, where the admin key is looked for).
    #[arg(long, env = "CRA_DATA", default_value = "cra-data", global = true)]
    pub data: PathBuf,
    /// Local mode: the storage key the data directory's records are encrypted with (the
    /// server's `encryption.key_file`); needed to open an encrypted directory.
    #[arg(long, env = "CRA_STORAGE_KEY_FILE", global = true)]
    pub storage_key_file: Option<PathBuf>,
    /// Local mode: a retired storage key (`encryption.retired_key_files`) that older records
    /// are still encrypted with; repeatable.
    #[arg(long = "retired-key-file", global = true)]
    pub retired_key_files: Vec<PathBuf>,
    /// The acting actor's id in local mode (what `created_by.id` must equal).
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
        /// Its project (needed when several projects hold a package with this id).
        #[arg(long)]
        project: Option<String>,
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
        /// Its project (needed when several projects hold a package with this id).
        #[arg(long)]
        project: Option<String>,
        /// The outcome.
        #[arg(long)]
        outcome: String,
        /// The reviewer's note.
        #[arg(long)]
        note: Option<String>,
    },
    /// Start, show or end a Relay work session (§5.5).
    #[command(subcommand)]
    Session(SessionCommand),
    /// Export every project (or one), its packages, facts, sessions and review records to DIR
    /// (NDJSON + manifest).
    Export {
        /// The target directory.
        dir: PathBuf,
        /// Only this project.
        #[arg(long)]
        project: Option<String>,
    },
    /// Import an export directory into an empty store (every hash verified first).
    Import {
        /// The export directory.
        dir: PathBuf,
        /// Server mode: actors granted the imported projects besides the importing admin.
        #[arg(long = "member")]
        members: Vec<String>,
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

/// `cra relay session ...`: Relay work sessions (§5.5). A deposit names its session in
/// `created_by.session_id`; the session lists the packages deposited in it.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start a session of the acting actor in a project (prints it, with its callsign).
    Start {
        /// The project.
        #[arg(long)]
        project: String,
    },
    /// Show a session and the packages deposited in it.
    Show {
        /// The session (`sess_...`).
        session_id: String,
        /// Its project.
        #[arg(long)]
        project: String,
    },
    /// End a session (only its own actor may).
    End {
        /// The session (`sess_...`).
        session_id: String,
        /// Its project.
        #[arg(long)]
        project: String,
    },
}

/// `cra relay pull` arguments.
#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    /// The project (for --latest and --query; with --id, the project the package must be in).
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
    /// Only packages with this topic (--latest, --query).
    #[arg(long)]
    pub topic: Option<String>,
    /// Only packages of this package_type (--latest, --query).
    #[arg(long)]
    pub package_type: Option<String>,
    /// Only packages carrying this tag (repeatable: every one).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Only packages created at or after this instant (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
    /// Only packages created before this instant (RFC 3339).
    #[arg(long)]
    pub until: Option<String>,
}

impl PullArgs {
    fn has_filters(&self) -> bool {
        self.topic.is_some()
            || self.package_type.is_some()
            || !self.tags.is_empty()
            || self.since.is_some()
            || self.until.is_some()
    }

    fn search_query(&self, project_id: String) -> SearchQuery {
        SearchQuery {
            project_id,
            query: self.query.clone().unwrap_or_default(),
            limit: self.limit,
            topic: self.topic.clone(),
            package_type: self.package_type.clone(),
            tags: self.tags.clone(),
            since: self.since.clone(),
            until: self.until.clone(),
        }
    }
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

/// Why a command did not succeed.
enum Failure {
    /// It could not run (exit 1).
    CouldNotRun(String),
    /// The operation was refused with a wire error (exit 2).
    Refused(ErrorBody),
}

impl From<RelayError> for Failure {
    fn from(e: RelayError) -> Self {
        Failure::Refused(e.to_body())
    }
}

/// What a command prints.
enum Output {
    Json(Value),
    Text(String),
}

type Answer = Result<Value, Failure>;

/// One Relay operation per method, answered in the same JSON whether it runs on the local store
/// or on a server.
trait Backend {
    fn create_project(&self, project_id: &str, name: &str) -> Answer;
    fn set_archived(&self, project_id: &str, archived: bool) -> Answer;
    /// `{"created": bool, "package": <stored package>}`.
    fn deposit(&self, package: &Value) -> Answer;
    /// One package; with `project`, only that project's (`package_not_found` otherwise).
    fn pull_specific(&self, package_id: &str, project: Option<&str>) -> Answer;
    /// `{"packages", "quarantined"}`; filters of `query` apply, its text does not.
    fn pull_latest(&self, query: &SearchQuery, filtered: bool) -> Answer;
    /// `{"packages", "matches", "quarantined"}`.
    fn pull_relevant(&self, query: &SearchQuery) -> Answer;
    fn orient(&self, project_id: &str, window_days: u32, markdown: bool)
    -> Result<Output, Failure>;
    /// The stored §7 fact.
    fn assert_fact(&self, project_id: &str, body: &Value) -> Answer;
    /// `{"invalidated": n}`.
    fn invalidate_fact(&self, project_id: &str, subject: &str, predicate: &str) -> Answer;
    /// A JSON array of §7 facts.
    fn facts(&self, project_id: &str, query: &FactQuery) -> Answer;
    /// The package of `project` (or of the one project holding the id), flagged.
    fn flag(
        &self,
        package_id: &str,
        project: Option<&str>,
        review_type: &str,
        note: Option<&str>,
    ) -> Answer;
    /// The package of `project` (or of the one project holding the id), reviewed.
    fn review(
        &self,
        package_id: &str,
        project: Option<&str>,
        outcome: &str,
        note: Option<&str>,
    ) -> Answer;
    /// The §5.5 session started for the acting actor.
    fn start_session(&self, project_id: &str) -> Answer;
    /// The session `session_id` of `project_id`.
    fn session(&self, project_id: &str, session_id: &str) -> Answer;
    /// The session, ended.
    fn end_session(&self, project_id: &str, session_id: &str) -> Answer;
    /// Writes the export files into `dir`; answers the counts.
    fn export(&self, dir: &Path, project: Option<&str>) -> Answer;
    /// Imports an export directory; answers the counts.
    fn import(&self, dir: &Path, members: &[String]) -> Answer;
}

/// The counts an export or import answers: `{<verb>: dir, projects, packages, facts, sessions,
/// reviews}`.
fn summary(verb: &str, dir: &Path, snap: &cra_relay::store::Snapshot) -> Value {
    json!({verb: dir.display().to_string(), "projects": snap.projects.len(),
           "packages": snap.packages.len(), "facts": snap.facts.len(),
           "sessions": snap.sessions.len(), "reviews": snap.reviews.len()})
}

/// The project a package is deposited into: its `project_id`. A package without one is
/// refused with the checks a server would make (`invalid_schema`, every field error).
fn deposit_project(package: &Value) -> Result<&str, Failure> {
    match package.get("project_id").and_then(Value::as_str) {
        Some(p) if !p.is_empty() => Ok(p),
        _ => {
            let mut errors = cra_relay::validate::validate_package(package)
                .err()
                .unwrap_or_default();
            if errors.is_empty() {
                errors.push(cra_wire::FieldError::new(
                    "/project_id",
                    "project_id must name the project to deposit into",
                ));
            }
            Err(Failure::from(RelayError::InvalidSchema {
                what: "package",
                errors,
            }))
        }
    }
}

/// Writes an export `bundle` into `dir`, checked as an import would check it before anything
/// is written, and answers the counts.
fn write_export(dir: &Path, bundle: &[u8]) -> Answer {
    let files = export::unbundle(bundle)
        .map_err(|e| Failure::CouldNotRun(format!("the export bundle is unreadable: {e}")))?;
    let snap = export::parse(&files)
        .map_err(|e| Failure::CouldNotRun(format!("the export does not verify: {e}")))?;
    export::write_files(dir, &files).map_err(|e| Failure::CouldNotRun(e.to_string()))?;
    Ok(summary("exported", dir, &snap))
}

/// The bundle of the export directory `dir`, every hash verified (a tampered file is refused
/// before anything is sent or written), and the counts an import of it answers.
fn import_files(dir: &Path) -> Result<(Vec<u8>, Value), Failure> {
    let files = export::read_files(dir).map_err(|e| Failure::Refused(e.to_body()))?;
    let snap = export::parse(&files).map_err(|e| Failure::Refused(e.to_body()))?;
    Ok((export::bundle(&files), summary("imported", dir, &snap)))
}

/// Runs `cra relay` with the given streams (the binary and the tests both call this).
pub fn execute(
    args: RelayArgs,
    stdin: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit {
    let result = (|| -> Result<Output, Failure> {
        let backend: Box<dyn Backend> = match &args.url {
            Some(url) => Box::new(remote::Remote::connect(
                url,
                args.token.clone(),
                &args.data,
            )?),
            None => {
                let actor = args.actor.clone().map(|id| {
                    let t = match args.actor_type {
                        CliActorType::Human => ActorType::Human,
                        CliActorType::Agent => ActorType::Agent,
                        CliActorType::Script => ActorType::Script,
                    };
                    (id, t)
                });
                let keys = crate::cmd::trace_io::key_flags(
                    args.storage_key_file.as_deref(),
                    &args.retired_key_files,
                );
                Box::new(local::Local::open(&args.data, keys, actor, err)?)
            }
        };
        dispatch(&*backend, args.command, stdin)
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

fn read_package(file: &Path, stdin: &mut dyn Read) -> Result<Value, Failure> {
    let mut bytes = Vec::new();
    let read = if file.as_os_str() == "-" {
        stdin.read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(file).map(|b| bytes = b)
    };
    read.map_err(|e| Failure::CouldNotRun(format!("{}: {e}", file.display())))?;
    cra_wire::json::parse_input(&bytes)
        .map_err(|e| Failure::Refused(ErrorBody::new(Token::InvalidSchema, e.to_string())))
}

fn dispatch(b: &dyn Backend, cmd: RelayCommand, stdin: &mut dyn Read) -> Result<Output, Failure> {
    Ok(Output::Json(match cmd {
        RelayCommand::Project(p) => match p {
            ProjectCommand::Create { project_id, name } => b.create_project(&project_id, &name)?,
            ProjectCommand::Archive { project_id } => b.set_archived(&project_id, true)?,
            ProjectCommand::Unarchive { project_id } => b.set_archived(&project_id, false)?,
        },
        RelayCommand::Deposit { file } => b.deposit(&read_package(&file, stdin)?)?,
        RelayCommand::Pull(p) => pull(b, p)?,
        RelayCommand::Orient {
            project,
            window_days,
            markdown,
        } => return b.orient(&project, window_days, markdown),
        RelayCommand::Facts(f) => facts(b, f)?,
        RelayCommand::Flag {
            package_id,
            project,
            review_type,
            note,
        } => b.flag(
            &package_id,
            project.as_deref(),
            &review_type,
            note.as_deref(),
        )?,
        RelayCommand::Review {
            package_id,
            project,
            outcome,
            note,
        } => b.review(&package_id, project.as_deref(), &outcome, note.as_deref())?,
        RelayCommand::Session(s) => match s {
            SessionCommand::Start { project } => b.start_session(&project)?,
            SessionCommand::Show {
                session_id,
                project,
            } => b.session(&project, &session_id)?,
            SessionCommand::End {
                session_id,
                project,
            } => b.end_session(&project, &session_id)?,
        },
        RelayCommand::Export { dir, project } => b.export(&dir, project.as_deref())?,
        RelayCommand::Import { dir, members } => b.import(&dir, &members)?,
    }))
}

fn pull(b: &dyn Backend, p: PullArgs) -> Answer {
    if let Some(id) = &p.id {
        if p.has_filters() {
            return Err(Failure::CouldNotRun(
                "--id reads one package: it takes no filters (--project names its project)".into(),
            ));
        }
        return b.pull_specific(id, p.project.as_deref());
    }
    let project = p
        .project
        .clone()
        .ok_or_else(|| Failure::CouldNotRun("--latest and --query need --project".into()))?;
    let q = p.search_query(project);
    if p.query.is_some() {
        b.pull_relevant(&q)
    } else {
        b.pull_latest(&q, p.has_filters())
    }
}

fn facts(b: &dyn Backend, f: FactsCommand) -> Answer {
    match f {
        FactsCommand::Assert {
            project,
            subject,
            predicate,
            value,
            valid_from,
        } => {
            let mut body = json!({"subject": subject, "predicate": predicate, "value": value});
            if let Some(t) = valid_from {
                body["valid_from"] = json!(t);
            }
            b.assert_fact(&project, &body)
        }
        FactsCommand::Invalidate {
            project,
            subject,
            predicate,
        } => b.invalidate_fact(&project, &subject, &predicate),
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
            b.facts(
                &project,
                &FactQuery {
                    subject,
                    predicate,
                    view,
                },
            )
        }
    }
}
