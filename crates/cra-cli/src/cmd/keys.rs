//! `cra keys`: the API keys file as an operator manages it (issue 31, item 3). `add` writes a
//! new random key for an actor (optionally expiring) and prints it once; `revoke` marks keys
//! `revoked = true` by fingerprint or actor; `list` shows every key by fingerprint, never its
//! token. Edits keep the file's comments and layout (`toml_edit`), are checked by the same loader
//! `cra serve` uses before they are written, and replace the file in one rename, so a running
//! server's file watch never reads half a file and never sees a file it would refuse; it reloads
//! the change by itself (`specs/http.md`, "Key lifecycle").

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use cra_runtime::auth::{ActorType, KeysFile, Role, fingerprint, new_token};
use serde::Serialize;
use serde_json::json;
use time::OffsetDateTime;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Add a new random key for an actor and print it (once: only its fingerprint is shown
    /// afterwards).
    Add(AddArgs),
    /// Mark keys revoked (by fingerprint or actor); a running server refuses them from its next
    /// reload.
    Revoke(RevokeArgs),
    /// List the keys by fingerprint, with actor, roles, expiry and status.
    List(ListArgs),
}

/// Where the keys file is.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// The API keys file (default: `<data>/api-keys.toml`).
    #[arg(long, value_name = "FILE")]
    pub api_keys: Option<PathBuf>,
    /// The data directory whose `api-keys.toml` is meant (default ./cra-data).
    #[arg(long, value_name = "DIR", default_value = "./cra-data")]
    pub data: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

impl FileArgs {
    /// The keys file these options name.
    pub fn path(&self) -> PathBuf {
        self.api_keys
            .clone()
            .unwrap_or_else(|| self.data.join(cra_runtime::auth::DEFAULT_KEYS_FILE))
    }
}

/// An actor type on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ActorTypeArg {
    /// An AI agent.
    Agent,
    /// A person.
    Human,
    /// A script or service.
    Script,
}

/// A role on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// Opens its own sessions, resolves and executes in them.
    Agent,
    /// Reads, tests and (in its namespaces) installs atlases.
    Author,
    /// Reads every trace and session.
    Auditor,
    /// Reads everything, decides approvals.
    Operator,
    /// Everything.
    Admin,
}

/// `cra keys add` options.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The actor the key authenticates.
    #[arg(long)]
    pub actor: String,
    /// The actor's kind.
    #[arg(long = "type", value_enum, default_value_t = ActorTypeArg::Agent)]
    pub actor_type: ActorTypeArg,
    /// A role to grant (repeatable).
    #[arg(long = "role", value_enum, required = true)]
    pub roles: Vec<RoleArg>,
    /// For authors: an atlas id namespace they may install atlases in (repeatable).
    #[arg(long = "namespace")]
    pub atlas_namespaces: Vec<String>,
    /// The key stops working after this long: a number and a unit (`90s`, `45m`, `12h`, `30d`).
    #[arg(long, conflicts_with = "expires_at", value_parser = parse_duration)]
    pub expires_in: Option<time::Duration>,
    /// The key stops working at this instant (RFC 3339 with an offset).
    #[arg(long, value_parser = parse_instant)]
    pub expires_at: Option<OffsetDateTime>,
    /// Which file.
    #[command(flatten)]
    pub file: FileArgs,
}

/// `cra keys revoke` options.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true))]
pub struct RevokeArgs {
    /// The fingerprint of the key to revoke (as `cra keys list` and the server's log show it).
    #[arg(long, group = "which")]
    pub key: Option<String>,
    /// Revoke every key of this actor.
    #[arg(long, group = "which")]
    pub actor: Option<String>,
    /// Which file.
    #[command(flatten)]
    pub file: FileArgs,
}

/// `cra keys list` options.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Which file.
    #[command(flatten)]
    pub file: FileArgs,
}

/// A key as `cra keys` shows it: never its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyView {
    /// The fingerprint of the key.
    pub key: String,
    /// The actor.
    pub actor_id: String,
    /// agent | human | script.
    pub actor_type: &'static str,
    /// Granted roles.
    pub roles: Vec<Role>,
    /// When it stops working (wire form), if ever.
    pub expires_at: Option<String>,
    /// `active`, `revoked` or `expired` (by this machine's clock).
    pub status: &'static str,
}

/// What `cra keys add` made.
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    /// The new token: shown once.
    pub token: String,
    /// Its entry as listed.
    #[serde(flatten)]
    pub view: KeyView,
    /// The file written.
    pub file: PathBuf,
}

