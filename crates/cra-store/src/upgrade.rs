//! What opening a store written by an earlier cra will change (`cra migrate --check`), shared by
//! both backends: [`crate::redb::upgrade::plan`] and [`crate::pg::upgrade::plan`] read a store
//! without writing to it and answer an [`UpgradePlan`].
//!
//! Invariants (`specs/upgrades.md`):
//! - **A plan writes nothing.** It reads the store in one read transaction (redb) or one
//!   repeatable-read transaction (PostgreSQL); opening the store is what upgrades it.
//! - **An older cra refuses a newer store before it changes anything**: a data directory whose
//!   recorded data format is above [`crate::redb::upgrade::FORMAT`], or a schema holding a
//!   migration this build does not embed, is refused by name ([`crate::BackendError`]), by a plan
//!   and by an open alike.
//! - **Every step an open takes is in the plan**: each area that converts its tables on open
//!   reports the same condition it converts on, so a plan with no steps means an open changes
//!   nothing but the tables it creates empty.

/// What opening a store will change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpgradePlan {
    /// `redb` or `postgres`.
    pub backend: &'static str,
    /// The data directory, or the schema.
    pub location: String,
    /// The format the store records now: `data format N` (redb), `migration N` (PostgreSQL), or
    /// `none` for a store written before its backend recorded one.
    pub found: String,
    /// The format this build writes.
    pub target: String,
    /// What an open will do, in order; empty when the store is current.
    pub steps: Vec<UpgradeStep>,
}

impl UpgradePlan {
    /// Whether an open changes nothing.
    pub fn is_current(&self) -> bool {
        self.steps.is_empty()
    }
}

/// One change an open makes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpgradeStep {
    /// What kind of change, stable for scripts: `redb.tables`, `redb.format`, `tlog.convert`,
    /// `tlog.layout`, `tlog.backfill`, `carp.owner_index`, `relay.package_keys`, `relay.created_index`,
    /// `postgres.schema`, `postgres.migration`.
    pub step: &'static str,
    /// The change in words.
    pub description: String,
}

impl UpgradeStep {
    /// A step of kind `step`.
    pub fn new(step: &'static str, description: impl Into<String>) -> Self {
        Self {
            step,
            description: description.into(),
        }
    }
}
