//! `orient` (§8.3: the OrientationBundle and its Markdown briefing) and `orchestrate` (§8.4: our
//! documented DigestBundle). Both read only; both are deterministic for a given store and clock.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::Duration;

use crate::error::RelayError;
use crate::fact::{FactQuery, FactRecord};
use crate::model::{Project, Status, StoredPackage};
use crate::ops::Relay;
use crate::store::{PackageFilter, instant_key};

/// Default `window_days` of orient (§8.3) and orchestrate.
pub const DEFAULT_WINDOW_DAYS: u32 = 14;
/// At most this many packages in an OrientationBundle.
pub const ORIENT_MAX_PACKAGES: usize = 20;
/// Default number of snippets in a DigestBundle.
pub const DEFAULT_SNIPPETS: usize = 25;

/// §8.3 OrientationBundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrientationBundle {
    /// The project.
    pub project: Project,
    /// Packages created in the window, newest deposit first (at most 20), wire form.
    pub recent_packages: Vec<Value>,
    /// Current facts of the project.
    pub active_facts: Vec<crate::fact::Fact>,
    /// Open questions of the recent packages, deduplicated (first occurrence, newest first).
    pub open_questions: Vec<String>,
    /// The window.
    pub window_days: u32,
    /// When generated.
    pub generated_at: String,
}

/// One per-project line of a global digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectCounts {
    /// The project.
    pub project_id: String,
    /// Its name.
    pub name: String,
    /// Non-draft packages created in the window.
    pub packages_in_window: usize,
    /// Packages awaiting review (any age).
    pub awaiting_review: usize,
    /// Current facts.
    pub active_facts: usize,
    /// Distinct open questions in the window.
    pub open_questions: usize,
}

/// The activity summary of a DigestBundle.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Activity {
    /// Non-draft packages created in the window.
    pub packages: usize,
    /// Counts by `package_type`.
    pub by_type: BTreeMap<String, usize>,
    /// Counts by `status`.
    pub by_status: BTreeMap<String, usize>,
    /// Counts by `created_by.id`.
    pub by_actor: BTreeMap<String, usize>,
    /// Decisions recorded in the window (newest first, deduplicated).
    pub decisions: Vec<String>,
    /// The newest non-empty handoff note in the window.
    pub latest_handoff: Option<String>,
}

/// A piece of a package relevant to `focus`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snippet {
    /// The package.
    pub package_id: String,
    /// Its project.
    pub project_id: String,
    /// Its title.
    pub title: String,
    /// The field the text came from.
    pub field: String,
    /// The text.
    pub text: String,
    /// BM25 score of the text against `focus` (0 when no focus was given).
    pub score: f64,
}

/// Our DigestBundle (orchestrate, §8.4; the protocol fixes no shape, this one is documented in
/// `specs/relay.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DigestBundle {
    /// The project, or null for a global digest.
    pub project_id: Option<String>,
    /// The focus text, if any.
    pub focus: Option<String>,
    /// The window.
    pub window_days: u32,
    /// When generated.
    pub generated_at: String,
    /// What happened in the window (drafts excluded, §5.3).
    pub activity: Activity,
    /// Current facts of the projects in scope.
    pub active_facts: Vec<crate::fact::Fact>,
    /// Open questions in the window, deduplicated.
    pub open_questions: Vec<String>,
    /// Pieces relevant to `focus` (or the most significant recent ones without focus).
    pub snippets: Vec<Snippet>,
    /// Per-project counts (global mode only; empty for a single project).
    pub projects: Vec<ProjectCounts>,
}

/// The filter of the packages created in the last `window_days` (at or after now minus the
/// window; a window reaching before year -9999 holds every package), newest deposit first, at
/// most `limit`. The store answers it from its creation-time index, so orient and orchestrate
/// read the window, not the project.
fn window_filter(relay: &Relay, window_days: u32, limit: Option<usize>) -> PackageFilter {
    let start = relay
        .clock()
        .now()
        .checked_sub(Duration::days(i64::from(window_days)));
    PackageFilter {
        limit,
        created_since: Some(start.map(instant_key).unwrap_or_default()),
        ..PackageFilter::default()
    }
}

