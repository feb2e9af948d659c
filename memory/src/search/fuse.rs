//! How the lexical and vector rankings are combined: the measured recipe
//! (normalised score fusion, neighbour max-smoothing, session and speaker
//! boosts) or plain reciprocal-rank fusion.

/// Parameters of the default fusion recipe (see `docs/retrieval-research.md`).
///
/// ```
/// let p = cairn_memory::search::RecipeParams::default();
/// assert_eq!((p.lexical_weight, p.smoothing, p.window), (0.5, 0.5, 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecipeParams {
    /// Weight of the max-normalised BM25 score (the vector side gets 1 − w).
    pub lexical_weight: f32,
    /// Share of the best neighbour's fused score added to each item.
    pub smoothing: f32,
    /// Neighbours within this many positions in the same session.
    pub window: u64,
    /// Share of the session's best score added to each item.
    pub session_boost: f32,
    /// Share of the best score added to the turns of the one speaker the
    /// query names.
    pub speaker_boost: f32,
    /// Share of the best score added, for a question that asks "when", to
    /// every item with a resolved time expression (0: off; 0.2 by default,
    /// measured leave-one-conversation-out in `docs/retrieval-research.md`).
    pub when_boost: f32,
    /// Share of the best score added, for a question naming a period ("in
    /// July 2023"), to the items said in it or naming a time inside it
    /// (0: off, the default: it changed no recall on LoCoMo).
    pub period_boost: f32,
    /// Weight of the second pass that follows the first pass's best hits
    /// (0: off, the default: it did not help in every LoCoMo conversation).
    /// See [`RecipeParams::follow_seeds`].
    pub follow: f32,
    /// How many of the first pass's best hits the second pass follows: the
    /// rarest words of their texts that the question lacks (the entities
    /// and subjects they name) are added to the question's words for one
    /// more BM25 query, whose max-normalised scores are added with weight
    /// [`RecipeParams::follow`] times the best first-pass score.
    pub follow_seeds: usize,
    /// How many words the second pass adds.
    pub follow_terms: usize,
    /// Whether the second pass's query looks only outside the sessions of
    /// the hits it follows (the other part of a two-part question is often
    /// said on another day).
    pub follow_elsewhere: bool,
    /// At most this many hits of one session before any hit of another
    /// session that scored lower is let ahead of the rest (0: off). The
    /// ranking is kept otherwise: the hits held back follow, in order.
    pub session_cap: usize,
    /// Each further hit of a session counts this much less: a hit's score
    /// is multiplied by `session_decay^j`, `j` the hits of its session
    /// ranked before it (in (0, 1]; 1: off, the default). A soft
    /// [`RecipeParams::session_cap`]: a session's third hit still ranks
    /// high when it scores well above the other sessions' hits.
    pub session_decay: f32,
    /// Maximal marginal relevance: each next hit is the one whose
    /// max-normalised score minus `diversity` times its highest cosine to
    /// the hits already placed is best, so near-duplicates of a placed hit
    /// let a different one ahead (0: off, the default).
    pub diversity: f32,
    /// How far a document's cosine moves towards its best sentence's
    /// cosine when the index embeds sentences too (0: off, the default;
    /// 1: the best of the document and its sentences).
    pub sentence_sim: f32,
    /// For a question that asks for several things
    /// ([`asks_many`](super::asks_many)), the [`RecipeParams::session_cap`]
    /// used instead (0: the general one).
    pub list_cap: usize,
    /// For such a question, the [`RecipeParams::session_decay`] used
    /// instead (1: the general one).
    pub list_decay: f32,
    /// For such a question, the [`RecipeParams::smoothing`] used instead
    /// (`None`: the general one).
    pub list_smoothing: Option<f32>,
    /// For such a question, the [`RecipeParams::session_boost`] used
    /// instead (`None`: the general one).
    pub list_session_boost: Option<f32>,
    /// Weight of a second query vector, for a question that asks for
    /// several things: the question's content words alone (no question
    /// words, stopwords or speaker names), which an embedding places nearer
    /// the instances of a general word ("instruments" → "clarinet") than
    /// the whole question does (0: off, the default). Its cosine is added
    /// to each candidate's with this weight and its nearest neighbours join
    /// the candidates.
    pub concept: f32,
    /// Weight of the first pass's feedback vector (pseudo-relevance
    /// feedback): the mean direction of the best
    /// [`RecipeParams::feedback_seeds`] hits of a first fused ranking,
    /// whose nearest documents join the candidates and whose cosine, times
    /// this weight, is added to each candidate's before the recipe ranks
    /// again (0: off, the default). The evidence of a question that asks
    /// for several things is often alike (the same person's outings), so
    /// the first pieces found point at the rest.
    pub feedback: f32,
    /// How many of the first pass's best hits make the feedback vector.
    pub feedback_seeds: usize,
    /// For a question that asks for several things, the
    /// [`RecipeParams::feedback`] used instead (`None`: the general one).
    pub list_feedback: Option<f32>,
}

