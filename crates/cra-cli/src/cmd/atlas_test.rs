//! `cra atlas test DIR`: runs an atlas's tests, of two kinds.
//! * `tests/*.trace.jsonl`, recorded traces: each recorded `carp.request.received` is
//!   re-resolved against the atlas as it is now and compared with the recorded
//!   `carp.resolution.completed` (ids and timestamps ignored).
//! * `tests/*.test.json`, stated expectations (`atlas_cases`): a request and the decision the
//!   author expects, per action; `--update` rewrites the expectations from what the atlas
//!   decides now.
//!
//! Prints one line per case and `results: N passed, M failed`; `--coverage` adds policies fired
//! / defined and actions decided / defined, listing what no test reaches, and `--min N` fails
//! below N percent of policies fired. An atlas without any test fails unless `--allow-empty`.
//!
//! Exit codes: 0 all passed; 1 could not run; 2 a case failed (divergence, unmet expectation,
//! unreadable or unverifiable file), no test at all, or coverage under `--min`; 3 the atlas is
//! invalid.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Args;
use cra_carp::replay::{CaseOutcome, replay};
use cra_trace::TraceEvent;
use serde_json::json;

use crate::exit::Exit;
use crate::output::OutputFormat;

/// Arguments of `cra atlas test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The atlas directory (its tests are `tests/*.trace.jsonl` and `tests/*.test.json`).
    pub dir: PathBuf,
    /// Further atlases the recorded requests name (dependencies).
    #[arg(long = "with")]
    pub with: Vec<PathBuf>,
    /// Only run cases whose file name or goal contains this text.
    #[arg(long)]
    pub run: Option<String>,
    /// Report policies fired / defined and actions decided / defined.
    #[arg(long)]
    pub coverage: bool,
    /// Fail when fewer than this percentage of the atlas's policies fire (implies --coverage).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub min: Option<u8>,
    /// Rewrite each `*.test.json`'s `expect` with what the atlas decides now.
    #[arg(long)]
    pub update: bool,
    /// Pass an atlas that has no tests at all.
    #[arg(long)]
    pub allow_empty: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// The outcome of running an atlas's tests.
#[derive(Debug, Default)]
pub struct TestReport {
    /// `(case name, failure)`; `None` when passed.
    pub cases: Vec<(String, Option<String>)>,
    /// Policy ids of the atlas no case fired.
    pub policies_uncovered: Vec<String>,
    /// Number of policies defined.
    pub policies_defined: usize,
    /// Action ids of the atlas no case decided.
    pub actions_uncovered: Vec<String>,
    /// Number of actions defined.
    pub actions_defined: usize,
}

impl TestReport {
    /// Cases passed.
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.1.is_none()).count()
    }

    /// Cases failed.
    pub fn failed(&self) -> usize {
        self.cases.len() - self.passed()
    }
}

/// The files of `dir/tests` whose names end with `suffix`, sorted.
fn test_files(dir: &Path, suffix: &str) -> std::io::Result<Vec<PathBuf>> {
    let tests = dir.join("tests");
    if !tests.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&tests)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(suffix))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Runs the tests of the atlas at `args.dir`; `Err` is the exit status after printing why.
