//! Retention with a fixed clock: only ended sessions older than the policy go, the removal is
//! recorded first in the operator audit chain, and every remaining chain still verifies.

use cra_store::RetentionPolicy;
use cra_store::retention::{OPERATOR_AUDIT_SESSION, RETENTION_EVENT, apply_retention};
use cra_trace::store::SESSION_ENDED;
use cra_wire::SequentialIds;
use serde_json::json;
use time::Duration;
use time::macros::datetime;

use crate::backends::{backends, draft, fixed, note, verify_stored};

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
