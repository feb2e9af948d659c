//! One workspace's search index: documents, the BM25 and vector sides, and
//! the three search modes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::embed::{Embedder, normalise};
use super::filter::{DocAttrs, DocSource, ItemRef, SearchFilters};
use super::fuse::{Fusion, RecipeParams, rrf_term};
use super::lexical::LexicalIndex;
use super::vector::{VectorIndex, best_first, cosine};
use super::when::{Period, TimeMention, asks_when, named_periods, resolve_times};
use super::{SearchError, SearchResultOf};

/// The longest query text searched, in bytes: a longer one is cut at a
/// character boundary (the embedding model reads far less; a megabyte of
/// query would only cost memory and time).
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// The most candidates one search asks of each index: the lexical index
/// allocates its top-n collector up front, so `k` and `candidates` from a
/// caller are capped here whatever they say.
pub const MAX_CANDIDATES: usize = 10_000;

/// One indexed item: a turn (or an entry, with `pos` 0 in its own "session").
///
/// ```
/// use cairn_memory::search::SearchDoc;
/// let d = SearchDoc::new("s1:3", "s1", 3, "hi").with_speaker("Ana").with_date("8 May, 2023");
/// assert_eq!(d.lexical_text(), "[8 May, 2023] Ana: hi");
/// assert_eq!(d.dense_text(), "Ana: hi");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchDoc {
    /// Stable id (`session:seq` for turns, the entry id for entries).
    pub id: String,
    /// Session (neighbour smoothing and the session boost work inside it).
    pub session: String,
    /// Position inside the session.
    pub pos: u64,
    /// The text.
    pub text: String,
    /// Who said it.
    pub speaker: Option<String>,
    /// When, as text (indexed on the lexical side).
    pub date: Option<String>,
    /// A caption of an attached image.
    pub caption: Option<String>,
    /// Turn or entry, and what the filters look at.
    #[serde(default)]
    pub attrs: DocAttrs,
}

impl SearchDoc {
    /// A document with the required fields.
    pub fn new(id: &str, session: &str, pos: u64, text: &str) -> Self {
        SearchDoc {
            id: id.to_owned(),
            session: session.to_owned(),
            pos,
            text: text.to_owned(),
            speaker: None,
            date: None,
            caption: None,
            attrs: DocAttrs::default(),
        }
    }

    /// Sets the attributes (turn or entry, kind, subject, role, times…).
    pub fn with_attrs(mut self, attrs: DocAttrs) -> Self {
        self.attrs = attrs;
        self
    }

    /// Sets the speaker.
    pub fn with_speaker(mut self, speaker: &str) -> Self {
        self.speaker = Some(speaker.to_owned());
        self
    }

    /// Sets the date text.
    pub fn with_date(mut self, date: &str) -> Self {
        self.date = Some(date.to_owned());
        self
    }

    /// Sets an image caption.
    pub fn with_caption(mut self, caption: &str) -> Self {
        self.caption = Some(caption.to_owned());
        self
    }

    /// What BM25 indexes: `"[date] speaker: text [shared a photo: caption]"`.
    pub fn lexical_text(&self) -> String {
        match &self.date {
            Some(d) => format!("[{d}] {}", self.spoken_text()),
            None => self.spoken_text(),
        }
    }

    /// What was said, as a transcript line: `"speaker: text [shared a photo: caption]"`.
    ///
    /// ```
    /// use cairn_memory::search::SearchDoc;
    /// let doc = SearchDoc::new("D1:3", "s1", 2, "Look!").with_speaker("Mel").with_caption("a clarinet");
    /// assert_eq!(doc.spoken_text(), "Mel: Look! [shared a photo: a clarinet]");
    /// ```
    pub fn spoken_text(&self) -> String {
        let mut s = self.dense_text();
        if let Some(c) = &self.caption {
            s.push_str(&format!(" [shared a photo: {c}]"));
        }
        s
    }

    /// What is embedded: `"speaker: text"`.
    pub fn dense_text(&self) -> String {
        match &self.speaker {
            Some(sp) => format!("{sp}: {}", self.text),
            None => self.text.clone(),
        }
    }
}

/// Which rankings a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// BM25 alone.
    Bm25,
    /// Vector similarity alone.
    Dense,
    /// Both, fused.
    Hybrid,
}

impl SearchMode {
    /// The lowercase name.
    ///
    /// ```
    /// assert_eq!(cairn_memory::search::SearchMode::Hybrid.as_str(), "hybrid");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Bm25 => "bm25",
            SearchMode::Dense => "dense",
            SearchMode::Hybrid => "hybrid",
        }
    }
}

/// What to search for and how.
///
/// ```
/// use cairn_memory::search::{SearchMode, SearchOptions};
/// let o = SearchOptions::new(10).mode(SearchMode::Bm25);
/// assert_eq!((o.k, o.candidates), (10, 100));
/// ```
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Results wanted.
    pub k: usize,
    /// Requested mode (hybrid by default).
    pub mode: SearchMode,
    /// How hybrid fuses.
    pub fusion: Fusion,
    /// Candidates taken from each index before fusion.
    pub candidates: usize,
    /// How wide the vector graph's search is (HNSW's `ef`: the frontier
    /// it keeps while walking); `None` is four times the vector candidates,
    /// at least 64. Wider finds more of the true nearest neighbours in large
    /// indexes, at some latency (docs/BENCHMARKS.md, *Search latency*).
    /// Capped at the number of indexed vectors (a wider walk visits nothing
    /// more), and never narrower than the candidates asked for.
    pub graph_breadth: Option<usize>,
    /// Only these sessions (lineage, filters); all when `None`.
    pub sessions: Option<HashSet<String>>,
    /// Attribute filters and the replaced / expired exclusions.
    pub filters: SearchFilters,
    /// The time decay is judged at (`None`: nothing counts as expired).
    /// [`super::SearchService`] sets it from the memory's clock.
    pub now: Option<DateTime<Utc>>,
}

