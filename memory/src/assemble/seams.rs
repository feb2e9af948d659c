//! The assembly's two seams: [`Retriever`] (query → scored candidates) and
//! [`PolicyCheck`] (item + destination → verdict), and the implementations
//! that need nothing else: [`NoRetrieval`] and [`TrustAll`]. The retriever
//! over a search index is `search::IndexRetriever`: assembly does not
//! depend on search.

use std::collections::HashSet;

use super::{Destination, Fidelity, ItemSource, RetrievalMode, Section};

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
    /// Whether the item's source must be named beside its content (the
    /// policy's `attribute-source` obligation): a line that would not say
    /// where it came from gets `[source: session:seq]`.
    pub attribute_source: bool,
}

/// Decides, per item and destination, how much of it the block may show.
pub trait PolicyCheck {
    /// The verdict on `item` for `context`.
    fn check(
        &self,
        item: &PolicyItem<'_>,
        context: &PolicyContext<'_>,
    ) -> Result<PolicyVerdict, SeamError>;

    /// The verdicts on `items`, in order, one per item. An assembly asks
    /// about the candidates it knows of in one such call; a policy that can
    /// judge many items at once (one plugin call, one log record) overrides
    /// this. The default asks [`PolicyCheck::check`] once per item.
    fn check_many(
        &self,
        items: &[PolicyItem<'_>],
        context: &PolicyContext<'_>,
    ) -> Result<Vec<PolicyVerdict>, SeamError> {
        items.iter().map(|item| self.check(item, context)).collect()
    }

    /// Whether the asking session may read what `session` said in full
    /// (a sub-agent or cron session: only its lineage). Tiers drawn from
    /// the whole workspace leave out what comes from outside it. The
    /// default reads everything.
    fn in_lineage(&self, _session: Option<&str>) -> bool {
        true
    }
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
            attribute_source: false,
        })
    }
}
