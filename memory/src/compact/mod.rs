//! Lossless compaction: a summary DAG over a session's transcript.
//!
//! A long session outgrows any context window. [`Workspace::compact`](crate::Workspace::compact)
//! replaces the session's *view* of its older history with summaries while
//! the raw record stays exactly as it was (docs/DESIGN.md, *Compaction*):
//!
//! 1. **Tail.** The kept recent tail is the last `min_tail_turns` turns,
//!    extended backward up to `tail_tokens` (`m` wins when they conflict),
//!    then moved backward until no tool call is split from its result.
//! 2. **Clusters.** Only turns before the tail are compacted, in clusters of
//!    at most `cluster_turns` turns / `cluster_tokens` tokens whose
//!    boundaries never fall inside a bundle (a call and its results).
//! 3. **Summaries.** Each cluster is sanitised (secrets redacted, payloads
//!    and instruction-like sentences dropped) and summarised, conditioned on
//!    the previous summary (what it already said is not repeated). The
//!    summariser ladder is: the configured [`Summariser`] (normal, then
//!    aggressive), the deterministic [`Extractive`] summariser (normal, then
//!    tight), then a bounded fallback. The first answer strictly smaller than
//!    its sources wins (Δ > 0); when none is, the cluster stays raw in the
//!    view (declined).
//! 4. **Levels.** While the view (summaries + raw tail) is over the budget,
//!    runs of consecutive same-level nodes are summarised again into a node
//!    one level up: summaries of summaries form the DAG.
//! 5. **Write.** Every new node and the new [`CompactionView`] go in one
//!    atomic write batch, then an fsync: a crash leaves the old view or the
//!    new one.
//!
//! [`Workspace::expand`](crate::Workspace::expand) follows one level of the DAG; [`Workspace::expand_all`](crate::Workspace::expand_all)
//! returns the exact source turns, checked against the node's source hash.
//!
//! ```
//! use std::sync::Arc;
//! use cairn_memory::compact::{CompactOptions, Extractive};
//! use cairn_memory::*;
//!
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
//! let ws = memory.workspace("acme")?;
//! for i in 0..40 {
//!     ws.append_turn(&TurnInput::new("s1", Role::User, &format!("Turn {i}: we decided to keep retry budget {i} for the queue worker.")))?;
//! }
//! let report = ws.compact("s1", &CompactOptions::new(300), &Extractive)?;
//! assert!(report.tokens_after < report.tokens_before);
//! let top = &report.created[0];
//! let turns = ws.expand_all(top)?;
//! assert_eq!(turns[0].content, "Turn 0: we decided to keep retry budget 0 for the queue worker.");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod pass;
mod summarise;
#[cfg(test)]
mod tests;

pub use summarise::{
    Extractive, SourceItem, Summariser, SummariserError, SummaryRequest, sanitise, summarise_turns,
};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::record::Turn;

/// What a summary node directly covers: a range of raw turns or a
/// lower-level summary (an edge of the DAG).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Cover {
    /// Raw turns `from..=to` of the node's session.
    Turns {
        /// First sequence number.
        from: u64,
        /// Last sequence number (inclusive).
        to: u64,
    },
    /// Another summary node.
    Summary {
        /// Its id.
        id: String,
    },
}

/// How a summary's text was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SummaryMethod {
    /// A model through the configured endpoint.
    Model,
    /// A model asked for a shorter answer after the first was not smaller.
    ModelAggressive,
    /// The deterministic extractive summariser.
    Extractive,
    /// The extractive summariser with a tighter cap.
    ExtractiveTight,
    /// The deterministic bounded fallback (counts and the range).
    Fallback,
}

impl SummaryMethod {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            SummaryMethod::Model => "model",
            SummaryMethod::ModelAggressive => "model_aggressive",
            SummaryMethod::Extractive => "extractive",
            SummaryMethod::ExtractiveTight => "extractive_tight",
            SummaryMethod::Fallback => "fallback",
        }
    }
}

/// One node of the summary DAG, with its lineage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SummaryNode {
    /// `sum-` and 26 hex digits, derived from what the node covers.
    pub id: String,
    /// The session summarised.
    pub session: String,
    /// The session's work context.
    pub work_context: String,
    /// 0 over raw turns; one more than its highest child otherwise.
    pub level: u32,
    /// First source turn.
    pub from_seq: u64,
    /// Last source turn (inclusive).
    pub to_seq: u64,
    /// Direct children, in order (the DAG's edges).
    pub covers: Vec<Cover>,
    /// The summary.
    pub text: String,
    /// How the text was made.
    pub method: SummaryMethod,
    /// Tokens of what it replaces (its children as they stood in the view).
    pub tokens_before: usize,
    /// Tokens of `text`.
    pub tokens_after: usize,
    /// blake3 over the source turns' sequence numbers and content hashes.
    pub source_hash: String,
    /// Timestamp of the first source turn.
    pub earliest: DateTime<Utc>,
    /// Timestamp of the last source turn.
    pub latest: DateTime<Utc>,
    /// When the node was made.
    pub created_at: DateTime<Utc>,
}