pub fn run_tests(args: &TestArgs) -> Result<TestReport, Exit> {
    let mut paths = vec![args.dir.clone()];
    paths.extend(args.with.iter().cloned());
    let set = crate::cmd::resolve::load_atlases(&paths, "cra atlas test")?;
    let manifest = match cra_carp::atlas_check::load(&args.dir) {
        Ok(a) => a.manifest,
        Err(e) => {
            eprintln!("cra atlas test: {e}");
            return Err(Exit::InvalidAtlas);
        }
    };
    let list = |suffix| {
        test_files(&args.dir, suffix).map_err(|e| {
            eprintln!(
                "cra atlas test: could not list {}/tests: {e}",
                args.dir.display()
            );
            Exit::CouldNotRun
        })
    };
    let cases = list(".test.json")?;
    let files = list(".trace.jsonl")?;
    let mut report = TestReport::default();
    let mut fired: BTreeSet<String> = BTreeSet::new();
    let mut decided: BTreeSet<String> = BTreeSet::new();
    for file in files {
        let fname = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) => {
                report.cases.push((fname, Some(format!("unreadable: {e}"))));
                continue;
            }
        };
        let verification = cra_trace::verify::verify_text_reference(&bytes, false);
        if let Some(f) = verification.first_error() {
            report
                .cases
                .push((fname, Some(format!("the trace does not verify: {f:?}"))));
            continue;
        }
        let mut events: Vec<TraceEvent> = Vec::new();
        let mut bad = None;
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match cra_trace::verify::parse_event_line(line) {
                Ok(e) => events.push(e),
                Err(e) => {
                    bad = Some(format!("line {}: {e}", i + 1));
                    break;
                }
            }
        }
        if let Some(b) = bad {
            report.cases.push((fname, Some(b)));
            continue;
        }
        for case in replay(&events, &set) {
            let name = format!("{fname}#{} {}", case.sequence, case.goal);
            if let Some(filter) = &args.run
                && !name.contains(filter.as_str())
            {
                continue;
            }
            for (atlas, p) in &case.policies_fired {
                if *atlas == manifest.atlas_id {
                    fired.insert(p.clone());
                }
            }
            for (atlas, a) in &case.actions_decided {
                if *atlas == manifest.atlas_id {
                    decided.insert(a.clone());
                }
            }
            let failure = match case.outcome {
                CaseOutcome::Same => None,
                CaseOutcome::Diverged {
                    pointer,
                    recorded,
                    replayed,
                } => Some(format!(
                    "first divergence at {pointer}: recorded {recorded}, replayed {replayed}"
                )),
                CaseOutcome::Error(e) => Some(e),
            };
            report.cases.push((name, failure));
        }
    }
    for file in cases {
        let case = crate::cmd::atlas_cases::run_case(&file, &set, &manifest.atlas_id);
        if let Some(filter) = &args.run
            && !case.name.contains(filter.as_str())
        {
            continue;
        }
        fired.extend(case.fired);
        decided.extend(case.decided);
        let mut failure = case.failure;
        if args.update && !case.actual.is_null() {
            failure = match crate::cmd::atlas_cases::update(&file, &case.actual) {
                Ok(()) => None,
                Err(e) => Some(format!("could not update the expectation: {e}")),
            };
        }
        report.cases.push((case.name, failure));
    }
    report.policies_defined = manifest.policies.len();
    report.actions_defined = manifest.actions.len();
    report.policies_uncovered = manifest
        .policies
        .iter()
        .map(|p| p.policy_id.clone())
        .filter(|p| !fired.contains(p))
        .collect();
    report.actions_uncovered = manifest
        .actions
        .iter()
        .map(|a| a.action_id.clone())
        .filter(|a| !decided.contains(a))
        .collect();
    Ok(report)
}

