//! The assembly's two seams: [`Retriever`] (query → scored candidates) and
//! [`PolicyCheck`] (item + destination → verdict), and the implementations
//! the core ships: [`IndexRetriever`] over a [`SearchIndex`], [`NoRetrieval`]
//! and [`TrustAll`].

use std::collections::HashSet;

use super::{Destination, Fidelity, ItemSource, RetrievalMode, Section};
use crate::search::{SearchIndex, SearchMode, SearchOptions, SearchResult};

/// A seam's failure, as a message (the runtime's errors do not reach into
/// the core).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SeamError(pub String);

/// What the projection asks for.
#[derive(Debug, Clone)]
pub struct RetrievalQuery<'a> {
    /// The query text (the current turn, or the request's query).
    pub text: &'a str,
    /// Candidates wanted.
    pub k: usize,
    /// Lexical only, or hybrid.
    pub mode: RetrievalMode,
    /// The asking session (a retriever may restrict sub-agents to their lineage).
    pub session: &'a str,
    /// The asking session's work context.
    pub work_context: &'a str,
    /// Only these sessions' turns, when set.
    pub sessions: Option<&'a HashSet<String>>,
}

/// A candidate's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CandidateRef {
    /// A transcript turn.
    Turn {
        /// Session.
        session: String,
        /// Sequence number.
        seq: u64,
    },
    /// A memory-log entry, by id.
    Entry {
        /// Entry id.
        id: String,
    },
}

/// One scored candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// What it is.
    pub target: CandidateRef,
    /// Its score (higher is better).
    pub score: f32,
}

/// What a retriever found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retrieved {
    /// Candidates, best first.
    pub candidates: Vec<Candidate>,
    /// The mode actually used (`hybrid`, `bm25`, ...).
    pub mode: String,
    /// True when hybrid was asked and only lexical ranking was possible.
    pub lexical_fallback: bool,
    /// True when the index was still being built, so stored items may be
    /// missing from the candidates.
    pub catching_up: bool,
}

/// Finds candidates for the projection.
///
/// ```
/// use cairn_memory::assemble::{NoRetrieval, RetrievalMode, RetrievalQuery, Retriever};
/// let q = RetrievalQuery { text: "retries", k: 5, mode: RetrievalMode::Lexical,
///     session: "s1", work_context: "default", sessions: None };
/// assert!(NoRetrieval.retrieve(&q)?.candidates.is_empty());
/// # Ok::<(), cairn_memory::assemble::SeamError>(())
/// ```
pub trait Retriever {
    /// Up to `query.k` candidates, best first.
    fn retrieve(&self, query: &RetrievalQuery<'_>) -> Result<Retrieved, SeamError>;
}

/// A retriever that finds nothing: the block is invariants, tail and tiers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRetrieval;

impl Retriever for NoRetrieval {
    fn retrieve(&self, _query: &RetrievalQuery<'_>) -> Result<Retrieved, SeamError> {
        Ok(Retrieved {
            candidates: Vec::new(),
            mode: "off".to_owned(),
            lexical_fallback: false,
            catching_up: false,
        })
    }
}

/// A retriever over one [`SearchIndex`] whose turn documents have ids
/// `session:seq` and whose entry documents have the entry id.
///
/// ```
/// use cairn_memory::assemble::{CandidateRef, IndexRetriever, RetrievalMode, RetrievalQuery, Retriever};
/// use cairn_memory::search::{SearchDoc, SearchIndex};
/// let mut index = SearchIndex::new(None)?;
/// index.add(&[SearchDoc::new("s1:0", "s1", 0, "retries use a dead-letter queue")])?;
/// let q = RetrievalQuery { text: "dead-letter queue", k: 5, mode: RetrievalMode::Lexical,
///     session: "s2", work_context: "default", sessions: None };
/// let found = IndexRetriever(&index).retrieve(&q)?;
/// assert_eq!(found.candidates[0].target, CandidateRef::Turn { session: "s1".into(), seq: 0 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct IndexRetriever<'a>(pub &'a SearchIndex);

impl CandidateRef {
    /// What a search hit names: a turn when its id is `session:pos` (how
    /// turns are indexed), else an entry by id.
    ///
    /// ```
    /// use cairn_memory::assemble::CandidateRef;
    /// assert_eq!(CandidateRef::from_hit("s1:4", "s1", 4), CandidateRef::Turn { session: "s1".into(), seq: 4 });
    /// assert_eq!(CandidateRef::from_hit("01JABC", "log", 0), CandidateRef::Entry { id: "01JABC".into() });
    /// ```
    pub fn from_hit(id: &str, session: &str, pos: u64) -> CandidateRef {
        hit_target(id, session, pos)
    }
}

fn hit_target(id: &str, session: &str, pos: u64) -> CandidateRef {
    let is_turn = id
        .rsplit_once(':')
        .is_some_and(|(s, p)| s == session && p.parse::<u64>() == Ok(pos));
    if is_turn {
        CandidateRef::Turn {
            session: session.to_owned(),
            seq: pos,
        }
    } else {
        CandidateRef::Entry { id: id.to_owned() }
    }
}

/// The search options for a query: mode and session restriction.
///
/// ```
/// use cairn_memory::assemble::{search_options, RetrievalMode, RetrievalQuery};
/// use cairn_memory::search::SearchMode;
/// let q = RetrievalQuery { text: "x", k: 7, mode: RetrievalMode::Lexical,
///     session: "s", work_context: "w", sessions: None };
/// assert_eq!(search_options(&q).mode, SearchMode::Bm25);
/// ```
pub fn search_options(query: &RetrievalQuery<'_>) -> SearchOptions {
    let mode = match query.mode {
        RetrievalMode::Lexical | RetrievalMode::Off => SearchMode::Bm25,
        RetrievalMode::Hybrid => SearchMode::Hybrid,
    };
    let mut options = SearchOptions::new(query.k).mode(mode);
    if let Some(sessions) = query.sessions {
        options = options.sessions(sessions.iter().cloned());
    }
    options
}

impl Retrieved {
    /// The candidates a search found, best first.
    ///
    /// ```
    /// use cairn_memory::assemble::{CandidateRef, Retrieved};
    /// use cairn_memory::search::{SearchDoc, SearchIndex, SearchOptions};
    /// let mut index = SearchIndex::new(None)?;
    /// index.add(&[SearchDoc::new("s1:0", "s1", 0, "retries use a dead-letter queue")])?;
    /// let found = Retrieved::from_search(&index.search("dead-letter", &SearchOptions::new(5))?);
    /// assert_eq!(found.candidates[0].target, CandidateRef::Turn { session: "s1".into(), seq: 0 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_search(result: &SearchResult) -> Retrieved {
        Retrieved {
            candidates: result
                .hits
                .iter()
                .map(|h| Candidate {
                    target: hit_target(&h.id, &h.session, h.pos),
                    score: h.score,
                })
                .collect(),
            mode: result.mode.as_str().to_owned(),
            lexical_fallback: result.lexical_fallback,
            catching_up: result.catching_up,
        }
    }
}

