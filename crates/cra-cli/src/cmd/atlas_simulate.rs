//! `cra atlas simulate NEW_ATLAS (--against FILES... | --data DIR | --postgres URL | --url URL)`:
//! what an atlas change would have decided differently on recorded traffic, before it ships.
//!
//! The recorded chains come from files (`.trace.jsonl`, as `cra trace export` or an atlas's
//! tests write them), from a stopped server's store (`--data DIR`, `--postgres URL`: every
//! chain it holds), or from a running server (`--url URL` with `--token`: every chain
//! `GET /v1/traces` lists for the caller, so an auditor's token reads them all). Every resolve
//! recorded in them is re-decided under the new atlases, with the counters and the
//! instant it recorded (no counterfactual cascade: a flip does not change what later requests
//! saw). Each action whose outcome changes (`allow`, `requires_approval`, `deny`, or `absent`
//! when it is no longer, or newly, a candidate) is a flip; flips are counted per policy deciding
//! them now, with examples naming the session and the request event's sequence.
//!
//! Every recorded execute is then decided again under the resolution its resolve was made
//! again into, on the history the chains recorded ([`cra_carp::execute_replay`]): its
//! parameters, the marks of earlier succeeded calls, the charges of earlier calls that ran, its
//! approval as recorded. Execute flips (`allow`, `requires_approval`, `deny`) are reported
//! apart, counted per verdict now. Executes not decided by a policy when recorded, and those
//! in chains written before `action.requested` carried the parameters, are left out and
//! counted.
//!
//! Exit codes: 0 nothing flips; 1 could not run (an unreadable file, an invalid atlas); 2 some
//! decision flips, or a recorded resolve or execute could not be re-decided, so an atlas change
//! can gate CI like code.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use cra_carp::execute_replay::{ExecuteCase, ExecuteReplay, replay_executes};
use cra_carp::replay::{CaseOutcome, ReplayCase, replay};
use serde_json::{Value, json};

use crate::cmd::trace_io::{Failure, StoreArgs, read_events, read_session};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// Examples kept per policy.
const EXAMPLES: usize = 5;

/// Arguments of `cra atlas simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The new atlas (directory or archive).
    pub atlas: PathBuf,
    /// Further atlases the recorded requests name, as they are to be.
    #[arg(long = "with")]
    pub with: Vec<PathBuf>,
    /// Recorded chains (`.trace.jsonl`) to re-decide; or read them from a store (--data,
    /// --postgres) or a server (--url) instead.
    #[arg(
        long = "against",
        num_args = 1..,
        required_unless_present_any = ["data", "postgres", "url"],
        conflicts_with_all = ["data", "postgres", "url"]
    )]
    pub against: Vec<PathBuf>,
    /// Every chain of a stopped server's store (--data DIR or --postgres URL).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Every chain a running server lists for the caller (`GET /v1/traces`).
    #[arg(long, conflicts_with_all = ["data", "postgres"])]
    pub url: Option<String>,
    /// The bearer token for --url (default $CRA_TOKEN, else the admin key of ./cra-data).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// What a simulation found.
#[derive(Debug, Default)]
pub struct SimulationReport {
    /// Recorded resolves re-decided.
    pub resolves: usize,
    /// Resolves with at least one flip.
    pub resolves_flipped: usize,
    /// Flips per policy deciding them now: count and examples.
    pub by_policy: BTreeMap<String, (usize, Vec<Value>)>,
    /// Resolves that could not be re-decided, with why.
    pub errors: Vec<String>,
    /// What the recorded executes gave.
    pub executes: ExecuteReport,
}

/// The executes of a simulation.
#[derive(Debug, Default)]
pub struct ExecuteReport {
    /// Recorded executes decided again.
    pub decided: usize,
    /// Flips per verdict now (`deny by POLICY`, `requires_approval`, `allow`): count and
    /// examples.
    pub flips: BTreeMap<String, (usize, Vec<Value>)>,
    /// Executes left out, as their recording says they must be (refused as a request, no
    /// recorded outcome, recorded before parameters were), counted per reason.
    pub skipped: BTreeMap<String, usize>,
    /// Executes that could not be decided again although they should have been, with why.
    pub errors: Vec<String>,
}

impl ExecuteReport {
    /// Every execute flip.
    pub fn flipped(&self) -> usize {
        self.flips.values().map(|(n, _)| n).sum()
    }