/// Runs `cra atlas test`.
pub fn run(mut args: TestArgs) -> Exit {
    args.coverage |= args.min.is_some();
    let report = match run_tests(&args) {
        Ok(r) => r,
        Err(x) => return x,
    };
    if report.cases.is_empty() && !args.allow_empty {
        eprintln!(
            "cra atlas test: {} has no tests{}: add tests/*.test.json (a request and the decision \
             it must get) or record one with `cra resolve --record`, or pass --allow-empty",
            args.dir.display(),
            if args.run.is_some() {
                " matching --run"
            } else {
                ""
            }
        );
        return Exit::Negative;
    }
    match args.output {
        OutputFormat::Json => {
            let doc = json!({
                "passed": report.passed(),
                "failed": report.failed(),
                "cases": report.cases.iter().map(|(n, f)| json!({"name": n, "ok": f.is_none(), "failure": f})).collect::<Vec<_>>(),
                "coverage": args.coverage.then(|| json!({
                    "policies": {"fired": report.policies_defined - report.policies_uncovered.len(), "defined": report.policies_defined, "uncovered": report.policies_uncovered},
                    "actions": {"decided": report.actions_defined - report.actions_uncovered.len(), "defined": report.actions_defined, "uncovered": report.actions_uncovered},
                })),
            });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        OutputFormat::Text => {
            for (name, failure) in &report.cases {
                match failure {
                    None => println!("ok    {name}"),
                    Some(f) => println!("FAIL  {name}\n      {f}"),
                }
            }
            println!(
                "results: {} passed, {} failed",
                report.passed(),
                report.failed()
            );
            if args.coverage {
                println!(
                    "coverage: policies fired {}/{}, actions decided {}/{}",
                    report.policies_defined - report.policies_uncovered.len(),
                    report.policies_defined,
                    report.actions_defined - report.actions_uncovered.len(),
                    report.actions_defined
                );
                if !report.policies_uncovered.is_empty() {
                    println!(
                        "  policies never fired: {}",
                        report.policies_uncovered.join(", ")
                    );
                }
                if !report.actions_uncovered.is_empty() {
                    println!(
                        "  actions never decided: {}",
                        report.actions_uncovered.join(", ")
                    );
                }
            }
        }
    }
    if report.failed() > 0 {
        return Exit::Negative;
    }
    let fired = report.policies_defined - report.policies_uncovered.len();
    // An atlas without policies is fully covered.
    let percent = (fired * 100)
        .checked_div(report.policies_defined)
        .unwrap_or(100);
    match args.min {
        Some(min) if percent < usize::from(min) => {
            eprintln!(
                "cra atlas test: {percent}% of the policies fired ({fired} of {}), under --min {min}",
                report.policies_defined
            );
            Exit::Negative
        }
        _ => Exit::Success,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::cmd::resolve::{FailOn, ResolveArgs};
    use serde_json::Value;

    use crate::cmd::test_dirs::{copy_dir, repo};

    fn args(dir: PathBuf) -> TestArgs {
        TestArgs {
            dir,
            with: vec![],
            run: None,
            coverage: true,
            min: None,
            update: false,
            allow_empty: false,
            output: OutputFormat::Text,
        }
    }

    /// The github-ops atlas copied into a temporary directory, with only `case` as its test.
    fn github_ops_with_case(case: &Value) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("dev.cra.github-ops");
        copy_dir(&repo("atlases/dev.cra.github-ops"), &copy);
        std::fs::remove_dir_all(copy.join("tests")).unwrap();
        std::fs::create_dir(copy.join("tests")).unwrap();
        std::fs::write(
            copy.join("tests/main.test.json"),
            serde_json::to_string_pretty(case).unwrap(),
        )
        .unwrap();
        (tmp, copy)
    }

    fn delete_main(expect: Value) -> Value {
        serde_json::json!({
            "description": "Deleting main by another name",
            "request": {"agent_id": "maintainer-1", "goal": "Tidy up",
                        "required_capabilities": ["maintain"],
                        "intended_parameters": {"branch.delete":
                            {"owner": "o", "repo": "r", "branch": "main"}}},
            "expect": expect,
        })
    }

    #[test]
    fn a_stated_expectation_passes_or_names_each_action_that_differs() {
        let good = delete_main(serde_json::json!({
            "decision": "requires_approval",
            "actions": {"branch.delete": "deny by deny-protected-branch-deletion",
                        "pr.merge": "requires_approval by approve-merges"}}));
        let (_tmp, dir) = github_ops_with_case(&good);
        let report = run_tests(&TestArgs {
            coverage: false,
            ..args(dir)
        })
        .unwrap();
        assert_eq!(report.cases.len(), 1);
        assert_eq!(report.failed(), 0, "{:?}", report.cases);

        let bad = delete_main(serde_json::json!({
            "decision": "allow",
            "actions": {"branch.delete": "allow by allow-maintain",
                        "no.such": "allow by x"}}));
        let (_tmp, dir) = github_ops_with_case(&bad);
        let report = run_tests(&args(dir)).unwrap();
        let failure = report.cases[0].1.clone().unwrap();
        assert!(
            failure.contains("decision: expected allow, got requires_approval"),
            "{failure}"
        );
        assert!(
            failure.contains(
                "action branch.delete: expected \"allow by allow-maintain\", got \"deny by deny-protected-branch-deletion\""
            ),
            "{failure}"
        );
        assert!(
            failure.contains(
                "action no.such: expected \"allow by x\", got \"not a candidate action\""
            ),
            "{failure}"
        );
    }

    #[test]
    fn a_case_that_cannot_be_judged_says_why() {
        for (case, why) in [
            (
                serde_json::json!({"expect": {}}),
                "the case has no `request` object",
            ),
            (
                serde_json::json!({"request": {"agent_id": "a"}, "expect": {}}),
                "`request.goal` is missing",
            ),
            (
                serde_json::json!({"request": {"agent_id": "a", "goal": "g", "risk_tier": "huge"}}),
                "the request is not a CARP request",
            ),
            (
                serde_json::json!({"request": {"agent_id": "a", "goal": "g"}}),
                "the case has no `expect`",
            ),
            (
                serde_json::json!({"now": "yesterday", "request": {"agent_id": "a", "goal": "g"}}),
                "`now` is not an RFC 3339 instant",
            ),
        ] {
            let (_tmp, dir) = github_ops_with_case(&case);
            let report = run_tests(&args(dir)).unwrap();
            let failure = report.cases[0].1.clone().unwrap_or_default();
            assert!(failure.contains(why), "{case}: {failure}");
        }
    }

    #[test]
    fn update_writes_what_the_atlas_decides() {
        let (_tmp, dir) = github_ops_with_case(&delete_main(serde_json::json!({})));
        let report = run_tests(&TestArgs {
            update: true,
            ..args(dir.clone())
        })
        .unwrap();
        assert_eq!(report.failed(), 0, "{:?}", report.cases);
        let written: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("tests/main.test.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            written["expect"]["actions"]["branch.delete"],
            "deny by deny-protected-branch-deletion"
        );
        assert_eq!(written["description"], "Deleting main by another name");
        // And it passes as written.
        assert_eq!(run_tests(&args(dir)).unwrap().failed(), 0);
    }

    #[test]
    fn no_tests_and_low_coverage_fail() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("dev.cra.github-ops");
        copy_dir(&repo("atlases/dev.cra.github-ops"), &copy);
        std::fs::remove_dir_all(copy.join("tests")).unwrap();
        assert_eq!(run(args(copy.clone())), Exit::Negative);
        assert_eq!(
            run(TestArgs {
                allow_empty: true,
                ..args(copy)
            }),
            Exit::Success
        );
        let (_tmp, dir) = github_ops_with_case(&delete_main(serde_json::json!({})));
        assert_eq!(
            run(TestArgs {
                min: Some(100),
                ..args(dir.clone())
            }),
            Exit::Negative
        );
        assert_eq!(
            run(TestArgs {
                min: Some(10),
                ..args(dir)
            }),
            Exit::Success
        );
    }

    #[test]
    fn example_atlases_pass_their_tests_and_cover_every_policy() {
        for a in [
            "com.example.customer-support",
            "com.example.payments",
            "dev.cra.github-ops",
        ] {
            let report = run_tests(&args(repo(&format!("atlases/{a}")))).unwrap();
            assert!(report.passed() > 0, "{a} has no tests");
            assert_eq!(report.failed(), 0, "{a}: {:?}", report.cases);
            assert!(
                report.policies_uncovered.is_empty(),
                "{a}: {:?}",
                report.policies_uncovered
            );
        }
    }

    #[test]
    fn flipping_one_policy_makes_atlas_test_fail() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("com.example.customer-support");
        copy_dir(&repo("atlases/com.example.customer-support"), &copy);
        // Find the file holding deny-personal-data-export and turn it into an allow.
        let mut flipped = false;
        for dir in [copy.clone(), copy.join("policies")] {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_none_or(|x| x != "json") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                let mut v: Value = serde_json::from_str(&text).unwrap();
                let mut changed = false;
                flip(&mut v, &mut changed);
                if changed {
                    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
                    flipped = true;
                }
            }
        }
        assert!(flipped, "deny-personal-data-export not found");
        let report = run_tests(&args(copy.clone())).unwrap();
        assert!(report.failed() > 0, "{:?}", report.cases);
        assert!(
            report.cases.iter().any(|(_, f)| f
                .as_deref()
                .is_some_and(|f| f.contains("first divergence at"))),
            "{:?}",
            report.cases
        );
        assert_eq!(run(args(copy)), Exit::Negative);
    }

    fn flip(v: &mut Value, changed: &mut bool) {
        match v {
            Value::Object(m) => {
                if m.get("policy_id").and_then(Value::as_str) == Some("deny-personal-data-export") {
                    m.insert("type".into(), json!("allow"));
                    *changed = true;
                }
                for x in m.values_mut() {
                    flip(x, changed);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| flip(x, changed)),
            _ => {}
        }
    }

    #[test]
    fn resolve_exit_codes_follow_the_contract() {
        let fixtures = repo("crates/cra-carp/tests/fixtures/golden/simple-resolve");
        let base = |fail_on| ResolveArgs {
            atlases: vec![fixtures.join("atlas")],
            request: fixtures.join("request.json"),
            now: None,
            explain: false,
            ttl: 3600,
            fail_on,
            record: None,
            output: OutputFormat::Json,
        };
        assert_eq!(
            crate::cmd::resolve::run(base(Some(FailOn::Deny))),
            Exit::Success
        );
        let tmp = tempfile::tempdir().unwrap();
        let mut req: Value =
            serde_json::from_str(&std::fs::read_to_string(fixtures.join("request.json")).unwrap())
                .unwrap();
        req["task"]["required_capabilities"] = json!(["nothing-here"]);
        let path = tmp.path().join("deny.json");
        std::fs::write(&path, req.to_string()).unwrap();
        let mut deny = base(Some(FailOn::Deny));
        deny.request = path.clone();
        assert_eq!(crate::cmd::resolve::run(deny), Exit::Negative);
        let mut no_fail = base(None);
        no_fail.request = path;
        assert_eq!(crate::cmd::resolve::run(no_fail), Exit::Success);
        let mut skewed = base(None);
        skewed.now = Some("2024-12-28T13:00:00Z".into());
        assert_eq!(crate::cmd::resolve::run(skewed), Exit::CouldNotRun);
    }
}