/// Runs a `cra keys` subcommand.
pub fn run(command: KeysCommand) -> Exit {
    let now = OffsetDateTime::now_utc();
    match command {
        KeysCommand::Add(args) => match add(&args, now) {
            Ok(added) => {
                match args.file.output {
                    OutputFormat::Json => println!("{}", json!(added)),
                    OutputFormat::Text => {
                        println!("{}", added.token);
                        eprintln!(
                            "cra keys add: key {} for `{}` written to {}; the token above is shown only now",
                            added.view.key,
                            added.view.actor_id,
                            added.file.display()
                        );
                    }
                }
                Exit::Success
            }
            Err(e) => fail("add", &e),
        },
        KeysCommand::Revoke(args) => match revoke(&args, now) {
            Ok(revoked) => {
                print_views(&revoked, args.file.output);
                Exit::Success
            }
            Err(e) => fail("revoke", &e),
        },
        KeysCommand::List(args) => match list(&args.file.path(), now) {
            Ok(views) => {
                print_views(&views, args.file.output);
                Exit::Success
            }
            Err(e) => fail("list", &e),
        },
    }
}

fn fail(command: &str, e: &str) -> Exit {
    eprintln!("cra keys {command}: {e}");
    Exit::CouldNotRun
}

fn print_views(views: &[KeyView], output: OutputFormat) {
    match output {
        OutputFormat::Json => println!("{}", json!(views)),
        OutputFormat::Text => {
            for v in views {
                let roles: Vec<&str> = v.roles.iter().map(|r| r.as_str()).collect();
                println!(
                    "{}  {:<8} {} ({}) [{}]{}",
                    v.key,
                    v.status,
                    v.actor_id,
                    v.actor_type,
                    roles.join(","),
                    v.expires_at
                        .as_ref()
                        .map(|e| format!(" expires {e}"))
                        .unwrap_or_default()
                );
            }
        }
    }
}

/// Every key of the file at `path`, as listed at `now`.
///
/// # Errors
/// The file cannot be read or is not a valid keys file.
pub fn list(path: &Path, now: OffsetDateTime) -> Result<Vec<KeyView>, String> {
    let file = KeysFile::load(path).map_err(|e| e.to_string())?;
    Ok(file.keys.iter().map(|k| view(k, now)).collect())
}

fn view(k: &cra_runtime::auth::KeyEntry, now: OffsetDateTime) -> KeyView {
    let status = if k.revoked {
        "revoked"
    } else if k.expires_at.is_some_and(|e| e.0 <= now) {
        "expired"
    } else {
        "active"
    };
    KeyView {
        key: fingerprint(&k.token),
        actor_id: k.actor_id.clone(),
        actor_type: k.actor_type.as_str(),
        roles: k.roles.clone(),
        expires_at: k.expires_at.map(|e| e.to_string()),
        status,
    }
}

/// Adds a new key as `args` says; `now` dates `--expires-in`. A missing file is created only
/// for an admin key (`cra serve` would otherwise find a keys file and make no admin key).
///
/// # Errors
/// An expiry in the past, a new file without an admin key, or a file that cannot be read,
/// edited, checked or written (nothing is written then).
pub fn add(args: &AddArgs, now: OffsetDateTime) -> Result<Added, String> {
    let path = args.file.path();
    let expires_at = match (args.expires_in, args.expires_at) {
        (Some(d), _) => Some(now + d),
        (None, at) => at,
    };
    if expires_at.is_some_and(|at| at <= now) {
        return Err("the expiry is not in the future; a key that never works is not added".into());
    }
    if !path.exists() && !args.roles.iter().any(|r| matches!(r, RoleArg::Admin)) {
        return Err(format!(
            "{} does not exist yet, and a keys file without an admin key locks the administrators out: start `cra serve` once (it creates the file with an admin key), or add an admin key first (--role admin)",
            path.display()
        ));
    }
    let mut doc = read_document(&path, true)?;
    let token = new_token();
    let mut entry = toml_edit::Table::new();
    entry["token"] = toml_edit::value(token.clone());
    entry["actor_id"] = toml_edit::value(args.actor.clone());
    entry["actor_type"] = toml_edit::value(actor_type(args.actor_type).as_str());
    let mut roles = toml_edit::Array::new();
    for r in &args.roles {
        roles.push(role(*r).as_str());
    }
    entry["roles"] = toml_edit::value(roles);
    if !args.atlas_namespaces.is_empty() {
        let mut namespaces = toml_edit::Array::new();
        for ns in &args.atlas_namespaces {
            namespaces.push(ns.as_str());
        }
        entry["atlas_namespaces"] = toml_edit::value(namespaces);
    }
    if let Some(at) = expires_at {
        let text = cra_wire::clock::format_timestamp(at);
        let datetime: toml_edit::Datetime = text.parse().map_err(|e| format!("{e}"))?;
        entry["expires_at"] = toml_edit::value(datetime);
    }
    let keys = doc
        .entry("keys")
        .or_insert_with(|| toml_edit::Item::ArrayOfTables(toml_edit::ArrayOfTables::new()));
    let Some(keys) = keys.as_array_of_tables_mut() else {
        return Err(format!(
            "{}: `keys` is not an array of [[keys]] tables",
            path.display()
        ));
    };
    keys.push(entry);
    let file = write_checked(&path, &doc)?;
    let written = file
        .keys
        .iter()
        .find(|k| k.token == token)
        .ok_or("the new key is missing from the written file")?;
    Ok(Added {
        view: view(written, now),
        token,
        file: path,
    })
}

