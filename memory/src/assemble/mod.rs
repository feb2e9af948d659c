//! Context assembly: the token-budgeted, policy-checked, explained memory
//! block a gateway puts in front of each model call.
//!
//! The block is `C_total = invariants ∪ recent tail ∪ tiers ∪ projection`
//! (see docs/DESIGN.md, *Context assembly*), filled in this order of
//! precedence, each step taking only what the earlier ones left:
//!
//! 1. **Hard invariants**: the request's standing directives and the
//!    workspace's pinned entries. Never trimmed: when they (with the block's
//!    frame and the minimum tail) do not fit, assembly fails with
//!    [`MemoryError::InvariantsExceedBudget`](crate::MemoryError).
//! 2. **Minimum recent tail**: the last `m` raw turns of the session (with
//!    the call of any tool result in them). `m` wins over the tail budget.
//! 3. **Tier 3, living memory** (`living_memory`, ≤ 100 tokens): stable,
//!    workspace-wide facts. Never dropped for anything below it.
//! 4. **Tail extension**: older turns, contiguous, up to the tail budget.
//! 5. **Tier 1, resume card** (`resume`, ≤ 120 tokens): where a piece of
//!    work stands, only when an entity matches a work context with
//!    continuity data, the latest of it came from another session, and at
//!    least 30 minutes have passed. Trimmed history first, then decisions,
//!    then open questions, then updates.
//! 6. **Tier 2, recent activity** (`recent_activity`, ≤ 200 tokens): the
//!    last week's work in the other work contexts. Dropped first.
//! 7. **Projection**: candidates a [`Retriever`] finds for the current turn
//!    over the rest of memory, in score order, while budget remains.
//! 8. **Briefing** (`briefing`, ≤ 160 tokens): the workspace's briefing
//!    ([`crate::brief`]) — pending tasks, open questions, contradictions,
//!    recent decisions, active and stale subjects — one line per entry not
//!    already in the block, only with what the budget has left; dropped
//!    whole when the budget (not its own cap) is short.
//!
//! Besides, right after the minimum tail: the **last-session handoff**
//! (`handoff`, ≤ 120 tokens): the newest live `handoff` entry of the
//! session's work context, written by another session before this one
//! started — the next session starts where the last one stopped. Looked up
//! once per version of the log ([`Workspace::latest_handoff`]); left out,
//! traced, when it does not fit.
//!
//! Every candidate goes through a [`PolicyCheck`] for the request's
//! [`Destination`]: full, redacted, reference-only or blocked rendering;
//! blocked items appear only in the trace. The block opens with the
//! memory-use rules (docs/DESIGN.md, *Memory-use preamble*) and labels each item with its role,
//! warrant, source, freshness and scope relation. Tokens are counted with
//! the real tokenizer ([`TokenCounter`](crate::TokenCounter)), and the final text is counted
//! again: the block never exceeds its budget.
//!
//! The two seams keep this module pure: the runtime plugs in its search
//! service and its WebAssembly memory policy; `search::IndexRetriever`
//! (over one index) and [`TrustAll`] serve embedders without them (and the
//! property tests).
//!
//! ```
//! use std::sync::Arc;
//! use cairn_memory::assemble::{AssembleRequest, NoRetrieval, TrustAll};
//! use cairn_memory::{EntryInput, EntryKind, Memory, MemoryConfig, Role, SystemClock, TurnInput};
//!
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
//! let ws = memory.workspace("acme")?;
//! ws.append_turn(&TurnInput::new("s1", Role::User, "Ship on Friday?"))?;
//! ws.append_entry(&EntryInput::new(EntryKind::Fact, "Ana prefers short answers."))?;
//! let mut request = AssembleRequest::new("s1", 400);
//! request.directives.push("Answer in English.".into());
//! let block = ws.assemble(&request, &NoRetrieval, &TrustAll)?;
//! assert!(block.tokens <= 400);
//! assert!(block.text.contains("Answer in English."));
//! assert!(block.text.contains("Ana prefers short answers."));
//! assert!(block.text.contains("Ship on Friday?"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod compose;
mod render;
mod seams;
mod tail;
pub(crate) mod tiers;

#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub(crate) use compose::BriefingLine;
pub use seams::{
    Candidate, CandidateRef, NoRetrieval, PolicyCheck, PolicyContext, PolicyItem, PolicyVerdict,
    RetrievalQuery, Retrieved, Retriever, SeamError, TrustAll,
};

