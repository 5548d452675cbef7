//! An in-memory [`CarpStore`], for tests only (feature `test-support`): the product always uses
//! a durable store from `cra-store`. One mutex around everything makes each call atomic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use crate::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, CarpStore, CarpStoreError, Charge,
    ChargeKind, ClaimOutcome, ConsumeOutcome, ExecutionLease, ExecutionRecord, SessionRecord,
    StoredResolution,
};

#[derive(Debug, Default)]
struct State {
    sessions: BTreeMap<String, SessionRecord>,
    request_ids: BTreeSet<(String, String)>,
    resolutions: BTreeMap<String, StoredResolution>,
    executions_by_key: BTreeMap<(String, String), ExecutionRecord>,
    executions: Vec<ExecutionRecord>,
    rate_events: BTreeMap<(String, String), Vec<(i64, u64)>>,
    budget_spent: BTreeMap<(String, String), u64>,
    approvals: BTreeMap<String, ApprovalRecord>,
    leases: BTreeMap<String, ExecutionLease>,
}

/// A [`CarpStore`] held in memory. Tests only.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// While set, reading a counter (`rate_count`, `budget_spent`, hence `has_event`) fails: a
    /// test's store whose counters cannot be read.
    counters_unreadable: std::sync::atomic::AtomicBool,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, reading a counter fails (`on`) or works again.
    pub fn set_counters_unreadable(&self, on: bool) {
        self.counters_unreadable
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn counters_readable(&self) -> Result<(), CarpStoreError> {
        if self
            .counters_unreadable
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(CarpStoreError::Backend(
                "the counters cannot be read (MemoryStore::set_counters_unreadable)".into(),
            ));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn rate_used(state: &State, policy_id: &str, scope_key: &str, since: i64, until: i64) -> u64 {
    state
        .rate_events
        .get(&(policy_id.to_owned(), scope_key.to_owned()))
        .map(|v| {
            v.iter()
                .filter(|(t, _)| *t > since && *t <= until)
                .map(|(_, n)| *n)
                .fold(0, u64::saturating_add)
        })
        .unwrap_or(0)
}

/// Units counted in `c`'s window ending at `at_us`, with the earlier charges of this call on the
/// same counter (`same_counter`).
fn window_used<'a>(
    s: &State,
    c: &Charge,
    window_seconds: u64,
    at_us: i64,
    same_counter: impl Iterator<Item = &'a Charge>,
) -> u64 {
    let since = at_us.saturating_sub(crate::eval::seconds_to_us(window_seconds));
    let earlier = same_counter
        .map(|e| e.kind.windowed().map_or(0, |w| w.1))
        .fold(0, u64::saturating_add);
    rate_used(s, &c.policy_id, &c.scope_key, since, at_us).saturating_add(earlier)
}

/// Checks every charge at `at_us` and records them all if all fit. Charges on one counter given
/// twice are counted together, as the durable stores do.
fn consume(s: &mut State, charges: &[Charge], at_us: i64) -> ConsumeOutcome {
    let mut read = Vec::with_capacity(charges.len());
    for (i, c) in charges.iter().enumerate() {
        let same_counter = charges[..i]
            .iter()
            .filter(|e| e.policy_id == c.policy_id && e.scope_key == c.scope_key);
        let (fits, used) = match &c.kind {
            ChargeKind::Rate { .. } | ChargeKind::Window { .. } | ChargeKind::Once { .. } => {
                let (max, units, window_seconds) = c.kind.windowed().unwrap_or_default();
                let used = window_used(s, c, window_seconds, at_us, same_counter);
                (used.saturating_add(units) <= max, used)
            }
            ChargeKind::Budget { max_units, units } => {
                let spent = s
                    .budget_spent
                    .get(&(c.policy_id.clone(), c.scope_key.clone()))
                    .copied()
                    .unwrap_or(0)
                    .saturating_add(
                        same_counter
                            .map(|e| match e.kind {
                                ChargeKind::Budget { units, .. } => units,
                                _ => 0,
                            })
                            .fold(0, u64::saturating_add),
                    );
                (spent.saturating_add(*units) <= *max_units, spent)
            }
        };
        if !fits {
            return ConsumeOutcome::Refused {
                at: i,
                policy_id: c.policy_id.clone(),
                scope_key: c.scope_key.clone(),
                kind: c.kind.clone(),
                used,
            };
        }
        read.push(used);
    }
    for c in charges {
        let key = (c.policy_id.clone(), c.scope_key.clone());
        match &c.kind {
            ChargeKind::Rate { .. } | ChargeKind::Window { .. } | ChargeKind::Once { .. } => {
                let units = c.kind.windowed().map_or(0, |w| w.1);
                s.rate_events.entry(key).or_default().push((at_us, units));
            }
            ChargeKind::Budget { units, .. } => {
                let e = s.budget_spent.entry(key).or_default();
                *e = e.saturating_add(*units);
            }
        }
    }
    ConsumeOutcome::Consumed { used: read }
}

impl CarpStore for MemoryStore {
    fn create_session(&self, session: &SessionRecord) -> Result<(), CarpStoreError> {
        let mut s = self.lock();
        if s.sessions.contains_key(&session.session_id) {
            return Err(CarpStoreError::AlreadyExists {
                what: "session",
                id: session.session_id.clone(),
            });
        }
        s.sessions
            .insert(session.session_id.clone(), session.clone());
        Ok(())
    }

    fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, CarpStoreError> {
        Ok(self.lock().sessions.get(session_id).cloned())
    }

    fn sessions_of(&self, agent_id: &str) -> Result<Option<Vec<String>>, CarpStoreError> {
        let s = self.lock();
        let mine = s.sessions.values().filter(|r| r.agent_id == agent_id);
        Ok(Some(mine.map(|r| r.session_id.clone()).collect()))
    }

    fn end_session(
        &self,
        session_id: &str,
        ended_at: &str,
    ) -> Result<SessionRecord, CarpStoreError> {
        let mut s = self.lock();
        let rec = s
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| CarpStoreError::NotFound {
                what: "session",
                id: session_id.to_owned(),
            })?;
        if rec.ended_at.is_none() {
            rec.ended_at = Some(ended_at.to_owned());
        }
        Ok(rec.clone())
    }

    fn insert_request_id(
        &self,
        session_id: &str,
        request_id: &str,
    ) -> Result<bool, CarpStoreError> {
        Ok(self
            .lock()
            .request_ids
            .insert((session_id.to_owned(), request_id.to_owned())))
    }

    fn has_request_id(&self, session_id: &str, request_id: &str) -> Result<bool, CarpStoreError> {
        Ok(self
            .lock()
            .request_ids
            .contains(&(session_id.to_owned(), request_id.to_owned())))
    }

    fn put_resolution(&self, resolution: &StoredResolution) -> Result<(), CarpStoreError> {
        let mut s = self.lock();
        let id = &resolution.resolution.resolution_id;
        if s.resolutions.contains_key(id) {
            return Err(CarpStoreError::AlreadyExists {
                what: "resolution",
                id: id.clone(),
            });
        }
        s.resolutions.insert(id.clone(), resolution.clone());
        Ok(())
    }

    fn get_resolution(
        &self,
        resolution_id: &str,
    ) -> Result<Option<StoredResolution>, CarpStoreError> {
        Ok(self.lock().resolutions.get(resolution_id).cloned())
    }

    fn get_execution_by_key(
        &self,
        session_id: &str,
        idempotency_key: &str,
    ) -> Result<Option<ExecutionRecord>, CarpStoreError> {
        Ok(self
            .lock()
            .executions_by_key
            .get(&(session_id.to_owned(), idempotency_key.to_owned()))
            .cloned())
    }

    fn record_execution(
        &self,
        execution: &ExecutionRecord,
    ) -> Result<ExecutionRecord, CarpStoreError> {
        let mut s = self.lock();
        if let Some(key) = &execution.idempotency_key {
            let k = (execution.session_id.clone(), key.clone());
            if let Some(first) = s.executions_by_key.get(&k) {
                return Ok(first.clone());
            }
            s.executions_by_key.insert(k, execution.clone());
        }
        for m in &execution.marks {
            let key = (m.counter.clone(), m.scope_key.clone());
            s.rate_events.entry(key).or_default().push((m.at_us, 1));
        }
        s.executions.push(execution.clone());
        Ok(execution.clone())
    }

    fn rate_count(
        &self,
        policy_id: &str,
        scope_key: &str,
        since_us: i64,
        until_us: i64,
    ) -> Result<u64, CarpStoreError> {
        self.counters_readable()?;
        Ok(rate_used(
            &self.lock(),
            policy_id,
            scope_key,
            since_us,
            until_us,
        ))
    }

    fn budget_spent(&self, policy_id: &str, scope_key: &str) -> Result<u64, CarpStoreError> {
        self.counters_readable()?;
        Ok(self
            .lock()
            .budget_spent
            .get(&(policy_id.to_owned(), scope_key.to_owned()))
            .copied()
            .unwrap_or(0))
    }

    fn try_consume(
        &self,
        charges: &[Charge],
        at_us: i64,
    ) -> Result<ConsumeOutcome, CarpStoreError> {
        Ok(consume(&mut self.lock(), charges, at_us))
    }

    fn try_consume_now(
        &self,
        charges: &[Charge],
        clock: &dyn cra_wire::Clock,
    ) -> Result<(ConsumeOutcome, i64), CarpStoreError> {
        let mut s = self.lock();
        let at_us = crate::eval::unix_micros(clock.now());
        Ok((consume(&mut s, charges, at_us), at_us))
    }

    fn claim_execution(&self, lease: &ExecutionLease) -> Result<ClaimOutcome, CarpStoreError> {
        let mut s = self.lock();
        if let Some(key) = &lease.idempotency_key {
            let k = (lease.session_id.clone(), key.clone());
            if let Some(first) = s.executions_by_key.get(&k) {
                return Ok(ClaimOutcome::Finished(Box::new(first.clone())));
            }
            let holder = s.leases.values().find(|l| {
                l.session_id == lease.session_id && l.idempotency_key.as_ref() == Some(key)
            });
            if let Some(h) = holder {
                return Ok(ClaimOutcome::InFlight {
                    execution_id: h.execution_id.clone(),
                });
            }
        }
        s.leases.insert(lease.execution_id.clone(), lease.clone());
        Ok(ClaimOutcome::Claimed)
    }

    fn release_execution(&self, execution_id: &str) -> Result<(), CarpStoreError> {
        self.lock().leases.remove(execution_id);
        Ok(())
    }

    fn leases_of(&self, owner: &str) -> Result<Vec<ExecutionLease>, CarpStoreError> {
        Ok(self
            .lock()
            .leases
            .values()
            .filter(|l| l.owner == owner)
            .cloned()
            .collect())
    }

    fn create_approval(&self, approval: &ApprovalRecord) -> Result<(), CarpStoreError> {
        let mut s = self.lock();
        if s.approvals.contains_key(&approval.approval_id) {
            return Err(CarpStoreError::AlreadyExists {
                what: "approval",
                id: approval.approval_id.clone(),
            });
        }
        s.approvals
            .insert(approval.approval_id.clone(), approval.clone());
        Ok(())
    }

    fn get_approval(&self, approval_id: &str) -> Result<Option<ApprovalRecord>, CarpStoreError> {
        Ok(self.lock().approvals.get(approval_id).cloned())
    }

    fn decide_approval(
        &self,
        approval_id: &str,
        decision: ApprovalDecision,
        decided_by: &str,
        note: Option<&str>,
        decided_at: &str,
    ) -> Result<ApprovalRecord, CarpStoreError> {
        let mut s = self.lock();
        let rec = s
            .approvals
            .get_mut(approval_id)
            .ok_or_else(|| CarpStoreError::NotFound {
                what: "approval",
                id: approval_id.to_owned(),
            })?;
        rec.decide(decision, decided_by, note, decided_at)?;
        Ok(rec.clone())
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, CarpStoreError> {
        Ok(self
            .lock()
            .approvals
            .values()
            .filter(|a| a.status == ApprovalStatus::Pending)
            .cloned()
            .collect())
    }

    fn list_decided_approvals(&self, limit: usize) -> Result<Vec<ApprovalRecord>, CarpStoreError> {
        let approvals: Vec<ApprovalRecord> = self.lock().approvals.values().cloned().collect();
        Ok(crate::store::newest_decisions(approvals, limit))
    }
}