impl SearchOptions {
    /// Hybrid, default fusion, 100 candidates per index.
    pub fn new(k: usize) -> Self {
        SearchOptions {
            k,
            mode: SearchMode::Hybrid,
            fusion: Fusion::default(),
            candidates: 100,
            graph_breadth: None,
            sessions: None,
            filters: SearchFilters::default(),
            now: None,
        }
    }

    /// Sets the mode.
    pub fn mode(mut self, mode: SearchMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the fusion.
    pub fn fusion(mut self, fusion: Fusion) -> Self {
        self.fusion = fusion;
        self
    }

    /// Sets the filters.
    pub fn filters(mut self, filters: SearchFilters) -> Self {
        self.filters = filters;
        self
    }

    /// Sets the time decay is judged at.
    pub fn at(mut self, now: DateTime<Utc>) -> Self {
        self.now = Some(now);
        self
    }

    /// Restricts results to these sessions.
    pub fn sessions(mut self, sessions: impl IntoIterator<Item = String>) -> Self {
        self.sessions = Some(sessions.into_iter().collect());
        self
    }
}

/// One result with its score breakdown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SearchHit {
    /// Document id.
    pub id: String,
    /// Session.
    pub session: String,
    /// Position inside the session.
    pub pos: u64,
    /// Final score (higher is better).
    pub score: f32,
    /// 0-based rank in the BM25 candidates, if there.
    pub lexical_rank: Option<usize>,
    /// 0-based rank in the vector candidates, if there.
    pub vector_rank: Option<usize>,
    /// Raw BM25 score, if a candidate.
    pub lexical_score: Option<f32>,
    /// Exact cosine similarity to the query, when vectors exist.
    pub cosine: Option<f32>,
    /// What the hit is: a turn (session and seq) or an entry (its id).
    pub item: ItemRef,
    /// Its attributes (kind, subject, role, provenance, times, low trust).
    pub attrs: DocAttrs,
    /// True for an entry replaced by a later one (only returned when asked).
    pub replaced: bool,
    /// True for an archived entry or turn (only returned when asked).
    #[serde(default)]
    pub archived: bool,
    /// The time expressions of the item resolved against its timestamp,
    /// as `expression → period` ("last Saturday → 20 May 2023"): what a
    /// question about a date matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub times: Vec<String>,
}

/// The answer of [`SearchIndex::search`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Mode actually used.
    pub mode: SearchMode,
    /// True when vectors were asked for but unavailable, so the results are
    /// lexical only.
    pub lexical_fallback: bool,
    /// Best first.
    pub hits: Vec<SearchHit>,
    /// Microseconds spent embedding the query.
    pub embed_micros: u64,
    /// True when the answer came from an index still being built: the
    /// [`super::SearchService`] had not finished its first indexing pass
    /// over the workspace since it started (a restart rebuilds the index),
    /// so stored items may be missing. Always false from a bare
    /// [`SearchIndex`].
    #[serde(default)]
    pub catching_up: bool,
}

#[derive(Debug, Clone)]
struct DocMeta {
    id: String,
    session: String,
    pos: u64,
    speaker_key: Option<String>,
    attrs: DocAttrs,
    /// Its time expressions resolved against `attrs.timestamp`.
    times: Vec<TimeMention>,
    /// Its text (the second pass reads the words of the best hits).
    text: Box<str>,
    /// A hash of the indexed text (for `reconstruct`'s comparison).
    digest: [u8; 16],
}

impl DocMeta {
    /// Whether the item was said in the period or names a time inside it.
    fn in_period(&self, p: &Period) -> bool {
        let said = self
            .attrs
            .timestamp
            .map(|t| t.date_naive())
            .is_some_and(|d| p.start <= d && d < p.end);
        said || self.times.iter().any(|m| m.overlaps(p.start, p.end))
    }
}

/// One workspace's hybrid index. Not internally synchronised: wrap it in a
/// lock to share it (searches take `&self`, writes `&mut self`).
pub struct SearchIndex {
    embedder: Option<Arc<dyn Embedder>>,
    docs: Vec<Option<DocMeta>>,
    by_id: HashMap<String, usize>,
    sessions: HashMap<String, BTreeMap<u64, usize>>,
    /// Entries by the session their provenance names (what the second pass
    /// follows from a turn to the entries derived from it).
    derived: HashMap<String, HashSet<usize>>,
    lexical: LexicalIndex,
    vector: VectorIndex,
    /// Lower-cased first names of speakers → number of docs.
    speakers: HashMap<String, usize>,
    /// Ids of entries replaced by a later entry (set by the owner).
    replaced: HashSet<String>,
    /// Archived entries, and sessions archived up to a turn (set by the owner).
    archived: (HashSet<String>, HashMap<String, u64>),
    /// Live documents with a decay time.
    decaying: usize,
    /// Whether resolved dates are added to the lexical text.
    time_terms: bool,
    /// Whether each sentence of a multi-sentence document is embedded too
    /// (an evaluation switch; see [`RecipeParams::sentence_sim`]).
    sentence_vectors: bool,
    /// The sentence vectors of multi-sentence documents, by document.
    sentences: HashMap<usize, Vec<Vec<f32>>>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("docs", &self.by_id.len())
            .field("vectors", &self.vector.len())
            .finish()
    }
}

fn first_name(speaker: &str) -> Option<String> {
    speaker
        .split(|c: char| !c.is_alphanumeric())
        .find(|s| !s.is_empty())
        .map(str::to_lowercase)
}

impl SearchIndex {
    /// An empty index; without an embedder every search is lexical and
    /// flagged as a fallback.
    pub fn new(embedder: Option<Arc<dyn Embedder>>) -> SearchResultOf<Self> {
        Ok(SearchIndex {
            embedder,
            docs: Vec::new(),
            by_id: HashMap::new(),
            sessions: HashMap::new(),
            derived: HashMap::new(),
            lexical: LexicalIndex::new()?,
            vector: VectorIndex::new(1024),
            speakers: HashMap::new(),
            replaced: HashSet::new(),
            archived: (HashSet::new(), HashMap::new()),
            decaying: 0,
            time_terms: false,
            sentence_vectors: false,
            sentences: HashMap::new(),
        })
    }

