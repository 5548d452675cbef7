//! The hostile-input table for atlases: packed archives (`tests/fixtures/hostile/archives.json`)
//! and atlas directories (`tests/fixtures/hostile/dirs.json`). Each case is refused with a
//! clear, short error (or, for the few documented harmless forms, loads without reading anything
//! from outside the atlas), and loading never writes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use cra_atlas::load::{Limits, from_files, read_dir_files};
use cra_atlas::pack::{pack_files, read_archive_from};
use cra_atlas::{LoadError, load_dir};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::Value;

use crate::{copy_fixture, fixture};

/// Longest acceptable refusal message: errors name the offending entry, never echo a bomb.
const MAX_MESSAGE: usize = 600;

fn cases(file: &str) -> Vec<Value> {
    let path = fixture("hostile").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

fn limits(case: &Value) -> Limits {
    let mut l = Limits::default();
    let get = |k: &str| case["limits"][k].as_u64();
    if let Some(n) = get("max_files") {
        l.max_files = n as usize;
    }
    if let Some(n) = get("max_file_bytes") {
        l.max_file_bytes = n;
    }
    if let Some(n) = get("max_total_bytes") {
        l.max_total_bytes = n;
    }
    l
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn content(entry: &Value) -> Vec<u8> {
    if let Some(r) = entry.get("content_repeat") {
        let text = r["text"].as_str().unwrap();
        return text
            .repeat(r["times"].as_u64().unwrap() as usize)
            .into_bytes();
    }
    entry["content"].as_str().unwrap_or("").as_bytes().to_vec()
}

/// One raw tar entry: a GNU header with the name, type and link written byte for byte.
fn raw_entry(out: &mut Vec<u8>, entry: &Value) {
    let data = content(entry);
    let name: Vec<u8> = match entry.get("name_hex") {
        Some(h) => hex(h.as_str().unwrap()),
        None => entry["name"]
            .as_str()
            .unwrap_or("././@LongLink")
            .as_bytes()
            .to_vec(),
    };
    let kind = entry["type"].as_str().unwrap().as_bytes()[0];
    let mut h = tar::Header::new_gnu();
    {
        let old = h.as_old_mut();
        let n = name.len().min(old.name.len());
        old.name[..n].copy_from_slice(&name[..n]);
        if let Some(link) = entry["link"].as_str() {
            let l = link.len().min(old.linkname.len());
            old.linkname[..l].copy_from_slice(&link.as_bytes()[..l]);
        }
    }
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(entry["size"].as_u64().unwrap_or(data.len() as u64));
    h.set_cksum();
    if entry["bad_checksum"].as_bool() == Some(true) {
        h.as_old_mut().cksum[0] ^= 0x07;
    }
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn minimal_files() -> BTreeMap<String, Vec<u8>> {
    read_dir_files(&fixture("minimal"), Limits::default()).unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// The archive bytes a case describes.
fn archive(case: &Value) -> Vec<u8> {
    if let Some(h) = case["raw_hex"].as_str() {
        return hex(h);
    }
    let mut tar_bytes = Vec::new();
    if case["base"].as_bool() == Some(true) {
        for (path, bytes) in minimal_files() {
            let text = String::from_utf8(bytes).unwrap();
            raw_entry(
                &mut tar_bytes,
                &serde_json::json!({"name": path, "type": "0", "content": text}),
            );
        }
    }
    for entry in case["entries"].as_array().unwrap() {
        for _ in 0..entry["repeat"].as_u64().unwrap_or(1) {
            raw_entry(&mut tar_bytes, entry);
        }
    }
    if case["trailer"].as_bool() != Some(false) {
        tar_bytes.extend_from_slice(&[0u8; 1024]);
    }
    match case["gzip"].as_str() {
        Some("none") => tar_bytes,
        Some("truncated") => {
            let gz = gzip(&tar_bytes);
            gz[..gz.len() / 2].to_vec()
        }
        _ => gzip(&tar_bytes),
    }
}

/// The refusal's problems (empty when it is what the case expects).
fn check_message(name: &str, message: &str, expect: &Value) -> Vec<String> {
    let shown = &message[..message.floor_char_boundary(2000)];
    let Some(want) = expect["error"].as_str() else {
        return vec![format!(
            "case `{name}`: refused ({shown}) but expected to load"
        )];
    };
    let mut problems = Vec::new();
    if !message.contains(want) {
        problems.push(format!(
            "case `{name}`: refusal `{shown}` does not mention `{want}`"
        ));
    }
    if message.len() > MAX_MESSAGE {
        problems.push(format!(
            "case `{name}`: the refusal is {} bytes long",
            message.len()
        ));
    }
    problems
}

#[test]
fn every_hostile_archive_is_refused_clearly_or_loads_only_what_it_should() {
    let minimal_digest = load_dir(&fixture("minimal")).unwrap().digest;
    let all = cases("archives.json");
    assert!(all.len() >= 40, "the archive table shrank to {}", all.len());
    let mut problems = Vec::new();
    for case in &all {
        let name = case["name"].as_str().unwrap();
        let expect = &case["expect"];
        let bytes = archive(case);
        let outcome = read_archive_from(bytes.as_slice(), limits(case)).and_then(|files| {
            from_files(Path::new("hostile.atlas.tar.gz"), files).map_err(|e| e.to_string())
        });
        match outcome {
            Ok(atlas) => {
                if expect["ok"].as_bool() != Some(true) {
                    problems.push(format!(
                        "case `{name}`: loaded but expected `{}`",
                        expect["error"]
                    ));
                    continue;
                }
                if expect["digest_of_minimal"].as_bool() == Some(true)
                    && atlas.digest != minimal_digest
                {
                    problems.push(format!(
                        "case `{name}`: digest differs from the directory's"
                    ));
                }
                // What was read packs and reads back identically.
                let again =
                    read_archive_from(pack_files(&atlas.files).unwrap().as_slice(), limits(case));
                if again.as_ref() != Ok(&atlas.files) {
                    problems.push(format!("case `{name}`: pack/read round trip differs"));
                }
            }
            Err(message) => problems.extend(check_message(name, &message, expect)),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every path under `root` with its kind and bytes (links by target): what "nothing written"
/// compares.
fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                "dir".to_owned()
            } else if meta.is_file() {
                format!("file {:?}", std::fs::read(&p).unwrap())
            } else {
                "special".to_owned()
            };
            out.insert(p, what);
        }
    }
    out
}

fn mkfifo(path: &Path) -> bool {
    std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn every_hostile_atlas_directory_is_refused_or_reads_nothing_from_outside() {
    let all = cases("dirs.json");
    assert!(
        all.len() >= 20,
        "the directory table shrank to {}",
        all.len()
    );
    let mut problems = Vec::new();
    for case in &all {
        let name = case["name"].as_str().unwrap();
        let expect = &case["expect"];
        let (tmp, atlas) = copy_fixture("minimal");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.md"), "TOP SECRET").unwrap();
        let place = |s: &str| {
            s.replace("{outside}", &outside.display().to_string())
                .replace("{atlas}", &atlas.display().to_string())
        };
        for p in case["remove"].as_array().into_iter().flatten() {
            std::fs::remove_file(atlas.join(p.as_str().unwrap())).unwrap();
        }
        for (p, text) in case["files"].as_object().into_iter().flatten() {
            std::fs::write(atlas.join(p), text.as_str().unwrap()).unwrap();
        }
        for (p, h) in case["files_hex"].as_object().into_iter().flatten() {
            std::fs::write(atlas.join(p), hex(h.as_str().unwrap())).unwrap();
        }
        for (p, target) in case["symlinks"].as_object().into_iter().flatten() {
            std::os::unix::fs::symlink(place(target.as_str().unwrap()), atlas.join(p)).unwrap();
        }
        for (p, target) in case["hardlinks"].as_object().into_iter().flatten() {
            std::fs::hard_link(place(target.as_str().unwrap()), atlas.join(p)).unwrap();
        }
        for p in case["fifos"].as_array().into_iter().flatten() {
            if !mkfifo(&atlas.join(p.as_str().unwrap())) {
                eprintln!("case `{name}`: no mkfifo on this machine, skipped");
                continue;
            }
        }
        let before = tree(tmp.path());
        let outcome: Result<BTreeMap<String, Vec<u8>>, LoadError> = if case.get("limits").is_some()
        {
            read_dir_files(&atlas, limits(case))
        } else {
            load_dir(&atlas).map(|a| a.files)
        };
        assert_eq!(
            tree(tmp.path()),
            before,
            "case `{name}`: loading wrote to disk"
        );
        match outcome {
            Ok(files) => {
                assert_eq!(
                    expect["ok"].as_bool(),
                    Some(true),
                    "case `{name}`: loaded but expected `{}`",
                    expect["error"]
                );
                let secret = files
                    .values()
                    .any(|b| b.windows(10).any(|w| w == b"TOP SECRET"));
                assert_eq!(
                    secret,
                    expect["secret_inside"].as_bool() == Some(true),
                    "case `{name}`: what was read from outside the atlas"
                );
            }
            Err(e) => problems.extend(check_message(name, &e.to_string(), expect)),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
