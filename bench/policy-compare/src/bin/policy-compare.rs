//! CARP resolve (cra-carp) against cedar-policy and regorus (Rego) on the same allow/deny
//! questions.
//!
//! The question: "which of the atlas's N actions may this agent run now?", the question a CARP
//! resolve answers. cra answers it with one `resolve` call (which also builds the context
//! blocks, ids and constraints of a full resolution); Cedar answers it idiomatically with one
//! `is_authorized` call per action (Cedar decides one principal/action/resource triple at a
//! time); Rego answers it idiomatically with one query of a set-valued rule (`allowed`), the
//! actions and per-group settings living in `data` and the question in `input`.
//!
//! The atlas of N actions `g<k>.r<i>.op` (groups of ten) carries only allow and deny policies,
//! so that both languages can say exactly the same thing:
//! * `allow-low`: every action when the task's risk tier is low or medium;
//! * `deny-contractors`: every action when the agent matches `contractor-*` and the goal
//!   mentions `delete`;
//! * per group `g<k>`: `deny-g<k>` refuses action `g<k>.r<10k+9>.op`, and `allow-g<k>` allows
//!   `g<k>.*.op` between 06:00 and 22:00 UTC.
//!
//! In Cedar the groups are action groups (`Action::"g<k>"`), agents are `Agent` entities with a
//! `name` attribute, and risk tier, goal and hour travel in the context. In Rego the policy is a
//! handful of generic rules and the per-group denials and time windows are data
//! (`data.groups[g]`), the way Rego policies are usually written; the agent, goal, risk tier and
//! hour are the input.
//!
//! Before any timing, every benchmarked request is answered by all three engines and the
//! decision for every action compared; any difference aborts the run (exit status 1). Cedar's
//! cost per question grows with actions x policies, so the large atlases are measured on fewer
//! (still distinct) questions, and a slow engine's runs are capped by a time budget.
//!
//! Output: one JSON document on stdout (figures in microseconds per full resolve, min / median /
//! max over the timed runs). `--quick` uses smaller sizes and fewer runs; `--smoke` (CI) runs one
//! small size once to show the program still works.

use std::collections::{BTreeMap, HashSet};
use std::hint::black_box;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cedar_policy::{Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request};
use cra_bench_compare::summary;
use cra_carp::CarpRequest;
use cra_carp::eval::{CountersSnapshot, ResolveOptions, resolve};
use cra_carp::index::{AtlasSet, CompiledAtlas};
use cra_carp::validate::parse_request;
use cra_wire::SequentialIds;
use serde_json::{Value, json};
use time::OffsetDateTime;

const TIERS: [&str; 4] = ["low", "medium", "high", "critical"];

/// One benchmarked question, in every engine's form.
struct Question {
    carp: CarpRequest,
    now: OffsetDateTime,
    principal: EntityUid,
    context: Context,
    rego_input: regorus::Value,
}

fn agent_name(i: usize) -> String {
    if i.is_multiple_of(7) {
        format!("contractor-{i}")
    } else {
        format!("agent-{i}")
    }
}

fn goal(i: usize) -> String {
    if i.is_multiple_of(5) {
        format!("delete record {i}")
    } else {
        format!("look up record {i}")
    }
}

/// The hour of question `i`: spread over the day so that the time window is both met and missed.
fn hour(i: usize) -> usize {
    (i * 5) % 24
}

fn cra_atlas(n: usize) -> anyhow::Result<AtlasSet> {
    let actions: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "action_id": format!("g{}.r{}.op", i / 10, i),
                "name": format!("Action {i}"),
                "description": "A benchmark action.",
                // Low, so the tier `risk_tiers` reads (the riskier of the task's and the action's)
                // is the task's, which the Cedar and Rego versions get in their context.
                "risk_tier": "low",
                "parameters_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            })
        })
        .collect();
    let mut policies = vec![
        json!({"policy_id": "allow-low", "type": "allow", "actions": ["*"], "conditions": {"risk_tiers": ["low", "medium"]}}),
        json!({"policy_id": "deny-contractors", "type": "deny", "actions": ["*"], "conditions": {"agents": ["contractor-*"], "context_matches": ["delete"]}}),
    ];
    for g in 0..n.div_ceil(10) {
        policies.push(json!({"policy_id": format!("deny-g{g}"), "type": "deny", "actions": [format!("g{g}.r{}.op", g * 10 + 9)]}));
        policies.push(json!({"policy_id": format!("allow-g{g}"), "type": "allow", "actions": [format!("g{g}.*.op")], "conditions": {"time_window": {"start_hour": 6, "end_hour": 22}}}));
    }
    let manifest: cra_atlas::Manifest = serde_json::from_value(json!({
        "atlas_version": "1.0", "atlas_id": "com.example.bench", "version": "1.0.0", "name": "bench",
        "context_packs": [{"pack_id": "intro", "files": ["context/intro.md"], "priority": 10}],
        "policies": policies, "actions": actions,
    }))
    .context("the benchmark manifest does not parse")?;
    let ctx = BTreeMap::from([(
        "context/intro.md".to_owned(),
        "# Intro\n\nBenchmark context.\n".to_owned(),
    )]);
    let compiled = CompiledAtlas::compile(&manifest, &ctx, "digest")
        .map_err(|e| anyhow::anyhow!("the benchmark atlas does not compile: {e}"))?;
    AtlasSet::new(vec![compiled]).map_err(|e| anyhow::anyhow!("atlas set: {e}"))
}

