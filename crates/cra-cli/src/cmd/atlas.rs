//! `cra atlas ...`: tools for atlas authors (init, check, fmt, inspect, adapters, pack, test,
//! import-mcp; sign and verify are [`crate::cmd::atlas_sign`]'s).
//!
//! Exit codes follow [`crate::exit`]: 0 success, 1 could not run (unreadable path, not an atlas,
//! write failure), 2 a negative result (`fmt --check` or `adapters --check` found a file to
//! change), 3 the atlas is invalid. Diagnostics go to standard error as
//! `file:line: error[code] at /pointer: message`; with `-o json` one JSON document goes to
//! standard output instead.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use cra_atlas::adapters::{self, Target};
use cra_atlas::fmt::{format_value, kind_of_file};
use cra_atlas::load::{self, LoadError, SourceKind};
use cra_atlas::pack::pack_atlas;
use cra_atlas::{Diagnostic, LoadedAtlas, PolicyType, Registry, RiskTier, Severity};
use cra_carp::atlas_check::analyse;
use serde_json::{Value, json};

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra atlas` subcommands.
#[derive(Debug, Subcommand)]
pub enum AtlasCommand {
    /// Create a skeleton atlas that passes `cra atlas check --strict`.
    Init {
        /// Directory to create (must not exist or be empty).
        dir: PathBuf,
        /// Atlas id in reverse-domain notation, e.g. com.example.support.
        #[arg(long)]
        id: String,
    },
    /// Validate atlases (directories or .atlas.tar.gz archives); silent when valid.
    Check(CheckArgs),
    /// Rewrite atlas.json, policies/*.json and actions/*.json in canonical form.
    Fmt {
        /// The atlas directory.
        dir: PathBuf,
        /// Change nothing; exit 2 when a file is not in canonical form.
        #[arg(long)]
        check: bool,
    },
    /// Show an atlas: manifest, capabilities, actions by risk tier, policies in evaluation
    /// order, context packs and digest.
    Inspect {
        /// Directory or archive.
        path: PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Generate provider tool descriptors (OpenAI, Anthropic, MCP) into adapters/.
    Adapters {
        /// The atlas directory.
        dir: PathBuf,
        /// Targets to generate (default: all): openai-chat, openai-responses, anthropic, mcp.
        #[arg(long = "target", value_parser = parse_target)]
        targets: Vec<Target>,
        /// Change nothing; exit 2 when an adapter file is missing or stale.
        #[arg(long)]
        check: bool,
    },
    /// Write a deterministic .atlas.tar.gz and print its SHA-256 and the atlas digest (a signed
    /// directory's signature is copied beside the archive: it signs the same digest).
    Pack {
        /// The atlas directory.
        dir: PathBuf,
        /// The archive to write (default: `<atlas_id>-<version>.atlas.tar.gz`).
        #[arg(long = "out")]
        out: Option<PathBuf>,
    },
    /// Sign an atlas: an SSH signature (Ed25519, namespace cra-atlas) over its digest, which
    /// `ssh-keygen -Y verify` and `cra atlas verify` check.
    Sign(crate::cmd::atlas_sign::SignArgs),
    /// Check an atlas's signature against trusted keys: exit 0 valid, 2 not (unsigned, changed,
    /// untrusted key), 1 unreadable, 3 invalid atlas.
    Verify(crate::cmd::atlas_sign::VerifyArgs),
    /// Run the atlas's tests: recorded traces and stated expectations (see `cra atlas test --help`).
    Test(crate::cmd::atlas_test::TestArgs),
    /// Re-decide recorded resolves and executes under a changed atlas and report every decision
    /// that flips.
    Simulate(crate::cmd::atlas_simulate::SimulateArgs),
    /// Write an atlas governing an existing MCP server: one action per tool it lists.
    #[command(name = "import-mcp")]
    ImportMcp(crate::cmd::mcp::ImportArgs),
}

/// Arguments of `cra atlas check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Atlases to check (directories or archives); they may depend on one another.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Further atlases to load (to resolve dependencies) without reporting on them.
    #[arg(long = "with")]
    pub with: Vec<PathBuf>,
    /// Treat warnings as errors.
    #[arg(long)]
    pub strict: bool,
    /// Output format: `text` (with each offending source line), `json`, or `sarif` (SARIF
    /// 2.1.0, for code-review tools).
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: CheckFormat,
}