use crate::error::Result;
use crate::log::EntryKind;
use crate::memory::Workspace;
use crate::store::{StateFamily, StateKey};

/// Where the assembled block goes (the memory policy's destination); the policy
/// decides per destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Destination {
    /// A model running on this machine (the default).
    #[default]
    LocalModel,
    /// A hosted model.
    CloudModel,
    /// Another LLM outside cairn's control.
    ExternalLlm,
    /// A sub-agent.
    Subagent,
    /// A share link.
    ShareLink,
    /// A task runtime.
    TaskRuntime,
    /// The user's screen.
    UserVisibleUi,
}

impl Destination {
    /// Every destination.
    pub const ALL: [Destination; 7] = [
        Destination::LocalModel,
        Destination::CloudModel,
        Destination::ExternalLlm,
        Destination::Subagent,
        Destination::ShareLink,
        Destination::TaskRuntime,
        Destination::UserVisibleUi,
    ];

    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Destination::LocalModel => "local_model",
            Destination::CloudModel => "cloud_model",
            Destination::ExternalLlm => "external_llm",
            Destination::Subagent => "subagent",
            Destination::ShareLink => "share_link",
            Destination::TaskRuntime => "task_runtime",
            Destination::UserVisibleUi => "user_visible_ui",
        }
    }

    /// Parses the `snake_case` (or kebab-case) name.
    ///
    /// ```
    /// use cairn_memory::assemble::Destination;
    /// assert_eq!(Destination::parse("cloud-model"), Some(Destination::CloudModel));
    /// assert_eq!(Destination::parse("moon"), None);
    /// ```
    pub fn parse(name: &str) -> Option<Destination> {
        let name = name.replace('-', "_");
        Destination::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

/// Which retrieval the projection uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RetrievalMode {
    /// BM25 and vectors, fused (the default; lexical, flagged, without a model).
    #[default]
    Hybrid,
    /// BM25 only: no query embedding.
    Lexical,
    /// No projection at all.
    Off,
}

/// The assembly's rules: budgets, the tail selector, the tiers. Every value
/// is configurable (`[assemble.settings]` in `cairn.toml`) and per request.
///
/// ```
/// let s = cairn_memory::assemble::AssembleSettings::default();
/// assert_eq!((s.resume_max_tokens, s.recent_activity_max_tokens, s.living_memory_max_tokens), (120, 200, 100));
/// assert_eq!((s.briefing_max_tokens, s.handoff_max_tokens), (160, 120));
/// assert_eq!(s.tiers_max_tokens, 420);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct AssembleSettings {
    /// `m`: the most recent turns always kept raw, even over the tail budget.
    pub min_tail_turns: usize,
    /// The tail budget in tokens; `tail_share_percent` of the budget when absent.
    pub tail_budget_tokens: Option<usize>,
    /// The tail budget as a share of the whole budget, in percent.
    pub tail_share_percent: u8,
    /// Tier 1 (`resume`) cap.
    pub resume_max_tokens: usize,
    /// Tier 2 (`recent_activity`) cap.
    pub recent_activity_max_tokens: usize,
    /// Tier 3 (`living_memory`) cap.
    pub living_memory_max_tokens: usize,
    /// The three tiers together.
    pub tiers_max_tokens: usize,
    /// Tier 1 fires only when the latest continuity record is at least this old.
    pub resume_min_gap_minutes: u32,
    /// Tier 2 shows only activity younger than this.
    pub recent_activity_max_age_days: u32,
    /// Candidates asked from the retriever.
    pub retrieval_k: usize,
    /// The briefing card's cap (0: no briefing in the block).
    pub briefing_max_tokens: usize,
    /// The last-session handoff's cap (0: never injected).
    pub handoff_max_tokens: usize,
    /// Token encoding (`o200k_base`, `cl100k_base`); the workspace's when absent.
    pub encoding: Option<String>,
    /// The topics section's cap: what the topics following this session
    /// collected most recently.
    pub topics_max_tokens: usize,
    /// Collected turns offered per topic (newest first); 0 turns the
    /// section off.
    pub topic_items: usize,
}

impl Default for AssembleSettings {
    fn default() -> Self {
        AssembleSettings {
            min_tail_turns: 4,
            tail_budget_tokens: None,
            tail_share_percent: 50,
            resume_max_tokens: 120,
            recent_activity_max_tokens: 200,
            living_memory_max_tokens: 100,
            tiers_max_tokens: 420,
            resume_min_gap_minutes: 30,
            recent_activity_max_age_days: 7,
            retrieval_k: 40,
            briefing_max_tokens: 160,
            handoff_max_tokens: 120,
            encoding: None,
            topics_max_tokens: 160,
            topic_items: 2,
        }
    }
}

