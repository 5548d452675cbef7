//! The CARP engine: the protocol's operations over a store, with no TRACE and no transport:
//! sessions, resolve (and validate, its dry run), execute up to the point where an executor
//! runs, and approvals. The runtime's governance core (`cra_runtime::service::carp`) calls it
//! and records what it decides; the conformance runner's in-process target and the fuzz targets
//! call it directly. Every §3.6 rule is checked here in a fixed order, each with its own token; the rules themselves live in [`crate::validate`] and
//! [`crate::execute`], evaluation in [`crate::eval`]. Time and ids are injected.

use std::collections::BTreeMap;
use std::sync::Arc;

use cra_wire::clock::format_timestamp;
use cra_wire::{Clock, IdGenerator, Token};
use serde_json::{Map, Value};

use crate::cache::{ResolutionCache, cache_key, same_outcome};
use crate::eval::{
    ActionOrigin, CountersSnapshot, ExplainLevel, ResolveOptions, resolve_with_origins,
    seconds_to_us, unix_micros,
};
use crate::execute::{Authorization, authorize, refusal_error};
use crate::history::HistoryRead;
use crate::index::AtlasSet;
use crate::store::{
    ApprovalCall, ApprovalDecision, ApprovalRecord, ApprovalStatus, CarpStore, CarpStoreError,
    ClaimOutcome, ConsumeOutcome, ExecutionLease, ExecutionRecord, IdempotentCall, ResolveRecord,
    SessionRecord, StoredResolution,
};
use crate::types::{
    AllowedAction, CARP_VERSION, CarpRequest, ExecuteError, ExecuteResponse, ExecuteStatus,
    Operation, Resolution,
};
use crate::validate::{
    CarpError, DEFAULT_MAX_SKEW_SECONDS, check_action_allowed, check_after_resolution,
    check_clock_skew, check_request_id_new, check_resolution, check_session, compile_schema,
    execution_of,
};

/// Runtime knobs.
#[derive(Debug, Clone)]
pub struct CarpConfig {
    /// `ttl_seconds` of resolutions.
    pub ttl_seconds: u64,
    /// Allowed clock skew of request timestamps.
    pub max_skew_seconds: i64,
    /// The most candidate actions (allowed and denied) one resolve or validate may weigh: each
    /// is recorded (`policy.evaluated`, the resolution), so this bounds what one request writes.
    /// `None`: no bound.
    pub max_candidates: Option<usize>,
}

impl Default for CarpConfig {
    fn default() -> Self {
        Self {
            ttl_seconds: crate::eval::DEFAULT_TTL_SECONDS,
            max_skew_seconds: DEFAULT_MAX_SKEW_SECONDS,
            max_candidates: None,
        }
    }
}

/// Refuses a resolution weighing more than `max` candidate actions (`CarpConfig::max_candidates`)
/// before any of it is recorded: the request must name fewer capabilities or atlases.
fn check_candidates(resolution: &Resolution, max: Option<usize>) -> Result<(), CarpError> {
    let weighed = resolution.allowed_actions.len() + resolution.denied_actions.len();
    match max {
        Some(max) if weighed > max => {
            let mut refusal = CarpError::new(
                Token::InvalidRequest,
                format!(
                    "this resolve weighs {weighed} candidate actions; this server records at \
                     most {max} in one resolve (quotas.max_resolve_actions): name the \
                     task's required_capabilities, or fewer atlas_ids"
                ),
            );
            refusal.errors.push(cra_wire::FieldError::new(
                "/task/required_capabilities",
                format!("narrow the request to at most {max} actions"),
            ));
            Err(refusal)
        }
        _ => Ok(()),
    }
}

/// The member of a rate-limit refusal's `error.details` that says how many seconds to wait;
/// the HTTP layer copies it into `Retry-After`.
pub const RETRY_AFTER_DETAIL: &str = "retry_after_seconds";

/// The `details` of a refused execution's error: its field errors and the policy that refused,
/// each when there is one.
fn refusal_details(e: &CarpError) -> Option<Value> {
    let mut details = Map::new();
    if !e.errors.is_empty() {
        details.insert("errors".into(), serde_json::to_value(&e.errors).ok()?);
    }
    if let Some(policy_id) = &e.policy_id {
        details.insert("policy_id".into(), Value::String(policy_id.clone()));
    }
    (!details.is_empty()).then_some(Value::Object(details))
}

/// The execute response (§3.5) that refuses `request` with `refusal` under `execution_id`:
/// status `pending_approval` for `approval_pending`, else `denied`, the refusal's token, message
/// and details (its field errors, the refusing policy) in `error`. A refusal is still an execute
/// response; only its transport status differs.
pub fn refusal_response(
    request: &CarpRequest,
    execution_id: String,
    trace_id: String,
    timestamp: String,
    refusal: Option<&CarpError>,
) -> ExecuteResponse {
    let status = match refusal {
        Some(e) if e.token == Token::ApprovalPending => ExecuteStatus::PendingApproval,
        _ => ExecuteStatus::Denied,
    };
    ExecuteResponse {
        carp_version: CARP_VERSION.to_owned(),
        execution_id,
        request_id: request.request_id.clone(),
        resolution_id: request
            .execution
            .as_ref()
            .map(|x| x.resolution_id.clone())
            .unwrap_or_default(),
        timestamp,
        status,
        result: None,
        error: refusal.map(|e| ExecuteError {
            code: e.token.as_str().to_owned(),
            message: e.message.clone(),
            details: refusal_details(e),
        }),
        trace_id,
        extra: Map::new(),
    }
}

