//! `cra conformance run`: plays the conformance fixtures against this build (in-process) or a
//! server (`--target URL`) and reports per level and surface.
//!
//! Exit status: 0 every selected case passed and every exercised claimed level holds; 2 a case
//! failed or errored, or a claimed level has unimplemented cases; 1 the run could not start
//! (fixtures unreadable, server unreachable).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use cra_conformance::target::http::HttpTarget;
use cra_conformance::target::inproc::InProcess;
use cra_conformance::{Filter, Target};

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra conformance` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConformanceCommand {
    /// Run the suite and report.
    Run(RunArgs),
}

/// Options of `cra conformance run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Base URL of a server to test (plain HTTP), e.g. http://127.0.0.1:8080.
    #[arg(long, conflicts_with = "in_process")]
    pub target: Option<String>,
    /// Test this build by calling the cra crates directly (the default).
    #[arg(long)]
    pub in_process: bool,
    /// Only this suite (cra, relay).
    #[arg(long)]
    pub suite: Option<String>,
    /// Only the cases counted by this level (a level includes the ones below it).
    #[arg(long)]
    pub level: Option<String>,
    /// Only this surface.
    #[arg(long)]
    pub surface: Option<String>,
    /// Only fixture ids starting with this prefix.
    #[arg(long)]
    pub id: Option<String>,
    /// The fixture directory.
    #[arg(
        long,
        env = "CRA_CONFORMANCE_FIXTURES",
        default_value = "conformance/fixtures"
    )]
    pub fixtures: PathBuf,
    /// Bearer token for the server.
    #[arg(long, env = "CRA_TOKEN")]
    pub token: Option<String>,
    /// Per-actor tokens, `ACTOR=TOKEN` (repeatable): requests naming that actor use its token.
    #[arg(long = "actor-token", value_name = "ACTOR=TOKEN")]
    pub actor_tokens: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Runs a `cra conformance` subcommand.
pub fn run(cmd: ConformanceCommand) -> Exit {
    match cmd {
        ConformanceCommand::Run(args) => run_suite(args),
    }
}

fn run_suite(args: RunArgs) -> Exit {
    let fixtures = match cra_conformance::load_dir(&args.fixtures) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cra conformance run: {e}");
            return Exit::CouldNotRun;
        }
    };
    let filter = Filter {
        suite: args.suite,
        level: args.level,
        surface: args.surface,
        id_prefix: args.id,
    };
    let target: Box<dyn Target> = match &args.target {
        Some(url) => {
            let mut tokens = BTreeMap::new();
            for t in &args.actor_tokens {
                let Some((actor, token)) = t.split_once('=') else {
                    eprintln!("cra conformance run: --actor-token wants ACTOR=TOKEN, got {t:?}");
                    return Exit::CouldNotRun;
                };
                tokens.insert(actor.to_owned(), token.to_owned());
            }
            match HttpTarget::connect(url, args.token.clone(), tokens) {
                Ok(t) => Box::new(t),
                Err(e) => {
                    eprintln!("cra conformance run: cannot reach {url}: {e}");
                    return Exit::CouldNotRun;
                }
            }
        }
        None => Box::new(InProcess::new()),
    };
    let report = cra_conformance::run(target.as_ref(), &fixtures, &filter);
    match args.output {
        OutputFormat::Text => print!("{}", report.render_text()),
        OutputFormat::Json => println!("{}", report.to_json()),
    }
    if report.exit_code() == 0 {
        Exit::Success
    } else {
        Exit::Negative
    }
}