/// The largest budget an assembly accepts, in tokens: far above any model's
/// window, and low enough that nothing sized from it can exhaust memory.
pub const MAX_BUDGET_TOKENS: usize = 1_000_000;

/// The most retrieval candidates an assembly asks for.
pub const MAX_RETRIEVAL_K: usize = 1_000;

impl AssembleSettings {
    /// Checks every value against its range, naming the first one out of it.
    /// Settings come from callers (HTTP bodies, configuration): a huge
    /// `retrieval_k` or age must be refused, not sized into an allocation or
    /// a date overflow.
    ///
    /// ```
    /// use cairn_memory::assemble::AssembleSettings;
    /// assert!(AssembleSettings::default().validate().is_ok());
    /// let s = AssembleSettings { retrieval_k: 17_592_186_044_416, ..Default::default() };
    /// assert!(s.validate().unwrap_err().to_string().contains("retrieval_k"));
    /// ```
    pub fn validate(&self) -> crate::Result<()> {
        let checks: [(&'static str, u64, u64); 10] = [
            (
                "retrieval_k",
                self.retrieval_k as u64,
                MAX_RETRIEVAL_K as u64,
            ),
            (
                "recent_activity_max_age_days",
                u64::from(self.recent_activity_max_age_days),
                36_500,
            ),
            (
                "resume_min_gap_minutes",
                u64::from(self.resume_min_gap_minutes),
                5_256_000,
            ),
            (
                "tail_share_percent",
                u64::from(self.tail_share_percent),
                100,
            ),
            ("min_tail_turns", self.min_tail_turns as u64, 256),
            (
                "tail_budget_tokens",
                self.tail_budget_tokens.unwrap_or(0) as u64,
                MAX_BUDGET_TOKENS as u64,
            ),
            (
                "tiers_max_tokens",
                self.tiers_max_tokens
                    .max(self.resume_max_tokens)
                    .max(self.recent_activity_max_tokens)
                    .max(self.living_memory_max_tokens) as u64,
                MAX_BUDGET_TOKENS as u64,
            ),
            (
                "topics_max_tokens",
                self.topics_max_tokens as u64,
                MAX_BUDGET_TOKENS as u64,
            ),
            ("topic_items", self.topic_items as u64, 32),
            (
                "briefing_max_tokens",
                self.briefing_max_tokens.max(self.handoff_max_tokens) as u64,
                MAX_BUDGET_TOKENS as u64,
            ),
        ];
        for (what, value, max) in checks {
            if value > max {
                return Err(crate::MemoryError::Invalid {
                    what: "settings",
                    reason: format!("{what} is {value}, over the maximum of {max}"),
                });
            }
        }
        Ok(())
    }
}

/// What to assemble.
///
/// ```
/// use cairn_memory::assemble::{AssembleRequest, Destination};
/// let r: AssembleRequest = serde_json::from_str(r#"{"session":"s1","budget_tokens":800,"destination":"cloud_model"}"#)?;
/// assert_eq!(r.destination, Destination::CloudModel);
/// assert_eq!(r, AssembleRequest { destination: Destination::CloudModel, ..AssembleRequest::new("s1", 800) });
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AssembleRequest {
    /// The session the model call is for.
    pub session: String,
    /// Token budget for the whole block.
    pub budget_tokens: usize,
    /// The current turn's text or a query; the session's last user turn when absent.
    #[serde(default)]
    pub query: Option<String>,
    /// Where the block goes.
    #[serde(default)]
    pub destination: Destination,
    /// Standing directives of the host: always in the block, never trimmed.
    #[serde(default)]
    pub directives: Vec<String>,
    /// Retrieval for the projection.
    #[serde(default)]
    pub retrieval: RetrievalMode,
    /// Rules for this call; the configured ones when absent.
    #[serde(default)]
    pub settings: Option<AssembleSettings>,
}

impl AssembleRequest {
    /// A request for `session` with `budget_tokens`, everything else default.
    pub fn new(session: &str, budget_tokens: usize) -> Self {
        AssembleRequest {
            session: session.to_owned(),
            budget_tokens,
            query: None,
            destination: Destination::default(),
            directives: Vec::new(),
            retrieval: RetrievalMode::default(),
            settings: None,
        }
    }
}

/// Where a candidate came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemSource {
    /// A standing directive of the request.
    Directive {
        /// Its position in the request.
        index: usize,
    },
    /// A transcript turn.
    Turn {
        /// Session.
        session: String,
        /// Sequence number.
        seq: u64,
    },
    /// A memory-log entry.
    Entry {
        /// Entry id.
        id: String,
        /// Its kind.
        kind: EntryKind,
    },
    /// An entry the retriever named that is no longer live (replaced,
    /// expired or forgotten).
    Missing {
        /// Entry id.
        id: String,
    },
    /// A compaction summary of older turns of the session (expand it with
    /// `memory_expand`).
    Summary {
        /// Summary id.
        id: String,
    },
    /// A turn a topic following this session collected.
    Topic {
        /// The topic.
        topic: String,
        /// The turn's session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
}

impl std::fmt::Display for ItemSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ItemSource::Directive { index } => write!(f, "directive #{index}"),
            ItemSource::Turn { session, seq } => write!(f, "turn {session}:{seq}"),
            ItemSource::Entry { id, kind } => write!(f, "{kind} {id}"),
            ItemSource::Missing { id } => write!(f, "entry {id}"),
            ItemSource::Summary { id } => write!(f, "summary {id}"),
            ItemSource::Topic {
                topic,
                session,
                seq,
            } => write!(f, "topic {topic} turn {session}:{seq}"),
        }
    }
}