/// How `cra atlas check` reports: the shared formats, and SARIF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CheckFormat {
    /// For people: a line per diagnostic, and the source line it is about.
    #[default]
    Text,
    /// One JSON document on standard output, for programs.
    Json,
    /// One SARIF 2.1.0 document on standard output, for code-review tools.
    Sarif,
}

fn parse_target(text: &str) -> Result<Target, String> {
    Target::parse(text).ok_or_else(|| {
        format!("unknown target `{text}`: use openai-chat, openai-responses, anthropic or mcp")
    })
}

/// Runs a `cra atlas` subcommand.
pub fn run(cmd: AtlasCommand) -> Exit {
    match cmd {
        AtlasCommand::Init { dir, id } => init(&dir, &id),
        AtlasCommand::Check(args) => check(&args),
        AtlasCommand::Fmt { dir, check } => fmt(&dir, check),
        AtlasCommand::Inspect { path, output } => inspect(&path, output),
        AtlasCommand::Adapters {
            dir,
            targets,
            check,
        } => adapters_cmd(&dir, &targets, check),
        AtlasCommand::Pack { dir, out } => pack(&dir, out.as_deref()),
        AtlasCommand::Sign(args) => crate::cmd::atlas_sign::run_sign(&args),
        AtlasCommand::Verify(args) => crate::cmd::atlas_sign::run_verify(&args),
        AtlasCommand::Test(args) => crate::cmd::atlas_test::run(args),
        AtlasCommand::Simulate(args) => crate::cmd::atlas_simulate::run(args),
        AtlasCommand::ImportMcp(args) => crate::cmd::mcp::import(&args),
    }
}

fn init(dir: &Path, id: &str) -> Exit {
    let files = match cra_atlas::scaffold::skeleton(id) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cra atlas init: {e}");
            return Exit::CouldNotRun;
        }
    };
    if let Err(e) = write_new_atlas(dir, &files) {
        eprintln!("cra atlas init: {e}");
        return Exit::CouldNotRun;
    }
    println!("created atlas {id} in {}", dir.display());
    Exit::Success
}

