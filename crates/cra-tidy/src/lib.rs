//! The repository's tidiness rules, checked as tests: `tests/tidy.rs` runs every rule here over
//! the real tree (so `cargo test --workspace` enforces them) and over planted violations (so each
//! rule is shown to be able to fail).
//!
//! Every checker is a pure function over paths and text and returns the [`Violation`]s it found;
//! reading the repository is left to the tests. Paths are relative to the repository root and
//! written with `/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One broken rule: the file it is in and a message saying what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The file (relative to the repository root), with `:LINE` when one line is at fault.
    pub file: String,
    /// What is wrong and what to do about it.
    pub message: String,
}

impl Violation {
    fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            message: message.into(),
        }
    }

    fn at(file: &str, line: usize, message: impl Into<String>) -> Self {
        Self::new(format!("{file}:{line}"), message)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

// ---------------------------------------------------------------------------------------------
// Rule 1: module docs

/// Whether `path` is a crate root: `src/lib.rs`, `src/main.rs`, `src/bin/NAME.rs` or
/// `src/bin/NAME/main.rs` of some crate.
pub fn is_crate_root(path: &str) -> bool {
    let Some((_, in_src)) = path.rsplit_once("src/") else {
        return false;
    };
    match in_src.strip_prefix("bin/") {
        Some(bin) => match bin.split_once('/') {
            None => bin.ends_with(".rs"),
            Some((_, rest)) => rest == "main.rs",
        },
        None => in_src == "lib.rs" || in_src == "main.rs",
    }
}

/// Rule 1. Invariant: a Rust module file begins with a `//!` doc that says something; only blank
/// lines may come before it, and in a crate root also inner attributes (`#![...]`, possibly over
/// several lines).
pub fn module_doc(path: &str, text: &str) -> Option<Violation> {
    let root = is_crate_root(path);
    let mut lines = text.lines().map(str::trim);
    let mut attribute_depth = 0usize;
    for line in lines.by_ref() {
        if attribute_depth > 0 || (root && line.starts_with("#![")) {
            attribute_depth = bracket_depth_after(attribute_depth, line);
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if let Some(doc) = line.strip_prefix("//!") {
            let said = !doc.trim().is_empty()
                || lines
                    .take_while(|l| l.starts_with("//!"))
                    .any(|l| !l.trim_start_matches("//!").trim().is_empty());
            return (!said).then(|| {
                Violation::new(
                    path,
                    "the `//!` module doc is empty: say in a line or two what this module is for",
                )
            });
        }
        break;
    }
    Some(Violation::new(
        path,
        "does not begin with a `//!` module doc: add one (a line or two saying what this module \
         is for) as its first lines",
    ))
}

/// The `[`/`]` nesting depth after `line`, starting from `depth`.
fn bracket_depth_after(depth: usize, line: &str) -> usize {
    line.chars().fold(depth, |d, c| match c {
        '[' => d + 1,
        ']' => d.saturating_sub(1),
        _ => d,
    })
}

// ---------------------------------------------------------------------------------------------
// Manifests (rules 2 and 3)

/// Which table of a manifest a dependency is listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepKind {
    /// `[dependencies]` (also under `[target.'cfg(..)']`).
    Normal,
    /// `[dev-dependencies]`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

impl DepKind {
    fn table(self) -> &'static str {
        match self {
            DepKind::Normal => "dependencies",
            DepKind::Dev => "dev-dependencies",
            DepKind::Build => "build-dependencies",
        }
    }
}

/// A parsed `Cargo.toml`: the package's name and the packages it lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Where it was read (relative to the repository root).
    pub path: String,
    /// `package.name`.
    pub name: String,
    /// Every listed dependency: the package's real name (`package = ".."` when renamed).
    pub deps: Vec<(DepKind, String)>,
}

