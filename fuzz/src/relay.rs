//! Relay context packages, fact assertions and export/import files, through the real service
//! ([`cra_relay::Relay`]) over the in-memory store.
//!
//! Packages and facts are deposited into the project `fuzz-project` (created before each input);
//! a package is deposited as the actor its `created_by` names, so identity checks pass and the
//! input reaches hashing and storage.
//!
//! Oracles:
//! * package: a valid package hashes; adding a `null` member does not change the hash (Relay
//!   canonical form drops nulls); the wire form reads back and verifies; a second identical
//!   deposit is an idempotent replay with the same hash; the stored package pulls back verified;
//! * fact: whatever is asserted (twice, then invalidated), the history of that subject and
//!   predicate has no overlap and no hole;
//! * import: whatever `export::parse` accepts renders back to files that parse to the same
//!   snapshot, and rendering that again gives the same bytes; a restore into an empty store
//!   either works or is refused with an error.

use std::sync::Arc;

use cra_relay::export::{FILES, MANIFEST, parse, render};
use cra_relay::fact::{FactQuery, FactView, check_history};
use cra_relay::model::StoredPackage;
use cra_relay::session::SeededCallsigns;
use cra_relay::store::RelayStore;
use cra_relay::store::memory::MemoryStore;
use cra_relay::validate::validate_package;
use cra_relay::{Actor, ActorType, Relay};
use cra_wire::hash::sha256_hex;
use cra_wire::json::parse_strict;
use cra_wire::{FixedClock, SequentialIds};
use serde_json::Value;

/// The project every input is deposited into.
pub const PROJECT: &str = "fuzz-project";

fn relay() -> Relay {
    let clock = match FixedClock::parse("2026-03-02T10:00:00Z") {
        Ok(c) => Arc::new(c),
        Err(e) => panic!("{e}"),
    };
    let r = Relay::new(
        Arc::new(MemoryStore::new()),
        clock,
        Arc::new(SequentialIds::new(1_772_445_600_000, 11)),
        Arc::new(SeededCallsigns::new(5)),
    );
    if let Err(e) = r.create_project(PROJECT, "Fuzz project") {
        panic!("setup project: {e}");
    }
    r
}

fn actor_of(v: &Value) -> Actor {
    let id = v["created_by"]["id"].as_str().unwrap_or("fuzz-agent");
    let t = v["created_by"]["type"]
        .as_str()
        .and_then(ActorType::parse)
        .unwrap_or(ActorType::Agent);
    Actor::new(id, t)
}

/// A context package (JSON text).
pub fn relay_package(data: &[u8]) {
    let Ok(v) = parse_strict(data) else {
        return;
    };
    let Ok(package) = validate_package(&v) else {
        return;
    };
    let Ok(hash) = package.content_hash() else {
        return;
    };
    if let Value::Object(map) = &v
        && !map.contains_key("x-fuzz-null")
    {
        let mut with_null = map.clone();
        with_null.insert("x-fuzz-null".into(), Value::Null);
        match validate_package(&Value::Object(with_null)).map(|p| p.content_hash()) {
            Ok(Ok(h)) => assert_eq!(h, hash, "a null member changed the content hash"),
            other => panic!("adding a null member made the package invalid: {other:?}"),
        }
    }
    let stored = StoredPackage {
        package,
        content_hash: hash.clone(),
        quarantined: None,
    };
    match StoredPackage::from_wire(&stored.to_wire()) {
        Ok(back) => {
            assert_eq!(back.content_hash, hash);
            assert_eq!(back.verify(), Ok(()), "the wire form does not verify");
        }
        Err(e) => panic!("the wire form of a valid package is refused: {e:?}"),
    }
    let r = relay();
    let actor = actor_of(&v);
    match r.deposit(PROJECT, &actor, &v) {
        Ok(first) => {
            assert!(first.created, "the first deposit is a replay");
            assert_eq!(
                first.stored.content_hash, hash,
                "deposit hashed differently"
            );
            match r.deposit(PROJECT, &actor, &v) {
                Ok(again) => {
                    assert!(!again.created, "an identical deposit was stored twice");
                    assert_eq!(again.stored.content_hash, hash);
                }
                Err(e) => panic!("an identical deposit was refused: {e}"),
            }
            match r.pull_specific(PROJECT, first.stored.package.package_id()) {
                Ok(p) => assert_eq!(p.content_hash, hash),
                Err(e) => panic!("a deposited package does not pull back: {e}"),
            }
        }
        Err(e) => {
            let _ = (e.to_string(), e.token());
        }
    }
}