/// Writes `files` (relative path to text) into `dir`, which must not exist or be empty.
///
/// # Errors
/// A sentence naming the directory or file that could not be used.
pub(crate) fn write_new_atlas(dir: &Path, files: &BTreeMap<String, String>) -> Result<(), String> {
    if fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!(
            "{} exists and is not empty: choose a new directory",
            dir.display()
        ));
    }
    for (rel, text) in files {
        let path = dir.join(rel);
        path.parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::write(&path, text))
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// What checking one path produced.
#[derive(Debug)]
pub struct Checked {
    /// The path checked.
    pub path: PathBuf,
    /// The atlas, when it is valid.
    pub atlas: Option<LoadedAtlas>,
    /// Every diagnostic (errors first; with `--strict` every one is an error).
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// Whether no diagnostic is an error.
    pub fn is_valid(&self) -> bool {
        !self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Reads and analyses one path; `Err` means it could not be read at all.
fn check_one(path: &Path) -> Result<Checked, LoadError> {
    let (files, kind) = match load::read_any(path) {
        Ok(x) => x,
        Err(LoadError::Invalid { diagnostics, .. }) => {
            return Ok(Checked {
                path: path.to_owned(),
                atlas: None,
                diagnostics,
            });
        }
        Err(LoadError::BadArchive { message, .. }) => {
            return Ok(Checked {
                path: path.to_owned(),
                atlas: None,
                diagnostics: vec![Diagnostic::error(
                    "bad_archive",
                    path.file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                    "",
                    message,
                )],
            });
        }
        Err(e) => return Err(e),
    };
    let analysis = analyse(path, files);
    let mut diagnostics = analysis.diagnostics;
    let atlas = analysis.atlas;
    if let Some(a) = &atlas
        && kind == SourceKind::Directory
    {
        let existing: Vec<Target> = Target::ALL
            .into_iter()
            .filter(|t| a.files.contains_key(&t.file()))
            .collect();
        match adapters::stale(a, &existing) {
            Ok(stale) => diagnostics.extend(stale.into_iter().map(|f| {
                Diagnostic::warning(
                    "stale_adapter",
                    f,
                    "",
                    "this adapter no longer matches the actions: run `cra atlas adapters`",
                )
            })),
            Err(e) => diagnostics.push(Diagnostic::warning(
                "adapter",
                "adapters",
                "",
                e.to_string(),
            )),
        }
    }
    if let Some(a) = &atlas {
        cra_atlas::validate::fill_lines(&mut diagnostics, &a.files);
    }
    let valid = !diagnostics.iter().any(Diagnostic::is_error);
    Ok(Checked {
        path: path.to_owned(),
        atlas: atlas.filter(|_| valid),
        diagnostics,
    })
}

/// `cra atlas check` as a library function: every path checked through the one validator
/// (`cra_carp::atlas_check`), then dependencies against every valid atlas given; `Err` names a
/// path that could not be read at all.
pub fn check_atlases(args: &CheckArgs) -> Result<Vec<Checked>, String> {
    let mut checked = Vec::new();
    for path in &args.paths {
        checked.push(check_one(path).map_err(|e| e.to_string())?);
    }
    // Dependencies: resolve against every valid atlas given (checked or --with).
    let registry = Registry::new();
    for path in &args.with {
        let a = cra_carp::atlas_check::load(path)
            .map_err(|e| format!("--with {}: {e}", path.display()))?;
        insert_ignoring_dependencies(&registry, &[a]);
    }
    for c in &mut checked {
        if let Some(a) = &c.atlas {
            let mut bare = a.clone();
            bare.manifest.dependencies.clear();
            if let Err(e) = registry.insert(bare) {
                c.diagnostics.push(Diagnostic::error(
                    "duplicate_atlas",
                    "atlas.json",
                    "/version",
                    e.to_string(),
                ));
            }
        }
    }
    for c in &mut checked {
        if let Some(a) = &c.atlas {
            c.diagnostics.extend(registry.dependency_diagnostics(a));
        }
    }
    if args.strict {
        for c in &mut checked {
            for d in &mut c.diagnostics {
                d.severity = Severity::Error;
            }
        }
    }
    Ok(checked)
}

fn check(args: &CheckArgs) -> Exit {
    let checked = match check_atlases(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cra atlas check: {e}");
            return Exit::CouldNotRun;
        }
    };
    let ok = checked.iter().all(Checked::is_valid);
    match args.output {
        CheckFormat::Text => {
            let colour = crate::cmd::atlas_report::colour_on_stderr();
            for c in &checked {
                for d in &c.diagnostics {
                    eprintln!("{}", crate::cmd::atlas_report::text(&c.path, d, colour));
                }
            }
        }
        CheckFormat::Sarif => println!("{}", crate::cmd::atlas_report::sarif(&checked)),
        CheckFormat::Json => {
            let doc = json!({
                "valid": ok,
                "strict": args.strict,
                "atlases": checked.iter().map(|c| json!({
                    "path": c.path.display().to_string(),
                    "valid": c.is_valid(),
                    "atlas_id": c.atlas.as_ref().map(|a| a.manifest.atlas_id.clone()),
                    "version": c.atlas.as_ref().map(|a| a.manifest.version.clone()),
                    "digest": c.atlas.as_ref().map(|a| a.digest.clone()),
                    "diagnostics": c.diagnostics,
                })).collect::<Vec<_>>(),
            });
            println!("{doc}");
        }
    }
    if ok {
        Exit::Success
    } else {
        Exit::InvalidAtlas
    }
}

/// Makes `atlases` visible to dependency resolution even when their own dependencies are not
/// resolved (each atlas's dependency diagnostics are reported separately).
fn insert_ignoring_dependencies(registry: &Registry, atlases: &[LoadedAtlas]) {
    for a in atlases {
        let mut bare = a.clone();
        bare.manifest.dependencies.clear();
        let _ = registry.insert(bare);
    }
}

fn fmt(dir: &Path, check_only: bool) -> Exit {
    if !dir.is_dir() {
        eprintln!("cra atlas fmt: {} is not an atlas directory", dir.display());
        return Exit::CouldNotRun;
    }
    let files = match load::read_dir_files(dir, load::Limits::default()) {
        Ok(f) => f,
        Err(LoadError::Invalid { diagnostics, .. }) => {
            for d in diagnostics {
                eprintln!("{}: {d}", dir.display());
            }
            return Exit::InvalidAtlas;
        }
        Err(e) => {
            eprintln!("cra atlas fmt: {e}");
            return Exit::CouldNotRun;
        }
    };
    let mut changed = Vec::new();
    let mut broken = false;
    for (rel, bytes) in &files {
        let Some(kind) = kind_of_file(rel) else {
            continue;
        };
        let value: Value = match cra_wire::json::parse_strict(bytes) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("{}: {rel}: error[json_syntax]: {e}", dir.display());
                broken = true;
                continue;
            }
        };
        let text = format_value(&value, kind);
        if text.as_bytes() != bytes.as_slice() {
            changed.push((rel.clone(), text));
        }
    }
    if broken {
        return Exit::InvalidAtlas;
    }
    if check_only {
        for (rel, _) in &changed {
            eprintln!(
                "{}: {rel}: not in canonical form (run `cra atlas fmt`)",
                dir.display()
            );
        }
        return if changed.is_empty() {
            Exit::Success
        } else {
            Exit::Negative
        };
    }
    for (rel, text) in &changed {
        if let Err(e) = write_atomic(&dir.join(rel), text.as_bytes()) {
            eprintln!("cra atlas fmt: {e}");
            return Exit::CouldNotRun;
        }
        println!("formatted {rel}");
    }
    Exit::Success
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("cra-tmp");
    fs::write(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, path))
        .map_err(|e| format!("could not write {}: {e}", path.display()))
}