impl Manifest {
    /// Parses the manifest at `path`; an unreadable one is a violation of every manifest rule.
    pub fn parse(path: &str, text: &str) -> Result<Self, Violation> {
        let doc: toml::Table = text
            .parse()
            .map_err(|e| Violation::new(path, format!("is not valid TOML ({e}): fix it")))?;
        let name = doc
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(toml::Value::as_str)
            .ok_or_else(|| Violation::new(path, "has no `package.name`: give the crate a name"))?;
        let mut deps = Vec::new();
        let targets = doc.get("target").and_then(toml::Value::as_table);
        let scopes = std::iter::once(&doc).chain(
            targets
                .into_iter()
                .flat_map(|t| t.values().filter_map(toml::Value::as_table)),
        );
        for scope in scopes {
            for kind in [DepKind::Normal, DepKind::Dev, DepKind::Build] {
                deps.extend(listed(scope, kind).map(|dep| (kind, dep)));
            }
        }
        Ok(Self {
            path: path.to_owned(),
            name: name.to_owned(),
            deps,
        })
    }

    fn normal_deps(&self) -> impl Iterator<Item = &str> {
        self.deps
            .iter()
            .filter(|(k, _)| *k == DepKind::Normal)
            .map(|(_, d)| d.as_str())
    }
}

/// The real package names listed in `scope`'s table of `kind`.
fn listed(scope: &toml::Table, kind: DepKind) -> impl Iterator<Item = String> + '_ {
    let table = scope.get(kind.table()).and_then(toml::Value::as_table);
    table.into_iter().flatten().map(|(key, spec)| {
        spec.get("package")
            .and_then(toml::Value::as_str)
            .unwrap_or(key)
            .to_owned()
    })
}

// ---------------------------------------------------------------------------------------------
// Rule 2: protocol crates stay below the product

/// The crates that implement the protocols themselves.
pub const PROTOCOL_CRATES: [&str; 5] = [
    "cra-wire",
    "cra-trace",
    "cra-atlas",
    "cra-carp",
    "cra-relay",
];

/// The crates built on the protocols, which the protocol crates must not know about.
pub const PRODUCT_CRATES: [&str; 4] = ["cra-store", "cra-runtime", "cra-cli", "cra-conformance"];

/// Rule 2. Invariant: no protocol crate ([`PROTOCOL_CRATES`]) lists a product crate
/// ([`PRODUCT_CRATES`]) in its normal, dev or build dependencies.
pub fn protocol_dependencies(manifest: &Manifest) -> Vec<Violation> {
    if !PROTOCOL_CRATES.contains(&manifest.name.as_str()) {
        return Vec::new();
    }
    let bad = manifest
        .deps
        .iter()
        .filter(|(_, dep)| PRODUCT_CRATES.contains(&dep.as_str()));
    bad.map(|(kind, dep)| {
        Violation::new(
            &manifest.path,
            format!(
                "`{}` is a protocol crate but lists `{dep}` in [{}]: protocol crates must not \
                 depend on the product; move the code or test that needs `{dep}` into `{dep}` \
                 (or a crate above it)",
                manifest.name,
                kind.table()
            ),
        )
    })
    .collect()
}

// ---------------------------------------------------------------------------------------------
// Rule 3: no dev-dependency cycles

/// Rule 3. Invariant: no crate X lists as a dev-dependency a workspace crate Y that depends on X
/// through normal dependencies (directly or transitively). A crate listing itself (to turn on
/// its own test features) is not a cycle.
pub fn dev_dependency_cycles(manifests: &[Manifest]) -> Vec<Violation> {
    let graph: BTreeMap<&str, &Manifest> = manifests.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut found = Vec::new();
    for m in manifests {
        let dev = m.deps.iter().filter(|(k, _)| *k == DepKind::Dev);
        for (_, dep) in dev.filter(|(_, d)| *d != m.name) {
            if let Some(route) = normal_route(&graph, dep, &m.name) {
                found.push(Violation::new(
                    &m.path,
                    format!(
                        "`{}` dev-depends on `{dep}`, which depends on `{}` ({}): a \
                         dev-dependency cycle; test through a crate below `{}` instead, or move \
                         the tests that need `{dep}` into `{dep}`'s own tests",
                        m.name,
                        m.name,
                        route.join(" -> "),
                        m.name
                    ),
                ));
            }
        }
    }
    found
}