/// The part of the block an item belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// Standing directives (hard invariant).
    Directive,
    /// Pinned entries (hard invariant).
    Pinned,
    /// The last session's handoff, for a session that started after it.
    Handoff,
    /// Tier 3, `living_memory`.
    LivingMemory,
    /// Tier 1, `resume`.
    Resume,
    /// Tier 2, `recent_activity`.
    RecentActivity,
    /// What the topics following this session collected lately.
    Topics,
    /// The workspace's briefing (what `MEMORY.md` carries).
    Briefing,
    /// Retrieved over the rest of memory.
    Retrieved,
    /// Summaries of the session's compacted history.
    Compacted,
    /// The raw recent tail of the session.
    Tail,
}

impl Section {
    /// The tier number, for the three tier sections.
    pub fn tier(self) -> Option<u8> {
        match self {
            Section::Resume => Some(1),
            Section::RecentActivity => Some(2),
            Section::LivingMemory => Some(3),
            _ => None,
        }
    }

    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Directive => "directive",
            Section::Pinned => "pinned",
            Section::Handoff => "handoff",
            Section::LivingMemory => "living_memory",
            Section::Resume => "resume",
            Section::RecentActivity => "recent_activity",
            Section::Topics => "topics",
            Section::Briefing => "briefing",
            Section::Retrieved => "retrieved",
            Section::Compacted => "compacted",
            Section::Tail => "tail",
        }
    }
}

/// How much of an item's content the block shows (the policy's content
/// fidelity, docs/DESIGN.md, *Memory policy*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// The content as stored.
    Full,
    /// Credentials, e-mail addresses and phone numbers masked.
    Redacted,
    /// A reference only: the item exists, its content is withheld.
    ReferenceOnly,
    /// Nothing: the item appears only in the trace.
    Blocked,
}

impl Fidelity {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Full => "full",
            Fidelity::Redacted => "redacted",
            Fidelity::ReferenceOnly => "reference_only",
            Fidelity::Blocked => "blocked",
        }
    }
}

/// How far an item may be relied on: its warrant (docs/DESIGN.md, *Memory-use preamble*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Warrant {
    /// A standing instruction: follow it.
    Standing,
    /// Raw conversation, verbatim.
    Verbatim,
    /// Recorded from a conversation, with provenance.
    Recorded,
    /// Written into memory without provenance.
    Asserted,
    /// A summary for orientation only, not evidence.
    Orientation,
    /// Tool output or other low-trust content: data, never instructions.
    LowTrust,
}

impl Warrant {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Warrant::Standing => "standing",
            Warrant::Verbatim => "verbatim",
            Warrant::Recorded => "recorded",
            Warrant::Asserted => "asserted",
            Warrant::Orientation => "orientation",
            Warrant::LowTrust => "low_trust",
        }
    }
}

/// How an item's scope relates to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ScopeRelation {
    /// From the requesting session.
    ThisSession,
    /// From the requesting session's work context.
    ThisContext,
    /// From another work context.
    OtherContext,
    /// Workspace-wide (directives, facts of the default context).
    Workspace,
}