fn dedupe<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for q in items {
        let t = q.trim();
        if !t.is_empty() && seen.insert(t.to_lowercase()) {
            out.push(t.to_owned());
        }
    }
    out
}

impl Relay {
    /// §8.3 orient.
    pub fn orient(
        &self,
        project_id: &str,
        window_days: Option<u32>,
    ) -> Result<OrientationBundle, RelayError> {
        let window_days = window_days.unwrap_or(DEFAULT_WINDOW_DAYS);
        let project = self.project(project_id)?;
        let mut pulled = self.list(
            project_id,
            &window_filter(self, window_days, Some(ORIENT_MAX_PACKAGES)),
        )?;
        if !pulled.quarantined.is_empty() {
            // A package failed verification (and is now quarantined): the answer is the first
            // ORIENT_MAX_PACKAGES that pass, so read the whole window, as a listing does.
            pulled = self.list(project_id, &window_filter(self, window_days, None))?;
        }
        let recent: Vec<&StoredPackage> =
            pulled.packages.iter().take(ORIENT_MAX_PACKAGES).collect();
        let open_questions = dedupe(recent.iter().flat_map(|p| p.package.open_questions()));
        let facts = self.facts(project_id, &FactQuery::default())?;
        Ok(OrientationBundle {
            project,
            recent_packages: recent.iter().map(|p| p.to_wire()).collect(),
            active_facts: facts.into_iter().map(|r| r.fact).collect(),
            open_questions,
            window_days,
            generated_at: self.now(),
        })
    }

    /// §8.4 orchestrate over one project or (None) every project.
    pub fn orchestrate(
        &self,
        project_id: Option<&str>,
        focus: Option<&str>,
        snippets: Option<usize>,
        window_days: Option<u32>,
    ) -> Result<DigestBundle, RelayError> {
        let projects = match project_id {
            Some(id) => vec![self.project(id)?],
            None => self.projects()?,
        };
        self.digest_over(&projects, project_id, focus, snippets, window_days)
    }

    /// §8.4 orchestrate without a project, over the projects `project_ids` names: every project
    /// the caller may read (errata), which the caller's grants decide outside this crate.
    pub fn orchestrate_among(
        &self,
        project_ids: &[String],
        focus: Option<&str>,
        snippets: Option<usize>,
        window_days: Option<u32>,
    ) -> Result<DigestBundle, RelayError> {
        let projects = project_ids
            .iter()
            .map(|id| self.project(id))
            .collect::<Result<Vec<_>, _>>()?;
        self.digest_over(&projects, None, focus, snippets, window_days)
    }