/// Loads a valid atlas or reports why not (exit 3 invalid, 1 unreadable).
fn load_valid(cmd: &str, path: &Path) -> Result<LoadedAtlas, Exit> {
    match cra_carp::atlas_check::load(path) {
        Ok(a) => Ok(a),
        Err(LoadError::Invalid { diagnostics, .. }) => {
            for d in diagnostics {
                eprintln!("{}: {d}", path.display());
            }
            Err(Exit::InvalidAtlas)
        }
        Err(e @ LoadError::BadArchive { .. }) => {
            eprintln!("cra atlas {cmd}: {e}");
            Err(Exit::InvalidAtlas)
        }
        Err(e) => {
            eprintln!("cra atlas {cmd}: {e}");
            Err(Exit::CouldNotRun)
        }
    }
}

/// Policies in evaluation order: by type (deny, require_approval, rate_limit, budget, allow),
/// then priority (higher first), then declaration order.
pub fn evaluation_order(atlas: &LoadedAtlas) -> Vec<&cra_atlas::Policy> {
    let mut ps: Vec<(usize, &cra_atlas::Policy)> =
        atlas.manifest.policies.iter().enumerate().collect();
    ps.sort_by_key(|(i, p)| {
        let rank = PolicyType::EVALUATION_ORDER
            .iter()
            .position(|t| *t == p.kind)
            .unwrap_or(usize::MAX);
        (rank, std::cmp::Reverse(p.priority), *i)
    });
    ps.into_iter().map(|(_, p)| p).collect()
}

fn inspect(path: &Path, output: OutputFormat) -> Exit {
    let atlas = match load_valid("inspect", path) {
        Ok(a) => a,
        Err(exit) => return exit,
    };
    let m = &atlas.manifest;
    let mut by_tier: BTreeMap<RiskTier, Vec<&str>> = BTreeMap::new();
    for a in &m.actions {
        by_tier.entry(a.risk_tier).or_default().push(&a.action_id);
    }
    let policies = evaluation_order(&atlas);
    match output {
        OutputFormat::Json => {
            let doc = json!({
                "atlas_id": m.atlas_id,
                "version": m.version,
                "name": m.name,
                "description": m.description,
                "digest": atlas.digest,
                "source": atlas.source.display().to_string(),
                "files": atlas.files.len(),
                "capabilities": m.capabilities.iter().map(|c| json!({
                    "capability_id": c.capability_id, "name": c.name, "actions": c.actions,
                })).collect::<Vec<_>>(),
                "actions_by_risk_tier": by_tier.iter().rev().map(|(t, ids)| (t.as_str().to_owned(), json!(ids))).collect::<serde_json::Map<String, Value>>(),
                "policies": policies.iter().map(|p| json!({
                    "policy_id": p.policy_id, "type": p.kind.as_str(), "priority": p.priority,
                    "actions": p.actions, "conditional": p.conditions.is_some(),
                })).collect::<Vec<_>>(),
                "context_packs": m.context_packs.iter().map(|c| json!({
                    "pack_id": c.pack_id, "priority": c.priority, "files": c.files,
                    "conditional": c.conditions.is_some(),
                })).collect::<Vec<_>>(),
                "dependencies": m.dependencies,
                "warnings": atlas.warnings,
            });
            println!("{doc}");
        }
        OutputFormat::Text => {
            println!("{} {}  {}", m.atlas_id, m.version, m.name);
            if let Some(d) = &m.description {
                println!("  {d}");
            }
            println!("digest        {}", atlas.digest);
            println!("source        {}", atlas.source.display());
            println!("files         {}", atlas.files.len());
            for (id, range) in &m.dependencies {
                println!("depends on    {id} {range}");
            }
            println!("\ncapabilities ({}):", m.capabilities.len());
            for c in &m.capabilities {
                println!("  {:<20} {}", c.capability_id, c.actions.join(", "));
            }
            println!("\nactions by risk tier ({}):", m.actions.len());
            for (tier, ids) in by_tier.iter().rev() {
                println!("  {:<9} {}", tier.as_str(), ids.join(", "));
            }
            println!("\npolicies in evaluation order ({}):", policies.len());
            for (i, p) in policies.iter().enumerate() {
                let cond = if p.conditions.is_some() {
                    " (conditional)"
                } else {
                    ""
                };
                println!(
                    "  {:>2}. {:<16} {:<32} priority {:<4} {}{cond}",
                    i + 1,
                    p.kind.as_str(),
                    p.policy_id,
                    p.priority,
                    p.actions.join(", ")
                );
            }
            println!("   *. default deny");
            println!("\ncontext packs ({}):", m.context_packs.len());
            for c in &m.context_packs {
                let cond = if c.conditions.is_some() {
                    " (conditional)"
                } else {
                    ""
                };
                println!(
                    "  {:<20} priority {:<4} {}{cond}",
                    c.pack_id,
                    c.priority,
                    c.files.join(", ")
                );
            }
            for w in &atlas.warnings {
                eprintln!("{}: {w}", path.display());
            }
        }
    }
    Exit::Success
}