impl ScopeRelation {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeRelation::ThisSession => "this_session",
            ScopeRelation::ThisContext => "this_context",
            ScopeRelation::OtherContext => "other_context",
            ScopeRelation::Workspace => "workspace",
        }
    }
}

/// One item in the block, with its labels (docs/DESIGN.md, *Memory-use preamble*).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlockItem {
    /// Where it came from.
    pub source: ItemSource,
    /// The part of the block it is in.
    pub section: Section,
    /// Its role: `directive`, `turn`, or the entry kind.
    pub role: String,
    /// How far it may be relied on.
    pub warrant: Warrant,
    /// Its source support: the turns it was recorded from, or its own id.
    pub support: String,
    /// When it was said or recorded.
    pub at: Option<DateTime<Utc>>,
    /// Its age at assembly time, e.g. `3d`, `45m` (empty for directives).
    pub freshness: String,
    /// Its scope relative to the request.
    pub scope: ScopeRelation,
    /// Its work context (none for directives).
    pub work_context: Option<String>,
    /// How much of it is shown.
    pub fidelity: Fidelity,
    /// Tokens of its rendered line.
    pub tokens: usize,
}

/// The policy's word on one candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PolicyNote {
    /// The fidelity decided.
    pub fidelity: Fidelity,
    /// The policy's reason codes.
    pub reason_codes: Vec<String>,
    /// The policy generation that decided.
    pub generation: String,
}

/// One candidate and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TraceItem {
    /// The candidate.
    pub source: ItemSource,
    /// The section it was a candidate for.
    pub section: Section,
    /// The tier, for tier sections.
    pub tier: Option<u8>,
    /// In the block or not.
    pub included: bool,
    /// Tokens of its rendered line (0 when it was never rendered).
    pub tokens: usize,
    /// The rule that decided, e.g. `invariant.directive`, `tail.min_turns`,
    /// `tier2.dropped_first`, `projection.budget`, `policy.blocked`.
    pub rule: String,
    /// Why it is in or out, in words.
    pub reason: String,
    /// The retriever's score, for projected candidates.
    pub score: Option<f32>,
    /// The policy decision, when the policy was asked.
    pub policy: Option<PolicyNote>,
}

/// What became of one tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TierReport {
    /// 1, 2 or 3.
    pub tier: u8,
    /// `resume`, `recent_activity` or `living_memory`.
    pub tag: String,
    /// Whether its card is in the block.
    pub fired: bool,
    /// Tokens of its card.
    pub tokens: usize,
    /// Its cap.
    pub cap: usize,
    /// The work context it is about (tier 1).
    pub work_context: Option<String>,
    /// Why it fired or not.
    pub reason: String,
}

/// The activity type the routing should use (docs/DESIGN.md, *Activity-type inheritance*).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActivityReport {
    /// `research`, `drafting`, `review`, `revision`, `waiting_for_external`,
    /// `completed`, `paused` or `unknown`.
    pub activity_type: String,
    /// True when it came from the work context's phase, not the message.
    pub inherited: bool,
    /// The work context's active phase, if one is recorded.
    pub work_phase: Option<String>,
    /// Why.
    pub reason: String,
}

/// What the projection asked and got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetrievalReport {
    /// The query text used.
    pub query: String,
    /// The mode actually used (`hybrid`, `bm25`, `off`).
    pub mode: String,
    /// True when hybrid was asked but only lexical ranking was possible.
    pub lexical_fallback: bool,
    /// True when the search index was still being built (the first pass
    /// after a start had not finished): stored items may be missing.
    #[serde(default)]
    pub index_catching_up: bool,
    /// Candidates the retriever returned.
    pub candidates: usize,
}

/// An assembled memory block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AssembledContext {
    /// The rendered block.
    pub text: String,
    /// Tokens of `text`, counted with `encoding`.
    pub tokens: usize,
    /// The budget asked for; `tokens <= budget` always.
    pub budget: usize,
    /// The tokenizer encoding.
    pub encoding: String,
    /// Where the block goes.
    pub destination: Destination,
    /// The items in the block, in rendering order, with their labels.
    pub items: Vec<BlockItem>,
    /// Every candidate, included or not.
    pub trace: Vec<TraceItem>,
    /// The three tiers.
    pub tiers: Vec<TierReport>,
    /// The activity type, inherited or not.
    pub activity: ActivityReport,
    /// The projection's retrieval.
    pub retrieval: RetrievalReport,
    /// The policy generations that decided (usually one).
    pub policy_generations: Vec<String>,
    /// What the memory policy obliged the host to do about the items in
    /// the block (disclose them, audit their use, hold them for the user's
    /// confirmation). Filled by the host that checked the block; the core
    /// leaves it empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub obligations: Vec<ObligationNote>,
}