impl SummaryNode {
    /// The line a reader is shown to get the originals back.
    pub fn expand_hint(&self) -> String {
        format!(
            "memory_expand {} (turns {}-{})",
            self.id, self.from_seq, self.to_seq
        )
    }
}

/// A session's compacted history: what stands for turns `0..covered_to`,
/// in order. Turns from `covered_to` on are raw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompactionView {
    /// The session.
    pub session: String,
    /// Summaries and raw ranges (declined clusters), contiguous from turn 0.
    pub items: Vec<Cover>,
    /// First turn the view does not cover.
    pub covered_to: u64,
    /// Passes that changed the view.
    pub passes: u64,
}

impl CompactionView {
    /// The ids of the summaries in the view, oldest first.
    pub fn summary_ids(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|c| match c {
            Cover::Summary { id } => Some(id.as_str()),
            Cover::Turns { .. } => None,
        })
    }
}

/// The knobs of one pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactOptions {
    /// Tokens the session's view (summaries + raw tail) should fit in.
    pub budget_tokens: usize,
    /// Turns always kept raw at the end (`m`; wins over `tail_tokens`).
    pub min_tail_turns: usize,
    /// Tokens the kept tail may grow to; half the budget when absent.
    pub tail_tokens: Option<usize>,
    /// Most turns in one level-0 cluster.
    pub cluster_turns: usize,
    /// Most tokens in one level-0 cluster (a bundle may pass it).
    pub cluster_tokens: usize,
    /// Cap of one summary's text, in tokens.
    pub summary_max_tokens: usize,
    /// Most children of a higher-level node.
    pub fanout: usize,
    /// Cap of the earlier summary a new one is conditioned on (τ_B).
    pub prior_max_tokens: usize,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            budget_tokens: 8_000,
            min_tail_turns: 8,
            tail_tokens: None,
            cluster_turns: 24,
            cluster_tokens: 4_000,
            summary_max_tokens: 160,
            fanout: 8,
            prior_max_tokens: 200,
        }
    }
}

impl CompactOptions {
    /// The defaults with a budget.
    ///
    /// ```
    /// let o = cairn_memory::compact::CompactOptions::new(2_000);
    /// assert_eq!(o.budget_tokens, 2_000);
    /// ```
    pub fn new(budget_tokens: usize) -> Self {
        CompactOptions {
            budget_tokens,
            ..CompactOptions::default()
        }
    }

    /// The kept tail's token target.
    pub fn tail_target(&self) -> usize {
        self.tail_tokens.unwrap_or(self.budget_tokens / 2)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |reason: &str| {
            Err(MemoryError::Invalid {
                what: "compaction options",
                reason: reason.to_owned(),
            })
        };
        if self.budget_tokens == 0 {
            return bad("budget_tokens must be above 0");
        }
        if self.cluster_turns == 0 || self.cluster_tokens == 0 {
            return bad("cluster_turns and cluster_tokens must be above 0");
        }
        if self.fanout < 2 {
            return bad("fanout must be at least 2");
        }
        if self.summary_max_tokens < 8 {
            return bad("summary_max_tokens must be at least 8");
        }
        Ok(())
    }
}

/// What a pass did. Not changing anything is an outcome, not an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompactReport {
    /// The session.
    pub session: String,
    /// True when the pass wrote a new view.
    pub changed: bool,
    /// Nodes made by this pass (children before parents).
    pub created: Vec<String>,
    /// Clusters left raw because no summary was smaller.
    pub declined: usize,
    /// The view's tokens (summaries + raw turns) before the pass.
    pub tokens_before: usize,
    /// The view's tokens after the pass.
    pub tokens_after: usize,
    /// The budget asked for.
    pub budget_tokens: usize,
    /// First turn of the kept raw tail.
    pub tail_from: u64,
    /// The view after the pass.
    pub view: CompactionView,
}

/// One level of a summary's expansion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Expanded {
    /// Raw turns, exactly as recorded.
    Turns {
        /// The turns.
        turns: Vec<Turn>,
    },
    /// A lower-level summary (expand it in turn).
    Summary {
        /// The node.
        node: SummaryNode,
    },
}

/// A summary and what it directly covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Expansion {
    /// The summary expanded.
    pub node: SummaryNode,
    /// Its children, in order.
    pub children: Vec<Expanded>,
}