/// What a request's id must be for the request to be admitted (§3.6 rule 1).
#[derive(Debug, Clone, Copy)]
enum RequestIdRule {
    /// Unused in the session; used up by this check.
    Record,
    /// Unused in the session; the caller records it (with the request's events).
    Unused,
    /// Already used by this very request (an execute decided again).
    Own,
}

/// A repeated idempotency key: the first response when `call` is the call the key was first
/// used for (or the first record predates keeping calls), else 409 `idempotency_key_reused`:
/// answering another call's response would tell the agent its call ran when it did not.
fn repeat_of(
    first: ExecutionRecord,
    call: &IdempotentCall,
    key: &str,
) -> Result<ExecuteOutcome, CarpError> {
    match &first.call {
        Some(ran) if ran != call => {
            let what = if ran.action_id == call.action_id {
                "the same action with other parameters".to_owned()
            } else {
                format!("action `{}`, not `{}`", ran.action_id, call.action_id)
            };
            let message = format!(
                "idempotency key `{key}` was first used by execution {} for another call ({what}); a key names one call: send this call with a new key",
                first.execution_id
            );
            let mut e = CarpError::new(Token::IdempotencyKeyReused, message.clone());
            e.errors = vec![cra_wire::FieldError::new(
                "/execution/idempotency_key",
                message,
            )];
            Err(e)
        }
        _ => Ok(ExecuteOutcome::Answered(first.response)),
    }
}

fn store_err(e: CarpStoreError) -> CarpError {
    CarpError::new(Token::Unavailable, e.to_string())
}

/// An execution cleared to run: run the executor, then call [`Carp::finish_execution`] (or
/// record [`Carp::execution_record`] with its events).
#[derive(Debug, Clone)]
pub struct ClearedExecution {
    /// The new execution's id.
    pub execution_id: String,
    /// The action.
    pub action: AllowedAction,
    /// Its parameters.
    pub parameters: Value,
    /// The resolution's trace id.
    pub trace_id: String,
    request_id: String,
    resolution_id: String,
    session_id: String,
    agent_id: String,
    idempotency_key: Option<String>,
    /// The call (action and parameters digest), digested once for the lease, the record and a
    /// repeated key.
    call: IdempotentCall,
}

/// What an execute request led to.
#[derive(Debug, Clone)]
pub enum ExecuteOutcome {
    /// Cleared: counters consumed; the caller runs the executor.
    Run(ClearedExecution),
    /// Answered without running anything (denied, pending approval, or the first response of a
    /// repeated idempotency key).
    Answered(ExecuteResponse),
    /// A gated call asked for its approval: the caller opens `approval` (with its events:
    /// [`crate::store::StateChange::Open`], or [`Carp::open_approval`]) and answers `response`
    /// (`pending_approval`). When the approval's id turns out taken (a concurrent execute under
    /// the same resolution opened it first), the caller executes the request again.
    OpenApproval {
        /// The pending answer; its `execution_id` is the approval's `call.execution_id`.
        response: ExecuteResponse,
        /// The approval to open, bound to this call.
        approval: Box<ApprovalRecord>,
    },
}

/// An execute decided ([`Carp::decide_execute`]): its outcome, and what shadow mode says of it.
#[derive(Debug)]
pub struct ExecuteDecided {
    /// What to do.
    pub outcome: ExecuteOutcome,
    /// What the action's `log_only` policies would have decided for the call, when that differs
    /// from what was decided ([`crate::shadow::at_execute`]); recorded in `action.requested`.
    pub shadow: Option<crate::explain::ShadowExplain>,
    /// What the decision read of history (marks asked for, counters its charges found);
    /// recorded in `action.requested` when not empty.
    pub history: HistoryRead,
}

impl From<ExecuteOutcome> for ExecuteDecided {
    fn from(outcome: ExecuteOutcome) -> Self {
        ExecuteDecided {
            outcome,
            shadow: None,
            history: HistoryRead::default(),
        }
    }
}

/// A resolve checked and evaluated but not yet recorded ([`Carp::prepare_resolve`]).
#[derive(Debug, Clone)]
pub struct PreparedResolve {
    /// The answer (with `explain` when asked for).
    pub resolution: Resolution,
    /// The counters the evaluation read.
    pub counters: CountersSnapshot,
    /// What to record; `None` for a validate request, which records nothing.
    pub record: Option<ResolveRecord>,
    /// Whether `resolution` is an earlier resolution answered again ([`crate::cache`]): its
    /// record holds the request id only, and it is recorded as `carp.resolution.cached`.
    pub cache_hit: bool,
}

