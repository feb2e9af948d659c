//! Hybrid retrieval: BM25 (tantivy) and approximate nearest neighbours
//! (hnsw_rs) over the same documents, fused by normalised score with
//! neighbour smoothing, session and speaker boosts (or by reciprocal rank).
//!
//! The pieces and how they connect:
//!
//! - [`Embedder`] turns text into unit vectors ([`FastEmbedder`] runs
//!   all-MiniLM-L6-v2 through fastembed and ONNX Runtime, offline).
//! - [`SearchDoc`] is one indexed item (a turn or an entry) with the fields
//!   the ranking uses: session, position in the session, speaker, date.
//! - [`SearchIndex`] holds one workspace's lexical index, vector index and
//!   stored vectors, and answers [`SearchIndex::search`] in one of three
//!   [`SearchMode`]s.
//!
//! The ranking recipe and the measurements behind it are in
//! `docs/retrieval-research.md` and `docs/BENCHMARKS.md`.
//!
//! ```
//! use cairn_memory::search::{SearchDoc, SearchIndex, SearchMode, SearchOptions};
//!
//! let mut index = SearchIndex::new(None)?; // no embedder: lexical only
//! index.add(&[SearchDoc::new("s1:0", "s1", 0, "I adopted a puppy named Rex")
//!     .with_speaker("Ana")])?;
//! let result = index.search("What is the name of Ana's dog puppy?", &SearchOptions::new(5))?;
//! assert_eq!(result.hits[0].id, "s1:0");
//! assert!(result.lexical_fallback); // asked for hybrid, got lexical, and says so
//! assert_eq!(result.mode, SearchMode::Bm25);
//! # Ok::<(), cairn_memory::search::SearchError>(())
//! ```

mod asks;
mod embed;
mod filter;
mod fuse;
mod index;
mod lexical;
mod retriever;
mod service;
mod vector;
mod when;

pub use asks::asks_many;
pub use embed::{EmbedConfig, Embedder, FastEmbedder};
pub use filter::{DocAttrs, DocSource, ItemRef, SearchFilters};
pub use fuse::{Fusion, RecipeParams};
pub use index::{
    MAX_CANDIDATES, MAX_QUERY_BYTES, SearchDoc, SearchHit, SearchIndex, SearchMode, SearchOptions,
    SearchResult,
};
pub use retriever::{IndexRetriever, search_options};
pub use service::{INDEXER, IndexStats, SearchService, ServiceError, entry_text};
pub use vector::UnitCosine;
pub use when::{Granularity, Period, TimeMention, asks_when, named_periods, resolve_times};

/// Errors of the search subsystem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// The embedding model or ONNX Runtime could not be found or loaded.
    #[error("embedding model unavailable: {0}")]
    ModelUnavailable(String),
    /// Embedding a batch failed.
    #[error("embedding failed: {0}")]
    Embed(String),
    /// The text index failed.
    #[error("text index error: {0}")]
    Lexical(#[from] tantivy::TantivyError),
    /// A document id was indexed twice.
    #[error("document `{0}` is already indexed")]
    Duplicate(String),
    /// A vector had the wrong dimension.
    #[error("vector for `{id}` has dimension {got}, expected {expected}")]
    Dimension {
        /// Document id.
        id: String,
        /// Dimension received.
        got: usize,
        /// Dimension of the index.
        expected: usize,
    },
}

impl SearchError {
    /// A stable, machine-readable code.
    ///
    /// ```
    /// use cairn_memory::search::SearchError;
    /// assert_eq!(SearchError::Duplicate("x".into()).code(), "duplicate");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            SearchError::ModelUnavailable(_) => "model_unavailable",
            SearchError::Embed(_) => "embedding_failed",
            SearchError::Lexical(_) => "text_index",
            SearchError::Duplicate(_) => "duplicate",
            SearchError::Dimension { .. } => "dimension",
        }
    }
}

/// Result of the search subsystem.
pub type SearchResultOf<T> = std::result::Result<T, SearchError>;

#[cfg(test)]
mod tests;