/// The same policies, written the way a Cedar user would.
fn cedar_policies(n: usize) -> anyhow::Result<PolicySet> {
    let mut src = String::from(
        r#"@id("allow-low")
permit(principal, action, resource) when { ["low", "medium"].contains(context.risk_tier) };
@id("deny-contractors")
forbid(principal is Agent, action, resource) when { principal.name like "contractor-*" && context.goal like "*delete*" };
"#,
    );
    for g in 0..n.div_ceil(10) {
        src.push_str(&format!(
            "@id(\"deny-g{g}\")\nforbid(principal, action == Action::\"g{g}.r{}.op\", resource);\n\
             @id(\"allow-g{g}\")\npermit(principal, action in Action::\"g{g}\", resource) when {{ context.hour >= 6 && context.hour < 22 }};\n",
            g * 10 + 9
        ));
    }
    PolicySet::from_str(&src).map_err(|e| anyhow::anyhow!("cedar policies do not parse: {e}"))
}

fn cedar_entities(n: usize, agents: &[String]) -> anyhow::Result<Entities> {
    let mut list: Vec<Value> = Vec::new();
    for g in 0..n.div_ceil(10) {
        list.push(
            json!({"uid": {"type": "Action", "id": format!("g{g}")}, "attrs": {}, "parents": []}),
        );
    }
    for i in 0..n {
        list.push(
            json!({"uid": {"type": "Action", "id": format!("g{}.r{}.op", i / 10, i)}, "attrs": {},
                         "parents": [{"type": "Action", "id": format!("g{}", i / 10)}]}),
        );
    }
    for a in agents {
        list.push(json!({"uid": {"type": "Agent", "id": a}, "attrs": {"name": a}, "parents": []}));
    }
    list.push(
        json!({"uid": {"type": "Atlas", "id": "com.example.bench"}, "attrs": {}, "parents": []}),
    );
    Entities::from_json_value(Value::Array(list), None)
        .map_err(|e| anyhow::anyhow!("cedar entities: {e}"))
}

/// Questions 1..=count (question 0 is a contractor deleting, which every engine denies
/// everything: a poor single question for the largest atlas).
fn questions(count: usize) -> anyhow::Result<Vec<Question>> {
    (1..=count)
        .map(|i| {
            let agent = agent_name(i);
            let ts = format!("2026-01-05T{:02}:00:00Z", hour(i));
            let carp = parse_request(&json!({
                "carp_version": "1.0",
                "request_id": format!("0190a000-0000-7000-8000-{i:012x}"),
                "timestamp": ts,
                "operation": "resolve",
                "requester": {"agent_id": agent, "session_id": "0190a000-0000-7000-8000-000000000001"},
                "task": {"goal": goal(i), "risk_tier": TIERS[i % 4]},
            }))
            .map_err(|e| anyhow::anyhow!("benchmark request {i}: {e:?}"))?;
            let now = cra_wire::clock::parse_rfc3339(&ts)
                .map_err(|e| anyhow::anyhow!("timestamp {ts}: {e:?}"))?;
            let principal = EntityUid::from_str(&format!("Agent::\"{agent}\""))?;
            let context = Context::from_json_value(
                json!({"risk_tier": TIERS[i % 4], "goal": goal(i), "hour": hour(i)}),
                None,
            )?;
            let rego_input = regorus::Value::from_json_str(
                &json!({"agent": agent, "goal": goal(i), "risk_tier": TIERS[i % 4], "hour": hour(i)})
                    .to_string(),
            )?;
            Ok(Question {
                carp,
                now,
                principal,
                context,
                rego_input,
            })
        })
        .collect()
}

/// cra's answer: the set of allowed action ids.
fn cra_answer(q: &Question, set: &AtlasSet, ids: &SequentialIds) -> anyhow::Result<Vec<String>> {
    let r = resolve(
        &q.carp,
        set,
        &CountersSnapshot::empty(),
        q.now,
        ids,
        &ResolveOptions::default(),
    )
    .map_err(|e| anyhow::anyhow!("cra resolve failed: {e}"))?;
    if r.allowed_actions.iter().any(|a| a.requires_confirmation) {
        bail!("cra asked for an approval; the benchmark atlas has no approval policies");
    }
    Ok(r.allowed_actions
        .iter()
        .map(|a| a.action_id.to_string())
        .collect())
}

