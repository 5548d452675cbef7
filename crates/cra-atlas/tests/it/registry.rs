//! Registry: versions, ranges, dependencies, atomic reload.

use cra_atlas::{LoadError, Registry, RegistryError, load_dir};

use crate::copy_fixture;

fn set_version_and_deps(dir: &std::path::Path, version: &str, deps: &str) {
    let path = dir.join("atlas.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(
        "\"version\": \"1.2.0\"",
        &format!("\"version\": \"{version}\", \"dependencies\": {deps}"),
    );
    std::fs::write(path, text).unwrap();
}

#[test]
fn resolves_the_highest_version_in_range() {
    let reg = Registry::new();
    let mut dirs = Vec::new();
    for v in ["1.0.0", "1.4.2", "2.0.0", "2.1.0-rc.1"] {
        let (tmp, dir) = copy_fixture("minimal");
        set_version_and_deps(&dir, v, "{}");
        reg.insert(load_dir(&dir).unwrap()).unwrap();
        dirs.push(tmp);
    }
    let v = |range: &str| {
        reg.resolve("com.example.minimal", range)
            .map(|a| a.manifest.version.clone())
    };
    assert_eq!(v("^1").unwrap(), "1.4.2");
    assert_eq!(v("~1.0").unwrap(), "1.0.0");
    assert_eq!(v("*").unwrap(), "2.0.0");
    assert_eq!(v(">=2.1.0-rc.1").unwrap(), "2.1.0-rc.1");
    let err = v("^3").unwrap_err().to_string();
    assert!(err.contains("1.0.0, 1.4.2, 2.0.0, 2.1.0-rc.1"), "{err}");
    assert!(matches!(
        reg.resolve("com.example.nope", "*"),
        Err(RegistryError::NotFound(_))
    ));
    assert!(matches!(
        reg.resolve("com.example.minimal", "not a range"),
        Err(RegistryError::BadRange { .. })
    ));
    assert_eq!(
        reg.latest("com.example.minimal").unwrap().manifest.version,
        "2.1.0-rc.1"
    );
}

#[test]
fn same_id_and_version_with_other_content_is_refused() {
    let reg = Registry::new();
    let (_t1, a) = copy_fixture("minimal");
    let (_t2, b) = copy_fixture("minimal");
    std::fs::write(b.join("context/overview.md"), "# Other\n").unwrap();
    reg.insert(load_dir(&a).unwrap()).unwrap();
    reg.insert(load_dir(&a).unwrap()).unwrap(); // identical: no-op
    let err = reg.insert(load_dir(&b).unwrap()).unwrap_err();
    assert!(matches!(err, RegistryError::Duplicate { .. }), "{err}");
}

