//! The search side of assembly's [`Retriever`] seam: [`IndexRetriever`]
//! over one [`SearchIndex`], and the conversions every search-backed
//! retriever shares ([`search_options`], `Retrieved::from_search`).

use super::{SearchIndex, SearchMode, SearchOptions, SearchResult};
use crate::assemble::{
    Candidate, CandidateRef, RetrievalMode, RetrievalQuery, Retrieved, Retriever, SeamError,
};

/// A retriever over one [`SearchIndex`] whose turn documents have ids
/// `session:seq` and whose entry documents have the entry id.
///
/// ```
/// use cairn_memory::assemble::{CandidateRef, RetrievalMode, RetrievalQuery, Retriever};
/// use cairn_memory::search::{IndexRetriever, SearchDoc, SearchIndex};
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

impl Retriever for IndexRetriever<'_> {
    fn retrieve(&self, query: &RetrievalQuery<'_>) -> Result<Retrieved, SeamError> {
        let result = self
            .0
            .search(query.text, &search_options(query))
            .map_err(|e| SeamError(e.to_string()))?;
        Ok(Retrieved::from_search(&result))
    }
}

/// The search options for a query: mode and session restriction.
///
/// ```
/// use cairn_memory::assemble::{RetrievalMode, RetrievalQuery};
/// use cairn_memory::search::{search_options, SearchMode};
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
                    target: CandidateRef::from_hit(&h.id, &h.session, h.pos),
                    score: h.score,
                })
                .collect(),
            mode: result.mode.as_str().to_owned(),
            lexical_fallback: result.lexical_fallback,
            catching_up: result.catching_up,
        }
    }
}