    fn add(&mut self, case: &ExecuteCase) {
        let now = match &case.now {
            ExecuteReplay::LeftOut(why) => {
                *self.skipped.entry(why.clone()).or_default() += 1;
                return;
            }
            ExecuteReplay::NotDecided(why) => {
                self.errors.push(format!(
                    "session {} sequence {} ({}): {why}",
                    case.session_id, case.sequence, case.action_id
                ));
                return;
            }
            ExecuteReplay::Decided(v) => v,
        };
        self.decided += 1;
        if !case.flipped() {
            return;
        }
        let (n, examples) = self.flips.entry(now.describe()).or_default();
        *n += 1;
        if examples.len() < EXAMPLES {
            examples.push(json!({
                "session_id": case.session_id, "sequence": case.sequence,
                "execution_id": case.execution_id, "action_id": case.action_id,
                "recorded": case.recorded.describe(), "now": now.describe(),
            }));
        }
    }
}

impl SimulationReport {
    /// Every flip of a resolve.
    pub fn flips(&self) -> usize {
        self.by_policy.values().map(|(n, _)| n).sum()
    }

    /// Whether the atlas change is to be refused: something flips, or could not be decided
    /// again.
    pub fn fails(&self) -> bool {
        self.flips() > 0
            || !self.errors.is_empty()
            || self.executes.flipped() > 0
            || !self.executes.errors.is_empty()
    }

    fn add_resolve(&mut self, source: &str, case: &ReplayCase) {
        self.resolves += 1;
        let session = &case.session_id;
        if let CaseOutcome::Error(e) = &case.outcome {
            self.errors.push(format!(
                "{source} session {session} sequence {}: {e}",
                case.sequence
            ));
            return;
        }
        if !case.flips.is_empty() {
            self.resolves_flipped += 1;
        }
        for f in &case.flips {
            let policy = if f.decided_by.is_empty() {
                "(no longer a candidate)".to_owned()
            } else {
                f.decided_by.clone()
            };
            let (n, examples) = self.by_policy.entry(policy).or_default();
            *n += 1;
            if examples.len() < EXAMPLES {
                examples.push(json!({
                    "session_id": session, "sequence": case.sequence,
                    "goal": case.goal, "action_id": f.action_id,
                    "recorded": f.recorded, "now": f.replayed,
                }));
            }
        }
    }
}

/// Re-decides every recorded resolve and execute of `args.against` under the new atlases.
/// Every chain is read first: an execute is decided on the history of every chain given.
pub fn simulate(args: &SimulateArgs) -> Result<SimulationReport, Exit> {
    let mut paths = vec![args.atlas.clone()];
    paths.extend(args.with.iter().cloned());
    let set = crate::cmd::resolve::load_atlases(&paths, "cra atlas simulate")?;
    let mut chains: Vec<(String, Vec<cra_trace::TraceEvent>)> = Vec::new();
    for_each_chain(args, &mut |source, events| {
        chains.push((source.to_owned(), events))
    })
    .map_err(|f| {
        eprintln!("cra atlas simulate: {}", f.message);
        Exit::CouldNotRun
    })?;
    let mut report = SimulationReport::default();
    let mut resolves = Vec::new();
    for (source, events) in &chains {
        for case in replay(events, &set) {
            report.add_resolve(source, &case);
            resolves.push(case);
        }
    }
    let all: Vec<&[cra_trace::TraceEvent]> = chains.iter().map(|(_, e)| e.as_slice()).collect();
    for case in replay_executes(&all, &resolves, Some(&set)) {
        report.executes.add(&case);
    }
    Ok(report)
}

/// Calls `each(source, events)` for every recorded chain `args` names: its files, every chain
/// of its store, or every chain its server lists for the caller. `source` names where the
/// chain came from, for the report.
fn for_each_chain(
    args: &SimulateArgs,
    each: &mut dyn FnMut(&str, Vec<cra_trace::TraceEvent>),
) -> Result<(), Failure> {
    for file in &args.against {
        let events = read_events(Some(file), std::io::empty())
            .map_err(|f| Failure::new(f.token, format!("{}: {}", file.display(), f.message)))?;
        each(&file.display().to_string(), events);
    }
    if args.store.given() {
        let Some(store) = args.store.open(None)? else {
            return Ok(());
        };
        let chains = store.chains.as_ref();
        let sessions = chains
            .sessions()
            .map_err(|e| Failure::new(e.token(), e.to_string()))?;
        for s in sessions {
            let events = read_session(chains, &s.session_id, &mut |_| {})?;
            each(&format!("{} {}", store.kind, store.location), events);
        }
    } else if let Some(base) = &args.url {
        let token = crate::cmd::client::token_or_local(args.token.clone()).ok_or_else(|| {
            Failure::new(
                cra_wire::Token::Unauthorized,
                "no credentials for the server: give --token or set CRA_TOKEN",
            )
        })?;
        for (id, body) in crate::cmd::trace_export::server_chains(base, &token)? {
            let events = read_events(None, body.as_slice())
                .map_err(|f| Failure::new(f.token, format!("session {id}: {}", f.message)))?;
            each(base, events);
        }
    }
    Ok(())
}

