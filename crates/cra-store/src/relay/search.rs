//! The embedded backend's search for `pull` mode `relevant`: a tantivy BM25 index of package
//! chunks ([`cra_relay::search::chunks`]: title, description, each decision and open question,
//! handoff note, content_md paragraphs), English-stemmed. It is a derived view: built in memory
//! from the stored packages on first use (so it is never stale across restarts) and kept in step
//! by every write after that. Results are deduplicated by package (best chunk wins), then the
//! query's filters are applied to the packages.
//!
//! A PostgreSQL store whose bodies are encrypted cannot search them in SQL, so it searches the
//! same index, as a [`SyncedIndex`]: other replicas write too, so each search first indexes again
//! the project's packages whose stored version changed.
//!
//! The index lives in memory only (`Index::create_in_ram`): nothing of it is ever written to
//! disk, so it holds no plaintext at rest.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use cra_relay::StoredPackage;
use cra_relay::store::{RelayStoreError, SearchHit, SearchQuery};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{Index, IndexReader, IndexWriter, TantivyDocument, Term, doc};

/// Chunks fetched per requested package before deduplication and filtering.
const CHUNKS_PER_RESULT: usize = 40;

fn err(e: impl std::fmt::Display) -> RelayStoreError {
    RelayStoreError::Backend(format!("search index: {e}"))
}

struct Fields {
    /// `project_id` NUL `package_id`: a package's identity (ids are unique per project).
    key: Field,
    package_id: Field,
    project_id: Field,
    field: Field,
    text: Field,
}

/// An in-memory tantivy index over package chunks.
pub struct ChunkIndex {
    index: Index,
    fields: Fields,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
}

impl std::fmt::Debug for ChunkIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkIndex").finish_non_exhaustive()
    }
}

impl ChunkIndex {
    /// An empty index.
    pub fn new() -> Result<Self, RelayStoreError> {
        let mut b = Schema::builder();
        let text_opts = TextOptions::default()
            .set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("en_stem")
                    .set_index_option(IndexRecordOption::WithFreqsAndPositions),
            )
            .set_stored();
        let fields = Fields {
            key: b.add_text_field("key", STRING),
            package_id: b.add_text_field("package_id", STRING | STORED),
            project_id: b.add_text_field("project_id", STRING),
            field: b.add_text_field("field", STORED),
            text: b.add_text_field("text", text_opts),
        };
        let index = Index::create_in_ram(b.build());
        let writer = index.writer_with_num_threads(1, 30_000_000).map_err(err)?;
        let reader = index.reader().map_err(err)?;
        Ok(Self {
            index,
            fields,
            writer: Mutex::new(writer),
            reader,
        })
    }

    /// Replaces the chunks of each package (delete by project and id, add its chunks), then
    /// commits once.
    pub fn upsert(&self, packages: &[&StoredPackage]) -> Result<(), RelayStoreError> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        for p in packages {
            let id = p.package.package_id();
            let key = format!("{}\0{id}", p.package.project_id());
            w.delete_term(Term::from_field_text(self.fields.key, &key));
            if p.quarantined.is_some() {
                continue;
            }
            for (field, text) in cra_relay::search::chunks(&p.package) {
                w.add_document(doc!(
                    self.fields.key => key.as_str(),
                    self.fields.package_id => id,
                    self.fields.project_id => p.package.project_id(),
                    self.fields.field => field,
                    self.fields.text => text,
                ))
                .map_err(err)?;
            }
        }
        w.commit().map_err(err)?;
        drop(w);
        self.reader.reload().map_err(err)
    }

    /// The best chunk per package for `q`, best first: `(package_id, score, field, chunk)`, at
    /// most `max` packages, before filters (the caller filters and truncates).
    pub fn search(
        &self,
        q: &SearchQuery,
        max: usize,
    ) -> Result<Vec<(String, f64, String, String)>, RelayStoreError> {
        let searcher = self.reader.searcher();
        let parser = QueryParser::for_index(&self.index, vec![self.fields.text]);
        // Free text, not query syntax: keep only words so quotes or colons cannot fail a search.
        let words: String = q
            .query
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect();
        let (text_query, _) = parser.parse_query_lenient(&words);
        let project: Box<dyn Query> = Box::new(TermQuery::new(
            Term::from_field_text(self.fields.project_id, &q.project_id),
            IndexRecordOption::Basic,
        ));
        let query = BooleanQuery::new(vec![(Occur::Must, text_query), (Occur::Must, project)]);
        let limit = max.saturating_mul(CHUNKS_PER_RESULT).max(100);
        let top = searcher
            .search(&query, &TopDocs::with_limit(limit).order_by_score())
            .map_err(err)?;
        let mut best: BTreeMap<String, usize> = BTreeMap::new();
        let mut out: Vec<(String, f64, String, String)> = Vec::new();
        for (score, addr) in top {
            let d: TantivyDocument = searcher.doc(addr).map_err(err)?;
            let get = |f: Field| {
                d.get_first(f)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            let id = get(self.fields.package_id);
            if best.contains_key(&id) {
                continue;
            }
            best.insert(id.clone(), out.len());
            out.push((
                id,
                f64::from(score),
                get(self.fields.field),
                get(self.fields.text),
            ));
        }
        Ok(out)
    }
}