/// A chain of normal dependencies from `from` to `to` (both included), if there is one.
fn normal_route(graph: &BTreeMap<&str, &Manifest>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_owned()]];
    while let Some(route) = stack.pop() {
        let last = route.last()?.clone();
        if last == to {
            return Some(route);
        }
        let Some(manifest) = graph.get(last.as_str()) else {
            continue;
        };
        for next in manifest.normal_deps().filter(|d| seen.insert(d.to_owned())) {
            let mut longer = route.clone();
            longer.push(next.to_owned());
            stack.push(longer);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Rule 4: no crate-level lint allowances

/// Rule 4. Invariant: a crate root has no crate-wide `#![allow(..)]` or `#![expect(..)]` (also
/// not inside `#![cfg_attr(..)]`); lints are allowed item by item, with a reason.
pub fn crate_level_allows(path: &str, text: &str) -> Vec<Violation> {
    if !is_crate_root(path) {
        return Vec::new();
    }
    let lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    lines
        .filter(|(_, l)| {
            let inner = l.strip_prefix("#![").unwrap_or("");
            inner.starts_with("allow")
                || inner.starts_with("expect")
                || (inner.starts_with("cfg_attr")
                    && (inner.contains("allow") || inner.contains("expect")))
        })
        .map(|(n, l)| {
            Violation::at(
                path,
                n,
                format!(
                    "`{l}` silences lints for the whole crate: remove it and put \
                     `#[allow(LINT, reason = \"..\")]` (or fix the code) on the items that need it"
                ),
            )
        })
        .collect()
}

/// Rule 4, continued. Invariant: the workspace's lints keep `unreachable_pub` (an item is
/// `pub(crate)` unless its crate's root exports it) and every member (`(path, manifest text)`)
/// takes the workspace's lints with `[lints] workspace = true`.
pub fn workspace_lints(root: &str, members: &[(&str, &str)]) -> Vec<Violation> {
    let mut found = Vec::new();
    let kept = root
        .lines()
        .any(|l| l.trim_start().starts_with("unreachable_pub") && !l.contains("allow"));
    if !kept {
        found.push(Violation::new(
            "Cargo.toml",
            "`[workspace.lints.rust]` must set `unreachable_pub = \"warn\"`: items are \
             `pub(crate)` unless the crate's root exports them",
        ));
    }
    for (path, manifest) in members {
        let lines: Vec<&str> = manifest.lines().map(str::trim).collect();
        let inherits = lines
            .windows(2)
            .any(|w| w[0] == "[lints]" && w[1].replace(' ', "") == "workspace=true");
        if !inherits {
            found.push(Violation::new(
                *path,
                "add `[lints]` with `workspace = true`, so the workspace's lints apply here",
            ));
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Rule 5: the README's layout table

/// Rule 5. Invariant: the `## Layout` section of `README.md` names every crate directory under
/// `crates/` (as `` `crates/NAME` ``) and no crate directory that does not exist.
pub fn readme_layout(readme: &str, crate_dirs: &[&str]) -> Vec<Violation> {
    const README: &str = "README.md";
    let Some(section) = section(readme, "## Layout") else {
        return vec![Violation::new(
            README,
            "has no `## Layout` section: add one with a table row per crate directory",
        )];
    };
    let named: BTreeSet<&str> = section.into_iter().flat_map(crate_dirs_named).collect();
    let existing: BTreeSet<&str> = crate_dirs.iter().copied().collect();
    let missing = existing.difference(&named).map(|d| {
        Violation::new(
            README,
            format!(
                "the `## Layout` table has no row for `crates/{d}`: add one saying what it holds"
            ),
        )
    });
    let stale = named.difference(&existing).map(|d| {
        Violation::new(
            README,
            format!(
                "the `## Layout` table names `crates/{d}`, which is not a crate directory: \
                 remove the row or correct the name"
            ),
        )
    });
    missing.chain(stale).collect()
}

/// The lines of the section starting at the line `heading`, up to the next heading of its level
/// or above.
fn section<'a>(text: &'a str, heading: &str) -> Option<Vec<&'a str>> {
    let level = heading_level(heading)?;
    let start = text.lines().position(|l| l.trim_end() == heading)?;
    let body = text.lines().skip(start + 1);
    Some(
        body.take_while(|l| heading_level(l).is_none_or(|lv| lv > level))
            .collect(),
    )
}

/// The `#` count of a Markdown heading line.
fn heading_level(line: &str) -> Option<usize> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    (hashes > 0 && line[hashes..].starts_with(' ')).then_some(hashes)
}

/// The `NAME`s of the `` `crates/NAME` `` spans of a table row.
fn crate_dirs_named(line: &str) -> Vec<&str> {
    if !line.trim_start().starts_with('|') {
        return Vec::new();
    }
    backticked(line)
        .filter_map(|s| s.trim_end_matches('/').strip_prefix("crates/"))
        .filter(|d| !d.is_empty() && !d.contains('/'))
        .collect()
}

/// The inline code spans (between single backticks) of `line`.
fn backticked(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

// ---------------------------------------------------------------------------------------------
// Rule 6: the service layer knows no HTTP

/// What the service layer must not mention: HTTP crates and the `http` crate's paths.
pub const HTTP_WORDS: [&str; 5] = ["axum", "hyper", "tower", "http::", "reqwest"];

/// The directory of the service layer.
pub const SERVICE_DIR: &str = "crates/cra-runtime/src/service";

/// Rule 6. Invariant: no file of the service layer ([`SERVICE_DIR`]) mentions an HTTP crate
/// ([`HTTP_WORDS`]), not even in a comment: the layer is called by the HTTP routes and by
/// anything else, and knows nothing of how it was called.
pub fn http_in_service<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Violation> {
    let mut found = Vec::new();
    for (path, text) in files {
        for (n, line) in text.lines().enumerate() {
            for word in HTTP_WORDS.iter().filter(|w| line.contains(*w)) {
                found.push(Violation::at(
                    path,
                    n + 1,
                    format!(
                        "the service layer mentions `{word}`: it must not know about HTTP; move \
                         this to the routes (crates/cra-runtime/src/routes) and pass plain values"
                    ),
                ));
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Rule 7: the architecture document names functions that exist

/// The architecture document.
pub const ARCHITECTURE: &str = "docs/architecture.md";

/// The backticked Rust paths (`cra_x::module::function`, optionally with `()`) of the sections
/// of `doc` whose titles start with "The life of", with their line numbers.
pub fn life_of_paths(doc: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut inside: Option<usize> = None;
    let mut fenced = false;
    for (n, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if let Some(level) = heading_level(line).filter(|_| !fenced) {
            let title = line[level..].trim();
            if inside.is_some_and(|l| level <= l) || title.starts_with("The life of") {
                inside = title.starts_with("The life of").then_some(level);
            }
            continue;
        }
        if inside.is_some() {
            found.extend(backticked(line).filter_map(rust_path).map(|p| (n + 1, p)));
        }
    }
    found
}

/// `span` without a trailing `()` when it is a path `cra_x::a::b` of at least two identifiers
/// whose last is not capitalised (types and constants are not functions, and are not checked).
fn rust_path(span: &str) -> Option<&str> {
    let path = span.strip_suffix("()").unwrap_or(span);
    let mut segments = path.split("::");
    let ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    let first = segments.next()?;
    let last = path.rsplit("::").next()?;
    let lowercase = !last.starts_with(|c: char| c.is_uppercase());
    let shaped = first.starts_with("cra_") && path.contains("::") && lowercase;
    (shaped && ident(first) && segments.all(ident)).then_some(path)
}

/// Rule 7. Invariant: every backticked path in the "The life of" sections of
/// [`ARCHITECTURE`] names a function that exists: `cra_x::a::b::f` is `fn f` in
/// `crates/cra-x/src/a/b.rs` (or `a/b/mod.rs`; the crate root is `lib.rs`), and
/// `cra_x::a::Type::f` is `fn f` in `a.rs` (which must mention `Type`). A path naming a module
/// that exists (`cra_x::a::b`) is accepted too; capitalised names (types) are not checked. `read` returns the text
/// of a file given its path relative to the repository root, or `None` if there is none.
pub fn architecture_paths(doc: &str, read: impl Fn(&str) -> Option<String>) -> Vec<Violation> {
    let unresolved = life_of_paths(doc)
        .into_iter()
        .filter(|(_, path)| !resolves(path, &read));
    unresolved
        .map(|(n, path)| {
            Violation::at(
                ARCHITECTURE,
                n,
                format!(
                    "`{path}` names no function: no `fn {}` in the module it names (see {}); \
                     write the path of the module that defines it (re-exports do not count), or \
                     fix the document",
                    path.rsplit("::").next().unwrap_or(path),
                    candidates(path).join(" or ")
                ),
            )
        })
        .collect()
}

/// Whether `path` resolves as `module::function`, as `module::Type::method`, or names a module
/// (a file) itself.
fn resolves(path: &str, read: &impl Fn(&str) -> Option<String>) -> bool {
    let segments: Vec<&str> = path.split("::").collect();
    let function = segments.last().copied().unwrap_or_default();
    let defines = |drop: usize, must_mention: Option<&str>| {
        module_files(path, drop)
            .iter()
            .filter_map(|f| read(f))
            .any(|text| has_fn(&text, function) && must_mention.is_none_or(|t| has_word(&text, t)))
    };
    let type_name = segments.len().checked_sub(2).and_then(|i| segments.get(i));
    let module = || module_files(path, 0).iter().any(|f| read(f).is_some());
    defines(1, None) || (segments.len() > 2 && defines(2, type_name.copied())) || module()
}

/// Every file `path` could be defined in.
fn candidates(path: &str) -> Vec<String> {
    let method = path.matches("::").count() > 1;
    let mut files = module_files(path, 1);
    files.extend(method.then(|| module_files(path, 2)).into_iter().flatten());
    files
}

/// The candidate files of the module named by `path` without its last `drop` segments.
fn module_files(path: &str, drop: usize) -> Vec<String> {
    let segments: Vec<&str> = path.split("::").collect();
    let Some((krate, rest)) = segments.split_first() else {
        return Vec::new();
    };
    let modules = &rest[..rest.len().saturating_sub(drop)];
    let src = format!("crates/{}/src", krate.replace('_', "-"));
    if modules.is_empty() {
        return vec![format!("{src}/lib.rs")];
    }
    let module = modules.join("/");
    vec![
        format!("{src}/{module}.rs"),
        format!("{src}/{module}/mod.rs"),
    ]
}

/// Whether `text` has `fn NAME` with `NAME` a whole identifier.
fn has_fn(text: &str, name: &str) -> bool {
    text.match_indices("fn ").any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = &text[i + 3..];
        before.is_none_or(|c| !is_ident_char(c))
            && after
                .strip_prefix(name)
                .is_some_and(|rest| rest.chars().next().is_none_or(|c| !is_ident_char(c)))
    })
}

/// Whether `word` occurs in `text` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        before.is_none_or(|c| !is_ident_char(c)) && after.is_none_or(|c| !is_ident_char(c))
    })
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

// ---------------------------------------------------------------------------------------------
// Rule 8: a library's root indexes its modules

/// The modules a crate root declares (`mod NAME;` or `pub mod NAME;`, any visibility, with the
/// line each is on), not inline modules (`mod tests { .. }`).
fn declared_modules(text: &str) -> Vec<(usize, &str)> {
    let lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    lines
        .filter_map(|(n, l)| {
            let rest = l
                .strip_prefix("pub ")
                .or_else(|| l.strip_prefix("pub(crate) "));
            let name = rest.unwrap_or(l).strip_prefix("mod ")?.strip_suffix(';')?;
            Some((n, name.trim()))
        })
        .collect()
}

/// Rule 8. Invariant: a library's root (`src/lib.rs`) names, in its `//!` doc, every module it
/// declares (as `` [`NAME`] ``, `` `NAME` `` or a path into it, `` [`NAME::Item`] ``), so the
/// crate's index lists every module.
pub fn module_index(path: &str, text: &str) -> Vec<Violation> {
    if !path.ends_with("/src/lib.rs") {
        return Vec::new();
    }
    let doc: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("//!"))
        .collect();
    let named = |m: &str| {
        let names = |s: &str| {
            let s = s.trim_start_matches("crate::");
            s == m || s.strip_prefix(m).is_some_and(|rest| rest.starts_with("::"))
        };
        doc.iter().any(|l| backticked(l).any(names))
    };
    declared_modules(text)
        .into_iter()
        .filter(|(_, m)| !named(m))
        .map(|(n, m)| {
            Violation::at(
                path,
                n,
                format!(
                    "module `{m}` is not in the crate's index: add a line \
                     ``//! * [`{m}`]: what it is for`` to the crate root's doc"
                ),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Rule 9: TRACE events are made from typed payloads

/// The one file that builds an event draft from its parts: `cra_trace::Span`'s.
pub const EVENT_MAKER: &str = "crates/cra-trace/src/payload.rs";

/// Rule 9. Invariant: outside [`EVENT_MAKER`], no library code builds a TRACE event draft
/// (an `EventDraft { .. }` literal), so every event a producer records is a struct implementing
/// `cra_trace::Payload` made into an event by `cra_trace::Span`, and no `json!` literal can be
/// a payload. Test code (from a file's first `#[cfg(test)]` on) may build drafts freely: its
/// chains are fixtures, not records.
pub fn untyped_event_drafts(path: &str, text: &str) -> Vec<Violation> {
    if path == EVENT_MAKER {
        return Vec::new();
    }
    let library = text.lines().take_while(|l| l.trim() != "#[cfg(test)]");
    library
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//") && builds_event_draft(line))
        .map(|(n, _)| {
            Violation::at(
                path,
                n + 1,
                "an event draft is built by hand: make the payload a struct implementing \
                 `cra_trace::Payload` and the event with `cra_trace::Span` (`event` or `draft_of`)",
            )
        })
        .collect()
}

/// Whether `line` has an `EventDraft { .. }` literal (not the type's definition, an `impl` of
/// it or a function returning it).
fn builds_event_draft(line: &str) -> bool {
    line.match_indices("EventDraft {").any(|(i, _)| {
        let before = &line[..i];
        let part_of_a_longer_name = before.ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let in_a_string = before.matches('"').count() % 2 == 1;
        let path_stripped =
            before.trim_end_matches(|c: char| c.is_alphanumeric() || "_:&".contains(c));
        let named_not_built = ["->", "struct", "for", "impl"]
            .iter()
            .any(|w| path_stripped.trim_end().ends_with(w));
        !part_of_a_longer_name && !named_not_built && !in_a_string
    })
}

// ---------------------------------------------------------------------------------------------
// Rule 10: every listed dependency is used

/// The keys (the names code uses, `-` written `_`) a manifest lists in its `kind` tables,
/// including the tables under `[target.'cfg(..)']`.
fn dependency_keys(doc: &toml::Table, kind: DepKind) -> Vec<String> {
    let targets = doc.get("target").and_then(toml::Value::as_table);
    let scopes = std::iter::once(doc).chain(
        targets
            .into_iter()
            .flat_map(|t| t.values().filter_map(toml::Value::as_table)),
    );
    let tables = scopes.filter_map(|s| s.get(kind.table()).and_then(toml::Value::as_table));
    tables.flat_map(|t| t.keys().cloned()).collect()
}

/// The dependencies a manifest says are used without being named in code (a crate linked for
/// its side effects): `[package.metadata.tidy] used-without-a-path = [..]`.
fn used_without_a_path(doc: &toml::Table) -> Vec<&str> {
    let list = doc
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("tidy"))
        .and_then(|t| t.get("used-without-a-path"))
        .and_then(toml::Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(toml::Value::as_str)
        .collect()
}

/// The Rust a crate's dependencies may be used from, split by who may use what.
#[derive(Debug, Default)]
pub struct CrateSources {
    /// `src/` (the library and its binaries).
    pub library: String,
    /// `tests/`, `benches/` and `examples/` (with the library, what dev-dependencies serve).
    pub tests: String,
    /// `build.rs`.
    pub build: String,
}

/// Rule 10. Invariant: every dependency a crate lists is named in the code it serves: a normal
/// one in `src/`, a dev-dependency in `src/`, `tests/`, `benches/` or `examples/`, a build one
/// in `build.rs`; a crate depending on itself (to turn on its test features) is not checked.
/// An unused dependency costs every build its compile time and every reader a wrong lead.
pub fn unused_dependencies(path: &str, manifest: &str, code: &CrateSources) -> Vec<Violation> {
    let Ok(doc) = manifest.parse::<toml::Table>() else {
        return vec![Violation::new(path, "is not valid TOML: fix it")];
    };
    let own = doc
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .unwrap_or_default()
        .replace('-', "_");
    let exempt = used_without_a_path(&doc);
    let library_and_tests = format!("{}\n{}", code.library, code.tests);
    let mut found = Vec::new();
    for kind in [DepKind::Normal, DepKind::Dev, DepKind::Build] {
        let served = match kind {
            DepKind::Normal => code.library.as_str(),
            DepKind::Dev => library_and_tests.as_str(),
            DepKind::Build => code.build.as_str(),
        };
        for key in dependency_keys(&doc, kind) {
            let name = key.replace('-', "_");
            if name == own || exempt.contains(&key.as_str()) || has_word(served, &name) {
                continue;
            }
            found.push(Violation::new(
                path,
                format!(
                    "lists `{key}` in [{}] but no code it serves names `{name}`: remove it (or, \
                     if it is linked for a side effect, list it in \
                     `[package.metadata.tidy] used-without-a-path`)",
                    kind.table()
                ),
            ));
        }
    }
    found
}

/// Rule 10, for the workspace. Invariant: every entry of the root manifest's
/// `[workspace.dependencies]` is listed by some member (`members` are their manifests' texts).
pub fn unused_workspace_dependencies(root: &str, members: &[&str]) -> Vec<Violation> {
    const ROOT: &str = "Cargo.toml";
    let Ok(doc) = root.parse::<toml::Table>() else {
        return vec![Violation::new(ROOT, "is not valid TOML: fix it")];
    };
    let listed: BTreeSet<String> = members
        .iter()
        .filter_map(|m| m.parse::<toml::Table>().ok())
        .flat_map(|m| {
            [DepKind::Normal, DepKind::Dev, DepKind::Build]
                .into_iter()
                .flat_map(move |k| dependency_keys(&m, k))
        })
        .collect();
    let entries = doc
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(toml::Value::as_table);
    entries
        .into_iter()
        .flat_map(|t| t.keys())
        .filter(|k| !listed.contains(*k))
        .map(|k| {
            Violation::new(
                ROOT,
                format!(
                    "[workspace.dependencies] has `{k}`, which no member lists: remove the entry"
                ),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Rule 11: every declared fault point is marked

/// The registry of fault points (`cra_store::fault::POINTS`).
pub const FAULT_REGISTRY: &str = "crates/cra-store/src/fault.rs";

/// The names `registry` declares (its `name: "..."` lines).
pub fn declared_fault_points(registry: &str) -> Vec<&str> {
    registry
        .lines()
        .filter_map(|l| l.trim().strip_prefix("name: \""))
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name))
        .collect()
}

/// Rule 11. Invariant: every fault point declared in [`FAULT_REGISTRY`] is marked by a
/// `fault_point!("name")` somewhere in `files` (the macro already refuses, at compile time, a
/// name the registry does not declare). The crash suite arms every declared point and fails when
/// one is never reached, so a declared point no code marks would only fail there, late.
pub fn unmarked_fault_points<'a>(
    registry: &str,
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Violation> {
    let mut marked = BTreeSet::new();
    for (_, text) in files {
        for piece in text.split("fault_point!(\"").skip(1) {
            if let Some((name, _)) = piece.split_once('"') {
                marked.insert(name.to_owned());
            }
        }
    }
    let names = declared_fault_points(registry);
    if names.is_empty() {
        return vec![Violation::new(
            FAULT_REGISTRY,
            "declares no fault point (no `name: \"...\"` line): the crash suite would arm nothing",
        )];
    }
    names
        .into_iter()
        .filter(|n| !marked.contains(*n))
        .map(|n| {
            Violation::new(
                FAULT_REGISTRY,
                format!(
                    "declares the fault point `{n}`, which no code marks: put \
                     `cra_store::fault_point!(\"{n}\")` where the crash belongs, or remove it"
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_draft_literals_are_told_from_mentions_of_the_type() {
        assert!(builds_event_draft("    let d = EventDraft {"));
        assert!(builds_event_draft(
            "PreparedDraft::new(cra_trace::EventDraft {"
        ));
        assert!(!builds_event_draft("pub struct EventDraft {"));
        assert!(!builds_event_draft(
            "impl AsRef<EventDraft> for EventDraft {"
        ));
        assert!(!builds_event_draft(
            "    pub fn into_draft(self) -> EventDraft {"
        ));
        assert!(!builds_event_draft("struct MyEventDraft {"));
        assert!(!builds_event_draft("fn f() -> cra_trace::EventDraft {"));
        assert!(!builds_event_draft("    fn as_ref(&self) -> &EventDraft {"));
        assert!(!builds_event_draft(
            r#"    line.match_indices("EventDraft {")"#
        ));
    }

    #[test]
    fn crate_roots_are_recognised() {
        assert!(is_crate_root("crates/a/src/lib.rs"));
        assert!(is_crate_root("crates/a/src/main.rs"));
        assert!(is_crate_root("crates/a/src/bin/x.rs"));
        assert!(is_crate_root("crates/a/src/bin/x/main.rs"));
        assert!(!is_crate_root("crates/a/src/bin/x/util.rs"));
        assert!(!is_crate_root("crates/a/src/routes/lib.rs"));
    }

    #[test]
    fn function_names_match_whole_identifiers() {
        assert!(has_fn("pub fn resolve(x: u8)", "resolve"));
        assert!(has_fn("fn resolve<T>()", "resolve"));
        assert!(!has_fn("fn resolve_all()", "resolve"));
        assert!(!has_fn("fn unresolve()", "resolve"));
    }

    #[test]
    fn only_crate_paths_are_taken_from_backticks() {
        assert_eq!(rust_path("cra_x::a::f()"), Some("cra_x::a::f"));
        assert_eq!(rust_path("cra_x"), None);
        assert_eq!(rust_path("serde::Deserialize"), None);
        assert_eq!(rust_path("cra_x::a::f(1)"), None);
        assert_eq!(rust_path("cra_x::a::Carp"), None);
        assert_eq!(
            rust_path("cra_x::a::Carp::new"),
            Some("cra_x::a::Carp::new")
        );
    }
}