    /// Whether documents added from now on get the absolute dates of their
    /// time expressions appended to their lexical text ("yesterday" said on
    /// 8 May 2023 also indexed as "7 May 2023"). Off by default: it did not
    /// help recall in every LoCoMo conversation (`docs/retrieval-research.md`).
    /// The expressions are resolved, used by the time boosts and shown on
    /// hits either way.
    pub fn set_time_terms(&mut self, on: bool) {
        self.time_terms = on;
    }

    /// Embeds each sentence of a multi-sentence document too, for
    /// [`RecipeParams::sentence_sim`] (off by default; an evaluation switch:
    /// it embeds two to three times as many texts).
    pub fn set_sentence_vectors(&mut self, on: bool) {
        self.sentence_vectors = on;
    }

    /// Whether vectors are available.
    pub fn has_embedder(&self) -> bool {
        self.embedder.is_some()
    }

    /// The embedder, if any.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Number of documents with a vector.
    pub fn vectors(&self) -> usize {
        self.vector.len()
    }

    /// Whether a document is indexed.
    pub fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// Embeds documents' dense texts (empty without an embedder).
    pub fn embed_docs(&self, docs: &[SearchDoc]) -> SearchResultOf<Vec<Vec<f32>>> {
        match &self.embedder {
            Some(e) => {
                let texts: Vec<String> = docs.iter().map(SearchDoc::dense_text).collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                e.embed(&refs)
            }
            None => Ok(Vec::new()),
        }
    }

    /// Embeds (when an embedder is set) and indexes documents, then commits.
    pub fn add(&mut self, docs: &[SearchDoc]) -> SearchResultOf<()> {
        let vectors = self.embed_docs(docs)?;
        self.add_with_vectors(docs, &vectors)?;
        if let (true, Some(e)) = (self.sentence_vectors, &self.embedder) {
            let mut owners = Vec::new();
            let mut texts = Vec::new();
            for d in docs {
                let parts = sentences(&d.text);
                if parts.len() < 2 {
                    continue;
                }
                for p in parts {
                    owners.push(d.id.as_str());
                    texts.push(match &d.speaker {
                        Some(sp) => format!("{sp}: {p}"),
                        None => p.to_owned(),
                    });
                }
            }
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vs = if refs.is_empty() {
                Vec::new()
            } else {
                e.embed(&refs)?
            };
            for (id, v) in owners.into_iter().zip(vs) {
                if let Some(&n) = self.by_id.get(id) {
                    self.sentences.entry(n).or_default().push(v);
                }
            }
        }
        Ok(())
    }

    /// Indexes documents with vectors computed earlier (restart catch-up);
    /// `vectors` is empty or one per document. Commits, so they are
    /// searchable when it returns.
    pub fn add_with_vectors(
        &mut self,
        docs: &[SearchDoc],
        vectors: &[Vec<f32>],
    ) -> SearchResultOf<()> {
        self.stage_with_vectors(docs, vectors)?;
        self.commit()
    }

    /// Like [`Self::add_with_vectors`] without the commit: the documents
    /// are held (and known to [`Self::contains`]) but reach lexical search
    /// only at the next [`Self::commit`]. A commit has a fixed cost (tantivy
    /// writes a segment, sized for its memory budget, however few documents
    /// it holds), so a caller adding in many small groups commits once.
    pub(crate) fn stage_with_vectors(
        &mut self,
        docs: &[SearchDoc],
        vectors: &[Vec<f32>],
    ) -> SearchResultOf<()> {
        let mut seen = HashSet::new();
        for d in docs {
            if self.by_id.contains_key(&d.id) || !seen.insert(d.id.as_str()) {
                return Err(SearchError::Duplicate(d.id.clone()));
            }
        }
        if let Some(e) = &self.embedder {
            for (d, v) in docs.iter().zip(vectors) {
                if v.len() != e.dimension() {
                    return Err(SearchError::Dimension {
                        id: d.id.clone(),
                        got: v.len(),
                        expected: e.dimension(),
                    });
                }
            }
        }
        let mut items = Vec::with_capacity(vectors.len());
        for (i, d) in docs.iter().enumerate() {
            let n = self.docs.len();
            let times = d
                .attrs
                .timestamp
                .map(|t| resolve_times(&d.text, t))
                .unwrap_or_default();
            let mut text = d.lexical_text();
            if self.time_terms && !times.is_empty() {
                let labels: Vec<String> = times.iter().map(TimeMention::label).collect();
                text.push_str(&format!(" [{}]", labels.join("; ")));
            }
            self.lexical.add(n as u64, &text)?;
            let mut digest = [0u8; 16];
            digest.copy_from_slice(&blake3::hash(text.as_bytes()).as_bytes()[..16]);
            let speaker_key = d.speaker.as_deref().and_then(first_name);
            if let Some(s) = &speaker_key {
                *self.speakers.entry(s.clone()).or_default() += 1;
            }
            if d.attrs.decay_at.is_some() {
                self.decaying += 1;
            }
            self.docs.push(Some(DocMeta {
                id: d.id.clone(),
                session: d.session.clone(),
                pos: d.pos,
                speaker_key,
                attrs: d.attrs.clone(),
                times,
                text: d.text.as_str().into(),
                digest,
            }));
            self.by_id.insert(d.id.clone(), n);
            self.sessions
                .entry(d.session.clone())
                .or_default()
                .insert(d.pos, n);
            if let (DocSource::Entry, Some(p)) = (d.attrs.source, &d.attrs.provenance) {
                self.derived
                    .entry(p.session.to_string())
                    .or_default()
                    .insert(n);
            }
            if let Some(v) = vectors.get(i) {
                items.push((n, v.clone()));
            }
        }
        self.vector.insert(&items);
        Ok(())
    }