/// What tells a package's stored versions apart: its content hash, and whether it is quarantined.
pub type Version = (String, bool);

/// A [`ChunkIndex`] over a store that other processes write too (PostgreSQL replicas): it
/// remembers the [`Version`] of each package it indexed, so that a search can first index again
/// only the packages whose version changed ([`SyncedIndex::stale`], [`SyncedIndex::upsert`]).
/// Packages are never deleted from a Relay store, so none has to be removed.
#[derive(Debug)]
pub struct SyncedIndex {
    index: ChunkIndex,
    /// (project, package) -> the version indexed.
    seen: Mutex<HashMap<(String, String), Version>>,
}

impl SyncedIndex {
    /// An empty index.
    pub fn new() -> Result<Self, RelayStoreError> {
        Ok(Self {
            index: ChunkIndex::new()?,
            seen: Mutex::new(HashMap::new()),
        })
    }

    /// The ids among `stored` (each package of `project_id` and its version as stored) whose
    /// version is not the one indexed.
    pub fn stale(
        &self,
        project_id: &str,
        stored: impl IntoIterator<Item = (String, Version)>,
    ) -> Vec<String> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        stored
            .into_iter()
            .filter(|(id, version)| seen.get(&(project_id.to_owned(), id.clone())) != Some(version))
            .map(|(id, _)| id)
            .collect()
    }

    /// Indexes `packages` as read from the store, and remembers their versions.
    pub fn upsert(&self, packages: &[StoredPackage]) -> Result<(), RelayStoreError> {
        let refs: Vec<&StoredPackage> = packages.iter().collect();
        self.index.upsert(&refs)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for p in packages {
            let key = (
                p.package.project_id().to_owned(),
                p.package.package_id().to_owned(),
            );
            seen.insert(key, (p.content_hash.clone(), p.quarantined.is_some()));
        }
        Ok(())
    }

    /// [`ChunkIndex::search`].
    pub fn search(
        &self,
        q: &SearchQuery,
        max: usize,
    ) -> Result<Vec<(String, f64, String, String)>, RelayStoreError> {
        self.index.search(q, max)
    }
}

/// Turns index hits into [`SearchHit`]s: loads each package (of the query's project), applies
/// the query's filters, truncates to `q.limit`.
pub fn hits(
    q: &SearchQuery,
    raw: Vec<(String, f64, String, String)>,
    load: impl Fn(&str) -> Result<Option<StoredPackage>, RelayStoreError>,
) -> Result<Vec<SearchHit>, RelayStoreError> {
    let mut out = Vec::new();
    for (id, score, field, chunk) in raw {
        if out.len() >= q.limit {
            break;
        }
        let Some(p) = load(&id)? else { continue };
        if p.quarantined.is_some() || !cra_relay::search::admits(q, &p.package) {
            continue;
        }
        out.push(SearchHit {
            package: p,
            score,
            field,
            chunk,
        });
    }
    Ok(out)
}
