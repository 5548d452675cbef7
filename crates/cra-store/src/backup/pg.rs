//! Backups of a PostgreSQL schema: one read-only repeatable-read transaction copies every table
//! out (`COPY ... TO STDOUT`, text format), parents before the tables that reference them, while
//! the replicas go on writing. A restore creates the schema with exactly the migrations the
//! backup's schema had, copies every table in, all in one transaction, then connects as a server
//! does (which applies any later migration) and verifies the store; a store that does not verify
//! is dropped again.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use postgres::{Client, Transaction};

use super::archive::{Archive, Writer, partial_path};
use super::{BackupError, FORMAT, Manifest, Verified, keys_not_included, verify_store};
use crate::pg::{
    MIGRATIONS, PgStore, check_schema_name, connect_client, count_rows, has_table, pg, quote_ident,
    read_only_view, schema_sql,
};
use crate::{BackendError, StoreConfig};

/// The entry listing the migrations the schema had (a JSON array of versions).
pub const MIGRATIONS_ENTRY: &str = "postgres/migrations.json";

/// The entry of table `table`'s rows.
fn table_entry(table: &str) -> String {
    format!("postgres/tables/{table}.copy")
}

/// Backs up `schema` at `url` into the new archive `out`. `created_at` is the time to record;
/// `progress` is told each table's name and the bytes copied.
pub fn backup(
    url: &str,
    schema: &str,
    out: &Path,
    created_at: &str,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Manifest, BackupError> {
    check_schema_name(schema)?;
    backup_with(&mut connect_client(url)?, schema, out, created_at, progress)
}

/// Backs up the schema of the open store `store` (a running server's) into the new archive
/// `out`, through one of its connections, while the replicas go on writing.
pub fn backup_store(
    store: &PgStore,
    out: &Path,
    created_at: &str,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Manifest, BackupError> {
    let mut client = store.client()?;
    backup_with(&mut client, store.schema(), out, created_at, progress)
}

fn backup_with(
    client: &mut Client,
    schema: &str,
    out: &Path,
    created_at: &str,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Manifest, BackupError> {
    let mut tx = read_only_view(client)?;
    let tables = tables_in_order(&mut tx, schema)?;
    if !tables.iter().any(|t| t == "cra_migrations") {
        return Err(BackendError::Backend(format!(
            "schema {schema} holds no cra store (no cra_migrations table)"
        ))
        .into());
    }
    let q = quote_ident(schema);
    let versions: Vec<i32> = tx
        .query(
            &format!("SELECT version FROM {q}.cra_migrations ORDER BY 1"),
            &[],
        )
        .map_err(pg)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        backend: "postgres".to_owned(),
        created_at: created_at.to_owned(),
        cra_version: env!("CARGO_PKG_VERSION").to_owned(),
        store_format: versions
            .last()
            .map_or_else(|| "none".to_owned(), |v| format!("migration {v}")),
        chains: count_rows(&mut tx, schema, "trace_heads", "true")?,
        log_size: log_size(&mut tx, schema)?,
        not_included: keys_not_included(),
        entries: Vec::new(),
    };
    let mut writer = Writer::create(out)?;
    let scratch = {
        let mut name = partial_path(out).into_os_string();
        name.push(".table");
        PathBuf::from(name)
    };
    let written = (|| {
        let list =
            serde_json::to_vec(&versions).map_err(|e| BackupError::Damaged(e.to_string()))?;
        write_file(&scratch, &list)?;
        writer.add_file(MIGRATIONS_ENTRY, &scratch)?;
        for table in &tables {
            let bytes = copy_out(&mut tx, schema, table, &scratch)?;
            progress(table, bytes);
            writer.add_file(&table_entry(table), &scratch)?;
        }
        writer.finish(manifest)
    })();
    let _ = std::fs::remove_file(&scratch);
    written
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BackupError> {
    std::fs::write(path, bytes).map_err(|e| BackupError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The log's leaves (0 for a schema from before the log).
fn log_size(tx: &mut Transaction<'_>, schema: &str) -> Result<u64, BackendError> {
    if !has_table(tx, schema, "tlog_state")? {
        return Ok(0);
    }
    let q = quote_ident(schema);
    let size: Option<i64> = tx
        .query_opt(
            &format!("SELECT size FROM {q}.tlog_state WHERE id = 1"),
            &[],
        )
        .map_err(pg)?
        .map(|r| r.get(0));
    Ok(size.unwrap_or(0).unsigned_abs())
}

/// Copies `table`'s rows out into the file `to`; answers the bytes.
fn copy_out(
    tx: &mut Transaction<'_>,
    schema: &str,
    table: &str,
    to: &Path,
) -> Result<u64, BackupError> {
    let sql = format!(
        "COPY {}.{} TO STDOUT",
        quote_ident(schema),
        quote_ident(table)
    );
    let mut reader = tx.copy_out(sql.as_str()).map_err(pg)?;
    let io = |e: std::io::Error| BackupError::Io {
        path: to.to_path_buf(),
        reason: e.to_string(),
    };
    let mut file = std::fs::File::create(to).map_err(io)?;
    std::io::copy(&mut reader, &mut file).map_err(io)
}

/// The schema's tables, each after every table it references.
fn tables_in_order(tx: &mut Transaction<'_>, schema: &str) -> Result<Vec<String>, BackendError> {
    let mut left: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1",
            &[&schema],
        )
        .map_err(pg)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let references: Vec<(String, String)> = tx
        .query(
            "SELECT child.relname::text, parent.relname::text FROM pg_constraint c
             JOIN pg_class child ON child.oid = c.conrelid
             JOIN pg_class parent ON parent.oid = c.confrelid
             JOIN pg_namespace n ON n.oid = c.connamespace
             WHERE c.contype = 'f' AND n.nspname = $1 AND c.conrelid <> c.confrelid",
            &[&schema],
        )
        .map_err(pg)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut ordered = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let placed: BTreeSet<&str> = ordered.iter().map(String::as_str).collect();
        let ready = left.iter().position(|t| {
            references
                .iter()
                .all(|(child, parent)| child != t || placed.contains(parent.as_str()))
        });
        let Some(at) = ready else {
            return Err(BackendError::Backend(format!(
                "the tables {} reference each other in a cycle",
                left.join(", ")
            )));
        };
        ordered.push(left.remove(at));
    }
    Ok(ordered)
}

/// Restores `archive` into `schema` at `url`, which must hold no table; answers what was
/// verified. A PostgreSQL archive is loaded table by table; a redb archive is moved across
/// ([`super::transfer`]).
pub fn restore(
    archive: &Archive,
    url: &str,
    schema: &str,
    config: StoreConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<Verified, BackupError> {
    if archive.manifest.backend == "redb" {
        return super::transfer::restore(archive, url, schema, config, progress);
    }
    archive.manifest.require_backend("postgres")?;
    check_schema_name(schema)?;
    let mut client = connect_client(url)?;
    load(archive, &mut client, schema)?;
    open_and_verify(&mut client, url, schema, config, archive, progress, |_| {
        Ok(())
    })
}

/// Opens the restored `schema` as a server opens it (later migrations, the log's backfill, the
/// storage keys), runs `then` on it, and verifies it against `archive`'s manifest; drops the
/// schema when any of it fails.
pub(crate) fn open_and_verify(
    client: &mut Client,
    url: &str,
    schema: &str,
    config: StoreConfig,
    archive: &Archive,
    progress: &mut dyn FnMut(u64),
    then: impl FnOnce(&PgStore) -> Result<(), BackupError>,
) -> Result<Verified, BackupError> {
    let verified = PgStore::connect_with(url, schema, config, 4)
        .map_err(BackupError::from)
        .and_then(|store| {
            then(&store)?;
            let v = verify_store(&store, &store, progress)?;
            super::check_counts(&archive.manifest, &v)?;
            Ok(v)
        });
    if verified.is_err() {
        let _ = client.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            quote_ident(schema)
        ));
    }
    verified
}

/// Refuses `schema` when it holds a table; else creates it (with `cra_migrations`) in `tx` and
/// makes it `tx`'s search path.
pub(crate) fn create_schema_in(tx: &mut Transaction<'_>, schema: &str) -> Result<(), BackupError> {
    let tables: i64 = tx
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .map_err(pg)?
        .get(0);
    if tables > 0 {
        return Err(BackupError::SchemaInUse(schema.to_owned()));
    }
    tx.batch_execute(&schema_sql(schema)).map_err(pg)?;
    tx.batch_execute(&format!("SET LOCAL search_path TO {}", quote_ident(schema)))
        .map_err(pg)?;
    Ok(())
}

/// Creates `schema` with the archive's migrations and copies its tables in, in one transaction.
fn load(archive: &Archive, client: &mut Client, schema: &str) -> Result<(), BackupError> {
    let mut tx = client.transaction().map_err(pg)?;
    create_schema_in(&mut tx, schema)?;
    let q = quote_ident(schema);
    archive.for_each(&mut |name, reader| {
        if name == MIGRATIONS_ENTRY {
            return create_tables(&mut tx, reader);
        }
        let Some(table) = name
            .strip_prefix("postgres/tables/")
            .and_then(|n| n.strip_suffix(".copy"))
        else {
            return Err(BackupError::Damaged(format!("unexpected entry {name}")));
        };
        let sql = format!("COPY {q}.{} FROM STDIN", quote_ident(table));
        let mut writer = tx.copy_in(sql.as_str()).map_err(pg)?;
        std::io::copy(reader, &mut writer).map_err(|e| BackupError::Damaged(e.to_string()))?;
        writer.finish().map_err(pg)?;
        Ok(())
    })?;
    tx.commit().map_err(pg)?;
    Ok(())
}

/// Runs the migrations the archive lists (the schema's tables as its cra made them); their
/// `cra_migrations` rows come with the table's own rows.
fn create_tables(tx: &mut Transaction<'_>, list: &mut dyn Read) -> Result<(), BackupError> {
    let mut text = Vec::new();
    list.read_to_end(&mut text)
        .map_err(|e| BackupError::Damaged(e.to_string()))?;
    let versions: Vec<u32> = serde_json::from_slice(&text)
        .map_err(|e| BackupError::Damaged(format!("{MIGRATIONS_ENTRY}: {e}")))?;
    for version in &versions {
        let Some((_, _, sql)) = MIGRATIONS.iter().find(|(v, _, _)| v == version) else {
            return Err(BackendError::UnknownMigration { version: *version }.into());
        };
        tx.batch_execute(sql).map_err(pg)?;
    }
    Ok(())
}