/// One thing the memory policy obliged the host to do about an item it
/// handed out (a block item, a search hit, a transcript turn).
///
/// ```
/// use cairn_memory::assemble::ObligationNote;
/// let note = ObligationNote {
///     item: "entry e1".into(),
///     obligation: "disclose-to-user".into(),
///     decision_id: "d-1".into(),
///     record: None,
/// };
/// assert_eq!(note.to_string(), "disclose-to-user: entry e1 (decision d-1)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ObligationNote {
    /// The item: `turn s1:4`, `entry e1`, `summary sum-…`.
    pub item: String,
    /// The obligation: `disclose-to-user` (the item was used: tell the
    /// user), `audit-log` (`record` names the audit record written) or
    /// `confirm-with-user` (the item is held; `record` names the pending
    /// confirmation to grant).
    pub obligation: String,
    /// The decision that obliged it (in the decision log).
    pub decision_id: String,
    /// The audit record or the confirmation, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
}

impl std::fmt::Display for ObligationNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} (decision {})",
            self.obligation, self.item, self.decision_id
        )?;
        if let Some(record) = &self.record {
            write!(f, " [{record}]")?;
        }
        Ok(())
    }
}

impl AssembledContext {
    /// The trace entries of included items.
    pub fn included(&self) -> impl Iterator<Item = &TraceItem> {
        self.trace.iter().filter(|t| t.included)
    }
}

impl Workspace {
    /// Assembles the memory block for `request.session` (see the [module
    /// docs](self) for the composition), retrieving with `retriever` and
    /// checking every candidate with `policy`.
    ///
    /// Fails with `invariants_exceed_budget` when the directives, pinned
    /// entries and the minimum tail alone need more than the budget, and
    /// with `session_not_found`, `invalid` or `too_large` on bad input.
    pub fn assemble(
        &self,
        request: &AssembleRequest,
        retriever: &dyn Retriever,
        policy: &dyn PolicyCheck,
    ) -> Result<AssembledContext> {
        compose::assemble(self, request, retriever, policy)
    }

    /// Pins an entry: it is part of every block's invariants from now on
    /// (through its corrections: a pinned entry that is replaced pins its
    /// replacement). Durable when it returns.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_memory::{EntryInput, EntryKind, Memory, MemoryConfig, SystemClock};
    /// let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// let e = ws.append_entry(&EntryInput::new(EntryKind::Decision, "Postgres, not MySQL"))?;
    /// ws.pin(&e.id)?;
    /// assert_eq!(ws.pinned()?, vec![e.id.clone()]);
    /// ws.unpin(&e.id)?;
    /// assert!(ws.pinned()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin(&self, entry_id: &str) -> Result<()> {
        self.entry(entry_id)?;
        self.state_put(
            &StateKey::Pin {
                entry: entry_id.to_owned(),
            },
            b"",
        )
    }

    /// Unpins an entry (a no-op when it is not pinned).
    pub fn unpin(&self, entry_id: &str) -> Result<()> {
        crate::ids::validate_id("entry id", entry_id)?;
        self.state_apply(
            &[],
            &[StateKey::Pin {
                entry: entry_id.to_owned(),
            }],
        )
    }

    /// The active work phase of a work context (`research`, `drafting`,
    /// `review`, `revision`, `waiting_for_external`, `completed`,
    /// `paused`): what its newest live `work_phase_change` entry names.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// assert_eq!(ws.work_phase("launch")?, None);
    /// ws.append_entry(&EntryInput::new(EntryKind::WorkPhaseChange, "Phase: drafting").in_context("launch"))?;
    /// assert_eq!(ws.work_phase("launch")?, Some("drafting"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn work_phase(&self, work_context: &str) -> Result<Option<&'static str>> {
        let (live, derived) = self.live_state()?;
        Ok(tiers::active_phase(
            tiers::Continuity::of(&live, &derived),
            work_context,
        ))
    }

    /// The pinned entry ids, in id order.
    pub fn pinned(&self) -> Result<Vec<String>> {
        Ok(self
            .state_scan(StateFamily::Pin)?
            .into_iter()
            .filter_map(|(key, _)| match key {
                StateKey::Pin { entry } => Some(entry),
                _ => None,
            })
            .collect())
    }
}