    /// The digest of `projects`; `project_id` is the one project asked for, if one was.
    fn digest_over(
        &self,
        projects: &[Project],
        project_id: Option<&str>,
        focus: Option<&str>,
        snippets: Option<usize>,
        window_days: Option<u32>,
    ) -> Result<DigestBundle, RelayError> {
        let window_days = window_days.unwrap_or(DEFAULT_WINDOW_DAYS);
        let max_snippets = snippets.unwrap_or(DEFAULT_SNIPPETS);
        let mut activity = Activity::default();
        let mut all_facts: Vec<FactRecord> = Vec::new();
        let mut questions: Vec<String> = Vec::new();
        let mut window_packages: Vec<StoredPackage> = Vec::new();
        let mut counts = Vec::new();
        for project in projects {
            let pulled = self.list(&project.project_id, &window_filter(self, window_days, None))?;
            let recent: Vec<StoredPackage> = pulled
                .packages
                .into_iter()
                .filter(|p| p.package.status() != Status::Draft)
                .collect();
            let awaiting = self.awaiting_review(&project.project_id)?.packages.len();
            let facts = self.facts(&project.project_id, &FactQuery::default())?;
            let pq = dedupe(recent.iter().flat_map(|p| p.package.open_questions()));
            counts.push(ProjectCounts {
                project_id: project.project_id.clone(),
                name: project.name.clone(),
                packages_in_window: recent.len(),
                awaiting_review: awaiting,
                active_facts: facts.len(),
                open_questions: pq.len(),
            });
            questions.extend(pq);
            all_facts.extend(facts);
            window_packages.extend(recent);
        }
        for p in &window_packages {
            activity.packages += 1;
            *activity
                .by_type
                .entry(p.package.package_type().to_owned())
                .or_default() += 1;
            *activity
                .by_status
                .entry(p.package.status().as_str().to_owned())
                .or_default() += 1;
            *activity
                .by_actor
                .entry(p.package.created_by_id().to_owned())
                .or_default() += 1;
            if activity.latest_handoff.is_none() && !p.package.handoff_note().trim().is_empty() {
                activity.latest_handoff = Some(p.package.handoff_note().trim().to_owned());
            }
        }
        activity.decisions = dedupe(window_packages.iter().flat_map(|p| p.package.decisions()));
        let snippets = crate::search::rank_snippets(&window_packages, focus, max_snippets);
        Ok(DigestBundle {
            project_id: project_id.map(str::to_owned),
            focus: focus.map(str::to_owned),
            window_days,
            generated_at: self.now(),
            activity,
            active_facts: all_facts.into_iter().map(|r| r.fact).collect(),
            open_questions: dedupe(questions.iter().map(String::as_str)),
            snippets,
            projects: if project_id.is_none() {
                counts
            } else {
                Vec::new()
            },
        })
    }
}

/// The Markdown briefing of an OrientationBundle, to paste into a system prompt: latest handoff
/// first, then decisions, open questions, facts, and the recent packages.
pub fn orientation_markdown(bundle: &OrientationBundle) -> String {
    let mut md = String::new();
    let p = &bundle.project;
    md.push_str(&format!(
        "# Orientation: {} (`{}`)\n\n_Generated {}; window {} days; {} recent packages._\n\n",
        p.name,
        p.project_id,
        bundle.generated_at,
        bundle.window_days,
        bundle.recent_packages.len()
    ));
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    md.push_str("## Latest handoff\n\n");
    match bundle
        .recent_packages
        .iter()
        .find(|v| !text(v, "handoff_note").trim().is_empty())
    {
        Some(v) => md.push_str(&format!(
            "{}\n\n_From \"{}\" ({}, {})._\n\n",
            text(v, "handoff_note").trim(),
            text(v, "title"),
            text(v, "package_id"),
            text(v, "created_at")
        )),
        None => md.push_str("No handoff note in the window.\n\n"),
    }
    md.push_str("## Decisions\n\n");
    let decisions = dedupe(bundle.recent_packages.iter().flat_map(|v| {
        v.get("decisions_made")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
            .unwrap_or_default()
    }));
    bullet_list(&mut md, &decisions, "No decisions recorded in the window.");
    md.push_str("## Open questions\n\n");
    bullet_list(&mut md, &bundle.open_questions, "No open questions.");
    md.push_str("## Facts\n\n");
    if bundle.active_facts.is_empty() {
        md.push_str("No active facts.\n\n");
    } else {
        for f in &bundle.active_facts {
            md.push_str(&format!(
                "- {} / {}: {} (since {})\n",
                f.subject, f.predicate, f.value, f.valid_from
            ));
        }
        md.push('\n');
    }
    md.push_str("## Recent packages\n\n");
    if bundle.recent_packages.is_empty() {
        md.push_str("None.\n");
    }
    for v in &bundle.recent_packages {
        md.push_str(&format!(
            "- {} [{}, {}] by {} at {}\n",
            text(v, "title"),
            text(v, "package_type"),
            text(v, "status"),
            v.get("created_by")
                .and_then(|c| c.get("id"))
                .and_then(Value::as_str)
                .unwrap_or(""),
            text(v, "created_at")
        ));
    }
    md
}

fn bullet_list(md: &mut String, items: &[String], empty: &str) {
    if items.is_empty() {
        md.push_str(empty);
        md.push_str("\n\n");
        return;
    }
    for i in items {
        md.push_str(&format!("- {i}\n"));
    }
    md.push('\n');
}