    /// How many segments the lexical index has.
    #[cfg(test)]
    pub(crate) fn lexical_segments(&self) -> usize {
        self.lexical.segments()
    }

    /// Additions and removals staged since the last commit.
    pub(crate) fn pending(&self) -> usize {
        self.lexical.pending()
    }

    /// Makes what was staged or removed since the last commit searchable
    /// (nothing to do when nothing was).
    pub(crate) fn commit(&mut self) -> SearchResultOf<()> {
        self.lexical.commit()
    }

    /// Removes a document from both indexes (forget). Returns whether it was there.
    pub fn remove(&mut self, id: &str) -> SearchResultOf<bool> {
        let removed = self.unstage(id);
        self.commit()?;
        Ok(removed)
    }

    /// Like [`Self::remove`] without the commit: gone from dense search and
    /// from every answer at once (hits are resolved through the document
    /// table), from the lexical index at the next [`Self::commit`].
    pub(crate) fn unstage(&mut self, id: &str) -> bool {
        let Some(n) = self.by_id.remove(id) else {
            return false;
        };
        if let Some(meta) = self.docs.get_mut(n).and_then(Option::take) {
            if let Some(s) = self.sessions.get_mut(&meta.session) {
                s.remove(&meta.pos);
            }
            if let Some(p) = &meta.attrs.provenance
                && let Some(e) = self.derived.get_mut(p.session.as_str())
            {
                e.remove(&n);
            }
            if let Some(k) = &meta.speaker_key
                && let Some(c) = self.speakers.get_mut(k)
            {
                *c = c.saturating_sub(1);
            }
            if meta.attrs.decay_at.is_some() {
                self.decaying = self.decaying.saturating_sub(1);
            }
        }
        self.lexical.delete(n as u64);
        self.vector.delete(n);
        true
    }

    /// Searches. A dense or hybrid request without an embedder answers
    /// lexically with `lexical_fallback` set.
    pub fn search(&self, query: &str, options: &SearchOptions) -> SearchResultOf<SearchResult> {
        let query = crate::text::head_bytes(query, MAX_QUERY_BYTES);
        // A list question with the concept vector on embeds its content
        // words too, in the same call.
        let concept = match options.fusion {
            Fusion::Recipe(p) if p.wants_concept(query) => self.concept_text(query),
            _ => None,
        };
        let (mut vs, embed_micros) = match (&self.embedder, options.mode) {
            (Some(e), SearchMode::Dense | SearchMode::Hybrid) => {
                let t = Instant::now();
                let texts: Vec<&str> = std::iter::once(query).chain(concept.as_deref()).collect();
                let vs = e.embed(&texts)?;
                (vs, t.elapsed().as_micros() as u64)
            }
            _ => (Vec::new(), 0),
        };
        let cv = if vs.len() > 1 { vs.pop() } else { None };
        let qv = vs.pop();
        self.search_vectors(query, qv.as_deref(), cv.as_deref(), options)
            .map(|mut r| {
                r.embed_micros = embed_micros;
                r
            })
    }

    /// The content words of `query`: no stopwords, no speaker names.
    fn concept_text(&self, query: &str) -> Option<String> {
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .map(str::to_lowercase)
            .filter(|w| w.len() > 1 && !self.lexical.is_stopword(w))
            .filter(|w| self.speakers.get(w).is_none_or(|c| *c == 0))
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    }

    /// Searches with a query vector computed by the caller (`None` = lexical).
    pub fn search_with_vector(
        &self,
        query: &str,
        query_vector: Option<&[f32]>,
        options: &SearchOptions,
    ) -> SearchResultOf<SearchResult> {
        self.search_vectors(query, query_vector, None, options)
    }

