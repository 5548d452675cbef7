//! Facts (§7) with two clocks.
//!
//! * **Valid time** is on the wire: `valid_from` / `valid_to` say when the claim was true in the
//!   world. A fact is current iff `valid_to` is null.
//! * **Recorded time** is internal: `recorded_at` (when this runtime stored the row; also the
//!   wire `created_at`) and `superseded_at` (when this runtime closed it). Together they answer
//!   "what did we believe on D?" without changing the wire format.
//!
//! Recorded time never goes backwards in a project: every write stamps [`recorded_instant`], the
//! later of the clock and the project's latest recorded instant, under the backend's lock.
//!
//! All fact timestamps are normalised to cra's fixed-width wire form
//! (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), so comparing the strings compares the instants; every
//! backend relies on that. The decisions that change state ([`supersede`], [`invalidate`]) and the
//! queries ([`select`]) are pure functions here; backends call them inside their transactions.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::ActorType;

/// Actor attribution of an assertion (same shape as a package's `created_by`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssertedBy {
    /// Actor id.
    pub id: String,
    /// Actor kind.
    #[serde(rename = "type")]
    pub actor_type: ActorType,
    /// Session, when the assertion was made within one.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// A fact on the wire (§7.1, §7.2). Unknown members round-trip in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// `fact_` + 32 hex.
    pub fact_id: String,
    /// Owning project.
    pub project_id: String,
    /// The entity.
    pub subject: String,
    /// The property.
    pub predicate: String,
    /// The value, always a string.
    pub value: String,
    /// Start of validity (inclusive).
    pub valid_from: String,
    /// End of validity (exclusive); `None` while current.
    pub valid_to: Option<String>,
    /// The package this came from, if any.
    pub source_package_id: Option<String>,
    /// 0.0 to 1.0, kept as the exact number text received (default 1.0).
    pub confidence: serde_json::Number,
    /// Who asserted it.
    pub asserted_by: AssertedBy,
    /// When this runtime recorded it.
    pub created_at: String,
    /// Labels.
    pub tags: Vec<String>,
    /// Members this version does not know (e.g. `x-*`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A fact as stored: the wire fact plus recorded time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactRecord {
    /// The wire fact.
    pub fact: Fact,
    /// When the runtime stored this row (equals `fact.created_at`).
    pub recorded_at: String,
    /// When the runtime closed `valid_to` (supersession or invalidation); `None` while current.
    pub superseded_at: Option<String>,
}

impl Fact {
    /// The §7 wire object: exactly the fields of §7.1 and §7.2 (`valid_to`, `source_package_id`
    /// as null when unset) plus the unknown members received (`x-*` and others), never the
    /// runtime's recorded time.
    pub fn to_wire(&self) -> Value {
        let opt = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        let mut asserted_by = Map::new();
        asserted_by.insert("id".into(), Value::String(self.asserted_by.id.clone()));
        asserted_by.insert(
            "type".into(),
            Value::String(self.asserted_by.actor_type.as_str().into()),
        );
        asserted_by.insert("session_id".into(), opt(&self.asserted_by.session_id));
        let mut o = self.extra.clone();
        for (k, v) in [
            ("fact_id", Value::String(self.fact_id.clone())),
            ("project_id", Value::String(self.project_id.clone())),
            ("subject", Value::String(self.subject.clone())),
            ("predicate", Value::String(self.predicate.clone())),
            ("value", Value::String(self.value.clone())),
            ("valid_from", Value::String(self.valid_from.clone())),
            ("valid_to", opt(&self.valid_to)),
            ("source_package_id", opt(&self.source_package_id)),
            ("confidence", Value::Number(self.confidence.clone())),
            ("asserted_by", Value::Object(asserted_by)),
            ("created_at", Value::String(self.created_at.clone())),
            (
                "tags",
                Value::Array(self.tags.iter().cloned().map(Value::String).collect()),
            ),
        ] {
            o.insert(k.into(), v);
        }
        Value::Object(o)
    }
}

