//! A simple, honest context assembly: the most recent turns of a session and
//! the live entries of its work context that fit a token budget.
//!
//! This is the foundation's assembly; the tiered, policy-checked assembly
//! replaces it. What it already guarantees: the rendered text never exceeds
//! the budget as counted by the configured tokenizer (it is counted on the
//! final text, not estimated), the recent tail is contiguous (no turn is
//! skipped to squeeze an older one in), a tool result is never included
//! without its call, and every candidate appears in the trace with the reason
//! it is in or out.

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::log::{EntryFilter, EntryKind, EntryView, TaskStatus};
use crate::memory::Workspace;
use crate::record::{Role, Turn};

/// How many turns are considered at most for the tail.
const MAX_TAIL_CANDIDATES: usize = 200;
/// How many live entries are considered at most.
const MAX_ENTRY_CANDIDATES: usize = 200;

/// What to assemble.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AssembleRequest {
    /// The session the model call is for.
    pub session: String,
    /// Token budget for the whole block.
    pub budget_tokens: usize,
}

/// Where an item came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemSource {
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
}

/// One candidate and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TraceItem {
    /// The candidate.
    pub source: ItemSource,
    /// In the block or not.
    pub included: bool,
    /// Tokens of its rendered line.
    pub tokens: usize,
    /// Why it is in or out.
    pub reason: String,
}

/// An assembled memory block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Every candidate, included or not, in rendering order for included ones.
    pub trace: Vec<TraceItem>,
}

impl AssembledContext {
    /// The included items, in rendering order.
    pub fn included(&self) -> impl Iterator<Item = &TraceItem> {
        self.trace.iter().filter(|t| t.included)
    }
}

fn entry_priority(view: &EntryView) -> u8 {
    match view.entry.kind {
        EntryKind::KeyDecision | EntryKind::Decision => 0,
        EntryKind::OpenQuestion | EntryKind::Question => 1,
        EntryKind::Task if view.entry.status != Some(TaskStatus::Done) => 2,
        EntryKind::Handoff | EntryKind::WorkPhaseChange => 3,
        EntryKind::CrossConversationUpdate => 4,
        EntryKind::Fact => 5,
        _ => 6,
    }
}

fn render_entry(view: &EntryView) -> String {
    let mut line = format!("- [{}] {}", view.entry.kind, view.entry.content.trim());
    if let Some(subject) = &view.subject {
        line.push_str(&format!(" (subject: {subject})"));
    }
    line
}

fn render_turn(turn: &Turn) -> String {
    let content = turn.content.trim();
    match &turn.tool_call_id {
        Some(id) => format!("[{}] {} ({id}): {content}", turn.seq, turn.role.as_str()),
        None => format!("[{}] {}: {content}", turn.seq, turn.role.as_str()),
    }
}

struct Candidate {
    source: ItemSource,
    line: String,
    tokens: usize,
    included: bool,
    reason: String,
}

impl Workspace {
    /// Assembles the recent tail of `request.session` and the live entries of
    /// its work context into a block of at most `request.budget_tokens` tokens.
    ///
    /// Entries get up to half the budget (decisions, then open questions, open
    /// tasks, handoffs, updates, facts; newest first within a rank); turns get
    /// the rest, newest first, stopping at the first that does not fit.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cairn_memory::{AssembleRequest, Memory, MemoryConfig, Role, SystemClock, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_turn(&TurnInput::new("s1", Role::User, "Ship on Friday?"))?;
    /// let block = ws.assemble(&AssembleRequest { session: "s1".into(), budget_tokens: 200 })?;
    /// assert!(block.tokens <= 200);
    /// assert!(block.text.contains("Ship on Friday?"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn assemble(&self, request: &AssembleRequest) -> Result<AssembledContext> {
        let session = self.session(&request.session)?;
        let counter = self.tokens();
        let budget = request.budget_tokens;
        let open = format!(
            "<cairn-memory session=\"{}\" work_context=\"{}\">\n",
            session.id, session.work_context
        );
        let close = "</cairn-memory>";
        let entries_header = "## Live memory\n";
        let turns_header = "## Recent turns\n";
        let fixed = counter.count(&format!("{open}{close}"));
        if fixed > budget {
            return Err(MemoryError::BudgetTooSmall {
                budget,
                needed: fixed,
            });
        }

        let mut entries: Vec<EntryView> = self.entries(&EntryFilter {
            work_context: Some(session.work_context.clone()),
            ..EntryFilter::default()
        })?;
        entries.sort_by_key(entry_priority);
        entries.truncate(MAX_ENTRY_CANDIDATES);
        let turns = self.recent_turns(&session.id, MAX_TAIL_CANDIDATES)?;