/// The executes' flips, errors and left-out counts, as text.
fn print_executes(x: &ExecuteReport) {
    for (now, (n, examples)) in &x.flips {
        println!("{n} execute flip(s) now {now}");
        for e in examples {
            println!(
                "  session {} #{}: {} {} -> {}",
                e["session_id"].as_str().unwrap_or(""),
                e["sequence"],
                e["action_id"].as_str().unwrap_or(""),
                e["recorded"].as_str().unwrap_or(""),
                e["now"].as_str().unwrap_or("")
            );
        }
    }
    for e in &x.errors {
        println!("could not re-decide execute: {e}");
    }
    for (why, n) in &x.skipped {
        println!("{n} execute(s) left out: {why}");
    }
}

/// Runs `cra atlas simulate`.
pub fn run(args: SimulateArgs) -> Exit {
    let report = match simulate(&args) {
        Ok(r) => r,
        Err(x) => return x,
    };
    match args.output {
        OutputFormat::Json => {
            let doc = json!({
                "resolves": report.resolves,
                "resolves_flipped": report.resolves_flipped,
                "flips": report.flips(),
                "by_policy": report.by_policy.iter().map(|(p, (n, ex))| {
                    json!({"policy_id": p, "flips": n, "examples": ex})
                }).collect::<Vec<_>>(),
                "errors": report.errors,
                "executes": {
                    "decided": report.executes.decided,
                    "flips": report.executes.flipped(),
                    "by_verdict": report.executes.flips.iter().map(|(v, (n, ex))| {
                        json!({"now": v, "flips": n, "examples": ex})
                    }).collect::<Vec<_>>(),
                    "skipped": report.executes.skipped.iter().map(|(why, n)| {
                        json!({"reason": why, "executes": n})
                    }).collect::<Vec<_>>(),
                    "errors": report.executes.errors,
                },
            });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        OutputFormat::Text => {
            for (policy, (n, examples)) in &report.by_policy {
                println!("{n} flip(s) now decided by {policy}");
                for e in examples {
                    println!(
                        "  session {} #{}: {} {} -> {} ({})",
                        e["session_id"].as_str().unwrap_or(""),
                        e["sequence"],
                        e["action_id"].as_str().unwrap_or(""),
                        e["recorded"].as_str().unwrap_or(""),
                        e["now"].as_str().unwrap_or(""),
                        e["goal"].as_str().unwrap_or("")
                    );
                }
            }
            for e in &report.errors {
                println!("could not re-decide: {e}");
            }
            print_executes(&report.executes);
            println!(
                "simulated {} resolve(s): {} flip(s) in {} resolve(s), {} not re-decided",
                report.resolves,
                report.flips(),
                report.resolves_flipped,
                report.errors.len()
            );
            let x = &report.executes;
            println!(
                "simulated {} execute(s): {} flip(s), {} not re-decided, {} left out",
                x.decided,
                x.flipped(),
                x.errors.len(),
                x.skipped.values().sum::<usize>()
            );
        }
    }
    if report.fails() {
        Exit::Negative
    } else {
        Exit::Success
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use super::*;
    use crate::cmd::resolve::ResolveArgs;

    use crate::cmd::test_dirs::{copy_dir, repo};

    /// A day of github-ops traffic: `n` resolves by several agents, capabilities, tiers and
    /// hours, each recorded with `cra resolve --record` into its own chain.
    fn record_day(dir: &Path, n: usize) -> Vec<PathBuf> {
        const AGENTS: [&str; 4] = ["maintainer-1", "maintainer-2", "sandbox-3", "ops-bot"];
        const CAPS: [&[&str]; 4] = [
            &["repo-read"],
            &["repo-read", "maintain"],
            &["contribute"],
            &["repo-read", "contribute", "maintain"],
        ];
        const TIERS: [&str; 3] = ["low", "medium", "high"];
        (0..n)
            .map(|i| {
                let minute = i * 7;
                let now = format!("2026-01-05T{:02}:{:02}:00Z", (minute / 60) % 24, minute % 60);
                let request = json!({
                    "carp_version": "1.0",
                    "request_id": format!("0190a000-0000-7000-8000-{:012x}", 0xa000 + i),
                    "timestamp": now, "operation": "resolve",
                    "requester": {"agent_id": AGENTS[i % 4],
                                  "session_id": format!("0190a000-0000-7000-8000-{:012x}", 0xb000 + i)},
                    "task": {"goal": format!("Task {i}"), "risk_tier": TIERS[i % 3],
                             "required_capabilities": CAPS[(i / 4) % 4]},
                    "atlas_ids": ["dev.cra.github-ops"],
                });
                let req = dir.join(format!("req-{i}.json"));
                std::fs::write(&req, request.to_string()).unwrap();
                let chain = dir.join(format!("day-{i}.trace.jsonl"));
                let exit = crate::cmd::resolve::run(ResolveArgs {
                    atlases: vec![repo("atlases/dev.cra.github-ops")],
                    request: req,
                    now: None,
                    explain: false,
                    ttl: cra_carp::eval::DEFAULT_TTL_SECONDS,
                    fail_on: None,
                    record: Some(chain.clone()),
                    output: OutputFormat::Json,
                });
                assert_eq!(exit, Exit::Success);
                chain
            })
            .collect()
    }

    /// How many recorded resolutions in `chains` satisfy `pick` (read from the chains
    /// themselves, not from the simulator).
    fn recorded(chains: &[PathBuf], pick: impl Fn(&Value, &Value) -> bool) -> usize {
        chains
            .iter()
            .map(|c| {
                let events = crate::cmd::trace_io::read_events(Some(c), std::io::empty()).unwrap();
                let request = &events[1].payload["request"];
                let done = events
                    .iter()
                    .find(|e| e.event_type == "carp.resolution.completed")
                    .unwrap();
                usize::from(pick(request, &done.payload["resolution"]))
            })
            .sum()
    }

    /// Simulating `atlas` against the chain files `against`.
    fn files(atlas: PathBuf, against: Vec<PathBuf>) -> SimulateArgs {
        SimulateArgs {
            atlas,
            with: vec![],
            against,
            store: StoreArgs::default(),
            url: None,
            token: None,
            output: OutputFormat::Json,
        }
    }

    fn allows(resolution: &Value, action: &str) -> bool {
        resolution["allowed_actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action_id"] == action && a["requires_confirmation"] == false)
    }

    #[test]
    fn simulate_finds_exactly_the_planted_flips() {
        let tmp = tempfile::tempdir().unwrap();
        let chains = record_day(tmp.path(), 96);
        // Plant two changes: pr.list is no longer readable by anyone, and maintainer-2 may no
        // longer re-run CI.
        let changed = tmp.path().join("dev.cra.github-ops");
        copy_dir(&repo("atlases/dev.cra.github-ops"), &changed);
        let allow = changed.join("policies/allow.json");
        let text = std::fs::read_to_string(&allow).unwrap();
        std::fs::write(&allow, text.replacen("\"pr.list\", ", "", 1)).unwrap();
        let deny = changed.join("policies/planted.json");
        std::fs::write(
            &deny,
            json!([{"policy_id": "deny-planted", "type": "deny", "actions": ["ci.run.rerun"],
                    "conditions": {"agents": ["maintainer-2"]},
                    "parameters": {"reason": "planted"}}])
            .to_string(),
        )
        .unwrap();

        let want_list = recorded(&chains, |_, r| allows(r, "pr.list"));
        let want_rerun = recorded(&chains, |q, r| {
            q["requester"]["agent_id"] == "maintainer-2" && allows(r, "ci.run.rerun")
        });
        assert!(want_list > 0 && want_rerun > 0, "the day plants nothing");

        let args = files(changed, chains.clone());
        let report = simulate(&args).unwrap();
        assert_eq!(report.resolves, 96);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let counts: BTreeMap<&str, usize> = report
            .by_policy
            .iter()
            .map(|(p, (n, _))| (p.as_str(), *n))
            .collect();
        assert_eq!(
            counts,
            BTreeMap::from([("default_deny", want_list), ("deny-planted", want_rerun)])
        );
        assert_eq!(run(args), Exit::Negative);

        // The unchanged atlas flips nothing.
        let same = files(repo("atlases/dev.cra.github-ops"), chains);
        assert_eq!(simulate(&same).unwrap().flips(), 0);
        assert_eq!(run(same), Exit::Success);
    }

    #[test]
    fn a_resolve_that_cannot_be_re_decided_is_reported_and_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let chains = record_day(tmp.path(), 2);
        // The recorded requests name github-ops, which this simulation does not supply.
        let args = files(repo("atlases/com.example.payments"), chains);
        let report = simulate(&args).unwrap();
        assert_eq!(
            (report.resolves, report.errors.len(), report.flips()),
            (2, 2, 0)
        );
        assert!(
            report.errors[0].contains("dev.cra.github-ops"),
            "{:?}",
            report.errors
        );
        assert_eq!(run(args), Exit::Negative);
    }
}
