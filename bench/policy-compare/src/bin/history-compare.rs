//! `history-compare`: conditions on history (issue 25's benchmark question) in cra-carp and in
//! cedar-policy, each given exactly the facts it needs.
//!
//! The atlas is `cra-store`'s history benchmark's (included from
//! `crates/cra-store/benches/common/history_atlas.rs`): 100 actions; the target's allow holds 20
//! history tests (5 `after`, 5 `bind`, 5 `count_within`, 5 `sum_within`), 90 others are allowed
//! outright, 9 are not allowed. The Cedar policy set says the same: one `permit` for the target
//! whose `when` reads 20 context members (10 booleans for the predicates, 5 counts and 5 totals,
//! the totals in millionths as `Long`), and one `permit` for the 90.
//!
//! Two questions, both engines' decisions compared before timing (a difference aborts the run):
//! * `resolve_100`: which of the 100 actions may the agent run (cra: one `resolve`, whose history
//!   is decided at execute; Cedar: one `is_authorized` per action, each with the 20-member
//!   context);
//! * `decide`: may this call of the target run, given the facts (cra: `execute::authorize`, its
//!   predicates answered from a set of the marks that exist, then its 10 charges checked against
//!   the counters' values; Cedar: the context built from the same values, one `is_authorized`).
//!   Reading those facts from a store is `cra-store`'s `history/decide` figure, not this one.
//!
//! Output: one JSON document on stdout, microseconds per question, min / median / max over runs.
//! `--quick` runs less; `--smoke` (CI, debug build) runs each question once.

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::str::FromStr;
use std::time::Duration;

use anyhow::bail;
use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request, RestrictedExpression,
};
use cra_carp::eval::{CountersSnapshot, ResolveOptions, resolve};
use cra_carp::execute::{Authorization, InForce, authorize};
use cra_carp::index::AtlasSet;
use cra_carp::store::{Charge, ChargeKind};
use cra_carp::validate::{CarpError, compile_schema, parse_request};
use cra_carp::{CarpRequest, Resolution};
use cra_wire::SequentialIds;
use serde_json::{Value, json};

#[path = "../../../../crates/cra-store/benches/common/history_atlas.rs"]
#[allow(dead_code, reason = "the criterion bench uses the rest")]
mod history_atlas;
use cra_bench_compare::{summary, time_runs};
use history_atlas::{NOW, TARGET, atlas, customer, request};

/// Each `count_within` limit's count and each `sum_within` limit's total (millionths) so far:
/// under every maximum, so the call fits.
const COUNTED: i64 = 900;
const SUMMED: i64 = 40_000_000;
/// The call's amount, 2.5, in millionths.
const AMOUNT: i64 = 2_500_000;

/// The facts of one decision: which predicates hold, and the limits' counters.
#[derive(Clone)]
struct Facts {
    /// The `after` and `bind` predicates that hold (test index 0..10).
    holding: HashSet<usize>,
}

impl Facts {
    fn all() -> Self {
        Facts {
            holding: (0..10).collect(),
        }
    }

    fn without(k: usize) -> Self {
        let mut f = Facts::all();
        f.holding.remove(&k);
        f
    }
}

struct CraSide {
    set: AtlasSet,
    resolve_request: CarpRequest,
    resolution: Resolution,
    call: CarpRequest,
    validator: jsonschema::Validator,
    /// Units counted per counter (`allow-history#<n>`), whatever the key: one customer asks.
    counters: HashMap<String, u64>,
    now: time::OffsetDateTime,
}

impl CraSide {
    fn new() -> anyhow::Result<Self> {
        let set = atlas();
        let now = cra_wire::clock::parse_rfc3339(NOW)?;
        let resolve_request = parse_request(&request(1, "resolve"))
            .map_err(|e| anyhow::anyhow!("resolve request: {e}"))?;
        let resolution = resolve(
            &resolve_request,
            &set,
            &CountersSnapshot::empty(),
            now,
            &SequentialIds::new(1, 1),
            &ResolveOptions::default(),
        )
        .map_err(|e| anyhow::anyhow!("cra resolve failed: {e}"))?;
        let mut exec = request(2, "execute");
        if let Some(o) = exec.as_object_mut() {
            o.remove("task");
        }
        exec["execution"] = json!({"resolution_id": resolution.resolution_id, "action_id": TARGET,
                                   "parameters": {"customer_id": customer(7), "amount": 2.5}});
        let call = parse_request(&exec).map_err(|e| anyhow::anyhow!("execute request: {e}"))?;
        let Some(action) = resolution
            .allowed_actions
            .iter()
            .find(|a| a.action_id.as_str() == TARGET)
        else {
            bail!("cra did not list the target {TARGET}");
        };
        let validator = compile_schema(TARGET, &action.parameters_schema)
            .map_err(|e| anyhow::anyhow!("schema: {e}"))?;
        let counters = (10..15)
            .map(|n| (format!("allow-history#{n}"), COUNTED as u64))
            .chain((15..20).map(|n| (format!("allow-history#{n}"), SUMMED as u64)))
            .collect();
        Ok(CraSide {
            set,
            resolve_request,
            resolution,
            call,
            validator,
            counters,
            now,
        })
    }