/// The CARP engine over a store, an atlas set, a clock and an id generator.
#[derive(Debug, Clone)]
pub struct Carp {
    store: Arc<dyn CarpStore>,
    atlases: Arc<AtlasSet>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    config: CarpConfig,
    owner: String,
    session: Option<SessionRecord>,
    cache: Option<Arc<ResolutionCache>>,
}

/// The lease owner of a [`Carp`] not given one ([`Carp::with_owner`]).
pub const DEFAULT_LEASE_OWNER: &str = "local";

impl Carp {
    /// Wires the parts together.
    pub fn new(
        store: Arc<dyn CarpStore>,
        atlases: Arc<AtlasSet>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
        config: CarpConfig,
    ) -> Self {
        Self {
            store,
            atlases,
            clock,
            ids,
            config,
            owner: DEFAULT_LEASE_OWNER.to_owned(),
            session: None,
            cache: None,
        }
    }

    /// The same, answering identical resolves from `cache` ([`crate::cache`]).
    #[must_use]
    pub fn with_cache(mut self, cache: Arc<ResolutionCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The same, with the requester's session as its caller already read it: the checks of a
    /// request in that session use this record instead of reading the store again, so one
    /// request is judged against one reading of its session.
    #[must_use]
    pub fn with_session(mut self, session: SessionRecord) -> Self {
        self.session = Some(session);
        self
    }

    /// The same, with executions leased to server instance `owner` ([`ExecutionLease::owner`]).
    #[must_use]
    pub fn with_owner(mut self, owner: &str) -> Self {
        owner.clone_into(&mut self.owner);
        self
    }

    /// The atlas set in force.
    pub fn atlases(&self) -> &AtlasSet {
        &self.atlases
    }

    /// Replaces the atlas set (hot reload); resolutions already made keep their content.
    pub fn set_atlases(&mut self, atlases: Arc<AtlasSet>) {
        self.atlases = atlases;
    }

    /// Opens a session for `agent_id` (with a given id, or a new UUIDv7).
    pub fn open_session(
        &self,
        agent_id: &str,
        session_id: Option<&str>,
        parent_session_id: Option<&str>,
    ) -> Result<SessionRecord, CarpError> {
        let rec = SessionRecord {
            session_id: session_id.map_or_else(|| self.ids.new_id(), str::to_owned),
            agent_id: agent_id.to_owned(),
            parent_session_id: parent_session_id.map(str::to_owned),
            created_at: format_timestamp(self.clock.now()),
            ended_at: None,
        };
        self.store.create_session(&rec).map_err(|e| match e {
            CarpStoreError::AlreadyExists { .. } => {
                CarpError::new(Token::AlreadyExists, e.to_string())
            }
            other => store_err(other),
        })?;
        Ok(rec)
    }

    /// Ends a session.
    pub fn end_session(&self, session_id: &str) -> Result<SessionRecord, CarpError> {
        self.store
            .end_session(session_id, &format_timestamp(self.clock.now()))
            .map_err(|e| match e {
                CarpStoreError::NotFound { .. } => {
                    CarpError::new(Token::SessionNotFound, e.to_string())
                }
                other => store_err(other),
            })
    }

    /// Clock skew, session and request id checks, the id by `id`: recorded as used now; only
    /// checked, the caller recording it with its result (a resolve:
    /// [`CarpStore::record_resolve`], one write instead of two); or known to be this request's.
    fn common_checks(
        &self,
        request: &CarpRequest,
        id: RequestIdRule,
    ) -> Result<time::OffsetDateTime, CarpError> {
        let now = self.clock.now();
        check_clock_skew(request, now, self.config.max_skew_seconds)?;
        let read;
        let session = match &self.session {
            Some(s) if s.session_id == request.requester.session_id => Some(s),
            _ => {
                read = self
                    .store
                    .get_session(&request.requester.session_id)
                    .map_err(store_err)?;
                read.as_ref()
            }
        };
        check_session(request, session)?;
        let (session_id, request_id) = (&request.requester.session_id, &request.request_id);
        let fresh = match id {
            RequestIdRule::Record => self.store.insert_request_id(session_id, request_id),
            RequestIdRule::Unused => self
                .store
                .has_request_id(session_id, request_id)
                .map(|seen| !seen),
            RequestIdRule::Own => Ok(true),
        }
        .map_err(store_err)?;
        check_request_id_new(request, fresh)?;
        Ok(now)
    }

    /// Resolves (operation `resolve`) and stores the resolution (a resolve opens no approval), or evaluates
    /// without storing anything (operation `validate`). `explain` attaches the explanation to the
    /// answer (never to the stored copy).
    pub fn resolve(
        &self,
        request: &CarpRequest,
        explain: bool,
        trace_id: Option<String>,
    ) -> Result<Resolution, CarpError> {
        self.resolve_recorded(request, explain, trace_id)
            .map(|(res, _)| res)
    }

    /// As [`Carp::resolve`], also returning the counters the evaluation read, which a trace
    /// records with the request so that replay evaluates against the same counts.
    pub fn resolve_recorded(
        &self,
        request: &CarpRequest,
        explain: bool,
        trace_id: Option<String>,
    ) -> Result<(Resolution, CountersSnapshot), CarpError> {
        let prepared = self.prepare_resolve(request, ExplainLevel::full_if(explain), trace_id)?;
        if let Some(record) = &prepared.record {
            let fresh = record.record_in(self.store.as_ref()).map_err(store_err)?;
            // A duplicate that raced past the check: refused, and nothing was written.
            check_request_id_new(request, fresh)?;
        }
        Ok((prepared.resolution, prepared.counters))
    }

    /// Checks and evaluates a resolve (or validate) request without writing anything: the
    /// caller records [`PreparedResolve::record`] itself, with [`CarpStore::record_resolve`] or
    /// together with the resolve's trace events ([`crate::store::StateLog`]), and must refuse
    /// the request as a duplicate when that finds the request id already used.
    pub fn prepare_resolve(
        &self,
        request: &CarpRequest,
        explain: ExplainLevel,
        trace_id: Option<String>,
    ) -> Result<PreparedResolve, CarpError> {
        if request.operation == Operation::Execute {
            return Err(CarpError::new(
                Token::InvalidRequest,
                "this is an execute request; send it to execute",
            ));
        }
        let id = if request.operation == Operation::Validate {
            RequestIdRule::Record
        } else {
            RequestIdRule::Unused
        };
        let now = self.common_checks(request, id)?;
        let counters = CountersSnapshot::load(self.store.as_ref(), &self.atlases, request, now)
            .map_err(store_err)?;
        let options = ResolveOptions {
            ttl_seconds: self.config.ttl_seconds,
            explain,
            trace_id,
        };
        let (res, origins) = resolve_with_origins(
            request,
            &self.atlases,
            &counters,
            now,
            self.ids.as_ref(),
            &options,
        )
        .map_err(|e| CarpError::new(e.token(), e.to_string()))?;
        check_candidates(&res, self.config.max_candidates)?;
        if request.operation == Operation::Validate {
            return Ok(PreparedResolve {
                resolution: res,
                counters,
                record: None,
                cache_hit: false,
            });
        }
        let cache = self.cache.as_ref().map(|c| {
            let key = cache_key(request, self.atlases.digests(), &counters);
            (c, key)
        });
        if let Some((c, key)) = &cache
            && let Some(earlier) = self.cached(c, key, request, &res, now)?
        {
            return Ok(PreparedResolve {
                resolution: earlier,
                counters,
                record: Some(ResolveRecord {
                    session_id: request.requester.session_id.clone(),
                    request_id: request.request_id.clone(),
                    resolution: None,
                }),
                cache_hit: true,
            });
        }
        let expires_at_us = unix_micros(now).saturating_add(seconds_to_us(self.config.ttl_seconds));
        let stored = StoredResolution::stored_form(&res);
        if let Some((c, key)) = cache {
            let id = res.resolution_id.clone();
            c.insert(key, id, expires_at_us, unix_micros(now));
        }
        let atlas_digests = self.offering_digests(&origins);
        let record = ResolveRecord {
            session_id: request.requester.session_id.clone(),
            request_id: request.request_id.clone(),
            resolution: Some(StoredResolution {
                resolution: stored,
                session_id: request.requester.session_id.clone(),
                agent_id: request.requester.agent_id.clone(),
                expires_at_us,
                origins: res
                    .allowed_actions
                    .iter()
                    .zip(origins)
                    .map(|(a, o)| (a.action_id.to_string(), o))
                    .collect(),
                atlas_digests,
            }),
        };
        Ok(PreparedResolve {
            resolution: res,
            counters,
            record: Some(record),
            cache_hit: false,
        })
    }

    /// The earlier resolution that answers `request` again, if one stands ([`crate::cache`]):
    /// cached under `key`, stored in the requester's session for its agent, unexpired at `now`,
    /// its approval (if any) not yet opened by an execute (an opened one is bound to its call,
    /// so a new resolve must bring a new approval id), and deciding what `fresh` decides. It is answered with
    /// `fresh`'s context blocks (the stored form keeps none; the request and atlases, hence the
    /// blocks, are the same) and `fresh`'s explanation.
    fn cached(
        &self,
        cache: &ResolutionCache,
        key: &str,
        request: &CarpRequest,
        fresh: &Resolution,
        now: time::OffsetDateTime,
    ) -> Result<Option<Resolution>, CarpError> {
        let now_us = unix_micros(now);
        let Some(id) = cache.get(key, now_us) else {
            return Ok(None);
        };
        let Some(stored) = self.store.get_resolution(&id).map_err(store_err)? else {
            return Ok(None);
        };
        let stands = stored.session_id == request.requester.session_id
            && stored.agent_id == request.requester.agent_id
            && stored.expires_at_us > now_us;
        if !stands || !same_outcome(fresh, &stored) {
            return Ok(None);
        }
        if let Some(approval_id) = &stored.resolution.decision.approval_id {
            let opened = self.store.get_approval(approval_id).map_err(store_err)?;
            if opened.is_some() {
                return Ok(None);
            }
        }
        let mut answer = stored.resolution;
        answer.context_blocks.clone_from(&fresh.context_blocks);
        answer.explain.clone_from(&fresh.explain);
        Ok(Some(answer))
    }

    fn answer(
        &self,
        request: &CarpRequest,
        resolution_id: &str,
        trace_id: &str,
        status: ExecuteStatus,
        error: Option<&CarpError>,
    ) -> ExecuteResponse {
        let mut response = refusal_response(
            request,
            self.ids.new_id(),
            trace_id.to_owned(),
            format_timestamp(self.clock.now()),
            error,
        );
        response.resolution_id = resolution_id.to_owned();
        response.status = status;
        response
    }

    /// The execute response refusing `request` with `refusal`, as [`Carp::execute`]'s `Err`
    /// would be answered: status `denied` (`pending_approval` for `approval_pending`), a fresh
    /// execution id and trace id, this engine's clock.
    pub fn refused(&self, request: &CarpRequest, refusal: &CarpError) -> ExecuteResponse {
        refusal_response(
            request,
            self.ids.new_id(),
            self.ids.new_id(),
            format_timestamp(self.clock.now()),
            Some(refusal),
        )
    }

    /// Runs every check of an execute request and, when it may run, consumes its rate-limit and
    /// budget charges. Malformed or rule-breaking requests are `Err` (with their token); denials
    /// by a policy (limit exhausted, approval rejected, outside a window) and pending approvals
    /// are answered as responses with status `denied` / `pending_approval`.
    pub fn execute(&self, request: &CarpRequest) -> Result<ExecuteOutcome, CarpError> {
        self.decide_execute(request, false).map(|d| d.outcome)
    }

    /// [`Carp::execute`] for a request whose id the first decision already used: a decision
    /// made again after its [`ExecuteOutcome::OpenApproval`] found the approval opened first by
    /// another execute (`specs/carp.md`, "Approvals bound to the call").
    pub fn execute_again(&self, request: &CarpRequest) -> Result<ExecuteOutcome, CarpError> {
        self.decide_execute(request, true).map(|d| d.outcome)
    }

    /// [`Carp::execute`] (or, `again`, [`Carp::execute_again`]) with what the action's
    /// `log_only` policies would have decided for the call, when that differs
    /// ([`crate::shadow`]): for callers that record it.
    pub fn decide_execute(
        &self,
        request: &CarpRequest,
        again: bool,
    ) -> Result<ExecuteDecided, CarpError> {
        let rule = if again {
            RequestIdRule::Own
        } else {
            RequestIdRule::Record
        };
        self.execute_under(request, rule)
    }

    fn execute_under(
        &self,
        request: &CarpRequest,
        id: RequestIdRule,
    ) -> Result<ExecuteDecided, CarpError> {
        let exec = execution_of(request)?;
        let now = self.common_checks(request, id)?;
        let stored = self
            .store
            .get_resolution(&exec.resolution_id)
            .map_err(store_err)?;
        // Before the key's first answer: a key lives no longer than its resolution.
        let checked = check_resolution(request, stored.as_ref(), unix_micros(now))?;
        check_after_resolution(&checked.resolution, now, self.config.max_skew_seconds)?;
        if let Some(key) = &exec.idempotency_key
            && let Some(first) = self
                .store
                .get_execution_by_key(&request.requester.session_id, key)
                .map_err(store_err)?
        {
            let call = IdempotentCall::of(&exec.action_id, &exec.parameters);
            return Ok(repeat_of(first, &call, key)?.into());
        }
        let resolution = &checked.resolution;
        let action = check_action_allowed(request, resolution)?;
        let compiled;
        let validator = match self.atlases.validator_of(action) {
            Some(v) => v,
            None => {
                compiled = compile_schema(&action.action_id, &action.parameters_schema)?;
                &compiled
            }
        };
        let approval = match &resolution.decision.approval_id {
            Some(id) if action.requires_confirmation => {
                self.store.get_approval(id).map_err(store_err)?
            }
            _ => None,
        };
        let atlas = self.atlas_of(checked, &action.action_id);
        let now_us = unix_micros(now);
        let mut history = HistoryRead::default();
        let (authorization, shadow) = {
            // One reader for all of this call's history predicates, opened at the first one
            // and closed before anything is written. Every answer is kept for the record.
            let mut reader: Option<Box<dyn crate::store::MarkReader + '_>> = None;
            let read = &mut history;
            let mut marked = |counter: &str, key: &str, since_us: i64| {
                let r = match &mut reader {
                    Some(r) => r,
                    None => reader.insert(self.store.mark_reader().map_err(store_err)?),
                };
                let found = r
                    .has_event(counter, key, since_us, now_us)
                    .map_err(store_err)?;
                read.mark(counter, key, since_us, now_us, found);
                Ok(found)
            };
            let mut authorization = authorize(
                request,
                resolution,
                action,
                validator,
                approval.as_ref(),
                crate::execute::InForce {
                    atlases: Some(&self.atlases),
                    atlas,
                },
                now,
                &mut marked,
            )?;
            let shadow = match checked.origins.get(action.action_id.as_str()) {
                Some(origin) if let Some(plan) = &origin.shadow => {
                    let call = crate::execute::Call {
                        action_id: &action.action_id,
                        parameters: &exec.parameters,
                        ids: (&request.requester.agent_id, &request.requester.session_id),
                        now_us,
                    };
                    let loaded = self.atlases.get(&origin.atlas_id);
                    let mut fits = |c: &crate::store::Charge| self.fits_now(c, now_us);
                    // Shadow mode never changes an answer: a plan that cannot be walked (or a
                    // counter that cannot be read for it) records no shadow, and the call is
                    // decided as enforced.
                    crate::shadow::at_execute(plan, loaded, call, &mut marked, &mut fits)
                        .unwrap_or_default()
                }
                _ => crate::shadow::ShadowDecision::default(),
            };
            if let Authorization::Proceed { charges, .. } = &mut authorization {
                charges.extend(shadow.counted);
            }
            (authorization, shadow.disagreement)
        };
        if matches!(
            authorization,
            Authorization::Proceed { .. } | Authorization::OpenApproval { .. }
        ) {
            check_in_force(checked, &action.action_id, atlas)?;
        }
        let outcome = self.authorized(
            request,
            authorization,
            checked,
            (action, atlas),
            now,
            exec,
            &mut history,
        )?;
        Ok(ExecuteDecided {
            outcome,
            shadow,
            history,
        })
    }

    /// What an execute's authorisation leads to: the approval to open, a pending or denied
    /// answer, or the claim and charges of a call that may run.
    #[expect(
        clippy::too_many_arguments,
        reason = "one execute's checked inputs, passed on from execute_under"
    )]
    fn authorized(
        &self,
        request: &CarpRequest,
        authorization: Authorization,
        checked: &StoredResolution,
        (action, atlas): (&AllowedAction, Option<(&str, &str)>),
        now: time::OffsetDateTime,
        exec: &crate::types::Execution,
        history: &mut HistoryRead,
    ) -> Result<ExecuteOutcome, CarpError> {
        let resolution = &checked.resolution;
        let rid = resolution.resolution_id.clone();
        let tid = resolution.trace_id.clone();
        match authorization {
            Authorization::OpenApproval {
                approval_id,
                parameters_hash,
            } => {
                let e = CarpError::new(
                    Token::ApprovalPending,
                    format!(
                        "approval {approval_id} is asked for this call; retry once it is granted"
                    ),
                );
                let response = self.answer(
                    request,
                    &rid,
                    &tid,
                    ExecuteStatus::PendingApproval,
                    Some(&e),
                );
                let Some((atlas_id, atlas_digest)) = atlas else {
                    return Err(CarpError::new(
                        Token::Unavailable,
                        format!(
                            "the atlas that offered {} is no longer loaded; resolve again",
                            action.action_id
                        ),
                    ));
                };
                let approval = ApprovalRecord {
                    approval_id,
                    resolution_id: rid,
                    session_id: request.requester.session_id.clone(),
                    agent_id: request.requester.agent_id.clone(),
                    actions: vec![action.action_id.to_string()],
                    created_at: format_timestamp(now),
                    expires_at_us: checked.expires_at_us,
                    status: ApprovalStatus::Pending,
                    decided_by: None,
                    decided_at: None,
                    note: None,
                    call: Some(ApprovalCall {
                        execution_id: response.execution_id.clone(),
                        action_id: action.action_id.to_string(),
                        parameters_hash,
                        atlas_id: atlas_id.to_owned(),
                        atlas_digest: atlas_digest.to_owned(),
                    }),
                };
                Ok(ExecuteOutcome::OpenApproval {
                    response,
                    approval: Box::new(approval),
                })
            }
            Authorization::PendingApproval { approval_id } => {
                let e = CarpError::new(
                    Token::ApprovalPending,
                    format!("approval {approval_id} is still pending; retry once it is granted"),
                );
                Ok(ExecuteOutcome::Answered(self.answer(
                    request,
                    &rid,
                    &tid,
                    ExecuteStatus::PendingApproval,
                    Some(&e),
                )))
            }
            Authorization::Denied(e) => Ok(ExecuteOutcome::Answered(self.answer(
                request,
                &rid,
                &tid,
                ExecuteStatus::Denied,
                Some(&e),
            ))),
            Authorization::Proceed { action, charges } => {
                let run = ClearedExecution {
                    execution_id: self.ids.new_id(),
                    parameters: exec.parameters.clone(),
                    trace_id: tid,
                    request_id: request.request_id.clone(),
                    resolution_id: rid,
                    session_id: request.requester.session_id.clone(),
                    agent_id: request.requester.agent_id.clone(),
                    idempotency_key: exec.idempotency_key.clone(),
                    call: IdempotentCall::of(&action.action_id, &exec.parameters),
                    action,
                };
                self.claim_and_consume(request, run, &charges, history)
            }
        }
    }

    /// Whether `charge` would fit at `now_us` on the store's counters, read without taking it
    /// (a shadow limit's check, [`crate::shadow`]).
    fn fits_now(&self, charge: &crate::store::Charge, now_us: i64) -> Result<bool, CarpError> {
        let (max, need) = charge.kind.cap_and_units();
        let used = match charge.kind.windowed() {
            Some((_, _, window_seconds)) => {
                let since = now_us.saturating_sub(seconds_to_us(window_seconds));
                self.store
                    .rate_count(&charge.policy_id, &charge.scope_key, since, now_us)
            }
            None => self
                .store
                .budget_spent(&charge.policy_id, &charge.scope_key),
        }
        .map_err(store_err)?;
        Ok(used.saturating_add(need) <= max)
    }

    /// Claims the execution's lease (and idempotency key) before anything runs, then consumes
    /// its charges at the store's instant; a refused charge releases the claim again.
    fn claim_and_consume(
        &self,
        request: &CarpRequest,
        run: ClearedExecution,
        charges: &[crate::store::Charge],
        history: &mut HistoryRead,
    ) -> Result<ExecuteOutcome, CarpError> {
        let (claim, consumed) = self
            .store
            .claim_and_consume_now(&self.lease(request, &run), charges, self.clock.as_ref())
            .map_err(store_err)?;
        if let Some((outcome, _)) = &consumed {
            history.consumed(charges, outcome);
        }
        match claim {
            ClaimOutcome::Claimed => {}
            ClaimOutcome::Finished(first) => {
                let key = run.idempotency_key.as_deref().unwrap_or_default();
                return repeat_of(*first, &run.call, key);
            }
            ClaimOutcome::InFlight { execution_id } => {
                return Err(CarpError::new(
                    Token::ExecutionInProgress,
                    format!(
                        "execution {execution_id} with this idempotency key is still running; retry with the same key to get its outcome"
                    ),
                ));
            }
        }
        let Some(e) = consumed.as_ref().and_then(|(c, _)| refusal_error(c)) else {
            return Ok(ExecuteOutcome::Run(run));
        };
        let mut answer = self.answer(
            request,
            &run.resolution_id,
            &run.trace_id,
            ExecuteStatus::Denied,
            Some(&e),
        );
        if let Some(seconds) = consumed
            .as_ref()
            .and_then(|(c, at_us)| self.retry_after(c, *at_us))
            && let Some(Value::Object(details)) =
                answer.error.as_mut().and_then(|x| x.details.as_mut())
        {
            details.insert(RETRY_AFTER_DETAIL.into(), Value::from(seconds));
        }
        Ok(ExecuteOutcome::Answered(answer))
    }

    /// Seconds after which a refused windowed charge would fit, counted from `at_us`, the
    /// instant the store judged it at (its clock: on PostgreSQL the database's, which stamped
    /// the counted charges). None for a budget (spent units do not come back by waiting) or a
    /// used approval; a store that cannot say leaves it out.
    fn retry_after(&self, outcome: &ConsumeOutcome, at_us: i64) -> Option<u64> {
        let ConsumeOutcome::Refused {
            policy_id,
            scope_key,
            kind,
            ..
        } = outcome
        else {
            return None;
        };
        let charge = crate::store::Charge {
            policy_id: policy_id.clone(),
            scope_key: scope_key.clone(),
            kind: kind.clone(),
        };
        crate::execute::window_retry_after(self.store.as_ref(), &charge, at_us)
            .ok()
            .flatten()
    }

    fn lease(&self, request: &CarpRequest, run: &ClearedExecution) -> ExecutionLease {
        ExecutionLease {
            execution_id: run.execution_id.clone(),
            owner: self.owner.clone(),
            session_id: run.session_id.clone(),
            agent_id: request.requester.agent_id.clone(),
            idempotency_key: run.idempotency_key.clone(),
            action_id: run.action.action_id.to_string(),
            request_id: run.request_id.clone(),
            resolution_id: run.resolution_id.clone(),
            trace_id: run.trace_id.clone(),
            claimed_at: format_timestamp(self.clock.now()),
            parameters_hash: Some(run.call.parameters_hash.clone()),
        }
    }

    /// The digest in force of each atlas that offered an allowed action (usually one).
    fn offering_digests(&self, origins: &[ActionOrigin]) -> BTreeMap<String, String> {
        let mut digests = BTreeMap::new();
        for o in origins {
            if !digests.contains_key(o.atlas_id.as_str())
                && let Some(d) = self.atlases.digests().get(o.atlas_id.as_str())
            {
                digests.insert(o.atlas_id.to_string(), d.clone());
            }
        }
        digests
    }

    /// The atlas that offered `action_id` under the resolution (its recorded origin, else the
    /// first loaded atlas declaring it), with its digest as it is in force now; `None` when
    /// that atlas is no longer loaded.
    fn atlas_of(&self, stored: &StoredResolution, action_id: &str) -> Option<(&str, &str)> {
        let origin = stored.origins.get(action_id);
        let atlas = match origin {
            Some(o) => self.atlases.get(&o.atlas_id)?,
            None => self.atlases.declaring(action_id)?,
        };
        Some((&atlas.atlas_id, &atlas.digest))
    }

    /// [`Carp::execute`] for callers that record no chain: an approval the call asks for is
    /// opened in the store at once ([`Carp::open_approval`]) and the outcome is the pending
    /// answer ([`ExecuteOutcome::Answered`]), so `OpenApproval` never comes back from here.
    pub fn execute_in_store(&self, request: &CarpRequest) -> Result<ExecuteOutcome, CarpError> {
        match self.execute(request)? {
            ExecuteOutcome::OpenApproval { response, approval } => {
                self.open_approval(&approval)?;
                Ok(ExecuteOutcome::Answered(response))
            }
            other => Ok(other),
        }
    }

    /// Opens `approval` in the store alone, without events: for callers that record no chain
    /// (the conformance runner's in-process target, tests). The runtime opens it with its
    /// events instead ([`crate::store::StateChange::Open`]).
    pub fn open_approval(&self, approval: &ApprovalRecord) -> Result<(), CarpError> {
        self.store.create_approval(approval).map_err(store_err)
    }

    /// Records the executor's outcome and returns the response. With an idempotency key, the
    /// first recorded response wins (a concurrent duplicate gets the first one back).
    pub fn finish_execution(
        &self,
        run: ClearedExecution,
        outcome: Result<Value, ExecuteError>,
    ) -> Result<ExecuteResponse, CarpError> {
        let rec = self
            .store
            .record_execution(&self.execution_record(run, outcome))
            .map_err(store_err)?;
        Ok(rec.response)
    }

    /// The record of the executor's `outcome` for `run`, with its response stamped now, for a
    /// caller that records it itself (with its events: [`crate::store::StateChange::Execute`]).
    pub fn execution_record(
        &self,
        run: ClearedExecution,
        outcome: Result<Value, ExecuteError>,
    ) -> ExecutionRecord {
        let (status, result, error) = match outcome {
            Ok(v) => (ExecuteStatus::Success, Some(v), None),
            Err(e) => (ExecuteStatus::Error, None, Some(e)),
        };
        let marks = match status {
            ExecuteStatus::Success => self.atlases.marks(
                &run.action.action_id,
                &run.parameters,
                (&run.agent_id, &run.session_id),
                unix_micros(self.clock.now()),
            ),
            _ => Vec::new(),
        };
        let response = ExecuteResponse {
            carp_version: CARP_VERSION.to_owned(),
            execution_id: run.execution_id.clone(),
            request_id: run.request_id,
            resolution_id: run.resolution_id,
            timestamp: format_timestamp(self.clock.now()),
            status,
            result,
            error,
            trace_id: run.trace_id,
            extra: Map::new(),
        };
        ExecutionRecord {
            execution_id: run.execution_id,
            session_id: run.session_id,
            idempotency_key: run.idempotency_key,
            response,
            marks,
            call: Some(run.call),
        }
    }

    /// Grants or rejects a pending approval once.
    pub fn decide_approval(
        &self,
        approval_id: &str,
        decision: ApprovalDecision,
        decided_by: &str,
        note: Option<&str>,
    ) -> Result<ApprovalRecord, CarpError> {
        self.store
            .decide_approval(
                approval_id,
                decision,
                decided_by,
                note,
                &format_timestamp(self.clock.now()),
            )
            .map_err(|e| match e {
                CarpStoreError::NotFound { .. } => {
                    CarpError::new(Token::ApprovalNotFound, e.to_string())
                }
                CarpStoreError::AlreadyDecided { .. } => {
                    CarpError::new(Token::AlreadyExists, e.to_string())
                }
                other => store_err(other),
            })
    }

    /// Every pending approval.
    pub fn pending_approvals(&self) -> Result<Vec<ApprovalRecord>, CarpError> {
        self.store.list_pending_approvals().map_err(store_err)
    }
}

