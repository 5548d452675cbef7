//! Generated files: each generator renders a file's expected content; `codegen` writes it,
//! `codegen --check` compares and names every stale file with the command that fixes it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// One generated file.
struct Generated {
    /// Path relative to the workspace root.
    path: &'static str,
    /// Renders the expected content from the current file (some generators replace a region).
    render: fn(current: &str) -> Result<String>,
}

const GENERATED: &[Generated] = &[
    Generated {
        path: "specs/errors.md",
        render: errors_table,
    },
    Generated {
        path: "schemas/openapi.json",
        render: openapi,
    },
    Generated {
        path: "schemas/trace-event.schema.json",
        render: trace_event_schema,
    },
];

/// Regenerates every file, or with `check` reports the stale ones and fails. `cargo test` runs
/// the check (`generated_files_are_current`), so CI needs no step of its own for it.
pub(crate) fn run(check: bool) -> Result<()> {
    let root = workspace_root();
    let mut stale = Vec::new();
    for g in GENERATED {
        let path = root.join(g.path);
        let current = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let expected = (g.render)(&current).with_context(|| format!("rendering {}", g.path))?;
        if current == expected {
            continue;
        }
        if check {
            stale.push(g.path);
        } else {
            std::fs::write(&path, expected)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("updated {}", g.path);
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "generated files are stale: {}; run `cargo xtask codegen` and commit the result",
            stale.join(", ")
        )
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

const TABLE_START: &str = "| token | HTTP status | meaning |";

/// Replaces the token table of `specs/errors.md` (from its header row to the first blank line).
fn errors_table(current: &str) -> Result<String> {
    let start = current
        .find(TABLE_START)
        .context("specs/errors.md has no token table header")?;
    let end = current[start..]
        .find("\n\n")
        .map(|i| start + i)
        .unwrap_or(current.len());
    let mut table = format!("{TABLE_START}\n|---|---|---|");
    for t in cra_wire::Token::ALL {
        table.push_str(&format!(
            "\n| `{}` | {} | {} |",
            t.as_str(),
            t.http_status(),
            t.description()
        ));
    }
    Ok(format!("{}{}{}", &current[..start], table, &current[end..]))
}

/// The OpenAPI document of the runtime, rendered from the handlers' annotations.
fn openapi(_current: &str) -> Result<String> {
    Ok(cra_runtime::openapi::openapi_json())
}

/// The TRACE event schema, rendered from the payload structs' required members.
fn trace_event_schema(_current: &str) -> Result<String> {
    let schema = cra_carp::events::trace_event_schema();
    Ok(serde_json::to_string_pretty(&schema)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed generated files are what their generators render now.
    #[test]
    fn generated_files_are_current() {
        if let Err(e) = run(true) {
            panic!("{e:#}");
        }
    }

    /// A stale token table is rewritten (so the check above can fail), and the text around it
    /// is kept.
    #[test]
    fn a_stale_token_table_is_rendered_anew() {
        let stale =
            format!("intro\n\n{TABLE_START}\n|---|---|---|\n| `gone` | 500 | x |\n\nafter\n");
        let fresh = errors_table(&stale).unwrap();
        assert_ne!(fresh, stale);
        assert!(fresh.starts_with("intro\n\n") && fresh.ends_with("\n\nafter\n"));
        assert!(!fresh.contains("`gone`"));
        assert!(fresh.contains("| `session_not_found` | 404 |"), "{fresh}");
    }
}
