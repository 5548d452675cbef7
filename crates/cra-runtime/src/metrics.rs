//! Counters the runtime maintains itself and renders in the Prometheus text format at `/metrics`.
//!
//! **Invariant: every label value comes from a closed set.** A series is kept for each distinct
//! label set, forever, so a label a client could choose would let anyone grow the server's memory
//! and `/metrics` without bound (invented HTTP methods did exactly that, before authentication).
//! The types hold the rule: methods become [`method_label`] (the methods HTTP defines, else
//! `other`), routes are the router's templates (`unmatched` for anything else), and every other
//! label is a `&'static str` the code names.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The upper bounds, in seconds, of the request latency histogram's buckets (`+Inf` last).
const LATENCY_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One latency histogram: how many observations fell at or under each bound, their sum, and
/// their count.
#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    sum_seconds: f64,
    count: u64,
}

impl Histogram {
    /// Writes the series `name{labels}` (its buckets, sum and count).
    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .copied()
            .zip(self.buckets.iter().copied())
            .collect();
        write_histogram(out, name, labels, &buckets, self.sum_seconds, self.count);
    }

    fn observe(&mut self, seconds: f64) {
        for (bound, n) in LATENCY_BUCKETS.iter().zip(self.buckets.iter_mut()) {
            if seconds <= *bound {
                *n += 1;
            }
        }
        self.sum_seconds += seconds;
        self.count += 1;
    }
}

/// The outcomes of a resolved action, in the order `policy_decisions` counts them.
const OUTCOMES: [&str; 3] = ["allow", "requires_approval", "deny"];

fn outcome_index(outcome: cra_carp::explain::Outcome) -> usize {
    match outcome {
        cra_carp::explain::Outcome::Allow => 0,
        cra_carp::explain::Outcome::RequiresApproval => 1,
        cra_carp::explain::Outcome::Deny => 2,
    }
}

/// Every counter.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, String, u16), u64>>,
    /// Request latency by route template (a closed set, as `requests`' routes).
    latencies: Mutex<BTreeMap<String, Histogram>>,
    /// Resolve and execute latency by operation and outcome (decisions and statuses: closed).
    carp_latencies: Mutex<BTreeMap<(&'static str, &'static str), Histogram>>,
    /// The size of the latest checkpoint and when this replica first saw it.
    checkpoint_seen: Mutex<Option<(u64, std::time::Instant)>>,
    /// Resolved actions by atlas, deciding policy (or `default_deny`) and outcome. Policy ids
    /// are atlas authors' words, not a client's, and only those of atlases in force are kept
    /// ([`Metrics::render_policy_decisions`]), so the series are as many as the policies in force.
    policy_decisions: Mutex<BTreeMap<String, BTreeMap<String, [u64; OUTCOMES.len()]>>>,
    /// TRACE events appended durably.
    pub trace_events: AtomicU64,
    /// Resolutions answered, by decision.
    resolutions: Mutex<BTreeMap<&'static str, u64>>,
    /// Executions answered, by status.
    executions: Mutex<BTreeMap<&'static str, u64>>,
    /// WebSocket streams opened.
    pub streams_opened: AtomicU64,
    /// WebSocket streams closed because the consumer was too slow.
    pub streams_slow_closed: AtomicU64,
    /// Requests refused by the rate limiter.
    pub rate_limited: AtomicU64,
    /// Requests refused by a quota (`specs/quotas.md`).
    pub quota_exceeded: AtomicU64,
    /// Atlas reloads that failed (the last good version stays in force).
    pub atlas_reload_failures: AtomicU64,
    /// Credential reloads that failed (the last good keys stayed in force).
    pub keys_reload_failures: AtomicU64,
    /// Approval notifications a webhook answered 2xx.
    pub notifications_delivered: AtomicU64,
    /// Approval notifications given up after their last attempt.
    pub notifications_failed: AtomicU64,
    /// Times the notifier's queue overflowed (notifications lost).
    pub notifications_dropped: AtomicU64,
    /// Spans the OTLP collector took.
    pub otlp_spans_exported: AtomicU64,
    /// Spans given up after their export's last attempt.
    pub otlp_spans_failed: AtomicU64,
    /// Spans dropped because the export queue was full.
    pub otlp_spans_dropped: AtomicU64,
    /// Times the exporter fell behind the appends and the live feed dropped it.
    pub otlp_feed_overflows: AtomicU64,
    /// Resolves answered by an earlier resolution (`carp.resolution.cached`).
    pub resolution_cache_hits: AtomicU64,
    /// Actions whose `log_only` policies would have decided otherwise (shadow mode).
    pub shadow_disagreements: AtomicU64,
    /// Executes whose `log_only` policies would have decided the call otherwise.
    pub execute_shadow_disagreements: AtomicU64,
}