/// Refuses a call that would run (or open an approval) under a resolution whose action's atlas
/// is no longer in force with the digest it had when the resolution was made (`in_force` is the
/// atlas as loaded now): a changed policy, such as an emergency deny, applies to every
/// outstanding resolution. Resolutions stored before digests were kept are not checked.
fn check_in_force(
    checked: &StoredResolution,
    action_id: &str,
    in_force: Option<(&str, &str)>,
) -> Result<(), CarpError> {
    let Some(origin) = checked.origins.get(action_id) else {
        return Ok(());
    };
    let Some(then) = checked.atlas_digests.get(origin.atlas_id.as_str()) else {
        return Ok(());
    };
    let atlas = &origin.atlas_id;
    let rid = &checked.resolution.resolution_id;
    let why = match in_force {
        Some((_, now)) if now == then => return Ok(()),
        Some((_, now)) => format!(
            "atlas `{atlas}` changed since resolution {rid} allowed {action_id} (digest {} then, {} now)",
            short(then),
            short(now)
        ),
        None => format!(
            "atlas `{atlas}`, which allowed {action_id} in resolution {rid}, is no longer loaded"
        ),
    };
    Err(CarpError::new(
        Token::ResolutionStale,
        format!("{why}; resolve again to be decided under the atlas in force"),
    ))
}

/// The first 12 hex digits of a digest, for messages.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}