/// Marks the keys `args` names revoked and answers them as they are now.
///
/// # Errors
/// No key matches, the change would leave no admin key that works at `now`, or the file
/// cannot be read, checked or written (nothing is written then).
pub fn revoke(args: &RevokeArgs, now: OffsetDateTime) -> Result<Vec<KeyView>, String> {
    let path = args.file.path();
    let mut doc = read_document(&path, false)?;
    let mut tokens = Vec::new();
    if let Some(keys) = doc
        .get_mut("keys")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
    {
        for entry in keys.iter_mut() {
            let token = entry.get("token").and_then(|t| t.as_str()).unwrap_or("");
            let actor = entry.get("actor_id").and_then(|t| t.as_str()).unwrap_or("");
            let matches = args.key.as_deref() == Some(fingerprint(token).as_str())
                || args.actor.as_deref() == Some(actor);
            if matches && !token.is_empty() {
                tokens.push(token.to_owned());
                entry["revoked"] = toml_edit::value(true);
            }
        }
    }
    if tokens.is_empty() {
        return Err(match (&args.key, &args.actor) {
            (Some(k), _) => format!(
                "no key in {} has the fingerprint {k}; `cra keys list` shows them",
                path.display()
            ),
            (_, a) => format!(
                "no key in {} belongs to `{}`",
                path.display(),
                a.as_deref().unwrap_or("")
            ),
        });
    }
    let after: KeysFile =
        toml::from_str(&doc.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    let admin_left = after
        .keys
        .iter()
        .any(|k| k.roles.contains(&Role::Admin) && view(k, now).status == "active");
    if !admin_left {
        return Err(
            "this would leave no working admin key; add one first (`cra keys add --role admin`), then revoke"
                .into(),
        );
    }
    let file = write_checked(&path, &doc)?;
    Ok(file
        .keys
        .iter()
        .filter(|k| tokens.contains(&k.token))
        .map(|k| view(k, now))
        .collect())
}

/// The keys file at `path` as an editable document; a missing file is an empty one when
/// `may_create`.
fn read_document(path: &Path, may_create: bool) -> Result<toml_edit::DocumentMut, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if may_create && e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    text.parse()
        .map_err(|e| format!("{} is not valid TOML: {e}", path.display()))
}

/// Writes `doc` over `path` in one rename, after the loader `cra serve` uses accepted it in a
/// temporary file beside it (mode 0600); answers the file as loaded.
fn write_checked(path: &Path, doc: &toml_edit::DocumentMut) -> Result<KeysFile, String> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("keys");
    let temp = dir.join(format!(".{name}.{}.new", std::process::id()));
    let io = |e: std::io::Error| format!("cannot write {}: {e}", temp.display());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let written = (|| {
        let mut f = options.open(&temp).map_err(io)?;
        f.write_all(doc.to_string().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        KeysFile::load(&temp).map_err(|e| e.to_string())
    })();
    let file = match written {
        Ok(file) => file,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(format!("not written: {e}"));
        }
    };
    std::fs::rename(&temp, path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot replace {}: {e}", path.display())
    })?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(file)
}

fn actor_type(a: ActorTypeArg) -> ActorType {
    match a {
        ActorTypeArg::Agent => ActorType::Agent,
        ActorTypeArg::Human => ActorType::Human,
        ActorTypeArg::Script => ActorType::Script,
    }
}

fn role(r: RoleArg) -> Role {
    match r {
        RoleArg::Agent => Role::Agent,
        RoleArg::Author => Role::Author,
        RoleArg::Auditor => Role::Auditor,
        RoleArg::Operator => Role::Operator,
        RoleArg::Admin => Role::Admin,
    }
}

/// `90s`, `45m`, `12h`, `30d`.
fn parse_duration(text: &str) -> Result<time::Duration, String> {
    let unit_at = text.len().saturating_sub(1);
    let (number, unit) = text.split_at(unit_at);
    let n: i64 = number.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
        format!("`{text}` is not a positive number and a unit (s, m, h, d), e.g. 30d")
    })?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3_600),
        "d" => n.checked_mul(86_400),
        _ => None,
    };
    seconds
        .filter(|s| *s <= 100 * 365 * 86_400)
        .map(time::Duration::seconds)
        .ok_or_else(|| format!("`{text}`: use s, m, h or d, up to 100 years, e.g. 30d"))
}

fn parse_instant(text: &str) -> Result<OffsetDateTime, String> {
    cra_wire::clock::parse_rfc3339(text).map_err(|_| {
        format!("`{text}` is not an RFC 3339 time with an offset, e.g. 2027-01-01T00:00:00Z")
    })
}