impl Retriever for IndexRetriever<'_> {
    fn retrieve(&self, query: &RetrievalQuery<'_>) -> Result<Retrieved, SeamError> {
        let result = self
            .0
            .search(query.text, &search_options(query))
            .map_err(|e| SeamError(e.to_string()))?;
        Ok(Retrieved::from_search(&result))
    }
}

/// Who asks, for the policy.
#[derive(Debug, Clone, Copy)]
pub struct PolicyContext<'a> {
    /// Where the block goes.
    pub destination: Destination,
    /// The asking session.
    pub session: &'a str,
    /// The asking session's work context.
    pub work_context: &'a str,
}

/// The item a policy is asked about.
#[derive(Debug, Clone, Copy)]
pub struct PolicyItem<'a> {
    /// Its identity.
    pub source: &'a ItemSource,
    /// The section it is a candidate for.
    pub section: Section,
    /// Its content.
    pub text: &'a str,
    /// Its work context (none for directives).
    pub work_context: Option<&'a str>,
    /// Its session (turns; entries with provenance).
    pub session: Option<&'a str>,
    /// Whether it came from a low-trust source (tool output).
    pub low_trust: bool,
}

/// A policy's verdict on one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVerdict {
    /// How much content may be shown.
    pub fidelity: Fidelity,
    /// Why (the policy's reason codes).
    pub reason_codes: Vec<String>,
    /// The policy generation that decided.
    pub generation: String,
    /// Whether the item must be labelled low-trust.
    pub label_low_trust: bool,
}

/// Decides, per item and destination, how much of it the block may show.
pub trait PolicyCheck {
    /// The verdict on `item` for `context`.
    fn check(
        &self,
        item: &PolicyItem<'_>,
        context: &PolicyContext<'_>,
    ) -> Result<PolicyVerdict, SeamError>;
}

/// Shows everything in full. For embedders that run no policy host and for
/// property tests of the assembly logic; the cairn runtime always checks
/// with its WebAssembly memory policy.
///
/// ```
/// use cairn_memory::assemble::*;
/// let source = ItemSource::Directive { index: 0 };
/// let item = PolicyItem { source: &source, section: Section::Directive, text: "x",
///     work_context: None, session: None, low_trust: false };
/// let ctx = PolicyContext { destination: Destination::CloudModel, session: "s", work_context: "w" };
/// assert_eq!(TrustAll.check(&item, &ctx)?.fidelity, Fidelity::Full);
/// # Ok::<(), SeamError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TrustAll;

impl PolicyCheck for TrustAll {
    fn check(
        &self,
        item: &PolicyItem<'_>,
        _context: &PolicyContext<'_>,
    ) -> Result<PolicyVerdict, SeamError> {
        Ok(PolicyVerdict {
            fidelity: Fidelity::Full,
            reason_codes: vec!["trust-all".to_owned()],
            generation: "trust-all".to_owned(),
            label_low_trust: item.low_trust,
        })
    }
}
