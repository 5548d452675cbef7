//! Embeds every `migrations/NNNN_<name>.sql` file, in version order, as the table
//! `MIGRATIONS: &[(u32, &str, &str)]` (version, name, SQL) that `PgStore` applies on start. Areas
//! add their own schema by dropping a file here; two files with one version fail the build.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time: a build script binary may be reused for another checkout of the crate.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| fail("CARGO_MANIFEST_DIR is not set"));
    let dir = Path::new(&manifest_dir).join("migrations");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut found: Vec<(u32, String, String)> = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) => fail(&format!("cannot read {}: {e}", dir.display())),
    };
    for entry in entries {
        let path = match entry {
            Ok(entry) => entry.path(),
            Err(e) => fail(&format!("cannot list {}: {e}", dir.display())),
        };
        println!("cargo:rerun-if-changed={}", path.display());
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        let Some(stem) = file.strip_suffix(".sql") else {
            continue;
        };
        let Some((number, name)) = stem.split_once('_') else {
            fail(&format!("migration `{file}` must be named NNNN_<name>.sql"));
        };
        let Ok(version) = number.parse::<u32>() else {
            fail(&format!("migration `{file}` must start with a number"));
        };
        if let Some(other) = found.iter().find(|m| m.0 == version) {
            fail(&format!(
                "migrations `{file}` and `{}` share version {version}; renumber one",
                other.1
            ));
        }
        found.push((version, name.to_owned(), path.display().to_string()));
    }
    found.sort();
    let mut out = String::from("/// Embedded migrations: (version, name, SQL), ascending.\n");
    out.push_str("pub(crate) static MIGRATIONS: &[(u32, &str, &str)] = &[\n");
    for (version, name, path) in &found {
        let _ = writeln!(out, "    ({version}, {name:?}, include_str!({path:?})),");
    }
    out.push_str("];\n");
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| fail("OUT_DIR is not set"));
    if let Err(e) = std::fs::write(Path::new(&out_dir).join("migrations.rs"), out) {
        fail(&format!("cannot write migrations.rs: {e}"));
    }
}

fn fail(message: &str) -> ! {
    eprintln!("cra-store build: {message}");
    std::process::exit(1);
}
