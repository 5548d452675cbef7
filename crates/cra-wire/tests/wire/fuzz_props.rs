//! The cargo-fuzz targets `strict_json`, `canonical_trace` and `canonical_relay` as property
//! tests on the stable toolchain (see `fuzz/README.md`), 10,000 cases each.
//!
//! The oracles are the fuzzer's own harness code (`fuzz/src/json.rs`, included below), so CI and
//! the fuzzer check the same properties. The inputs are structured rather than random bytes: JSON
//! documents with every kind of value, spelled in varied ways (escapes in either hex case,
//! surrogate pairs, `1E5`, `-0`, big integers, whitespace), a share of them then mutated (bytes
//! deleted, inserted, duplicated, or the text cut short) so the cases land on both sides of every
//! rule; and nesting around the depth limit. Failures print proptest's seed and minimal input and
//! persist in `proptest-regressions/fuzz_props.txt`.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

#[path = "../../../../fuzz/src/json.rs"]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's public harnesses, shared with this test"
)]
mod oracles;

/// A JSON document before it is spelled out.
#[derive(Debug, Clone)]
pub(crate) enum Doc {
    Null,
    Bool(bool),
    /// Number text, RFC 8259 grammar.
    Num(String),
    Str(String),
    Arr(Vec<Doc>),
    Obj(Vec<(String, Doc)>),
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        "-?(0|[1-9][0-9]{0,40})",
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
        prop::sample::select(vec![
            "1e400",
            "-1e400",
            "1e-400",
            "-0",
            "-0.0",
            "5e-324",
            "1E5",
            "1.50",
            "1e16",
            "1e-7",
            "925957820813.90625",
            "9007199254740993",
            "18446744073709551616",
        ])
        .prop_map(str::to_owned),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,6}",
        "[ -~]{0,10}",
        "[\\x00-\\x1f\\x7f\"\\\\/a é€😀\u{ffff}\u{10ffff}]{0,8}",
        any::<String>().prop_map(|s| s.chars().take(8).collect()),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["a", "b", "A", "", "é", "😀", "\u{ffff}", "a/b", "~"])
            .prop_map(str::to_owned),
        text(),
    ]
}

/// Documents of every shape, at most a few levels deep.
pub(crate) fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        Just(Doc::Null),
        any::<bool>().prop_map(Doc::Bool),
        number().prop_map(Doc::Num),
        text().prop_map(Doc::Str),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Doc::Arr),
            prop::collection::vec((key(), inner), 0..6).prop_map(Doc::Obj),
        ]
    })
}

/// A tiny deterministic generator for spelling choices (the seed comes from proptest).
pub(crate) struct Spelling(u64);

impl Spelling {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }

    fn ws(&mut self, out: &mut String) {
        if self.one_in(4) {
            for _ in 0..(self.next() % 3) {
                out.push([' ', '\t', '\n', '\r'][(self.next() % 4) as usize]);
            }
        }
    }

    fn string(&mut self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                '/' if self.one_in(2) => Some("\\/"),
                _ => None,
            };
            let must_escape = (c as u32) < 0x20;
            if let Some(e) =
                short.filter(|_| !self.one_in(3) || must_escape || c == '"' || c == '\\')
            {
                out.push_str(e);
            } else if must_escape || c == '"' || c == '\\' || self.one_in(6) {
                let upper = self.one_in(2);
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if upper {
                        out.push_str(&format!("\\u{u:04X}"));
                    } else {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            } else {
                out.push(c);
            }
        }
        out.push('"');
    }

    /// Writes `d` as JSON text with varied (but valid) spelling.
    pub(crate) fn write(&mut self, d: &Doc, out: &mut String) {
        self.ws(out);
        match d {
            Doc::Null => out.push_str("null"),
            Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Doc::Num(n) => out.push_str(n),
            Doc::Str(s) => self.string(s, out),
            Doc::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.write(item, out);
                }
                self.ws(out);
                out.push(']');
            }
            Doc::Obj(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.ws(out);
                    self.string(k, out);
                    self.ws(out);
                    out.push(':');
                    self.write(v, out);
                }
                self.ws(out);
                out.push('}');
            }
        }
        self.ws(out);
    }
}

/// One edit of a text's bytes.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Delete(usize),
    Insert(usize, u8),
    Duplicate(usize, usize),
    Truncate(usize),
}

/// Bytes that matter to a JSON reader, for insertions.
const INTERESTING: &[u8] = b"{}[],:\"\\ 0123456789eE.+-tfnu\x00\x1f\x7f\xc3\xa9\xff\xed\xa0";

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), prop::sample::select(INTERESTING))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
        (any::<usize>(), 1..12usize).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// Applies `edits` to `bytes` (positions taken modulo the current length).
pub(crate) fn mutate(mut bytes: Vec<u8>, edits: &[Mutation]) -> Vec<u8> {
    for m in edits {
        let len = bytes.len();
        match *m {
            Mutation::Delete(p) if len > 0 => {
                bytes.remove(p % len);
            }
            Mutation::Insert(p, b) => bytes.insert(p % (len + 1), b),
            Mutation::Duplicate(p, n) if len > 0 => {
                let start = p % len;
                let piece: Vec<u8> = bytes[start..(start + n).min(len)].to_vec();
                let at = (start + n).min(len);
                bytes.splice(at..at, piece);
            }
            Mutation::Truncate(p) => bytes.truncate(p % (len + 1)),
            _ => {}
        }
    }
    bytes
}

/// A document spelled out as text.
pub(crate) fn spelled() -> impl Strategy<Value = Vec<u8>> {
    (doc(), any::<u64>()).prop_map(|(d, seed)| {
        let mut out = String::new();
        Spelling::new(seed).write(&d, &mut out);
        out.into_bytes()
    })
}

/// Structured near-valid JSON text: a spelled document, then (in about half the cases) a few
/// mutations; or nesting within a few levels of the depth limit.
pub(crate) fn json_input() -> impl Strategy<Value = Vec<u8>> {
    let mutated = (spelled(), prop::collection::vec(mutation(), 1..4))
        .prop_map(|(b, edits): (Vec<u8>, Vec<Mutation>)| mutate(b, &edits));
    let deep = (120usize..136, any::<bool>(), doc()).prop_map(|(n, objects, inner)| {
        let mut out = String::new();
        for _ in 0..n {
            out.push_str(if objects { "{\"k\":" } else { "[" });
        }
        Spelling::new(n as u64).write(&inner, &mut out);
        for _ in 0..n {
            out.push(if objects { '}' } else { ']' });
        }
        out.into_bytes()
    });
    prop_oneof![5 => spelled(), 5 => mutated, 1 => deep]
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 10_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/fuzz_props.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn strict_json(input in json_input()) {
        oracles::strict_json(&input);
    }

    #[test]
    fn canonical_trace(input in json_input()) {
        oracles::canonical_trace(&input);
    }

    #[test]
    fn canonical_relay(input in json_input()) {
        oracles::canonical_relay(&input);
    }
}