impl RecipeParams {
    /// The parameters for `query`: the `list_*` ones in place of the
    /// general ones when it asks for several things.
    pub(crate) fn for_query(&self, query: &str) -> RecipeParams {
        let lists = self.list_cap > 0
            || self.concept > 0.0
            || self.list_decay < 1.0
            || self.list_smoothing.is_some()
            || self.list_session_boost.is_some()
            || self.list_feedback.is_some();
        if !lists || !super::asks_many(query) {
            return *self;
        }
        RecipeParams {
            session_cap: if self.list_cap > 0 {
                self.list_cap
            } else {
                self.session_cap
            },
            session_decay: self.session_decay.min(self.list_decay),
            smoothing: self.list_smoothing.unwrap_or(self.smoothing),
            session_boost: self.list_session_boost.unwrap_or(self.session_boost),
            feedback: self.list_feedback.unwrap_or(self.feedback),
            ..*self
        }
    }

    /// Whether `for_query` left the concept vector on (a list question).
    pub(crate) fn wants_concept(&self, query: &str) -> bool {
        self.concept > 0.0 && super::asks_many(query)
    }
}

impl Default for RecipeParams {
    fn default() -> Self {
        RecipeParams {
            lexical_weight: 0.5,
            smoothing: 0.5,
            window: 2,
            session_boost: 0.2,
            speaker_boost: 0.1,
            when_boost: 0.2,
            period_boost: 0.0,
            follow: 0.0,
            follow_seeds: 3,
            follow_terms: 6,
            follow_elsewhere: false,
            session_cap: 0,
            session_decay: 1.0,
            diversity: 0.0,
            sentence_sim: 0.0,
            list_cap: 0,
            list_decay: 1.0,
            list_smoothing: None,
            list_session_boost: None,
            concept: 0.0,
            feedback: 0.0,
            feedback_seeds: 5,
            list_feedback: None,
        }
    }
}

/// How hybrid search combines its two rankings.
///
/// ```
/// use cairn_memory::search::Fusion;
/// assert!(matches!(Fusion::default(), Fusion::Recipe(_)));
/// let rrf = Fusion::rrf();
/// assert!(matches!(rrf, Fusion::Rrf { k, .. } if k == 60.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Normalised score fusion with smoothing and boosts (the default: it
    /// measures best on LoCoMo, see `docs/BENCHMARKS.md`).
    Recipe(RecipeParams),
    /// Reciprocal-rank fusion: `Σ w / (k + rank)`.
    Rrf {
        /// The rank offset (60 in the literature).
        k: f32,
        /// Weight of the lexical ranking.
        lexical_weight: f32,
        /// Weight of the vector ranking.
        vector_weight: f32,
    },
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Recipe(RecipeParams::default())
    }
}

impl Fusion {
    /// Equal-weight RRF with k = 60.
    pub fn rrf() -> Self {
        Fusion::Rrf {
            k: 60.0,
            lexical_weight: 1.0,
            vector_weight: 1.0,
        }
    }
}

/// Reciprocal-rank score of a 0-based rank.
pub(crate) fn rrf_term(k: f32, weight: f32, rank: Option<usize>) -> f32 {
    rank.map_or(0.0, |r| weight / (k + r as f32 + 1.0))
}