impl FactRecord {
    /// The wire fact (see [`Fact::to_wire`]).
    pub fn to_wire(&self) -> Value {
        self.fact.to_wire()
    }

    /// True while the fact is current.
    pub fn is_current(&self) -> bool {
        self.fact.valid_to.is_none()
    }
}

/// Which facts of a project a read wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FactQuery {
    /// Only this subject.
    pub subject: Option<String>,
    /// Only this predicate.
    pub predicate: Option<String>,
    /// The time dimension.
    pub view: FactView,
}

/// The time dimension of a fact query.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FactView {
    /// Facts whose `valid_to` is null.
    #[default]
    Current,
    /// Facts valid at this instant: `valid_from <= t < valid_to` (null = +inf), as now known.
    AsOfValid(String),
    /// Facts this runtime held current at this instant: `recorded_at <= t < superseded_at`.
    AsOfRecorded(String),
    /// Every row, oldest first.
    History,
}

/// A supersession the caller's new fact cannot make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "valid_from {new} is earlier than the current fact's valid_from {current}; \
     assert with a later valid_from or invalidate first"
)]
pub struct SupersessionError {
    /// The new fact's valid_from.
    pub new: String,
    /// The current fact's valid_from.
    pub current: String,
}

/// A new fact on its way in: `explicit_valid_from` is false when the runtime filled `valid_from`
/// with "now"; then a concurrent assert that committed first (with a later now) moves it forward
/// instead of failing, so intervals stay contiguous.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFact {
    /// The row to insert (`valid_to` null, `superseded_at` null).
    pub record: FactRecord,
    /// Whether the caller chose `valid_from`.
    pub explicit_valid_from: bool,
}

/// The recorded instant of a write to a project's facts: the later of the clock's `now` and
/// `last`, the latest recorded instant the project's facts hold so far. Backends call it inside
/// the write transaction, under a lock that serialises the project's fact writes, and keep the
/// result as the project's new latest; so recorded time never goes backwards in commit order,
/// even between replicas whose clocks disagree (specs/relay.md, "Facts: two clocks").
pub fn recorded_instant(last: Option<&str>, now: &str) -> String {
    match last {
        Some(l) if l > now => l.to_owned(),
        _ => now.to_owned(),
    }
}

/// The latest recorded instant among `rows` (their `recorded_at` and `superseded_at`): where a
/// project's recorded clock starts when it has no stored mark yet (data written before the mark
/// existed, or restored by an import).
pub fn latest_recorded<'a>(rows: impl IntoIterator<Item = &'a FactRecord>) -> Option<String> {
    rows.into_iter()
        .flat_map(|r| std::iter::once(&r.recorded_at).chain(r.superseded_at.as_ref()))
        .max()
        .cloned()
}

/// Decides a supersession (§7.3) at `now` (read by the backend inside its transaction: it
/// becomes the new row's `recorded_at` / `created_at`, its `valid_from` unless the caller chose
/// one, and the old row's `superseded_at`). Given the current row of (project, subject, predicate), if
/// any, returns the closed old row (to be written back) and the row to insert. Both writes must
/// happen in one transaction.
pub fn supersede(
    current: Option<&FactRecord>,
    new: NewFact,
    now: &str,
) -> Result<(Option<FactRecord>, FactRecord), SupersessionError> {
    let mut inserted = new.record;
    // Stamped here, inside the caller's transaction, so recorded time follows commit order.
    inserted.recorded_at = now.to_owned();
    inserted.fact.created_at = now.to_owned();
    if !new.explicit_valid_from {
        inserted.fact.valid_from = now.to_owned();
    }
    let Some(cur) = current else {
        return Ok((None, inserted));
    };
    if inserted.fact.valid_from < cur.fact.valid_from {
        if new.explicit_valid_from {
            return Err(SupersessionError {
                new: inserted.fact.valid_from,
                current: cur.fact.valid_from.clone(),
            });
        }
        inserted.fact.valid_from = cur.fact.valid_from.clone();
    }
    let mut closed = cur.clone();
    closed.fact.valid_to = Some(inserted.fact.valid_from.clone());
    closed.superseded_at = Some(now.to_owned());
    Ok((Some(closed), inserted))
}

