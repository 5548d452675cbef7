//! Retention with a fixed clock: only ended sessions older than the policy go, the removal is
//! recorded first in the operator audit chain, and every remaining chain still verifies.

use cra_store::RetentionPolicy;
use cra_store::retention::{OPERATOR_AUDIT_SESSION, RETENTION_EVENT, apply_retention};
use cra_trace::store::{ChainStore as _, SESSION_ENDED};
use cra_wire::SequentialIds;
use serde_json::json;
use time::Duration;
use time::macros::datetime;

use cra_carp::store::{
    ApprovalRecord, ApprovalStatus, Charge, ChargeKind, SessionRecord, StoredResolution,
};
use cra_carp::store_contract::sample_resolution;

use crate::backends::{TestStore, backends, draft, fixed, note, verify_stored};

#[test]
fn policies_shorter_than_a_day_are_refused() {
    assert!(RetentionPolicy::new(Duration::hours(23)).is_err());
    assert!(RetentionPolicy::days(0).is_err());
    assert_eq!(
        RetentionPolicy::new(Duration::hours(24)).unwrap().max_age(),
        Duration::days(1)
    );
    let msg = RetentionPolicy::days(0).unwrap_err().to_string();
    assert!(msg.contains("24 hours"), "{msg}");
}

#[test]
fn ended_sessions_older_than_the_policy_are_removed_and_recorded() {
    let (clock, config) = fixed();
    let ids = SequentialIds::new(1_772_366_400_000, 99);
    for b in backends("ended_sessions_older_than_the_policy_are_removed", || {
        config.clone()
    }) {
        let s = &*b.store;
        let t0 = datetime!(2026-03-01 00:00 UTC);
        clock.set(t0);
        s.append(
            "old-ended",
            vec![note(0), draft(SESSION_ENDED, json!({"reason": "done"}))],
        )
        .unwrap();
        s.append("old-open", vec![note(0)]).unwrap();
        clock.set(t0 + Duration::days(9));
        s.append("new-ended", vec![note(0), draft(SESSION_ENDED, json!({}))])
            .unwrap();

        for id in ["old-ended", "old-open"] {
            carp_records(s, id);
        }
        assert_eq!(s.open_sessions("agent-a").unwrap(), 2, "{}", b.name);

        let week = RetentionPolicy::days(7).unwrap();
        clock.set(t0 + Duration::days(10));
        let report = apply_retention(s, &week, &*clock, &ids).unwrap();
        let removed: Vec<_> = report
            .removed
            .iter()
            .map(|r| r.session_id.as_str())
            .collect();
        assert_eq!(removed, ["old-ended"], "{}", b.name);
        assert_eq!(report.cutoff, "2026-03-04T00:00:00.000000Z");
        assert!(s.session("old-ended").unwrap().is_none());
        assert!(s.read_range("old-ended", 0, u64::MAX).unwrap().is_empty());
        assert_eq!(verify_stored(s, "old-open"), Ok(1));
        assert_eq!(verify_stored(s, "new-ended"), Ok(2));
        // The removed session's CARP records went with its chain; the open one's stayed.
        assert_eq!(carp_left(s, "old-ended"), [false; 7], "{}", b.name);
        assert_eq!(carp_left(s, "old-open"), [true; 7], "{}", b.name);
        // A record removed while it still said open (its chain had ended) leaves the count.
        assert_eq!(s.open_sessions("agent-a").unwrap(), 1, "{}", b.name);

        let audit = s.read_range(OPERATOR_AUDIT_SESSION, 0, u64::MAX).unwrap();
        assert_eq!(audit.len(), 2, "{}", b.name);
        assert_eq!(audit[0].event_type, "session.started");
        assert_eq!(audit[1].event_type, RETENTION_EVENT);
        assert_eq!(Some(&audit[1]), report.audit_event.as_ref());
        assert_eq!(audit[1].payload["sessions"][0]["session_id"], "old-ended");
        assert_eq!(audit[1].payload["sessions"][0]["events"], 2);
        assert_eq!(audit[1].payload["max_age_seconds"], 7 * 86_400);

        // Nothing more is due: no removal, no new audit event.
        let again = apply_retention(s, &week, &*clock, &ids).unwrap();
        assert!(again.removed.is_empty() && again.audit_event.is_none());
        assert_eq!(verify_stored(s, OPERATOR_AUDIT_SESSION), Ok(2));

        // Later the second ended session goes too; the open one and the audit chain stay.
        clock.set(t0 + Duration::days(17));
        let later = apply_retention(s, &week, &*clock, &ids).unwrap();
        assert_eq!(later.removed.len(), 1);
        assert_eq!(later.removed[0].session_id, "new-ended");
        assert_eq!(
            verify_stored(s, OPERATOR_AUDIT_SESSION),
            Ok(3),
            "{}",
            b.name
        );
        let left: Vec<_> = s
            .sessions()
            .unwrap()
            .into_iter()
            .map(|x| x.session_id)
            .collect();
        assert_eq!(left, [OPERATOR_AUDIT_SESSION, "old-open"]);
    }
}