#[test]
fn dependencies_missing_or_unsatisfied_name_both_atlases_and_the_range() {
    let reg = Registry::new();
    let (_t1, base) = copy_fixture("minimal");
    set_version_and_deps(&base, "1.2.0", "{}");
    let (_t2, user) = copy_fixture("minimal");
    std::fs::write(
        user.join("atlas.json"),
        std::fs::read_to_string(user.join("atlas.json"))
            .unwrap()
            .replace("com.example.minimal", "com.example.user")
            .replace(
                "\"version\": \"1.2.0\"",
                "\"version\": \"0.1.0\",\n  \"dependencies\": {\"com.example.minimal\": \"^2.0\"}",
            ),
    )
    .unwrap();
    let user_atlas = load_dir(&user).unwrap();
    let err = reg.insert(user_atlas.clone()).unwrap_err();
    let RegistryError::Dependencies { diagnostics, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(diagnostics[0].code, "dependency_missing");
    assert_eq!(diagnostics[0].pointer, "/dependencies/com.example.minimal");
    assert_eq!(diagnostics[0].line, Some(5));
    reg.insert(load_dir(&base).unwrap()).unwrap();
    let err = reg.insert(user_atlas).unwrap_err();
    let RegistryError::Dependencies { diagnostics, .. } = &err else {
        panic!("{err}")
    };
    let msg = &diagnostics[0].message;
    assert_eq!(diagnostics[0].code, "dependency_unsatisfied");
    for part in [
        "com.example.user 0.1.0",
        "com.example.minimal",
        "^2.0",
        "1.2.0",
    ] {
        assert!(msg.contains(part), "{msg} lacks {part}");
    }
}

#[test]
fn reload_swaps_atomically_and_keeps_the_old_atlas_when_the_new_one_is_invalid() {
    let reg = Registry::new();
    let (_t, dir) = copy_fixture("minimal");
    let first = reg.insert(load_dir(&dir).unwrap()).unwrap();
    // A valid change with a new version replaces the old one loaded from this source.
    set_version_and_deps(&dir, "1.3.0", "{}");
    let second = reg.reload(&dir).unwrap();
    assert_eq!(second.manifest.version, "1.3.0");
    assert_eq!(reg.all().len(), 1);
    assert_eq!(first.manifest.version, "1.2.0", "old snapshots stay usable");
    // An invalid change is refused and 1.3.0 stays in force.
    std::fs::write(dir.join("atlas.json"), "{\"atlas_version\": \"1.0\"").unwrap();
    let err = reg.reload(&dir).unwrap_err();
    assert!(
        matches!(err, RegistryError::Load(LoadError::Invalid { .. })),
        "{err}"
    );
    assert_eq!(
        reg.latest("com.example.minimal").unwrap().digest,
        second.digest
    );
    // So is a valid atlas whose dependency cannot be resolved.
    std::fs::copy(
        crate::fixture("minimal").join("atlas.json"),
        dir.join("atlas.json"),
    )
    .unwrap();
    set_version_and_deps(&dir, "1.4.0", "{\"com.example.absent\": \"^1\"}");
    let err = reg.reload(&dir).unwrap_err();
    assert!(matches!(err, RegistryError::Dependencies { .. }), "{err}");
    assert_eq!(
        reg.latest("com.example.minimal").unwrap().digest,
        second.digest
    );
}

#[test]
fn concurrent_readers_always_see_a_whole_atlas() {
    let reg = std::sync::Arc::new(Registry::new());
    let (_t, dir) = copy_fixture("minimal");
    reg.insert(load_dir(&dir).unwrap()).unwrap();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let reg = reg.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let a = reg.latest("com.example.minimal").unwrap();
                    assert_eq!(a.digest, cra_atlas::atlas_digest(&a.files));
                }
            })
        })
        .collect();
    for v in ["1.2.1", "1.2.2", "1.2.3"] {
        let text = std::fs::read_to_string(dir.join("atlas.json")).unwrap();
        let cur = reg
            .latest("com.example.minimal")
            .unwrap()
            .manifest
            .version
            .clone();
        std::fs::write(
            dir.join("atlas.json"),
            text.replace(&format!("\"{cur}\""), &format!("\"{v}\"")),
        )
        .unwrap();
        reg.reload(&dir).unwrap();
    }
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(
        reg.latest("com.example.minimal").unwrap().manifest.version,
        "1.2.3"
    );
}

#[test]
fn insert_all_orders_by_dependencies_and_reports_what_cannot_resolve() {
    let (_t1, base) = copy_fixture("minimal");
    let (_t2, user) = copy_fixture("minimal");
    std::fs::write(
        user.join("atlas.json"),
        std::fs::read_to_string(user.join("atlas.json"))
            .unwrap()
            .replace("com.example.minimal", "com.example.user")
            .replace(
                "\"version\": \"1.2.0\"",
                "\"version\": \"0.1.0\",\n  \"dependencies\": {\"com.example.minimal\": \"^1.2\"}",
            ),
    )
    .unwrap();
    let reg = Registry::new();
    let done = reg
        .insert_all(vec![load_dir(&user).unwrap(), load_dir(&base).unwrap()])
        .unwrap();
    let ids: Vec<&str> = done.iter().map(|a| a.id()).collect();
    assert_eq!(ids, ["com.example.minimal", "com.example.user"]);

    let lonely = Registry::new();
    let err = lonely
        .insert_all(vec![load_dir(&user).unwrap()])
        .unwrap_err();
    assert!(matches!(err, RegistryError::Dependencies { .. }), "{err}");
    assert!(lonely.all().is_empty());
}
