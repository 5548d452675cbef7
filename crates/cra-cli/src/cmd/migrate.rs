//! `cra migrate`: upgrade a stopped store written by an earlier cra, or (`--check`) say what the
//! upgrade will do without writing (`specs/upgrades.md`).
//!
//! Both read the store's plan first ([`cra_store::upgrade`]), so a store a newer cra wrote is
//! refused before anything changes. The upgrade itself is the open a server's start makes (the
//! store, then Relay's tables); afterwards the plan is read again and must be empty, so an open
//! that changes something its plan did not say is reported instead of passing quietly.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use cra_store::upgrade::UpgradePlan;
use cra_wire::Token;
use serde_json::json;

use crate::cmd::trace_io::{Failure, StoreArgs, require_database};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra migrate` options.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The store: a stopped server's data directory (--data) or a PostgreSQL schema
    /// (--postgres, --postgres-schema), with its storage keys when its records are encrypted.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only say what the upgrade would do; change nothing. Exits 0 when the store is current
    /// and 2 when an upgrade would change it.
    #[arg(long)]
    pub check: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// What `cra migrate` found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The plan read before anything was written.
    pub plan: UpgradePlan,
    /// Whether the steps were applied (false under `--check` and for a current store).
    pub applied: bool,
}

/// Runs `cra migrate`.
pub fn run(args: MigrateArgs) -> Exit {
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    match migrate(&args, &mut err) {
        Ok(done) => {
            let _ = match args.output {
                OutputFormat::Json => writeln!(out, "{}", to_json(&done)),
                OutputFormat::Text => write!(out, "{}", to_text(&done)),
            };
            if args.check && !done.plan.is_current() {
                Exit::Negative
            } else {
                Exit::Success
            }
        }
        Err(f) => f.report("cra migrate", args.output, &mut out, &mut err),
    }
}

/// Plans the upgrade of the named store and, without `--check`, applies it, telling `progress`
/// (standard error) what it is doing.
pub fn migrate(args: &MigrateArgs, progress: &mut dyn Write) -> Result<Migration, Failure> {
    let plan = match plan(&args.store) {
        Err(Refusal::NeedsRepair(dir, _)) if !args.check => {
            let _ = writeln!(
                progress,
                "{} was not closed cleanly: letting redb repair it first...",
                dir.display()
            );
            cra_store::redb::upgrade::repair(&dir).map_err(failed)?;
            self::plan(&args.store).map_err(Failure::from)?
        }
        other => other.map_err(Failure::from)?,
    };
    if args.check || plan.is_current() {
        return Ok(Migration {
            plan,
            applied: false,
        });
    }
    let _ = writeln!(
        progress,
        "upgrading {} ({} steps)...",
        plan.location,
        plan.steps.len()
    );
    apply(&args.store)?;
    let after = self::plan(&args.store).map_err(Failure::from)?;
    if !after.is_current() {
        let left: Vec<&str> = after.steps.iter().map(|s| s.description.as_str()).collect();
        return Err(Failure::new(
            Token::InternalError,
            format!(
                "the upgrade left steps undone ({}); this is a bug in cra: keep the store as it \
                 is and report it",
                left.join("; ")
            ),
        ));
    }
    Ok(Migration {
        plan,
        applied: true,
    })
}

fn failed(e: cra_store::BackendError) -> Failure {
    Failure::new(e.token(), e.to_string())
}

fn name_the_store() -> Failure {
    Failure::new(
        Token::InvalidRequest,
        "name the store: --data DIR (a stopped server's) or --postgres URL",
    )
}

/// Why a plan could not be read: a data directory that redb must repair first (its path and
/// the error), or anything else.
enum Refusal {
    NeedsRepair(PathBuf, Failure),
    Other(Failure),
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NeedsRepair(_, f) | Refusal::Other(f) => f,
        }
    }
}

/// The named store's plan, read without writing.
fn plan(store: &StoreArgs) -> Result<UpgradePlan, Refusal> {
    if let Some(url) = &store.postgres {
        return cra_store::pg::upgrade::plan(url, &store.postgres_schema)
            .map_err(|e| Refusal::Other(failed(e)));
    }
    let dir = store
        .data
        .as_deref()
        .ok_or_else(|| Refusal::Other(name_the_store()))?;
    require_database(dir).map_err(Refusal::Other)?;
    cra_store::redb::upgrade::plan(dir).map_err(|e| match e {
        cra_store::BackendError::NeedsRepair { .. } => {
            Refusal::NeedsRepair(dir.to_path_buf(), failed(e))
        }
        e => Refusal::Other(failed(e)),
    })
}

/// Opens the named store as a server's start does, which upgrades it, then closes it.
fn apply(store: &StoreArgs) -> Result<(), Failure> {
    if let Some(pg) = store.open_postgres()? {
        drop(cra_store::relay::PgRelay::new(pg));
        return Ok(());
    }
    let dir = store.data.as_deref().ok_or_else(name_the_store)?;
    let redb = store.open_redb(dir)?;
    cra_store::relay::RedbRelay::open(&redb)
        .map_err(|e| Failure::new(Token::Unavailable, e.to_string()))?;
    Ok(())
}

fn to_json(done: &Migration) -> serde_json::Value {
    let plan = &done.plan;
    json!({
        "backend": plan.backend,
        "location": plan.location,
        "found": plan.found,
        "target": plan.target,
        "current": plan.is_current(),
        "applied": done.applied,
        "steps": plan.steps,
    })
}

fn to_text(done: &Migration) -> String {
    let plan = &done.plan;
    if plan.is_current() {
        return format!(
            "{} store {} is current ({}): nothing to upgrade\n",
            plan.backend, plan.location, plan.target
        );
    }
    let mut text = format!(
        "{} store {}: {} -> {}\n",
        plan.backend, plan.location, plan.found, plan.target
    );
    for step in &plan.steps {
        text.push_str(&format!("  {}: {}\n", step.step, step.description));
    }
    text.push_str(if done.applied {
        "upgraded: every step above is done\n"
    } else {
        "nothing was changed; `cra migrate` without --check (or the next `cra serve`) makes these changes\n"
    });
    text
}
