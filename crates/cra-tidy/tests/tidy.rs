//! The repository's tidiness rules (see `cra_tidy`), run over the real tree and over planted
//! violations: each rule has a test that the repository keeps it and a test that its checker
//! reports a made-up breach (a rule that cannot fail checks nothing).
#![allow(
    clippy::expect_used,
    clippy::panic,
    reason = "a test binary: a repository it cannot read is a failed test"
)]

use std::fs;
use std::path::{Path, PathBuf};

use cra_tidy::*;

/// The repository root (this crate is `crates/cra-tidy`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `path` relative to the repository root, with `/`.
fn relative(path: &Path) -> String {
    let rel = path.strip_prefix(root()).unwrap_or(path);
    let parts: Vec<_> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    parts.join("/")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn fixture(name: &str) -> String {
    read(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
}

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let list = fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = list.map(|e| e.expect("a directory entry").path()).collect();
    paths.sort();
    paths
}

/// The crate directories under `crates/` (those with a `Cargo.toml`).
fn crate_dirs() -> Vec<PathBuf> {
    let dirs = entries(&root().join("crates")).into_iter();
    dirs.filter(|d| d.join("Cargo.toml").is_file()).collect()
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in entries(dir) {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Every Rust file under a `src/` of a crate or of `xtask`, with its text.
fn source_files() -> Vec<(String, String)> {
    let srcs = crate_dirs()
        .into_iter()
        .chain([root().join("xtask")])
        .map(|d| d.join("src"));
    let files = srcs.filter(|s| s.is_dir()).flat_map(|s| rust_files(&s));
    files.map(|f| (relative(&f), read(&f))).collect()
}

/// Every workspace manifest except the root's, parsed.
fn manifests() -> Vec<Manifest> {
    let dirs = crate_dirs().into_iter().chain([root().join("xtask")]);
    let parsed = dirs
        .map(|d| d.join("Cargo.toml"))
        .map(|p| Manifest::parse(&relative(&p), &read(&p)));
    parsed
        .collect::<Result<_, _>>()
        .unwrap_or_else(|v| panic!("{v}"))
}

/// Fails listing every violation of `rule`, one a line.
fn assert_kept(rule: &str, violations: Vec<Violation>) {
    let lines: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
    assert!(
        lines.is_empty(),
        "rule broken: {rule}\n{}",
        lines.join("\n")
    );
}

/// Fails unless some violation is of `file` and its message contains `words`.
fn assert_reported(violations: &[Violation], file: &str, words: &str) {
    let hit = violations
        .iter()
        .any(|v| v.file == file && v.message.contains(words));
    assert!(
        hit,
        "expected a violation of {file} saying {words:?}, got {violations:#?}"
    );
}

// Rule 1

#[test]
fn every_module_file_begins_with_a_module_doc() {
    let files = source_files();
    assert!(
        files.len() > 50,
        "found only {} source files: is the root right?",
        files.len()
    );
    let found = files.iter().filter_map(|(p, t)| module_doc(p, t)).collect();
    assert_kept("every module file begins with a `//!` doc", found);
}

#[test]
fn a_module_without_a_doc_is_reported() {
    let text = fixture("undocumented.rs");
    let v = module_doc("crates/x/src/a.rs", &text);
    assert_reported(
        v.as_slice(),
        "crates/x/src/a.rs",
        "does not begin with a `//!` module doc",
    );
    let attribute_first = "#![allow(dead_code)]\n//! Doc.\n";
    assert!(module_doc("crates/x/src/lib.rs", attribute_first).is_none());
    assert!(
        module_doc("crates/x/src/a.rs", attribute_first).is_some(),
        "only roots"
    );
    assert!(
        module_doc("crates/x/src/a.rs", "\n//!\n//!   \nfn f() {}\n").is_some(),
        "empty"
    );
}

// Rule 2

#[test]
fn protocol_crates_do_not_depend_on_the_product() {
    let manifests = manifests();
    for name in PROTOCOL_CRATES {
        let present = manifests.iter().any(|m| m.name == name);
        assert!(
            present,
            "no crate `{name}` found: update PROTOCOL_CRATES in cra-tidy"
        );
    }
    let found = manifests.iter().flat_map(protocol_dependencies).collect();
    assert_kept(
        "protocol crates do not depend on store, runtime, cli or conformance",
        found,
    );
}

#[test]
fn a_protocol_crate_depending_on_the_product_is_reported() {
    let path = "crates/cra-trace/Cargo.toml";
    let m =
        Manifest::parse(path, &fixture("protocol_on_product.toml")).expect("the fixture parses");
    let found = protocol_dependencies(&m);
    assert_reported(&found, path, "lists `cra-store` in [dev-dependencies]");
    assert_reported(&found, path, "lists `cra-runtime` in [build-dependencies]");
    assert_reported(&found, path, "lists `cra-cli` in [dependencies]");
    assert_eq!(found.len(), 3, "{found:#?}");
}

// Rule 3

#[test]
fn no_crate_dev_depends_on_a_crate_that_depends_on_it() {
    assert_kept(
        "no dev-dependency cycles",
        dev_dependency_cycles(&manifests()),
    );
}

#[test]
fn a_dev_dependency_cycle_is_reported() {
    let parse = |path: &str, text: &str| Manifest::parse(path, text).expect("the fixture parses");
    let low = parse("crates/low/Cargo.toml", &fixture("self_dev.toml"));
    let mid = parse("crates/mid/Cargo.toml", &fixture("mid.toml"));
    let top = parse(
        "crates/top/Cargo.toml",
        "[package]\nname = \"top\"\n[dependencies]\nmid = { path = \"../mid\" }\n",
    );
    let bottom = parse("crates/bottom/Cargo.toml", &fixture("dev_cycle.toml"));
    let found = dev_dependency_cycles(&[low, mid, top, bottom]);
    assert_reported(&found, "crates/bottom/Cargo.toml", "(top -> mid -> bottom)");
    assert_eq!(
        found.len(),
        1,
        "a crate listing itself is no cycle: {found:#?}"
    );
}

// Rule 4

#[test]
fn no_crate_root_allows_lints_crate_wide() {
    let files = source_files();
    let found = files
        .iter()
        .flat_map(|(p, t)| crate_level_allows(p, t))
        .collect();
    assert_kept("no crate-level #![allow] / #![expect]", found);
}

#[test]
fn a_crate_level_allow_is_reported() {
    let text = fixture("crate_allow.rs");
    let found = crate_level_allows("crates/x/src/main.rs", &text);
    assert_reported(
        &found,
        "crates/x/src/main.rs:2",
        "silences lints for the whole crate",
    );
    assert_reported(
        &found,
        "crates/x/src/main.rs:3",
        "silences lints for the whole crate",
    );
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        crate_level_allows("crates/x/src/a.rs", &text).is_empty(),
        "only crate roots"
    );
}

#[test]
fn every_member_keeps_the_workspace_lints() {
    let root_manifest = read(&root().join("Cargo.toml"));
    let members: Vec<(String, String)> = member_dirs()
        .into_iter()
        .map(|d| d.join("Cargo.toml"))
        .map(|p| (relative(&p), read(&p)))
        .collect();
    let pairs: Vec<(&str, &str)> = members
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    assert_kept(
        "unreachable_pub kept; every member takes the workspace lints",
        workspace_lints(&root_manifest, &pairs),
    );
}

#[test]
fn a_dropped_lint_or_a_member_without_the_workspace_lints_is_reported() {
    let root_manifest = "[workspace.lints.rust]\nunsafe_code = \"forbid\"\n";
    let members = [
        (
            "crates/a/Cargo.toml",
            "[package]\nname = \"a\"\n[lints]\nworkspace = true\n",
        ),
        ("crates/b/Cargo.toml", "[package]\nname = \"b\"\n"),
    ];
    let found = workspace_lints(root_manifest, &members);
    assert_reported(&found, "Cargo.toml", "unreachable_pub");
    assert_reported(&found, "crates/b/Cargo.toml", "workspace = true");
    assert_eq!(found.len(), 2, "{found:#?}");
    let allowed = "[workspace.lints.rust]\nunreachable_pub = \"allow\"\n";
    assert_eq!(workspace_lints(allowed, &members[..1]).len(), 1);
}

// Rule 5

#[test]
fn the_readme_layout_names_every_crate() {
    let dirs = crate_dirs();
    let names: Vec<String> = dirs
        .iter()
        .filter_map(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_kept(
        "README's Layout names every crate",
        readme_layout(&read(&root().join("README.md")), &names),
    );
}

#[test]
fn a_missing_or_stale_layout_row_is_reported() {
    let found = readme_layout(&fixture("readme.md"), &["cra-a", "cra-b", "cra-new"]);
    assert_reported(&found, "README.md", "no row for `crates/cra-new`");
    assert_reported(&found, "README.md", "names `crates/cra-gone`, which is not");
    assert_eq!(found.len(), 2, "only the Layout section counts: {found:#?}");
    assert_reported(
        &readme_layout("# cra\n", &[]),
        "README.md",
        "no `## Layout` section",
    );
}

// Rule 6

#[test]
fn the_service_layer_uses_no_http_crate() {
    let dir = root().join(SERVICE_DIR);
    assert!(
        dir.is_dir(),
        "{SERVICE_DIR} does not exist: this rule checks the service layer, which must be there \
         (merge the branch that adds it)"
    );
    let files: Vec<(String, String)> = rust_files(&dir)
        .iter()
        .map(|f| (relative(f), read(f)))
        .collect();
    assert!(
        !files.is_empty(),
        "{SERVICE_DIR} has no Rust files: the rule would check nothing"
    );
    let found = http_in_service(files.iter().map(|(p, t)| (p.as_str(), t.as_str())));
    assert_kept("the service layer uses no HTTP crate", found);
}

#[test]
fn http_in_the_service_layer_is_reported() {
    let text = fixture("service_with_http.rs");
    let path = "crates/cra-runtime/src/service/carp.rs";
    let found = http_in_service([
        (path, text.as_str()),
        ("crates/cra-runtime/src/service/ok.rs", "//! Fine.\n"),
    ]);
    assert_reported(&found, &format!("{path}:3"), "mentions `axum`");
    assert_reported(&found, &format!("{path}:6"), "mentions `http::`");
    assert_eq!(found.len(), 2, "{found:#?}");
}

// Rule 7

#[test]
fn the_architecture_document_names_functions_that_exist() {
    let doc = root().join(ARCHITECTURE);
    assert!(
        doc.is_file(),
        "{ARCHITECTURE} does not exist: this rule checks the functions it names (merge the branch \
         that adds it)"
    );
    let text = read(&doc);
    assert!(
        !life_of_paths(&text).is_empty(),
        "{ARCHITECTURE} names no `cra_x::module::function` in a \"The life of\" section: the rule \
         would check nothing; name the functions a request goes through"
    );
    let found = architecture_paths(&text, |p| fs::read_to_string(root().join(p)).ok());
    assert_kept("docs/architecture.md names functions that exist", found);
}

#[test]
fn a_function_the_architecture_names_wrongly_is_reported() {
    let files = [
        ("crates/cra-x/src/lib.rs", "//! X.\npub fn start() {}\n"),
        (
            "crates/cra-x/src/service/carp.rs",
            "//! CARP.\nimpl Carp {\n    pub fn resolve(&self) {}\n}\n",
        ),
        (
            "crates/cra-x/src/store/mod.rs",
            "//! Store.\npub fn append_all() {}\n",
        ),
    ];
    let read = |p: &str| {
        files
            .iter()
            .find(|(f, _)| *f == p)
            .map(|(_, t)| (*t).to_owned())
    };
    let found = architecture_paths(&fixture("architecture.md"), read);
    let lines: Vec<&str> = found.iter().map(|v| v.file.as_str()).collect();
    assert_eq!(
        lines,
        [
            "docs/architecture.md:9",
            "docs/architecture.md:10",
            "docs/architecture.md:11"
        ],
        "{found:#?}"
    );
    assert_reported(
        &found,
        "docs/architecture.md:9",
        "`cra_x::service::carp::execute` names no function",
    );
    assert_reported(
        &found,
        "docs/architecture.md:9",
        "crates/cra-x/src/service/carp.rs",
    );
}

// Rule 8

#[test]
fn every_library_root_indexes_its_modules() {
    let files = source_files();
    let found = files.iter().flat_map(|(p, t)| module_index(p, t)).collect();
    assert_kept(
        "every library root's doc names each module it declares",
        found,
    );
}

#[test]
fn a_module_missing_from_the_index_is_reported() {
    let text = "//! The crate.\n//!\n//! * [`listed`]: here.\n//! * `plain`: also.\n\npub mod listed;\nmod plain;\npub mod missing;\n#[cfg(test)]\nmod tests {}\n";
    let found = module_index("crates/x/src/lib.rs", text);
    assert_reported(
        &found,
        "crates/x/src/lib.rs:8",
        "module `missing` is not in the crate's index",
    );
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        module_index("crates/x/src/main.rs", text).is_empty(),
        "only library roots"
    );
}

// Rule 9

#[test]
fn events_are_made_from_typed_payloads() {
    let files = source_files();
    assert!(
        files.iter().any(|(p, _)| p == EVENT_MAKER),
        "{EVENT_MAKER} does not exist: the rule exempts it by name, so move the exemption with it"
    );
    let found = files
        .iter()
        .flat_map(|(p, t)| untyped_event_drafts(p, t))
        .collect();
    assert_kept(
        "only cra_trace::Span builds an event draft in library code",
        found,
    );
}

#[test]
fn a_hand_built_event_is_reported() {
    let text = fixture("hand_built_event.rs");
    let path = "crates/cra-runtime/src/service/relay.rs";
    let found = untyped_event_drafts(path, &text);
    assert_reported(
        &found,
        &format!("{path}:7"),
        "make the payload a struct implementing `cra_trace::Payload`",
    );
    assert_eq!(
        found.len(),
        1,
        "the test module's draft is allowed: {found:#?}"
    );
    assert!(untyped_event_drafts(EVENT_MAKER, &text).is_empty());
}

// Rule 10

/// The Rust of `dir`'s files, one text.
fn text_of(dir: &Path) -> String {
    if !dir.is_dir() {
        return String::new();
    }
    rust_files(dir)
        .iter()
        .map(|f| read(f))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every workspace member's directory: the crates and `xtask`.
fn member_dirs() -> Vec<PathBuf> {
    crate_dirs()
        .into_iter()
        .chain([root().join("xtask")])
        .collect()
}

#[test]
fn every_listed_dependency_is_used() {
    let mut found = Vec::new();
    for dir in member_dirs() {
        let code = CrateSources {
            library: text_of(&dir.join("src")),
            tests: ["tests", "benches", "examples"]
                .iter()
                .map(|d| text_of(&dir.join(d)))
                .collect::<Vec<_>>()
                .join("\n"),
            build: fs::read_to_string(dir.join("build.rs")).unwrap_or_default(),
        };
        let manifest = dir.join("Cargo.toml");
        found.extend(unused_dependencies(
            &relative(&manifest),
            &read(&manifest),
            &code,
        ));
    }
    let members: Vec<String> = member_dirs()
        .iter()
        .map(|d| read(&d.join("Cargo.toml")))
        .collect();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    found.extend(unused_workspace_dependencies(
        &read(&root().join("Cargo.toml")),
        &members,
    ));
    assert_kept("every listed dependency is used", found);
}

#[test]
fn an_unused_dependency_is_reported() {
    let manifest = fixture("unused_dep.toml");
    let code = CrateSources {
        library: "use serde::Serialize;\nfn f() -> toml::Table { toml::Table::new() }\n".into(),
        tests: "#[test] fn t() { tempfile::tempdir(); }\n".into(),
        build: String::new(),
    };
    let found = unused_dependencies("crates/x/Cargo.toml", &manifest, &code);
    assert_reported(
        &found,
        "crates/x/Cargo.toml",
        "lists `sha2` in [dependencies]",
    );
    assert_reported(
        &found,
        "crates/x/Cargo.toml",
        "lists `proptest` in [dev-dependencies]",
    );
    assert_eq!(
        found.len(),
        2,
        "serde, toml, tempfile, the self-dependency and the exempt libc are fine: {found:#?}"
    );
    let root = "[workspace.dependencies]\nserde = \"1\"\nhex = \"0.4\"\n";
    let found = unused_workspace_dependencies(root, &[manifest.as_str()]);
    assert_reported(&found, "Cargo.toml", "has `hex`, which no member lists");
    assert_eq!(found.len(), 1, "{found:#?}");
}

// Rule 11

#[test]
fn every_declared_fault_point_is_marked() {
    let registry = read(&root().join(FAULT_REGISTRY));
    let files = source_files();
    let found = unmarked_fault_points(
        &registry,
        files.iter().map(|(p, t)| (p.as_str(), t.as_str())),
    );
    assert_kept("every declared fault point is marked", found);
}

#[test]
fn an_unmarked_fault_point_is_reported() {
    let registry = "pub const POINTS: &[FaultPoint] = &[\n    FaultPoint {\n        name: \"a.b.c\",\n    },\n    FaultPoint {\n        name: \"a.b.d\",\n    },\n];\n";
    let code = "fn f() {\n    cra_store::fault_point!(\"a.b.c\");\n}\n";
    let found = unmarked_fault_points(registry, [("crates/x/src/lib.rs", code)]);
    assert_reported(&found, FAULT_REGISTRY, "`a.b.d`, which no code marks");
    assert_eq!(found.len(), 1, "{found:#?}");
    let empty = unmarked_fault_points("", [("crates/x/src/lib.rs", code)]);
    assert_reported(&empty, FAULT_REGISTRY, "declares no fault point");
}