    fn resolve(&self) -> anyhow::Result<Resolution> {
        resolve(
            &self.resolve_request,
            &self.set,
            &CountersSnapshot::empty(),
            self.now,
            &SequentialIds::new(1, 1),
            &ResolveOptions::default(),
        )
        .map_err(|e| anyhow::anyhow!("cra resolve failed: {e}"))
    }

    /// Whether the call may run on `facts`: every predicate answered from them, then every
    /// charge checked against the counters, as the store's consume would.
    fn decide(&self, facts: &Facts) -> anyhow::Result<bool> {
        let Some(action) = self
            .resolution
            .allowed_actions
            .iter()
            .find(|a| a.action_id.as_str() == TARGET)
        else {
            bail!("the target is not allowed");
        };
        let mut marked = |counter: &str, _key: &str, _since: i64| -> Result<bool, CarpError> {
            let n = counter.rsplit_once('#').and_then(|(_, n)| n.parse().ok());
            Ok(n.is_some_and(|n: usize| facts.holding.contains(&n)))
        };
        let in_force = InForce {
            atlases: Some(&self.set),
            atlas: None,
        };
        let authorization = authorize(
            &self.call,
            &self.resolution,
            action,
            &self.validator,
            None,
            in_force,
            self.now,
            &mut marked,
        )
        .map_err(|e| anyhow::anyhow!("cra authorize failed: {e}"))?;
        match authorization {
            Authorization::Proceed { charges, .. } => Ok(charges.iter().all(|c| self.fits(c))),
            Authorization::Denied(_) => Ok(false),
            other => bail!("unexpected authorisation {other:?}"),
        }
    }

    fn fits(&self, c: &Charge) -> bool {
        let used = self.counters.get(&c.policy_id).copied().unwrap_or(0);
        match c.kind {
            ChargeKind::Budget { max_units, units } => used + units <= max_units,
            ref k => k
                .windowed()
                .is_some_and(|(max, units, _)| used + units <= max),
        }
    }
}

struct CedarSide {
    policies: PolicySet,
    entities: Entities,
    principal: EntityUid,
    resource: EntityUid,
    actions: Vec<(String, EntityUid)>,
    authorizer: Authorizer,
}

fn uid(kind: &str, id: &str) -> anyhow::Result<EntityUid> {
    Ok(EntityUid::from_str(&format!(
        "{kind}::{}",
        Value::String(id.to_owned())
    ))?)
}

/// The action ids of the atlas, in order (as `history_atlas::atlas` names them).
fn action_ids() -> Vec<String> {
    (0..100).map(|i| format!("g{}.r{i}.op", i / 10)).collect()
}

impl CedarSide {
    fn new() -> anyhow::Result<Self> {
        // The target's 20 tests: 10 predicates, 5 counts under their maximum after this call,
        // 5 totals under theirs with this call's amount.
        let mut tests: Vec<String> = (0..10).map(|k| format!("context.p{k}")).collect();
        for k in 0..5 {
            tests.push(format!("context.c{k} + 1 <= {}", 1_000_000i64 + k));
        }
        for k in 0..5 {
            tests.push(format!(
                "context.s{k} + context.amount <= {}",
                (1_000_000i64 + k) * 1_000_000
            ));
        }
        let rest: Vec<String> = action_ids()
            .into_iter()
            .filter(|a| !a.starts_with("g0."))
            .map(|a| format!("Action::{}", Value::String(a)))
            .collect();
        let src = format!(
            "permit(principal, action == Action::{}, resource) when {{ {} }};\n\
             permit(principal, action in [{}], resource);\n",
            Value::String(TARGET.to_owned()),
            tests.join(" && "),
            rest.join(", ")
        );
        let policies = PolicySet::from_str(&src)
            .map_err(|e| anyhow::anyhow!("cedar policies do not parse: {e}"))?;
        let actions = action_ids()
            .into_iter()
            .map(|a| uid("Action", &a).map(|u| (a, u)))
            .collect::<anyhow::Result<_>>()?;
        Ok(CedarSide {
            policies,
            entities: Entities::empty(),
            principal: uid("Agent", "agent-1")?,
            resource: uid("Session", "s")?,
            actions,
            authorizer: Authorizer::new(),
        })
    }

