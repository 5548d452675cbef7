//! What the next start will migrate in a PostgreSQL schema ([`plan`], `cra migrate --check`),
//! and the refusals a start and a plan share (`check_applied`): a schema holding a migration
//! this build does not embed was written by a newer cra, and one whose recorded checksum differs
//! was migrated by a build whose released SQL changed.

use std::collections::BTreeMap;

use super::{MIGRATIONS, check_schema_name, count_rows, has_table, pg, quote_ident};
use crate::BackendError;
use crate::upgrade::{UpgradePlan, UpgradeStep};

/// Refuses `applied` (version → checksum, from `cra_migrations`) when it names a migration this
/// build does not embed or one whose SQL has changed since it was applied.
pub(crate) fn check_applied(applied: &BTreeMap<u32, String>) -> Result<(), BackendError> {
    for (version, checksum) in applied {
        let Some((_, name, sql)) = MIGRATIONS.iter().find(|(v, _, _)| v == version) else {
            return Err(BackendError::UnknownMigration { version: *version });
        };
        if *checksum != cra_wire::hash::sha256_hex(sql.as_bytes()) {
            return Err(BackendError::MigrationChanged {
                version: *version,
                name: (*name).to_owned(),
            });
        }
    }
    Ok(())
}

/// What the next start will do to `schema` at `url`, read in one repeatable-read transaction
/// that writes nothing.
///
/// # Errors
/// [`BackendError::InvalidSchema`], [`BackendError::Connect`], and the refusals of
/// `check_applied`.
pub fn plan(url: &str, schema: &str) -> Result<UpgradePlan, BackendError> {
    check_schema_name(schema)?;
    let mut client = super::connect_client(url)?;
    let mut tx = super::read_only_view(&mut client)?;
    let q = quote_ident(schema);
    let mut steps = Vec::new();
    let applied: BTreeMap<u32, String> = if has_table(&mut tx, schema, "cra_migrations")? {
        tx.query(
            &format!("SELECT version, checksum FROM {q}.cra_migrations"),
            &[],
        )
        .map_err(pg)?
        .iter()
        .map(|r| (r.get::<_, i32>(0).unsigned_abs(), r.get::<_, String>(1)))
        .collect()
    } else {
        steps.push(UpgradeStep::new(
            "postgres.schema",
            format!("create the schema {schema} and its migrations table"),
        ));
        BTreeMap::new()
    };
    check_applied(&applied)?;
    for (version, name, _) in MIGRATIONS {
        if !applied.contains_key(version) {
            steps.push(UpgradeStep::new(
                "postgres.migration",
                format!("apply migration {version:04} ({name})"),
            ));
        }
    }
    let mut rows = |table: &str, filter: &str| count_rows(&mut tx, schema, table, filter);
    let backfilled = rows("tlog_state", "id = 1")? > 0;
    let events = if backfilled {
        0
    } else {
        rows("trace_events", "true")?
    };
    if events > 0 {
        steps.push(UpgradeStep::new(
            "tlog.backfill",
            format!(
                "add the {events} stored events to the transparency log, in (timestamp, \
                 session, sequence) order"
            ),
        ));
    }
    // Migration 0020 leaves a row keyed '' until the store has counted the open sessions.
    let counted = has_table(&mut tx, schema, "carp_open_sessions")?
        && count_rows(&mut tx, schema, "carp_open_sessions", "agent_key = ''")? == 0;
    let sessions = if counted {
        0
    } else {
        count_rows(&mut tx, schema, "carp_sessions", "true")?
    };
    if sessions > 0 {
        steps.push(UpgradeStep::new(
            "carp.open_sessions",
            format!("count the open sessions of each agent among {sessions} sessions"),
        ));
    }
    tx.commit().map_err(pg)?;
    let newest = |v: Option<u32>| v.map_or_else(|| "none".to_owned(), |v| format!("migration {v}"));
    Ok(UpgradePlan {
        backend: "postgres",
        location: format!("schema {schema}"),
        found: newest(applied.keys().next_back().copied()),
        target: newest(MIGRATIONS.last().map(|(v, _, _)| *v)),
        steps,
    })
}