struct CedarSide {
    policies: PolicySet,
    entities: Entities,
    actions: Vec<(String, EntityUid)>,
    resource: EntityUid,
    authorizer: Authorizer,
}

impl CedarSide {
    /// Cedar's answer: one authorisation per action.
    fn answer(&self, q: &Question) -> anyhow::Result<Vec<&str>> {
        let mut allowed = Vec::new();
        for (id, uid) in &self.actions {
            let req = Request::new(
                q.principal.clone(),
                uid.clone(),
                self.resource.clone(),
                q.context.clone(),
                None,
            )?;
            let resp = self
                .authorizer
                .is_authorized(&req, &self.policies, &self.entities);
            if resp.diagnostics().errors().next().is_some() {
                let errs: Vec<String> =
                    resp.diagnostics().errors().map(|e| e.to_string()).collect();
                bail!("cedar evaluation errors for {id}: {errs:?}");
            }
            if resp.decision() == Decision::Allow {
                allowed.push(id.as_str());
            }
        }
        Ok(allowed)
    }
}

/// The same policies in Rego: generic rules over `data` (one entry per group: the action it
/// denies and its time window) and `input` (the question). Deny wins over allow; anything not
/// allowed is denied, as in CARP.
const REGO_POLICY: &str = r#"package bench

low_risk if input.risk_tier in {"low", "medium"}

contractor_deleting if {
	startswith(input.agent, "contractor-")
	contains(input.goal, "delete")
}

permitted(_) if low_risk

permitted(action) if {
	window := data.groups[action.group].window
	input.hour >= window.start_hour
	input.hour < window.end_hour
}

forbidden(_) if contractor_deleting

forbidden(action) if data.groups[action.group].deny == action.id

allowed contains action.id if {
	some action in data.actions
	permitted(action)
	not forbidden(action)
}
"#;

struct RegoSide {
    engine: regorus::Engine,
}

impl RegoSide {
    fn new(n: usize) -> anyhow::Result<Self> {
        let mut engine = regorus::Engine::new();
        engine.add_policy("bench.rego".to_owned(), REGO_POLICY.to_owned())?;
        let actions: Vec<Value> = (0..n)
            .map(|i| json!({"id": format!("g{}.r{}.op", i / 10, i), "group": format!("g{}", i / 10)}))
            .collect();
        let groups: serde_json::Map<String, Value> = (0..n.div_ceil(10))
            .map(|g| {
                (
                    format!("g{g}"),
                    json!({"deny": format!("g{g}.r{}.op", g * 10 + 9),
                           "window": {"start_hour": 6, "end_hour": 22}}),
                )
            })
            .collect();
        let data = json!({"actions": actions, "groups": groups});
        engine.add_data(regorus::Value::from_json_str(&data.to_string())?)?;
        Ok(Self { engine })
    }

    /// Rego's answer: the `allowed` set for this input.
    fn answer(&mut self, q: &Question) -> anyhow::Result<Vec<String>> {
        self.engine.set_input(q.rego_input.clone());
        let v = self.engine.eval_rule("data.bench.allowed".to_owned())?;
        if v == regorus::Value::Undefined {
            return Ok(Vec::new());
        }
        v.as_set()?
            .iter()
            .map(|x| Ok(x.as_string()?.to_string()))
            .collect()
    }
}