    fn search_vectors(
        &self,
        query: &str,
        query_vector: Option<&[f32]>,
        concept_vector: Option<&[f32]>,
        options: &SearchOptions,
    ) -> SearchResultOf<SearchResult> {
        let query = crate::text::head_bytes(query, MAX_QUERY_BYTES);
        let wants_vectors = options.mode != SearchMode::Bm25;
        let (mode, fallback) = match (options.mode, query_vector) {
            (SearchMode::Bm25, _) => (SearchMode::Bm25, false),
            (m, Some(_)) => (m, false),
            (_, None) => (SearchMode::Bm25, wants_vectors),
        };
        let n = options.candidates.max(options.k).min(MAX_CANDIDATES);
        let allowed = self.allowed(options);
        let fusion = match options.fusion {
            Fusion::Recipe(p) => Fusion::Recipe(p.for_query(query)),
            other => other,
        };
        let lexical = if mode == SearchMode::Dense {
            Vec::new()
        } else {
            self.lexical.search(query, n, allowed.clone())?
        };
        let dense = match (mode, query_vector) {
            (SearchMode::Bm25, _) | (_, None) => Vec::new(),
            (_, Some(q)) => self.vector.search(
                q,
                n,
                options.graph_breadth,
                allowed.as_ref().map(|a| a.as_slice()),
            ),
        };
        let mut scored: HashMap<usize, f32> = HashMap::new();
        match mode {
            SearchMode::Bm25 => scored.extend(lexical.iter().map(|&(d, s)| (d as usize, s))),
            SearchMode::Dense => scored.extend(dense.iter().copied()),
            SearchMode::Hybrid => match fusion {
                Fusion::Rrf {
                    k,
                    lexical_weight,
                    vector_weight,
                } => {
                    for (r, &(d, _)) in lexical.iter().enumerate() {
                        *scored.entry(d as usize).or_default() +=
                            rrf_term(k, lexical_weight, Some(r));
                    }
                    for (r, &(d, _)) in dense.iter().enumerate() {
                        *scored.entry(d).or_default() += rrf_term(k, vector_weight, Some(r));
                    }
                }
                Fusion::Recipe(p) => {
                    let near = |v: &[f32]| {
                        self.vector.search(
                            v,
                            n,
                            options.graph_breadth,
                            allowed.as_ref().map(|a| a.as_slice()),
                        )
                    };
                    let mut extra: Vec<Extra<'_>> = Vec::new();
                    if let Some(c) = concept_vector
                        && p.concept > 0.0
                    {
                        extra.push(Extra {
                            vector: c.into(),
                            near: near(c),
                            weight: p.concept,
                        });
                    }
                    scored = self.recipe(query, query_vector, &lexical, &dense, &extra, &p);
                    if p.feedback > 0.0
                        && let Some(f) = self.feedback_vector(&scored, allowed.as_deref(), &p)
                    {
                        let near = near(&f);
                        extra.push(Extra {
                            vector: f.into(),
                            near,
                            weight: p.feedback,
                        });
                        scored = self.recipe(query, query_vector, &lexical, &dense, &extra, &p);
                    }
                    if p.follow > 0.0 {
                        self.follow(query, &mut scored, n, allowed.clone(), &p)?;
                    }
                }
            },
        }
        let lex_rank: HashMap<usize, (usize, f32)> = lexical
            .iter()
            .enumerate()
            .map(|(r, &(d, s))| (d as usize, (r, s)))
            .collect();
        let vec_rank: HashMap<usize, usize> = dense
            .iter()
            .enumerate()
            .map(|(r, &(d, _))| (d, r))
            .collect();
        let mut ranked: Vec<(usize, f32)> = scored
            .into_iter()
            .filter(|(d, _)| match (&allowed, self.meta(*d)) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(allowed), Some(_)) => allowed.get(*d).copied().unwrap_or(false),
            })
            .collect();
        ranked.sort_by(best_first);
        if let (SearchMode::Hybrid, Fusion::Recipe(p)) = (mode, &fusion) {
            if p.session_decay < 1.0 {
                ranked = self.decay_sessions(ranked, p.session_decay);
            }
            if p.session_cap > 0 {
                ranked = self.spread_sessions(ranked, p.session_cap, options.k);
            }
            if p.diversity > 0.0 {
                ranked = self.diversify(ranked, p.diversity, options.k);
            }
        }
        ranked.truncate(options.k);
        let hits = ranked
            .into_iter()
            .filter_map(|(d, score)| {
                let m = self.meta(d)?;
                Some(SearchHit {
                    id: m.id.clone(),
                    session: m.session.clone(),
                    pos: m.pos,
                    score,
                    lexical_rank: lex_rank.get(&d).map(|x| x.0),
                    vector_rank: vec_rank.get(&d).copied(),
                    lexical_score: lex_rank.get(&d).map(|x| x.1),
                    cosine: query_vector.and_then(|q| self.vector.vector(d).map(|v| cosine(q, v))),
                    item: match m.attrs.source {
                        DocSource::Turn => ItemRef::Turn {
                            session: m.session.clone(),
                            seq: m.pos,
                        },
                        DocSource::Entry => ItemRef::Entry { id: m.id.clone() },
                    },
                    attrs: m.attrs.clone(),
                    replaced: self.replaced.contains(&m.id),
                    archived: self.is_archived(m),
                    times: m.times.iter().map(TimeMention::explain).collect(),
                })
            })
            .collect();
        Ok(SearchResult {
            mode,
            lexical_fallback: fallback,
            hits,
            embed_micros: 0,
            catching_up: false,
        })
    }

    /// Marks which entry ids are replaced by a later entry (the owner reads
    /// this from the log; replaced entries are left out unless a search asks
    /// for them). Returns whether anything changed.
    pub fn set_replaced(&mut self, ids: HashSet<String>) -> bool {
        if ids == self.replaced {
            return false;
        }
        self.replaced = ids;
        true
    }

    /// The entry ids currently marked replaced.
    pub fn replaced_ids(&self) -> &HashSet<String> {
        &self.replaced
    }

    /// Marks what maintenance archived: entry ids, and sessions whose turns
    /// up to a sequence number are archived (the owner reads both from the
    /// log; archived items are left out unless a search asks for them).
    /// Returns whether anything changed.
    pub fn set_archived(
        &mut self,
        entries: HashSet<String>,
        sessions: HashMap<String, u64>,
    ) -> bool {
        if entries == self.archived.0 && sessions == self.archived.1 {
            return false;
        }
        self.archived = (entries, sessions);
        true
    }

    /// The archived entry ids and sessions (with the last archived turn).
    pub fn archived(&self) -> (&HashSet<String>, &HashMap<String, u64>) {
        (&self.archived.0, &self.archived.1)
    }

    fn is_archived(&self, m: &DocMeta) -> bool {
        match m.attrs.source {
            DocSource::Entry => self.archived.0.contains(&m.id),
            DocSource::Turn => self.archived.1.get(&m.session).is_some_and(|t| m.pos <= *t),
        }
    }

    /// A document's indexed text digest and vector: what `reconstruct`
    /// compares between the live index and one rebuilt from the record.
    pub fn fingerprint(&self, id: &str) -> Option<([u8; 16], Option<&[f32]>)> {
        let n = *self.by_id.get(id)?;
        let m = self.meta(n)?;
        Some((m.digest, self.vector.vector(n)))
    }

    /// The attributes of an indexed document.
    pub fn attrs(&self, id: &str) -> Option<&DocAttrs> {
        let n = *self.by_id.get(id)?;
        self.meta(n).map(|m| &m.attrs)
    }

    /// Ids of the indexed documents of one source (turns or entries).
    pub fn ids(&self, source: DocSource) -> Vec<String> {
        self.docs
            .iter()
            .flatten()
            .filter(|m| m.attrs.source == source)
            .map(|m| m.id.clone())
            .collect()
    }

    /// Which documents a search may return, as a bitmap over internal
    /// numbers; `None` when every live document may.
    fn allowed(&self, o: &SearchOptions) -> Option<Arc<Vec<bool>>> {
        let f = &o.filters;
        let drop_replaced = !f.include_replaced && !self.replaced.is_empty();
        let drop_expired = !f.include_expired && o.now.is_some() && self.decaying > 0;
        let drop_archived =
            !f.include_archived && (!self.archived.0.is_empty() || !self.archived.1.is_empty());
        if f.is_empty() && o.sessions.is_none() && !drop_replaced && !drop_expired && !drop_archived
        {
            return None;
        }
        let bitmap = self
            .docs
            .iter()
            .map(|m| {
                let Some(m) = m else { return false };
                if drop_replaced && self.replaced.contains(&m.id) {
                    return false;
                }
                if drop_archived && self.is_archived(m) {
                    return false;
                }
                if drop_expired
                    && let (Some(at), Some(now)) = (m.attrs.decay_at, o.now)
                    && at <= now
                {
                    return false;
                }
                f.admits(&m.session, &m.attrs, o.sessions.as_ref())
            })
            .collect();
        Some(Arc::new(bitmap))
    }

    fn meta(&self, d: usize) -> Option<&DocMeta> {
        self.docs.get(d).and_then(Option::as_ref)
    }

    /// Neighbours of `d` within `window` positions in its session (not `d`).
    fn neighbours(&self, d: usize, window: u64) -> Vec<usize> {
        let Some(m) = self.meta(d) else {
            return Vec::new();
        };
        let Some(s) = self.sessions.get(&m.session) else {
            return Vec::new();
        };
        s.range(m.pos.saturating_sub(window)..=m.pos.saturating_add(window))
            .filter(|&(_, &n)| n != d)
            .map(|(_, &n)| n)
            .collect()
    }

    /// The one speaker the query names, as a lower-cased first name.
    fn query_speaker(&self, query: &str) -> Option<String> {
        let words: HashSet<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let named: Vec<&String> = self
            .speakers
            .iter()
            .filter(|(k, c)| **c > 0 && words.contains(*k))
            .map(|(k, _)| k)
            .collect();
        match named.as_slice() {
            [one] => Some((*one).clone()),
            _ => None,
        }
    }

    /// The default fusion (see [`RecipeParams`]).
    fn recipe(
        &self,
        query: &str,
        query_vector: Option<&[f32]>,
        lexical: &[(u64, f32)],
        dense: &[(usize, f32)],
        extra: &[Extra<'_>],
        p: &RecipeParams,
    ) -> HashMap<usize, f32> {
        // Candidates: both top lists plus their neighbours.
        let mut cands: HashSet<usize> = lexical.iter().map(|&(d, _)| d as usize).collect();
        cands.extend(dense.iter().map(|&(d, _)| d));
        for e in extra {
            cands.extend(e.near.iter().map(|&(d, _)| d));
        }
        let seeds: Vec<usize> = cands.iter().copied().collect();
        for d in seeds {
            cands.extend(self.neighbours(d, p.window));
        }
        let max_bm = lexical.iter().map(|x| x.1).fold(0.0f32, f32::max);
        let bm: HashMap<usize, f32> = lexical.iter().map(|&(d, s)| (d as usize, s)).collect();
        let cos: HashMap<usize, f32> = cands
            .iter()
            .map(|&d| {
                let mut c = match (query_vector, self.vector.vector(d)) {
                    (Some(q), Some(v)) => cosine(q, v).max(0.0),
                    _ => 0.0,
                };
                if let (true, Some(q), Some(vs)) =
                    (p.sentence_sim > 0.0, query_vector, self.sentences.get(&d))
                {
                    let best = vs.iter().map(|v| cosine(q, v)).fold(c, f32::max);
                    c += p.sentence_sim * (best - c);
                }
                if let Some(v) = self.vector.vector(d) {
                    for e in extra {
                        c += e.weight * cosine(&e.vector, v).max(0.0);
                    }
                }
                (d, c)
            })
            .collect();
        let max_cos = cos.values().copied().fold(0.0f32, f32::max);
        let w = p.lexical_weight;
        let fused: HashMap<usize, f32> = cands
            .iter()
            .map(|&d| {
                let bn = if max_bm > 0.0 {
                    bm.get(&d).copied().unwrap_or(0.0) / max_bm
                } else {
                    0.0
                };
                let dn = if max_cos > 0.0 {
                    cos.get(&d).copied().unwrap_or(0.0) / max_cos
                } else {
                    0.0
                };
                (d, w * bn + (1.0 - w) * dn)
            })
            .collect();
        // Neighbour max-smoothing.
        let smoothed: HashMap<usize, f32> = fused
            .iter()
            .map(|(&d, &f)| {
                let best = self
                    .neighbours(d, p.window)
                    .into_iter()
                    .filter_map(|n| fused.get(&n).copied())
                    .fold(0.0f32, f32::max);
                (d, f + p.smoothing * best)
            })
            .collect();
        // Session boost.
        let mut session_best: HashMap<&str, f32> = HashMap::new();
        for (&d, &g) in &smoothed {
            if let Some(m) = self.meta(d) {
                let e = session_best.entry(m.session.as_str()).or_insert(0.0);
                *e = e.max(g);
            }
        }
        let mut h: HashMap<usize, f32> = smoothed
            .iter()
            .map(|(&d, &g)| {
                let sb = self
                    .meta(d)
                    .and_then(|m| session_best.get(m.session.as_str()))
                    .copied()
                    .unwrap_or(0.0);
                (d, g + p.session_boost * sb)
            })
            .collect();
        // Speaker boost.
        if let Some(sp) = self.query_speaker(query) {
            let top = h.values().copied().fold(0.0f32, f32::max);
            for (d, v) in h.iter_mut() {
                if self.meta(*d).and_then(|m| m.speaker_key.as_deref()) == Some(sp.as_str()) {
                    *v += p.speaker_boost * top;
                }
            }
        }
        self.time_boosts(query, &mut h, p);
        h
    }

    /// `ranked` (best first) with at most `cap` hits of one session among
    /// the first `k` while hits of other sessions remain: the ones held
    /// back follow, in their order.
    fn spread_sessions(
        &self,
        ranked: Vec<(usize, f32)>,
        cap: usize,
        k: usize,
    ) -> Vec<(usize, f32)> {
        let mut per_session: HashMap<&str, usize> = HashMap::new();
        // The first k under the cap, then everything else in its order.
        let mut front = Vec::with_capacity(k);
        let mut back = Vec::new();
        for (d, s) in ranked {
            let session = self.meta(d).map_or("", |m| m.session.as_str());
            let count = per_session.entry(session).or_default();
            if front.len() < k && *count < cap {
                *count += 1;
                front.push((d, s));
            } else {
                back.push((d, s));
            }
        }
        front.extend(back);
        front
    }

    /// `ranked` (best first) ranked again with each hit's score multiplied
    /// by `decay^j`, `j` the hits of its session placed before it: the best
    /// adjusted head of any session goes next. Scores are the adjusted ones.
    fn decay_sessions(&self, ranked: Vec<(usize, f32)>, decay: f32) -> Vec<(usize, f32)> {
        // Each session's hits, best first (`ranked` is in that order).
        let mut queues: Vec<std::collections::VecDeque<(usize, f32)>> = Vec::new();
        let mut of_session: HashMap<&str, usize> = HashMap::new();
        for (d, s) in ranked {
            let session = self.meta(d).map_or("", |m| m.session.as_str());
            let q = *of_session.entry(session).or_insert_with(|| {
                queues.push(Default::default());
                queues.len() - 1
            });
            queues[q].push_back((d, s));
        }
        // Heads by adjusted score, ties by document (as `ranked`).
        let mut placed = vec![0i32; queues.len()];
        let mut out = Vec::with_capacity(queues.iter().map(|q| q.len()).sum());
        loop {
            let next = queues
                .iter()
                .enumerate()
                .filter_map(|(q, queue)| {
                    let &(d, s) = queue.front()?;
                    Some((q, d, s * decay.powi(placed[q])))
                })
                .max_by(|a, b| a.2.total_cmp(&b.2).then(b.1.cmp(&a.1)));
            let Some((q, d, adjusted)) = next else { break };
            queues[q].pop_front();
            placed[q] += 1;
            out.push((d, adjusted));
        }
        out
    }

    /// `ranked` (best first) with its first `k` placed greedily by maximal
    /// marginal relevance: the max-normalised score minus `weight` times the
    /// highest cosine to a hit already placed. The rest follow in order.
    fn diversify(&self, ranked: Vec<(usize, f32)>, weight: f32, k: usize) -> Vec<(usize, f32)> {
        let top = ranked.first().map_or(0.0, |x| x.1);
        if top <= 0.0 {
            return ranked;
        }
        let mut pool: Vec<(usize, f32, f32)> =
            ranked.into_iter().map(|(d, s)| (d, s, 0.0)).collect();
        let mut out = Vec::with_capacity(pool.len());
        while out.len() < k && !pool.is_empty() {
            let best = pool
                .iter()
                .enumerate()
                .max_by(|(_, a), (_, b)| {
                    let (x, y) = (a.1 / top - weight * a.2, b.1 / top - weight * b.2);
                    x.total_cmp(&y).then(b.0.cmp(&a.0))
                })
                .map(|(i, _)| i);
            let Some(i) = best else { break };
            let (d, s, _) = pool.remove(i);
            if let Some(v) = self.vector.vector(d) {
                for c in pool.iter_mut() {
                    if let Some(w) = self.vector.vector(c.0) {
                        c.2 = c.2.max(cosine(v, w));
                    }
                }
            }
            out.push((d, s));
        }
        out.extend(pool.into_iter().map(|(d, s, _)| (d, s)));
        out
    }

    /// The mean direction of the first pass's best `feedback_seeds` hits
    /// that have a vector (pseudo-relevance feedback), unit length; `None`
    /// when none has one.
    fn feedback_vector(
        &self,
        scored: &HashMap<usize, f32>,
        allowed: Option<&Vec<bool>>,
        p: &RecipeParams,
    ) -> Option<Vec<f32>> {
        let mut best: Vec<(usize, f32)> = scored
            .iter()
            .filter(|(d, _)| allowed.is_none_or(|a| a.get(**d).copied().unwrap_or(false)))
            .map(|(&d, &s)| (d, s))
            .collect();
        best.sort_by(best_first);
        // The index holds unit vectors (the `Embedder` contract): their sum
        // points the way of their mean.
        let mut seeds = best
            .iter()
            .filter_map(|&(d, _)| self.vector.vector(d))
            .take(p.feedback_seeds);
        let mut f = seeds.next()?.to_vec();
        for v in seeds {
            f.iter_mut().zip(v).for_each(|(a, x)| *a += x);
        }
        normalise(&mut f);
        f.iter().any(|x| *x != 0.0).then_some(f)
    }

    /// The bounded second pass (one extra BM25 query): the rarest words of
    /// the best first-pass hits that the question lacks are added to its
    /// words, and what that query finds is added to the scores.
    fn follow(
        &self,
        query: &str,
        scored: &mut HashMap<usize, f32>,
        n: usize,
        allowed: Option<Arc<Vec<bool>>>,
        p: &RecipeParams,
    ) -> SearchResultOf<()> {
        let mut best: Vec<(usize, f32)> = scored.iter().map(|(&d, &s)| (d, s)).collect();
        best.sort_by(best_first);
        let Some(&(_, top)) = best.first() else {
            return Ok(());
        };
        let asked = self.lexical.query_terms(query);
        let names: HashSet<&str> = self.speakers.keys().map(String::as_str).collect();
        let mut words: Vec<(u64, String)> = Vec::new();
        let mut seen: HashSet<String> = asked.iter().cloned().collect();
        for &(d, _) in best.iter().take(p.follow_seeds) {
            let Some(m) = self.meta(d) else { continue };
            for term in self.lexical.query_terms(&m.text) {
                if names.contains(term.as_str()) || term.chars().all(|c| c.is_ascii_digit()) {
                    continue;
                }
                if seen.insert(term.clone()) {
                    // A word only the hit itself holds leads nowhere.
                    let df = self.lexical.doc_freq(&term);
                    if df >= 2 {
                        words.push((df, term));
                    }
                }
            }
        }
        words.sort();
        let mut terms = asked;
        terms.extend(words.into_iter().take(p.follow_terms).map(|w| w.1));
        let seeds: Vec<usize> = best.iter().take(p.follow_seeds).map(|x| x.0).collect();
        let elsewhere = if p.follow_elsewhere {
            let near: HashSet<&str> = seeds
                .iter()
                .filter_map(|&d| self.meta(d).map(|m| m.session.as_str()))
                .collect();
            let bitmap: Vec<bool> = (0..self.docs.len())
                .map(|d| {
                    let open = allowed
                        .as_ref()
                        .is_none_or(|a| a.get(d).copied().unwrap_or(false));
                    open && self
                        .meta(d)
                        .is_some_and(|m| !near.contains(m.session.as_str()))
                })
                .collect();
            Some(Arc::new(bitmap))
        } else {
            allowed.clone()
        };
        let found = self.lexical.search_terms(&terms, n, elsewhere)?;
        let max = found.iter().map(|x| x.1).fold(0.0f32, f32::max);
        if max > 0.0 {
            for (d, s) in found {
                *scored.entry(d as usize).or_default() += p.follow * top * s / max;
            }
        }
        self.follow_provenance(&seeds, scored, allowed.as_deref(), p);
        Ok(())
    }

    /// The second pass along provenance: an entry among the best hits lifts
    /// the turns it was extracted from to its own score (they are its
    /// evidence), and a turn among them lifts the entries derived from it
    /// by `follow` times its score.
    fn follow_provenance(
        &self,
        seeds: &[usize],
        scored: &mut HashMap<usize, f32>,
        allowed: Option<&Vec<bool>>,
        p: &RecipeParams,
    ) {
        let mut lifts: Vec<(usize, f32)> = Vec::new();
        let mut lift = |d: usize, to: f32| lifts.push((d, to));
        for &d in seeds {
            let score = scored.get(&d).copied().unwrap_or(0.0);
            let Some(m) = self.meta(d) else { continue };
            match (m.attrs.source, &m.attrs.provenance) {
                (DocSource::Entry, Some(prov)) => {
                    if let Some(turns) = self.sessions.get(prov.session.as_str()) {
                        for (_, &t) in turns.range(prov.from_seq..=prov.to_seq) {
                            lift(t, score);
                        }
                    }
                }
                (DocSource::Turn, _) => {
                    for &e in self.derived.get(&m.session).into_iter().flatten() {
                        let covers = self
                            .meta(e)
                            .and_then(|x| x.attrs.provenance.as_ref())
                            .is_some_and(|x| x.from_seq <= m.pos && m.pos <= x.to_seq);
                        if covers {
                            lift(e, p.follow * score);
                        }
                    }
                }
                _ => {}
            }
        }
        for (d, to) in lifts {
            if allowed.is_none_or(|a| a.get(d).copied().unwrap_or(false)) {
                let v = scored.entry(d).or_default();
                *v = v.max(to);
            }
        }
    }

    /// Time boosts: a question asking "when" lifts the items that name a
    /// time; a question naming a period ("in July 2023") lifts the items
    /// said in it or naming a time inside it. Both scale with the best score.
    fn time_boosts(&self, query: &str, h: &mut HashMap<usize, f32>, p: &RecipeParams) {
        let when = p.when_boost > 0.0 && asks_when(query);
        let periods = if p.period_boost > 0.0 {
            named_periods(query)
        } else {
            Vec::new()
        };
        if !when && periods.is_empty() {
            return;
        }
        let top = h.values().copied().fold(0.0f32, f32::max);
        for (d, v) in h.iter_mut() {
            let Some(m) = self.meta(*d) else { continue };
            if when && !m.times.is_empty() {
                *v += p.when_boost * top;
            }
            if periods.iter().any(|x| m.in_period(x)) {
                *v += p.period_boost * top;
            }
        }
    }
}