fn history_is_sound(r: &Relay, subject: &str, predicate: &str) {
    let q = FactQuery {
        subject: Some(subject.to_owned()),
        predicate: Some(predicate.to_owned()),
        view: FactView::History,
    };
    match r.facts(PROJECT, &q) {
        Ok(rows) => {
            if let Err(e) = check_history(&rows) {
                panic!("fact history of ({subject}, {predicate}) is broken: {e}\n{rows:#?}");
            }
        }
        Err(e) => panic!("history query failed: {e}"),
    }
}

/// A fact assertion body (JSON text).
pub fn relay_fact(data: &[u8]) {
    let Ok(v) = parse_strict(data) else {
        return;
    };
    let r = relay();
    let actor = Actor::new("fuzz-agent", ActorType::Agent);
    let Ok(first) = r.assert_fact(PROJECT, &actor, &v) else {
        return;
    };
    let (subject, predicate) = (first.fact.subject.clone(), first.fact.predicate.clone());
    history_is_sound(&r, &subject, &predicate);
    if let Err(e) = r.assert_fact(PROJECT, &actor, &v) {
        let _ = e.to_string();
    }
    history_is_sound(&r, &subject, &predicate);
    if let Err(e) = r.invalidate_fact(PROJECT, &subject, &predicate) {
        panic!("invalidating an asserted fact failed: {e}");
    }
    history_is_sound(&r, &subject, &predicate);
}

/// The separator between files in an import input.
pub const SEPARATOR: &[u8] = b"\n#%#\n";

/// Splits an import input into its files (`FILES` in order, then the manifest).
pub fn split_files(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut parts = Vec::new();
    let mut rest = data;
    loop {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(i) => {
                parts.push(rest[..i].to_vec());
                rest = &rest[i + SEPARATOR.len()..];
            }
            None => {
                parts.push(rest.to_vec());
                break;
            }
        }
    }
    FILES
        .iter()
        .chain(std::iter::once(&MANIFEST))
        .zip(parts)
        .map(|(n, b)| ((*n).to_owned(), b))
        .collect()
}

/// Joins export files into one import input.
pub fn join_files(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for name in FILES.iter().chain(std::iter::once(&MANIFEST)) {
        if !out.is_empty() {
            out.extend_from_slice(SEPARATOR);
        }
        if let Some((_, b)) = files.iter().find(|(n, _)| n == name) {
            out.extend_from_slice(b);
        }
    }
    out
}

/// Rewrites the manifest's per-file hashes to match the bodies (so mutated records get past the
/// integrity check and reach the record readers).
fn rehash(files: &mut [(String, Vec<u8>)]) {
    let hashes: Vec<(String, String)> = files
        .iter()
        .filter(|(n, _)| n != MANIFEST)
        .map(|(n, b)| (n.clone(), sha256_hex(b)))
        .collect();
    let Some((_, m)) = files.iter_mut().find(|(n, _)| n == MANIFEST) else {
        return;
    };
    let Ok(mut manifest) = serde_json::from_slice::<Value>(m) else {
        return;
    };
    for (name, h) in hashes {
        if let Some(f) = manifest
            .get_mut("files")
            .and_then(|f| f.get_mut(&name))
            .and_then(Value::as_object_mut)
        {
            f.insert("sha256".into(), Value::String(h));
        }
    }
    *m = manifest.to_string().into_bytes();
}

/// An export directory's files (first byte: odd means fix up the manifest hashes first).
pub fn relay_import(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mut files = split_files(rest);
    if first % 2 == 1 {
        rehash(&mut files);
    }
    let snapshot = match parse(&files) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let rendered = match render(&snapshot) {
        Ok(r) => r,
        Err(e) => panic!("an imported snapshot does not render: {e}"),
    };
    match parse(&rendered) {
        Ok(back) => {
            assert_eq!(
                back, snapshot,
                "render/parse round trip changed the snapshot"
            );
            match render(&back) {
                Ok(again) => assert_eq!(again, rendered, "rendering is not deterministic"),
                Err(e) => panic!("{e}"),
            }
        }
        Err(e) => panic!("our own export does not parse: {e}"),
    }
    let store = MemoryStore::new();
    if let Err(e) = store.restore(&snapshot) {
        let _ = e.to_string();
    }
}