/// Gives session `id` one record of every CARP kind.
fn carp_records(s: &dyn TestStore, id: &str) {
    s.create_session(&SessionRecord {
        session_id: id.into(),
        agent_id: "agent-a".into(),
        parent_session_id: None,
        created_at: "2026-03-01T00:00:00.000000Z".into(),
        ended_at: None,
    })
    .unwrap();
    assert!(s.insert_request_id(id, "req-1").unwrap());
    s.put_resolution(&StoredResolution {
        resolution: sample_resolution(&format!("res-{id}")),
        session_id: id.into(),
        agent_id: "agent-a".into(),
        expires_at_us: 0,
        origins: Default::default(),
        atlas_digests: Default::default(),
    })
    .unwrap();
    s.create_approval(&ApprovalRecord {
        approval_id: format!("ap-{id}"),
        resolution_id: format!("res-{id}"),
        session_id: id.into(),
        agent_id: "agent-a".into(),
        actions: vec![],
        created_at: "2026-03-01T00:00:00.000000Z".into(),
        expires_at_us: 0,
        status: ApprovalStatus::Pending,
        decided_by: None,
        decided_at: None,
        note: None,
        call: None,
    })
    .unwrap();
    let charge = Charge {
        policy_id: "b".into(),
        scope_key: format!("session:{id}"),
        kind: ChargeKind::Budget {
            max_units: 10,
            units: 3,
        },
    };
    assert!(s.try_consume(&[charge], 1).unwrap().is_consumed());
    // A history test's counter, keyed by the session and a parameter's value.
    let total = Charge {
        policy_id: "p#0".into(),
        scope_key: format!("session:{id}|sha256:00"),
        kind: ChargeKind::Window {
            max_units: 10,
            window_seconds: 60,
            units: 3,
        },
    };
    assert!(s.try_consume(&[total], 1).unwrap().is_consumed());
}

/// Which of session `id`'s CARP records remain: session, request id, resolution, approval,
/// pending listing, budget, a history counter keyed by value.
fn carp_left(s: &dyn TestStore, id: &str) -> [bool; 7] {
    [
        s.get_session(id).unwrap().is_some(),
        !s.insert_request_id(id, "req-1").unwrap(),
        s.get_resolution(&format!("res-{id}")).unwrap().is_some(),
        s.get_approval(&format!("ap-{id}")).unwrap().is_some(),
        s.list_pending_approvals()
            .unwrap()
            .iter()
            .any(|a| a.session_id == id),
        s.budget_spent("b", &format!("session:{id}")).unwrap() == 3,
        s.rate_count("p#0", &format!("session:{id}|sha256:00"), 0, 2)
            .unwrap()
            == 3,
    ]
}

/// Invariant (redb, whose CARP records name their session only inside the record): a record
/// that cannot be read stops a retention run before it removes the session whose records it
/// cannot tell apart, naming the record; the session's chain and records stay whole, and the
/// run removes it once the record is readable (restored) again.
#[test]
fn an_unreadable_carp_record_stops_retention_and_removes_nothing() {
    use redb::TableDefinition;
    const RESOLUTIONS: TableDefinition<'static, &str, &[u8]> =
        TableDefinition::new("carp_resolutions");
    let (clock, config) = fixed();
    let ids = SequentialIds::new(1_772_366_400_000, 98);
    let dir = tempfile::tempdir().unwrap();
    let s = cra_store::RedbStore::open_with(dir.path(), config).unwrap();
    let t0 = datetime!(2026-03-01 00:00 UTC);
    clock.set(t0);
    s.append("old-ended", vec![note(0), draft(SESSION_ENDED, json!({}))])
        .unwrap();
    s.append("other", vec![note(0)]).unwrap();
    carp_records(&s, "old-ended");
    carp_records(&s, "other");
    let db = s.handle().clone();
    let stored = {
        let txn = db.begin_read().unwrap();
        let t = txn.open_table(RESOLUTIONS).unwrap();
        t.get("res-other").unwrap().unwrap().value().to_vec()
    };
    let put = |bytes: &[u8]| {
        let txn = db.begin_write().unwrap();
        txn.open_table(RESOLUTIONS)
            .unwrap()
            .insert("res-other", bytes)
            .unwrap();
        txn.commit().unwrap();
    };
    put(b"\x01not a record");

    let week = RetentionPolicy::days(7).unwrap();
    clock.set(t0 + Duration::days(10));
    let e = apply_retention(&s, &week, &*clock, &ids)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("record `res-other` of `carp_resolutions` cannot be read")
            && e.contains("none is removed"),
        "{e}"
    );
    assert_eq!(verify_stored(&s, "old-ended"), Ok(2));
    assert_eq!(carp_left(&s, "old-ended"), [true; 7]);

    put(&stored);
    let report = apply_retention(&s, &week, &*clock, &ids).unwrap();
    assert_eq!(report.removed.len(), 1);
    assert_eq!(carp_left(&s, "old-ended"), [false; 7]);
    assert_eq!(carp_left(&s, "other"), [true; 7]);
}