/// A text's sentences (split after `.`, `!` or `?` followed by white space),
/// trimmed, empty ones left out.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_some_and(|c| c.is_ascii_whitespace())
        {
            out.push(text[start..=i].trim());
            start = i + 1;
        }
    }
    out.push(text[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// A further query vector the recipe scores with: its nearest documents
/// join the candidates and its cosine, times `weight`, is added to each
/// candidate's (a list question's concept vector, [`RecipeParams::concept`];
/// the first pass's feedback vector, [`RecipeParams::feedback`]).
struct Extra<'a> {
    vector: std::borrow::Cow<'a, [f32]>,
    near: Vec<(usize, f32)>,
    weight: f32,
}

#[cfg(test)]
mod concept_tests {
    use super::*;

    #[test]
    fn the_concept_text_keeps_content_words_only() -> SearchResultOf<()> {
        let mut index = SearchIndex::new(None)?;
        index.add(&[SearchDoc::new("s1:0", "s1", 0, "I play the clarinet").with_speaker("Ana")])?;
        assert_eq!(
            index
                .concept_text("What instruments does Ana play?")
                .as_deref(),
            Some("instruments play")
        );
        assert_eq!(index.concept_text("What does Ana do?"), None);
        Ok(())
    }
}

#[cfg(test)]
mod sentence_tests {
    use super::sentences;

    #[test]
    fn sentences_split_after_end_marks_followed_by_white_space() {
        assert_eq!(
            sentences("Hi there! I went out. Did you?  Yes"),
            ["Hi there!", "I went out.", "Did you?", "Yes"]
        );
        // No white space after the mark: one sentence (decimals, URLs).
        assert_eq!(
            sentences("It cost 3.50 at x.com."),
            ["It cost 3.50 at x.com."]
        );
        assert!(sentences("  ").is_empty());
    }
}
