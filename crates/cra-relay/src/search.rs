//! What search indexes and how results are shaped, shared by every backend: the chunks of a
//! package (title, description, each decision, each open question, handoff note, content_md
//! paragraphs), the filters of a `pull` relevant query, and a small pure BM25 used to rank
//! orchestrate snippets (backends use tantivy or PostgreSQL full-text search for `pull`).

use std::collections::{BTreeMap, HashMap};

use cra_wire::clock::parse_rfc3339;

use crate::digest::Snippet;
use crate::model::{Package, StoredPackage};
use crate::store::SearchQuery;

/// The fields that are searched, in the order chunks are produced.
pub const SEARCH_FIELDS: [&str; 6] = [
    "title",
    "description",
    "decisions_made",
    "open_questions",
    "handoff_note",
    "content_md",
];

/// Longest chunk of `content_md`, in characters (paragraphs are split further past this).
pub const MAX_CHUNK_CHARS: usize = 1200;

/// The searchable chunks of a package: `(field, text)`, non-empty, in a fixed order.
pub fn chunks(p: &Package) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut push = |field: &'static str, text: &str| {
        let t = text.trim();
        if !t.is_empty() {
            out.push((field, t.to_owned()));
        }
    };
    push("title", p.title());
    push("description", p.description());
    for d in p.decisions() {
        push("decisions_made", d);
    }
    for q in p.open_questions() {
        push("open_questions", q);
    }
    push("handoff_note", p.handoff_note());
    for para in p.content_md().split("\n\n") {
        let chars: Vec<char> = para.chars().collect();
        for piece in chars.chunks(MAX_CHUNK_CHARS) {
            let s: String = piece.iter().collect();
            push("content_md", &s);
        }
    }
    out
}

/// Whether a package passes the filters of `q` (topic, type, every tag, created_at range).
pub fn admits(q: &SearchQuery, p: &Package) -> bool {
    if q.project_id != p.project_id() {
        return false;
    }
    if let Some(t) = &q.topic
        && p.topic() != Some(t.as_str())
    {
        return false;
    }
    if let Some(t) = &q.package_type
        && p.package_type() != t
    {
        return false;
    }
    let tags = p.tags();
    if !q.tags.iter().all(|t| tags.contains(&t.as_str())) {
        return false;
    }
    if q.since.is_some() || q.until.is_some() {
        let Ok(created) = parse_rfc3339(p.created_at()) else {
            return false;
        };
        if let Some(s) = q.since.as_deref().and_then(|s| parse_rfc3339(s).ok())
            && created < s
        {
            return false;
        }
        if let Some(u) = q.until.as_deref().and_then(|u| parse_rfc3339(u).ok())
            && created >= u
        {
            return false;
        }
    }
    true
}

/// Lowercased alphanumeric words of `text` (Unicode-aware), with a light English stemmer
/// (plural and -ing/-ed endings) so "migrations" meets "migration".
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| stem(&w.to_lowercase()))
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

const STOPWORDS: [&str; 24] = [
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on",
    "or", "that", "the", "this", "to", "was", "we", "with", "what",
];

fn stem(w: &str) -> String {
    let n = w.chars().count();
    for (suffix, min) in [("ies", 5), ("ing", 6), ("ed", 5), ("es", 5), ("s", 4)] {
        if n >= min && w.ends_with(suffix) && !w.ends_with("ss") {
            let base = &w[..w.len() - suffix.len()];
            return if suffix == "ies" {
                format!("{base}y")
            } else {
                base.to_owned()
            };
        }
    }
    w.to_owned()
}

/// Okapi BM25 (k1 = 1.2, b = 0.75) over `docs`, scoring each against `query`.
pub fn bm25(docs: &[Vec<String>], query: &[String]) -> Vec<f64> {
    let n = docs.len() as f64;
    if docs.is_empty() {
        return Vec::new();
    }
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n;
    let mut df: HashMap<&str, usize> = HashMap::new();
    for d in docs {
        let mut seen: Vec<&str> = d.iter().map(String::as_str).collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            *df.entry(t).or_default() += 1;
        }
    }
    let (k1, b) = (1.2, 0.75);
    docs.iter()
        .map(|d| {
            let mut tf: BTreeMap<&str, usize> = BTreeMap::new();
            for t in d {
                *tf.entry(t.as_str()).or_default() += 1;
            }
            let len = d.len() as f64;
            query
                .iter()
                .map(|q| {
                    let f = *tf.get(q.as_str()).unwrap_or(&0) as f64;
                    if f == 0.0 {
                        return 0.0;
                    }
                    let dfq = *df.get(q.as_str()).unwrap_or(&0) as f64;
                    let idf = ((n - dfq + 0.5) / (dfq + 0.5) + 1.0).ln();
                    idf * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

/// Snippets for a DigestBundle: with `focus`, the chunks with the best BM25 score (score > 0);
/// without, the title and handoff note of the most significant packages. Ties keep input order.
pub fn rank_snippets(packages: &[StoredPackage], focus: Option<&str>, max: usize) -> Vec<Snippet> {
    let mut all: Vec<(usize, &'static str, String)> = Vec::new();
    for (i, p) in packages.iter().enumerate() {
        for (field, text) in chunks(&p.package) {
            all.push((i, field, text));
        }
    }
    let make = |(i, field, text): &(usize, &'static str, String), score: f64| {
        let p = &packages[*i].package;
        Snippet {
            package_id: p.package_id().to_owned(),
            project_id: p.project_id().to_owned(),
            title: p.title().to_owned(),
            field: (*field).to_owned(),
            text: text.clone(),
            score,
        }
    };
    match focus.map(tokenize).filter(|q| !q.is_empty()) {
        Some(q) => {
            let docs: Vec<Vec<String>> = all.iter().map(|(_, _, t)| tokenize(t)).collect();
            let scores = bm25(&docs, &q);
            let mut order: Vec<usize> = (0..all.len()).filter(|&i| scores[i] > 0.0).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            order
                .into_iter()
                .take(max)
                .map(|i| make(&all[i], (scores[i] * 1e6).round() / 1e6))
                .collect()
        }
        None => {
            let mut order: Vec<usize> = (0..packages.len()).collect();
            order.sort_by(|&a, &b| {
                packages[b]
                    .package
                    .significance()
                    .cmp(&packages[a].package.significance())
                    .then(a.cmp(&b))
            });
            let mut out = Vec::new();
            for i in order {
                for c in all
                    .iter()
                    .filter(|c| c.0 == i && matches!(c.1, "title" | "handoff_note"))
                {
                    if out.len() < max {
                        out.push(make(c, 0.0));
                    }
                }
            }
            out
        }
    }
}