fn adapters_cmd(dir: &Path, targets: &[Target], check_only: bool) -> Exit {
    if !dir.is_dir() {
        eprintln!(
            "cra atlas adapters: {} is not an atlas directory",
            dir.display()
        );
        return Exit::CouldNotRun;
    }
    let atlas = match load_valid("adapters", dir) {
        Ok(a) => a,
        Err(exit) => return exit,
    };
    let targets = if targets.is_empty() {
        Target::ALL.to_vec()
    } else {
        targets.to_vec()
    };
    let rendered = match adapters::render(&atlas, &targets) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cra atlas adapters: {e}");
            return Exit::InvalidAtlas;
        }
    };
    let stale: Vec<&String> = rendered
        .iter()
        .filter(|(rel, text)| atlas.files.get(*rel).map(Vec::as_slice) != Some(text.as_bytes()))
        .map(|(rel, _)| rel)
        .collect();
    if check_only {
        for rel in &stale {
            let why = if atlas.files.contains_key(*rel) {
                "stale"
            } else {
                "missing"
            };
            eprintln!("{}: {rel}: {why} (run `cra atlas adapters`)", dir.display());
        }
        return if stale.is_empty() {
            Exit::Success
        } else {
            Exit::Negative
        };
    }
    if let Err(e) = fs::create_dir_all(dir.join("adapters")) {
        eprintln!("cra atlas adapters: could not create adapters/: {e}");
        return Exit::CouldNotRun;
    }
    for rel in stale {
        if let Err(e) = write_atomic(&dir.join(rel), rendered[rel].as_bytes()) {
            eprintln!("cra atlas adapters: {e}");
            return Exit::CouldNotRun;
        }
        println!("wrote {rel}");
    }
    Exit::Success
}

fn pack(dir: &Path, out: Option<&Path>) -> Exit {
    if !dir.is_dir() {
        eprintln!(
            "cra atlas pack: {} is not an atlas directory",
            dir.display()
        );
        return Exit::CouldNotRun;
    }
    let atlas = match load_valid("pack", dir) {
        Ok(a) => a,
        Err(exit) => return exit,
    };
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| {
        PathBuf::from(format!(
            "{}-{}.atlas.tar.gz",
            atlas.manifest.atlas_id, atlas.manifest.version
        ))
    });
    match pack_atlas(&atlas, &out) {
        Ok(report) => {
            println!("{}  {}", report.archive_sha256, out.display());
            println!("atlas digest {}", report.atlas_digest);
            // A signature is over the digest, which packing keeps: the directory's holds for
            // the archive, beside it (`specs/atlas-signing.md`).
            let signature = cra_atlas::signing::signature_path(dir);
            if signature.is_file() {
                let beside = cra_atlas::signing::signature_path(&out);
                if let Err(e) = fs::copy(&signature, &beside) {
                    eprintln!(
                        "cra atlas pack: could not copy the signature to {}: {e}",
                        beside.display()
                    );
                    return Exit::CouldNotRun;
                }
                println!("signature {}", beside.display());
            }
            Exit::Success
        }
        Err(e) => {
            eprintln!("cra atlas pack: {e}");
            Exit::CouldNotRun
        }
    }
}