/// Closes a current row without a replacement (§7.4): `valid_to = max(now, valid_from)`.
pub fn invalidate(current: &FactRecord, now: &str) -> FactRecord {
    let mut closed = current.clone();
    let end = if now < current.fact.valid_from.as_str() {
        current.fact.valid_from.clone()
    } else {
        now.to_owned()
    };
    closed.fact.valid_to = Some(end);
    closed.superseded_at = Some(now.to_owned());
    closed
}

/// Applies `query` to `rows` (any superset of the project's matching rows). Results are ordered
/// by (subject, predicate, valid_from, recorded_at, fact_id).
pub fn select(rows: impl IntoIterator<Item = FactRecord>, query: &FactQuery) -> Vec<FactRecord> {
    let mut out: Vec<FactRecord> = rows
        .into_iter()
        .filter(|r| query.subject.as_deref().is_none_or(|s| r.fact.subject == s))
        .filter(|r| {
            query
                .predicate
                .as_deref()
                .is_none_or(|p| r.fact.predicate == p)
        })
        .filter(|r| match &query.view {
            FactView::Current => r.is_current(),
            FactView::AsOfValid(t) => {
                r.fact.valid_from.as_str() <= t.as_str()
                    && r.fact.valid_to.as_deref().is_none_or(|end| t.as_str() < end)
                    // A zero-length interval was never observable.
                    && r.fact.valid_to.as_deref() != Some(r.fact.valid_from.as_str())
            }
            FactView::AsOfRecorded(t) => {
                r.recorded_at.as_str() <= t.as_str()
                    && r.superseded_at
                        .as_deref()
                        .is_none_or(|end| t.as_str() < end)
            }
            FactView::History => true,
        })
        .collect();
    sort_facts(&mut out);
    out
}

/// The order every fact listing and export uses.
pub fn sort_facts(rows: &mut [FactRecord]) {
    rows.sort_by(|a, b| {
        (
            &a.fact.project_id,
            &a.fact.subject,
            &a.fact.predicate,
            &a.fact.valid_from,
            &a.recorded_at,
            &a.fact.fact_id,
        )
            .cmp(&(
                &b.fact.project_id,
                &b.fact.subject,
                &b.fact.predicate,
                &b.fact.valid_from,
                &b.recorded_at,
                &b.fact.fact_id,
            ))
    });
}

/// Checks that the history of one (subject, predicate) is a contiguous chain of intervals with
/// at most one open (current) interval at the end: each row's `valid_to` is the next row's
/// `valid_from`. Returns a description of the first break.
pub fn check_history(rows: &[FactRecord]) -> Result<(), String> {
    let mut rows: Vec<&FactRecord> = rows.iter().collect();
    rows.sort_by(|a, b| (&a.recorded_at, &a.fact.fact_id).cmp(&(&b.recorded_at, &b.fact.fact_id)));
    let current = rows.iter().filter(|r| r.is_current()).count();
    if current > 1 {
        return Err(format!("{current} current facts, at most one allowed"));
    }
    // Intervals in time order (an open interval last among equal starts).
    let mut chain: Vec<&FactRecord> = rows.clone();
    chain.sort_by(|a, b| {
        let ka = a.fact.valid_to.as_deref().unwrap_or("\u{10ffff}");
        let kb = b.fact.valid_to.as_deref().unwrap_or("\u{10ffff}");
        (&a.fact.valid_from, ka).cmp(&(&b.fact.valid_from, kb))
    });
    for pair in chain.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let end = a.fact.valid_to.as_deref().unwrap_or("");
        if end != b.fact.valid_from {
            return Err(format!(
                "fact {} ends at {end} but the next fact {} starts at {}",
                a.fact.fact_id, b.fact.fact_id, b.fact.valid_from
            ));
        }
        if a.fact.valid_to.as_deref() < Some(a.fact.valid_from.as_str()) {
            return Err(format!("fact {} ends before it starts", a.fact.fact_id));
        }
    }
    Ok(())
}