fn bump(map: &Mutex<BTreeMap<&'static str, u64>>, key: &'static str) {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    *m.entry(key).or_insert(0) += 1;
}

/// The `method` label of a request: the method's name when HTTP defines it (RFC 9110 and PATCH),
/// else `other`, so that invented methods share one series.
pub(crate) fn method_label(method: &axum::http::Method) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method.as_str())
        .unwrap_or("other")
}

/// The `route` label of a request: the template of the route that matched (the router's own
/// finite set), else `unmatched`.
pub(crate) fn route_label(matched: Option<&axum::extract::MatchedPath>) -> &str {
    matched.map_or("unmatched", axum::extract::MatchedPath::as_str)
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Counts one answered HTTP request (labels from [`method_label`] and [`route_label`]) and
    /// observes how long it took to answer.
    pub fn record_request(
        &self,
        method: &'static str,
        route: &str,
        status: u16,
        took: std::time::Duration,
    ) {
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry((method, route.to_owned(), status)).or_insert(0) += 1;
        drop(m);
        let mut l = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
        match l.get_mut(route) {
            Some(h) => h.observe(took.as_secs_f64()),
            None => {
                let mut h = Histogram::default();
                h.observe(took.as_secs_f64());
                l.insert(route.to_owned(), h);
            }
        }
    }

    /// Observes how long a resolve or an execute (`operation`) took to answer with `outcome`
    /// (its decision or status), its executor's run included.
    pub fn observe_carp(
        &self,
        operation: &'static str,
        outcome: &'static str,
        took: std::time::Duration,
    ) {
        let mut l = self
            .carp_latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        l.entry((operation, outcome))
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// Counts each action a resolve decided by its atlas, deciding policy and outcome.
    pub fn record_policy_decisions(&self, actions: &[cra_carp::explain::ActionExplain]) {
        let mut m = self
            .policy_decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for a in actions {
            let policies = match m.get_mut(a.atlas_id.as_str()) {
                Some(p) => p,
                None => m.entry(a.atlas_id.clone()).or_default(),
            };
            let counts = match policies.get_mut(a.decided_by.as_str()) {
                Some(c) => c,
                None => policies.entry(a.decided_by.clone()).or_default(),
            };
            counts[outcome_index(a.outcome)] += 1;
        }
    }

    /// `cra_policy_decisions_total` in the Prometheus text format, for the policies `in_force`
    /// says are in force (atlas id, policy id); the others' counts are dropped here, so a
    /// replaced or removed atlas leaves no series behind.
    pub fn render_policy_decisions(&self, in_force: &dyn Fn(&str, &str) -> bool) -> String {
        let name = "cra_policy_decisions_total";
        let mut out = format!(
            "# HELP {name} Actions resolves decided, by atlas, deciding policy (default_deny when none granted) and outcome; atlases in force only.\n# TYPE {name} counter\n"
        );
        let mut m = self
            .policy_decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        m.retain(|atlas, policies| {
            policies.retain(|policy, _| in_force(atlas, policy));
            !policies.is_empty()
        });
        for (atlas, policies) in m.iter() {
            for (policy, counts) in policies {
                for (outcome, n) in OUTCOMES.iter().zip(counts).filter(|(_, n)| **n > 0) {
                    let _ = writeln!(
                        out,
                        "{name}{{atlas=\"{}\",policy=\"{}\",outcome=\"{outcome}\"}} {n}",
                        escape_label(atlas),
                        escape_label(policy)
                    );
                }
            }
        }
        out
    }

    /// How long ago a `/metrics` read first saw a checkpoint of `size` leaves, the latest
    /// published (scrapes are where it looks, so it lags publication by at most one scrape
    /// interval); 0 when none is published.
    pub fn checkpoint_age(&self, size: Option<u64>, now: std::time::Instant) -> f64 {
        let mut seen = self
            .checkpoint_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match (size, *seen) {
            (None, _) => 0.0,
            (Some(size), Some((was, at))) if was == size => now.duration_since(at).as_secs_f64(),
            (Some(size), _) => {
                *seen = Some((size, now));
                0.0
            }
        }
    }

    /// The latency histograms in the Prometheus text format.
    fn render_latencies(&self, out: &mut String) {
        let name = "cra_http_request_duration_seconds";
        let help = "Time to answer an HTTP request (to its response head), by route.";
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (route, h) in self
            .latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            h.write(out, name, &format!("route=\"{}\"", escape_label(route)));
        }
        let name = "cra_carp_duration_seconds";
        let help = "Time to answer a resolve or an execute (an execute's action run included), by operation and outcome.";
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for ((operation, outcome), h) in self
            .carp_latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            h.write(
                out,
                name,
                &format!("operation=\"{operation}\",outcome=\"{outcome}\""),
            );
        }
    }

    /// Counts one resolution with `decision`.
    pub fn record_resolution(&self, decision: &'static str) {
        bump(&self.resolutions, decision);
    }

    /// Counts one resolve answered by an earlier resolution.
    pub fn record_resolution_cache_hit(&self) {
        self.resolution_cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` actions of a resolve on which shadow mode disagreed with the answer.
    pub fn record_shadow_disagreements(&self, n: u64) {
        if n > 0 {
            self.shadow_disagreements.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts one execute on which shadow mode disagreed with the decision.
    pub fn record_execute_shadow_disagreement(&self) {
        self.execute_shadow_disagreements
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one execution with `status`.
    pub fn record_execution(&self, status: &'static str) {
        bump(&self.executions, status);
    }

    /// Counts `n` TRACE events made durable.
    pub fn add_events(&self, n: u64) {
        self.trace_events.fetch_add(n, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP cra_http_requests_total HTTP requests answered, by method, route and status.\n",
        );
        out.push_str("# TYPE cra_http_requests_total counter\n");
        for ((method, route, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "cra_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                escape_label(method),
                escape_label(route)
            );
        }
        for (name, help, map, label) in [
            (
                "cra_resolutions_total",
                "CARP resolutions answered, by decision.",
                &self.resolutions,
                "decision",
            ),
            (
                "cra_executions_total",
                "CARP executions answered, by status.",
                &self.executions,
                "status",
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (k, n) in map.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {n}", escape_label(k));
            }
        }
        for (name, help, v) in [
            (
                "cra_trace_events_total",
                "TRACE events appended durably.",
                &self.trace_events,
            ),
            (
                "cra_streams_opened_total",
                "WebSocket trace streams opened.",
                &self.streams_opened,
            ),
            (
                "cra_streams_slow_closed_total",
                "WebSocket trace streams closed because the consumer fell behind.",
                &self.streams_slow_closed,
            ),
            (
                "cra_rate_limited_total",
                "Requests refused by the per-key rate limit.",
                &self.rate_limited,
            ),
            (
                "cra_quota_exceeded_total",
                "Requests refused by a quota: an agent's open sessions, a session's events or bytes.",
                &self.quota_exceeded,
            ),
            (
                "cra_atlas_reload_failures_total",
                "Atlas reloads that failed (the last good version stayed in force).",
                &self.atlas_reload_failures,
            ),
            (
                "cra_keys_reload_failures_total",
                "Keys file or JWT reloads that failed (the last good credentials stayed in force).",
                &self.keys_reload_failures,
            ),
            (
                "cra_notifications_delivered_total",
                "Approval notifications a webhook answered with 2xx.",
                &self.notifications_delivered,
            ),
            (
                "cra_notifications_failed_total",
                "Approval notifications given up after their last attempt.",
                &self.notifications_failed,
            ),
            (
                "cra_notifications_dropped_total",
                "Times the approval notifier fell behind and lost notifications.",
                &self.notifications_dropped,
            ),
            (
                "cra_otlp_spans_exported_total",
                "Spans the OTLP collector took.",
                &self.otlp_spans_exported,
            ),
            (
                "cra_otlp_spans_failed_total",
                "Spans given up after their export's last attempt (collector down or refusing).",
                &self.otlp_spans_failed,
            ),
            (
                "cra_otlp_spans_dropped_total",
                "Spans dropped because the export queue was full.",
                &self.otlp_spans_dropped,
            ),
            (
                "cra_otlp_feed_overflows_total",
                "Times the OTLP exporter fell behind the appends (spans of those events not made).",
                &self.otlp_feed_overflows,
            ),
            (
                "cra_resolution_cache_hits_total",
                "Resolves answered by an earlier identical resolution (carp.resolution.cached).",
                &self.resolution_cache_hits,
            ),
            (
                "cra_shadow_disagreements_total",
                "Resolved actions on which the log_only policies (shadow mode) would have decided otherwise.",
                &self.shadow_disagreements,
            ),
            (
                "cra_execute_shadow_disagreements_total",
                "Executes on which the log_only policies (shadow mode) would have decided the call otherwise.",
                &self.execute_shadow_disagreements,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        self.render_latencies(&mut out);
        out
    }
}

/// One histogram series in the Prometheus text format: `buckets` are cumulative `(bound, n)`,
/// `labels` the series' own (`a="x",b="y"`, or empty).
pub(crate) fn write_histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    buckets: &[(f64, u64)],
    sum: f64,
    count: u64,
) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, n) in buckets {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}\n{name}_sum{braces} {sum}\n{name}_count{braces} {count}"
    );
}

/// The store committers' histograms (`cra_store::stats`) in the Prometheus text format.
pub(crate) fn render_commits(stats: &cra_store::stats::CommitStats) -> String {
    let mut out = String::new();
    for (name, help, h) in [
        (
            "cra_store_commit_duration_seconds",
            "Time a committer took to make one batch of appends durable (its transaction, fsync or commit included).",
            stats.commit_seconds(),
        ),
        (
            "cra_store_commit_batch_appends",
            "Appends made durable together in one batch (group commit).",
            stats.batch_appends(),
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        write_histogram(&mut out, name, "", &h.buckets, h.sum, h.count);
    }
    out
}

/// Gauges read when `/metrics` is asked, in the Prometheus text format: `(name, help, value)`.
pub(crate) fn render_gauges(gauges: &[(&str, &str, f64)]) -> String {
    let mut out = String::new();
    for (name, help, value) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explained(
        atlas: &str,
        policy: &str,
        outcome: cra_carp::explain::Outcome,
    ) -> cra_carp::explain::ActionExplain {
        cra_carp::explain::ActionExplain {
            action_id: "a".into(),
            atlas_id: atlas.into(),
            outcome,
            decided_by: policy.into(),
            deny_kind: None,
            policies: Vec::new(),
            shadow: None,
        }
    }

    /// Decisions are counted by atlas, policy and outcome, and only the policies in force are
    /// shown (and kept): a removed atlas's series end.
    #[test]
    fn decisions_are_counted_per_policy_in_force() {
        use cra_carp::explain::Outcome::{Allow, Deny};
        let m = Metrics::default();
        m.record_policy_decisions(&[
            explained("a1", "p-allow", Allow),
            explained("a1", "p-allow", Allow),
            explained("a1", "default_deny", Deny),
            explained("gone", "p-x", Deny),
        ]);
        let text = m.render_policy_decisions(&|atlas, _| atlas == "a1");
        let name = "cra_policy_decisions_total";
        assert!(
            text.contains(&format!(
                "{name}{{atlas=\"a1\",policy=\"p-allow\",outcome=\"allow\"}} 2\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{name}{{atlas=\"a1\",policy=\"default_deny\",outcome=\"deny\"}} 1\n"
            )),
            "{text}"
        );
        assert!(!text.contains("gone"), "{text}");
        assert!(!text.contains("outcome=\"requires_approval\""), "{text}");
        // The dropped series stays gone even if the atlas comes back.
        assert!(!m.render_policy_decisions(&|_, _| true).contains("gone"));
    }

    /// A checkpoint's age counts from when this replica first saw its size, and starts again
    /// at a larger one; none published is age 0.
    #[test]
    fn a_checkpoint_ages_from_when_its_size_was_first_seen() {
        let m = Metrics::default();
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        assert_eq!(m.checkpoint_age(None, at(0)), 0.0);
        assert_eq!(m.checkpoint_age(Some(10), at(5)), 0.0);
        assert_eq!(m.checkpoint_age(Some(10), at(35)), 30.0);
        assert_eq!(m.checkpoint_age(Some(12), at(40)), 0.0);
        assert_eq!(m.checkpoint_age(Some(12), at(41)), 1.0);
    }

    #[test]
    fn carp_latency_is_kept_by_operation_and_outcome() {
        let m = Metrics::default();
        m.observe_carp("resolve", "allow", std::time::Duration::from_millis(2));
        m.observe_carp("execute", "success", std::time::Duration::from_millis(200));
        let text = m.render();
        let name = "cra_carp_duration_seconds";
        for line in [
            format!("{name}_bucket{{operation=\"resolve\",outcome=\"allow\",le=\"0.0025\"}} 1\n"),
            format!("{name}_bucket{{operation=\"execute\",outcome=\"success\",le=\"0.1\"}} 0\n"),
            format!("{name}_count{{operation=\"execute\",outcome=\"success\"}} 1\n"),
        ] {
            assert!(text.contains(&line), "{line}{text}");
        }
    }

    #[test]
    fn renders_counters() {
        let m = Metrics::default();
        let ms = std::time::Duration::from_millis;
        m.record_request("GET", "/v1/health", 200, ms(3));
        m.record_request("GET", "/v1/health", 200, ms(30));
        m.record_request(
            method_label(&"BREW".parse().unwrap()),
            "unmatched",
            405,
            ms(1),
        );
        m.record_resolution("allow");
        m.add_events(10);
        let text = m.render();
        assert!(text.contains(
            "cra_http_requests_total{method=\"GET\",route=\"/v1/health\",status=\"200\"} 2"
        ));
        assert!(text.contains(
            "cra_http_requests_total{method=\"other\",route=\"unmatched\",status=\"405\"} 1"
        ));
        assert!(text.contains("cra_resolutions_total{decision=\"allow\"} 1"));
        assert!(text.contains("cra_trace_events_total 10"));
        // The histogram's buckets are cumulative: 3 ms is under 5 ms, both are under 50 ms.
        let h = "cra_http_request_duration_seconds";
        for (le, n) in [
            ("0.0025", 0),
            ("0.005", 1),
            ("0.025", 1),
            ("0.05", 2),
            ("+Inf", 2),
        ] {
            let line = format!("{h}_bucket{{route=\"/v1/health\",le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line}{text}");
        }
        assert!(text.contains(&format!("{h}_count{{route=\"/v1/health\"}} 2\n")));
        assert!(text.contains(&format!("{h}_sum{{route=\"/v1/health\"}} 0.033")));
        assert!(text.contains(&format!("# TYPE {h} histogram\n")));
    }
}