        let mut remaining = budget - fixed;
        // Entries: up to half of what remains, headers included.
        let entry_budget = remaining / 2;
        let mut entry_cands: Vec<Candidate> = entries
            .iter()
            .map(|view| {
                let line = render_entry(view);
                Candidate {
                    source: ItemSource::Entry {
                        id: view.entry.id.clone(),
                        kind: view.entry.kind,
                    },
                    tokens: counter.count(&line) + 1,
                    line,
                    included: false,
                    reason: String::new(),
                }
            })
            .collect();
        let header_cost = counter.count(entries_header);
        let mut used = 0;
        for cand in &mut entry_cands {
            let extra = if used == 0 { header_cost } else { 0 };
            if used + extra + cand.tokens <= entry_budget {
                used += extra + cand.tokens;
                cand.included = true;
                cand.reason = "live entry of this work context; fits the entry share".to_owned();
            } else {
                cand.reason = format!("over the entry share ({entry_budget} tokens, {used} used)");
            }
        }
        remaining -= used;

        // Turns: newest first, contiguous.
        let header_cost = counter.count(turns_header);
        let mut turn_cands: Vec<Candidate> = turns
            .iter()
            .rev()
            .map(|turn| {
                let line = render_turn(turn);
                Candidate {
                    source: ItemSource::Turn {
                        session: turn.session.clone(),
                        seq: turn.seq,
                    },
                    tokens: counter.count(&line) + 1,
                    line,
                    included: false,
                    reason: String::new(),
                }
            })
            .collect();
        let mut used = 0;
        let mut tail_closed = false;
        for cand in &mut turn_cands {
            let extra = if used == 0 { header_cost } else { 0 };
            if !tail_closed && used + extra + cand.tokens <= remaining {
                used += extra + cand.tokens;
                cand.included = true;
                cand.reason = "recent tail; fits the budget".to_owned();
            } else if tail_closed {
                cand.reason = "older than the recent tail that fits".to_owned();
            } else {
                tail_closed = true;
                cand.reason = format!("does not fit the remaining {} tokens", remaining - used);
            }
        }
        // Never keep a tool result whose call fell out of the tail.
        let included_calls: Vec<String> = turns
            .iter()
            .rev()
            .zip(&turn_cands)
            .filter(|(t, c)| c.included && t.role != Role::Tool)
            .filter_map(|(t, _)| t.tool_call_id.clone())
            .collect();
        for (turn, cand) in turns.iter().rev().zip(turn_cands.iter_mut()) {
            if cand.included
                && turn.role == Role::Tool
                && turn
                    .tool_call_id
                    .as_ref()
                    .is_some_and(|id| !included_calls.contains(id))
                && turns
                    .iter()
                    .any(|t| t.role != Role::Tool && t.tool_call_id == turn.tool_call_id)
            {
                cand.included = false;
                cand.reason = "tool result whose call is outside the tail".to_owned();
            }
        }

        // Render, then verify against the real count and trim if BPE merges
        // across lines made the sum of parts an underestimate.
        loop {
            let text = render(
                &open,
                close,
                entries_header,
                turns_header,
                &entry_cands,
                &turn_cands,
            );
            let tokens = counter.count(&text);
            if tokens <= budget {
                let mut trace: Vec<TraceItem> = Vec::new();
                for cand in entry_cands.into_iter().chain(turn_cands.into_iter().rev()) {
                    trace.push(TraceItem {
                        source: cand.source,
                        included: cand.included,
                        tokens: cand.tokens,
                        reason: cand.reason,
                    });
                }
                return Ok(AssembledContext {
                    text,
                    tokens,
                    budget,
                    encoding: counter.encoding().to_owned(),
                    trace,
                });
            }
            // Drop the oldest included turn, else the last included entry.
            if let Some(c) = turn_cands.iter_mut().rev().find(|c| c.included) {
                c.included = false;
                c.reason = "trimmed: the rendered block was over budget".to_owned();
            } else if let Some(c) = entry_cands.iter_mut().rev().find(|c| c.included) {
                c.included = false;
                c.reason = "trimmed: the rendered block was over budget".to_owned();
            } else {
                return Err(MemoryError::BudgetTooSmall {
                    budget,
                    needed: tokens,
                });
            }
        }
    }
}

fn render(
    open: &str,
    close: &str,
    entries_header: &str,
    turns_header: &str,
    entries: &[Candidate],
    turns: &[Candidate],
) -> String {
    let mut text = String::from(open);
    if entries.iter().any(|c| c.included) {
        text.push_str(entries_header);
        for c in entries.iter().filter(|c| c.included) {
            text.push_str(&c.line);
            text.push('\n');
        }
    }
    if turns.iter().any(|c| c.included) {
        text.push_str(turns_header);
        for c in turns.iter().rev().filter(|c| c.included) {
            text.push_str(&c.line);
            text.push('\n');
        }
    }
    text.push_str(close);
    text
}