/// Times `pass` (one pass over every question) up to `runs` times, repeating it inside a run
/// until the run lasts at least `min_run`; a slow engine gets fewer runs (never fewer than 3) so
/// that its timing stays within about `budget`. Returns microseconds per question for each run.
fn time_runs(
    runs: usize,
    min_run: Duration,
    budget: Duration,
    questions: usize,
    mut pass: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    // Calibrate: how many passes make a run of at least `min_run`.
    let t = Instant::now();
    pass()?;
    let one = t.elapsed().max(Duration::from_nanos(1));
    let reps = (min_run.as_secs_f64() / one.as_secs_f64()).ceil().max(1.0) as usize;
    let per_run = one.as_secs_f64() * reps as f64;
    let runs = runs.min(((budget.as_secs_f64() / per_run) as usize).max(3));
    let mut out = Vec::with_capacity(runs);
    // A calibration pass that already lasts `min_run` is a run of its own; a pass longer than
    // the whole budget (Cedar at 10,000 actions) is then the only run.
    if reps == 1 {
        out.push(one.as_secs_f64() * 1e6 / questions as f64);
        if one >= budget {
            return Ok(out);
        }
    }
    while out.len() < runs {
        let t = Instant::now();
        for _ in 0..reps {
            pass()?;
        }
        out.push(t.elapsed().as_secs_f64() * 1e6 / (reps * questions) as f64);
    }
    Ok(out)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("policy-compare: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--smoke` (CI, a debug build): every step once on a small atlas, figures meaningless.
    let smoke = std::env::args().any(|a| a == "--smoke");
    // (actions, benchmarked questions): Cedar's cost per resolve grows with actions x policies,
    // so the larger atlases get fewer (still distinct) questions.
    let plan: &[(usize, usize)] = if smoke {
        &[(10, 4)]
    } else if quick {
        &[(10, 64), (100, 32), (1000, 2)]
    } else {
        &[(10, 256), (100, 128), (1000, 8), (10_000, 1)]
    };
    let (runs, min_run, budget) = if smoke {
        (1, Duration::ZERO, Duration::from_secs(1))
    } else if quick {
        (5, Duration::from_millis(20), Duration::from_secs(3))
    } else {
        (11, Duration::from_millis(200), Duration::from_secs(30))
    };
    let mut results = Vec::new();
    for &(n, count) in plan {
        let qs = questions(count)?;
        let set = cra_atlas(n)?;
        let agents: Vec<String> = (1..=count).map(agent_name).collect();
        let cedar = CedarSide {
            policies: cedar_policies(n)?,
            entities: cedar_entities(n, &agents)?,
            actions: (0..n)
                .map(|i| {
                    let id = format!("g{}.r{}.op", i / 10, i);
                    let uid = EntityUid::from_str(&format!("Action::\"{id}\""))?;
                    Ok((id, uid))
                })
                .collect::<anyhow::Result<_>>()?,
            resource: EntityUid::from_str("Atlas::\"com.example.bench\"")?,
            authorizer: Authorizer::new(),
        };
        let mut rego = RegoSide::new(n)?;
        let ids = SequentialIds::new(1, 1);

        // Equivalence on every benchmarked question, before any timing.
        let mut allowed_total = 0usize;
        for (i, q) in qs.iter().enumerate() {
            let a: HashSet<String> = cra_answer(q, &set, &ids)?.into_iter().collect();
            let b: HashSet<String> = cedar.answer(q)?.into_iter().map(str::to_owned).collect();
            let c: HashSet<String> = rego.answer(q)?.into_iter().collect();
            for (other, name) in [(&b, "cedar"), (&c, "rego")] {
                if &a != other {
                    let mut only_cra: Vec<_> = a.difference(other).collect();
                    let mut only_other: Vec<_> = other.difference(&a).collect();
                    only_cra.sort();
                    only_other.sort();
                    bail!(
                        "decisions differ at {n} actions, question {i}: allowed only by cra {only_cra:?}, only by {name} {only_other:?}"
                    );
                }
            }
            allowed_total += a.len();
        }
        eprintln!(
            "policy-compare: {n} actions: {count} questions x {n} actions agree in cra, cedar and rego ({allowed_total} allowed, {} denied)",
            count * n - allowed_total
        );

        let cra_runs = time_runs(runs, min_run, budget, qs.len(), || {
            for q in &qs {
                black_box(
                    resolve(
                        &q.carp,
                        &set,
                        &CountersSnapshot::empty(),
                        q.now,
                        &ids,
                        &ResolveOptions::default(),
                    )
                    .map_err(|e| anyhow::anyhow!("cra resolve failed: {e}"))?,
                );
            }
            Ok(())
        })?;
        let cedar_runs = time_runs(runs, min_run, budget, qs.len(), || {
            for q in &qs {
                black_box(cedar.answer(q)?);
            }
            Ok(())
        })?;
        let rego_runs = time_runs(runs, min_run, budget, qs.len(), || {
            for q in &qs {
                black_box(rego.answer(q)?);
            }
            Ok(())
        })?;
        let c = summary(cra_runs);
        let d = summary(cedar_runs);
        let r = summary(rego_runs);
        eprintln!(
            "policy-compare: {n} actions: cra {:.2} us, cedar {:.1} us, rego {:.1} us per full resolve (median)",
            c["median"].as_f64().unwrap_or(f64::NAN),
            d["median"].as_f64().unwrap_or(f64::NAN),
            r["median"].as_f64().unwrap_or(f64::NAN)
        );
        results.push(json!({
            "actions": n,
            "policies": 2 + 2 * n.div_ceil(10),
            "questions": count,
            "decisions_checked": count * n,
            "decisions_agree": true,
            "unit": "us per resolve (all actions decided)",
            "cra": c,
            "cedar": d,
            "rego": r,
        }));
    }
    let doc = json!({
        "cedar_policy_version": "4",
        "regorus_version": "0.14",
        "mode": if smoke { "smoke" } else if quick { "quick" } else { "full" },
        "sizes": results,
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}