    /// The context of one question: exactly the facts the target's policy reads.
    fn context(facts: &Facts) -> anyhow::Result<Context> {
        let mut pairs = Vec::with_capacity(21);
        for k in 0..10 {
            let holds = facts.holding.contains(&k);
            pairs.push((format!("p{k}"), RestrictedExpression::new_bool(holds)));
        }
        for k in 0..5 {
            pairs.push((format!("c{k}"), RestrictedExpression::new_long(COUNTED)));
            pairs.push((format!("s{k}"), RestrictedExpression::new_long(SUMMED)));
        }
        pairs.push(("amount".to_owned(), RestrictedExpression::new_long(AMOUNT)));
        Ok(Context::from_pairs(pairs)?)
    }

    fn allows(&self, action: &EntityUid, context: Context) -> anyhow::Result<bool> {
        let req = Request::new(
            self.principal.clone(),
            action.clone(),
            self.resource.clone(),
            context,
            None,
        )?;
        let resp = self
            .authorizer
            .is_authorized(&req, &self.policies, &self.entities);
        if let Some(e) = resp.diagnostics().errors().next() {
            bail!("cedar evaluation error: {e}");
        }
        Ok(resp.decision() == Decision::Allow)
    }

    fn resolve(&self, facts: &Facts) -> anyhow::Result<Vec<&str>> {
        let context = Self::context(facts)?;
        let mut allowed = Vec::new();
        for (id, action) in &self.actions {
            if self.allows(action, context.clone())? {
                allowed.push(id.as_str());
            }
        }
        Ok(allowed)
    }

    fn decide(&self, facts: &Facts) -> anyhow::Result<bool> {
        let target = &self.actions[0].1;
        self.allows(target, Self::context(facts)?)
    }
}

/// Both engines answer the same: the 91 actions, the call with every fact, and the call without
/// each predicate in turn.
fn check_agreement(cra: &CraSide, cedar: &CedarSide) -> anyhow::Result<usize> {
    let resolution = cra.resolve()?;
    let a: Vec<&str> = resolution
        .allowed_actions
        .iter()
        .map(|a| a.action_id.as_str())
        .collect();
    let b = cedar.resolve(&Facts::all())?;
    if a != b {
        bail!("the engines list other actions: cra {a:?}, cedar {b:?}");
    }
    let mut checked = a.len();
    for facts in std::iter::once(Facts::all()).chain((0..10).map(Facts::without)) {
        let (x, y) = (cra.decide(&facts)?, cedar.decide(&facts)?);
        if x != y {
            bail!(
                "the engines decide the call otherwise (missing {:?}): cra {x}, cedar {y}",
                (0..10)
                    .filter(|k| !facts.holding.contains(k))
                    .collect::<Vec<_>>()
            );
        }
        checked += 1;
    }
    if !cra.decide(&Facts::all())? {
        bail!("the call with every fact was refused: the question is not the benchmark's");
    }
    Ok(checked)
}

fn run() -> anyhow::Result<Value> {
    let quick = std::env::args().any(|a| a == "--quick");
    let smoke = std::env::args().any(|a| a == "--smoke");
    let cra = CraSide::new()?;
    let cedar = CedarSide::new()?;
    let checked = check_agreement(&cra, &cedar)?;
    eprintln!("history-compare: {checked} decisions agree in cra and cedar");
    let (runs, min_run) = match (smoke, quick) {
        (true, _) => (1, Duration::ZERO),
        (false, true) => (5, Duration::from_millis(100)),
        (false, false) => (11, Duration::from_millis(300)),
    };
    let facts = Facts::all();
    let mut figures = serde_json::Map::new();
    for question in ["resolve_100", "decide"] {
        let cra_runs = time_runs(runs, min_run, || {
            match question {
                "resolve_100" => drop(black_box(cra.resolve()?)),
                _ => drop(black_box(cra.decide(&facts)?)),
            }
            Ok(())
        })?;
        let cedar_runs = time_runs(runs, min_run, || {
            match question {
                "resolve_100" => drop(black_box(cedar.resolve(&facts)?)),
                _ => drop(black_box(cedar.decide(&facts)?)),
            }
            Ok(())
        })?;
        let (c, d) = (summary(cra_runs), summary(cedar_runs));
        eprintln!(
            "history-compare: {question}: cra {:.2} us, cedar {:.2} us (median)",
            c["median"].as_f64().unwrap_or(0.0),
            d["median"].as_f64().unwrap_or(0.0)
        );
        figures.insert(question.to_owned(), json!({"cra": c, "cedar": d}));
    }
    Ok(json!({
        "cedar_policy_version": "4",
        "actions": 100,
        "history_tests": 20,
        "decisions_checked": checked,
        "questions": figures,
    }))
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(v) => {
            println!("{v}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("history-compare: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
