//! The compaction pass and expansion, as `impl Workspace` blocks: tail
//! selection, bundle-safe clusters, the summariser ladder, level-up merges,
//! the one atomic write; reads of the view and the DAG.

use std::collections::{BTreeSet, HashMap};

use super::summarise::{self, SourceItem, Summariser, SummaryRequest};
use super::{
    CompactOptions, CompactReport, CompactionView, Cover, Expanded, Expansion, SummaryMethod,
    SummaryNode,
};
use crate::error::{MemoryError, Result};
use crate::ids::validate_id;
use crate::memory::{Workspace, decode, encode};
use crate::record::{Role, Session, Turn, content_hash};
use crate::store::{Collection, StateKey, WriteBatch};
use crate::tokens::TokenCounter;

/// blake3 over `seq:content_hash` lines of the turns, hex.
pub(crate) fn source_hash<'t>(turns: impl IntoIterator<Item = &'t Turn>) -> String {
    let mut hasher = blake3::Hasher::new();
    for t in turns {
        hasher.update(format!("{}:{}\n", t.seq, t.content_hash).as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

/// Turns after an unanswered tool call that stay with it: its result is
/// still to come, so no boundary falls in this window after the call (a
/// call abandoned for longer no longer holds compaction back).
pub(crate) const PENDING_CALL_TURNS: usize = 32;

/// `allowed[p]` is true when a boundary before position `p` splits no
/// bundle: a tool call and any of its results, or a call still waiting for
/// its result (up to [`PENDING_CALL_TURNS`] turns after it).
pub(crate) fn boundaries(turns: &[Turn]) -> Vec<bool> {
    let n = turns.len();
    let mut depth = vec![0i64; n + 2];
    let mut calls: HashMap<&str, (usize, bool)> = HashMap::new();
    for (j, t) in turns.iter().enumerate() {
        let Some(id) = t.tool_call_id.as_deref() else {
            continue;
        };
        if t.role == Role::Tool {
            if let Some((c, answered)) = calls.get_mut(id) {
                // Forbid boundaries at c+1..=j.
                depth[*c + 1] += 1;
                depth[j + 1] -= 1;
                *answered = true;
            }
        } else {
            calls.insert(id, (j, false));
        }
    }
    for &(c, answered) in calls.values() {
        if !answered && n - c <= PENDING_CALL_TURNS {
            depth[c + 1] += 1;
            depth[n + 1] -= 1;
        }
    }
    let mut allowed = Vec::with_capacity(n + 1);
    let mut open = 0i64;
    for d in depth.iter().take(n + 1) {
        open += d;
        allowed.push(open == 0);
    }
    allowed
}

/// The kept tail's first index in `turns` (docs/DESIGN.md, *Compaction*): the last `m`
/// turns, extended backward within the tail target, moved backward off any
/// bundle.
pub(crate) fn tail_start(
    tokens: &[usize],
    allowed: &[bool],
    min_tail: usize,
    tail_target: usize,
) -> usize {
    let n = tokens.len();
    let mut start = n.saturating_sub(min_tail);
    let mut sum: usize = tokens[start..].iter().sum();
    while start > 0 && sum + tokens[start - 1] <= tail_target {
        start -= 1;
        sum += tokens[start];
    }
    while start > 0 && !allowed[start] {
        start -= 1;
    }
    start
}

/// One item of the view while a pass works on it.
#[derive(Debug, Clone)]
struct Item {
    cover: Cover,
    level: u32,
    tokens: usize,
    from: u64,
    to: u64,
}

struct Pass<'a> {
    ws: &'a Workspace,
    session: &'a Session,
    turns: &'a [Turn],
    turn_tokens: &'a [usize],
    counter: &'a TokenCounter,
    options: &'a CompactOptions,
    summariser: &'a dyn Summariser,
    nodes: HashMap<String, SummaryNode>,
    created: Vec<String>,
    declined: usize,
}

impl Pass<'_> {
    fn range_tokens(&self, from: u64, to: u64) -> usize {
        self.turn_tokens[from as usize..=to as usize].iter().sum()
    }

    fn item_of(&self, cover: &Cover) -> Result<Item> {
        match cover {
            Cover::Turns { from, to } => {
                if *to as usize >= self.turns.len() || from > to {
                    return Err(MemoryError::Corrupt {
                        what: "compaction view",
                        key: self.session.id.clone(),
                        reason: format!("range {from}-{to} is outside the transcript"),
                    });
                }
                Ok(Item {
                    cover: cover.clone(),
                    level: 0,
                    tokens: self.range_tokens(*from, *to),
                    from: *from,
                    to: *to,
                })
            }
            Cover::Summary { id } => {
                let node = self.node(id)?;
                Ok(Item {
                    cover: cover.clone(),
                    level: node.level,
                    tokens: node.tokens_after,
                    from: node.from_seq,
                    to: node.to_seq,
                })
            }
        }
    }

    fn node(&self, id: &str) -> Result<&SummaryNode> {
        self.nodes
            .get(id)
            .ok_or_else(|| MemoryError::SummaryNotFound { id: id.to_owned() })
    }

    fn sources(&self, items: &[Item]) -> Result<Vec<SourceItem>> {
        let mut out = Vec::new();
        for item in items {
            match &item.cover {
                Cover::Turns { from, to } => out.extend(summarise::turn_items(
                    &self.turns[*from as usize..=*to as usize],
                )),
                Cover::Summary { id } => out.push(SourceItem {
                    from: item.from,
                    to: item.to,
                    role: None,
                    tool_call_id: None,
                    text: self.node(id)?.text.clone(),
                }),
            }
        }
        Ok(out)
    }

    /// The ladder (docs/DESIGN.md, *Compaction*): the configured model (normal, aggressive),
    /// the extractive summary (normal, tight), the bounded fallback. The first
    /// sanitised answer strictly smaller than the sources wins.
    fn summarise(
        &self,
        sources: &[SourceItem],
        prior: Option<&str>,
        before: usize,
    ) -> Option<(String, SummaryMethod, usize)> {
        let max = self
            .options
            .summary_max_tokens
            .min(before.saturating_sub(1));
        if max == 0 {
            return None;
        }
        let request = |aggressive| SummaryRequest {
            items: sources,
            prior,
            max_tokens: if aggressive { (max / 2).max(1) } else { max },
            aggressive,
        };
        let accept = |text: String| -> Option<(String, usize)> {
            let text = summarise::sanitise(&text);
            let tokens = self.counter.count(&text);
            (!text.trim().is_empty() && tokens < before && tokens <= max).then_some((text, tokens))
        };
        if self.summariser.is_model() {
            for (aggressive, method) in [
                (false, SummaryMethod::Model),
                (true, SummaryMethod::ModelAggressive),
            ] {
                match self.summariser.summarise(&request(aggressive)) {
                    Ok(text) => {
                        if let Some((text, tokens)) = accept(text) {
                            return Some((text, method, tokens));
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "summariser failed; falling back");
                        break;
                    }
                }
            }
        }
        for (aggressive, method) in [
            (false, SummaryMethod::Extractive),
            (true, SummaryMethod::ExtractiveTight),
        ] {
            let text = summarise::extractive_with(&request(aggressive), self.counter);
            if let Some((text, tokens)) = accept(text) {
                return Some((text, method, tokens));
            }
        }
        let text = summarise::fallback(sources, max, self.counter);
        accept(text).map(|(text, tokens)| (text, SummaryMethod::Fallback, tokens))
    }

    /// Summarises `items` (consecutive) into one node, or `None` when no
    /// answer is smaller (declined).
    fn make_node(&mut self, items: &[Item], prior: Option<&str>) -> Result<Option<Item>> {
        let (Some(first), Some(last)) = (items.first(), items.last()) else {
            return Ok(None);
        };
        let before: usize = items.iter().map(|i| i.tokens).sum();
        let sources = self.sources(items)?;
        let prior = prior.map(|p| self.counter.truncate(p, self.options.prior_max_tokens));
        let Some((text, method, tokens)) = self.summarise(&sources, prior, before) else {
            self.declined += 1;
            return Ok(None);
        };
        let (from, to) = (first.from, last.to);
        let leaves = &self.turns[from as usize..=to as usize];
        let hash = source_hash(leaves);
        let covers: Vec<Cover> = items.iter().map(|i| i.cover.clone()).collect();
        let level = if items.iter().all(|i| matches!(i.cover, Cover::Turns { .. })) {
            0
        } else {
            items.iter().map(|i| i.level).max().unwrap_or(0) + 1
        };
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.session.id.as_bytes());
        hasher.update(format!("\0{level}\0{from}\0{to}\0{hash}").as_bytes());
        for c in &covers {
            if let Cover::Summary { id } = c {
                hasher.update(b"\0");
                hasher.update(id.as_bytes());
            }
        }
        let id = format!("sum-{}", &hasher.finalize().to_hex().as_str()[..26]);
        let node = SummaryNode {
            id: id.clone(),
            session: self.session.id.clone(),
            work_context: self.session.work_context.clone(),
            level,
            from_seq: from,
            to_seq: to,
            covers,
            text,
            method,
            tokens_before: before,
            tokens_after: tokens,
            source_hash: hash,
            earliest: leaves.first().map_or(self.ws.now(), |t| t.timestamp),
            latest: leaves.last().map_or(self.ws.now(), |t| t.timestamp),
            created_at: self.ws.now(),
        };
        self.nodes.insert(id.clone(), node);
        self.created.push(id.clone());
        Ok(Some(Item {
            cover: Cover::Summary { id },
            level,
            tokens,
            from,
            to,
        }))
    }

    fn prior_text(&self, items: &[Item]) -> Option<String> {
        items.iter().rev().find_map(|i| match &i.cover {
            Cover::Summary { id } => self.nodes.get(id).map(|n| n.text.clone()),
            Cover::Turns { .. } => None,
        })
    }

    /// Level 0: clusters of the raw turns `from..to` (indices), bundle-safe.
    fn clusters(&mut self, items: &mut Vec<Item>, from: usize, to: usize) -> Result<()> {
        let allowed = boundaries(self.turns);
        let mut p = from;
        while p < to {
            let mut end = p;
            let mut tokens = 0;
            while end < to
                && end - p < self.options.cluster_turns
                && (end == p || tokens + self.turn_tokens[end] <= self.options.cluster_tokens)
            {
                tokens += self.turn_tokens[end];
                end += 1;
            }
            while end < to && !allowed[end] {
                end += 1;
            }
            let raw = Item {
                cover: Cover::Turns {
                    from: p as u64,
                    to: (end - 1) as u64,
                },
                level: 0,
                tokens: self.range_tokens(p as u64, (end - 1) as u64),
                from: p as u64,
                to: (end - 1) as u64,
            };
            let prior = self.prior_text(items);
            match self.make_node(std::slice::from_ref(&raw), prior.as_deref())? {
                Some(node) => items.push(node),
                None => push_raw(items, raw),
            }
            p = end;
        }
        Ok(())
    }

    /// Higher levels: while over the budget, the oldest run of same-level
    /// items (lowest level first) becomes one node.
    fn level_up(&mut self, items: &mut Vec<Item>, tail_tokens: usize) -> Result<()> {
        loop {
            let total: usize = items.iter().map(|i| i.tokens).sum::<usize>() + tail_tokens;
            if total <= self.options.budget_tokens {
                return Ok(());
            }
            let Some((start, end)) = pick_run(items, self.options.fanout) else {
                return Ok(());
            };
            let prior = self.prior_text(&items[..start]);
            match self.make_node(&items[start..end], prior.as_deref())? {
                Some(node) => {
                    items.splice(start..end, [node]);
                }
                None => return Ok(()),
            }
        }
    }
}

fn push_raw(items: &mut Vec<Item>, raw: Item) {
    if let Some(Item {
        cover: Cover::Turns { to, .. },
        tokens,
        to: last,
        ..
    }) = items.last_mut()
        && *to + 1 == raw.from
    {
        *to = raw.to;
        *last = raw.to;
        *tokens += raw.tokens;
        return;
    }
    items.push(raw);
}

/// The oldest run (2..=fanout items) of one level, at the lowest level
/// that has one.
fn pick_run(items: &[Item], fanout: usize) -> Option<(usize, usize)> {
    let levels: BTreeSet<u32> = items.iter().map(|i| i.level).collect();
    for level in levels {
        let mut i = 0;
        while i < items.len() {
            if items[i].level != level {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < items.len() && items[j].level == level && j - i < fanout {
                j += 1;
            }
            if j - i >= 2 {
                return Some((i, j));
            }
            i = j.max(i + 1);
        }
    }
    None
}

// Compaction on a workspace: the pass, the view, the DAG, expansion.
impl Workspace {
    /// Compacts a session's older history into summaries (see the
    /// [module docs](crate::compact)); durable when it returns. A pass that
    /// finds nothing to compact returns a report with `changed: false`.
    pub fn compact(
        &self,
        session: &str,
        options: &CompactOptions,
        summariser: &dyn Summariser,
    ) -> Result<CompactReport> {
        validate_id("session id", session)?;
        options.validate()?;
        let stripe = self
            .shared
            .stripe(&self.id, &format!("\0compact/{session}"));
        let guard = self.shared.lock_stripes(BTreeSet::from([stripe]));
        let meta = self.session(session)?;
        let old = self.compaction_view(session)?.unwrap_or(CompactionView {
            session: session.to_owned(),
            ..CompactionView::default()
        });
        let turns = self.transcript(session, 0, None)?;
        if let Some((i, t)) = turns.iter().enumerate().find(|(i, t)| t.seq != *i as u64) {
            return Err(MemoryError::Corrupt {
                what: "transcript",
                key: session.to_owned(),
                reason: format!("turn at position {i} has seq {}", t.seq),
            });
        }
        let counter = self.tokens();
        let turn_tokens: Vec<usize> = turns.iter().map(|t| counter.count(&t.content)).collect();
        let mut pass = Pass {
            ws: self,
            session: &meta,
            turns: &turns,
            turn_tokens: &turn_tokens,
            counter,
            options,
            summariser,
            nodes: HashMap::new(),
            created: Vec::new(),
            declined: 0,
        };
        for id in old.summary_ids() {
            let node = self.summary(id)?;
            pass.nodes.insert(id.to_owned(), node);
        }
        let mut items = old
            .items
            .iter()
            .map(|c| pass.item_of(c))
            .collect::<Result<Vec<Item>>>()?;
        let covered = old.covered_to as usize;
        if covered > turns.len() {
            return Err(MemoryError::Corrupt {
                what: "compaction view",
                key: session.to_owned(),
                reason: format!("covers {covered} turns of {}", turns.len()),
            });
        }
        let raw_tokens: usize = turn_tokens[covered..].iter().sum();
        let tokens_before = items.iter().map(|i| i.tokens).sum::<usize>() + raw_tokens;
        let rest = &turns[covered..];
        let tail = covered
            + tail_start(
                &turn_tokens[covered..],
                &boundaries(rest),
                options.min_tail_turns,
                options.tail_target(),
            );
        pass.clusters(&mut items, covered, tail)?;
        let tail_tokens: usize = turn_tokens[tail..].iter().sum();
        pass.level_up(&mut items, tail_tokens)?;
        let tokens_after = items.iter().map(|i| i.tokens).sum::<usize>() + tail_tokens;
        let view = CompactionView {
            session: session.to_owned(),
            items: items.iter().map(|i| i.cover.clone()).collect(),
            covered_to: tail as u64,
            passes: old.passes + u64::from(!pass.created.is_empty()),
        };
        let changed = !pass.created.is_empty();
        if changed {
            let mut batch = WriteBatch::default();
            for id in &pass.created {
                let node = pass.node(id)?;
                batch.put(Collection::Summaries, id.as_bytes().to_vec(), encode(node)?);
            }
            let key = StateKey::CompactionView {
                session: session.to_owned(),
            };
            batch.put(Collection::State, key.encode(), encode(&view)?);
            self.apply(batch)?;
        }
        drop(guard);
        if changed {
            self.shared.store.sync()?;
        }
        Ok(CompactReport {
            session: session.to_owned(),
            changed,
            created: pass.created,
            declined: pass.declined,
            tokens_before,
            tokens_after: if changed { tokens_after } else { tokens_before },
            budget_tokens: options.budget_tokens,
            tail_from: if changed { tail as u64 } else { old.covered_to },
            view: if changed { view } else { old },
        })
    }

    /// Writes a session's compaction view and the summary nodes it stands
    /// on as they are given (an import of an exported bundle), in one
    /// atomic batch; durable when it returns. The session must exist, every
    /// node must belong to it, and every summary the view or a node names
    /// must be among `nodes` or already stored.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # use cairn_memory::compact::CompactionView;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.append_turn(&TurnInput::new("s1", Role::User, "hello"))?;
    /// let view = CompactionView { session: "s1".into(), ..CompactionView::default() };
    /// ws.restore_compaction(&view, &[])?;
    /// assert_eq!(ws.compaction_view("s1")?, Some(view));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn restore_compaction(&self, view: &CompactionView, nodes: &[SummaryNode]) -> Result<()> {
        let session = view.session.as_str();
        validate_id("session id", session)?;
        let stripe = self
            .shared
            .stripe(&self.id, &format!("\0compact/{session}"));
        let guard = self.shared.lock_stripes(BTreeSet::from([stripe]));
        self.session(session)?;
        let given: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        let named = view
            .items
            .iter()
            .chain(nodes.iter().flat_map(|n| n.covers.iter()))
            .filter_map(|c| match c {
                Cover::Summary { id } => Some(id.as_str()),
                Cover::Turns { .. } => None,
            });
        for id in named {
            if !given.contains(id) {
                self.summary(id)?;
            }
        }
        let mut batch = WriteBatch::default();
        for node in nodes {
            validate_id("summary id", &node.id)?;
            if node.session != session {
                return Err(MemoryError::Invalid {
                    what: "summary node",
                    reason: format!(
                        "summary {:?} belongs to session {:?}, not {session:?}",
                        node.id, node.session
                    ),
                });
            }
            batch.put(
                Collection::Summaries,
                node.id.as_bytes().to_vec(),
                encode(node)?,
            );
        }
        let key = StateKey::CompactionView {
            session: session.to_owned(),
        };
        batch.put(Collection::State, key.encode(), encode(view)?);
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(())
    }

    /// The session's compaction view; `None` before its first pass.
    pub fn compaction_view(&self, session: &str) -> Result<Option<CompactionView>> {
        validate_id("session id", session)?;
        if !self.has_compaction_view(session)? {
            return Ok(None);
        }
        let key = StateKey::CompactionView {
            session: session.to_owned(),
        };
        match self.store.get(Collection::State, &key.encode())? {
            Some(raw) => Ok(Some(decode("compaction view", &key.encode(), &raw)?)),
            None => Ok(None),
        }
    }

    /// One summary node.
    pub fn summary(&self, id: &str) -> Result<SummaryNode> {
        validate_id("summary id", id)?;
        match self.store.get(Collection::Summaries, id.as_bytes())? {
            Some(raw) => decode("summary", id.as_bytes(), &raw),
            None => Err(MemoryError::SummaryNotFound { id: id.to_owned() }),
        }
    }

    /// The summaries standing in a session's view, oldest first.
    pub fn view_summaries(&self, session: &str) -> Result<Vec<SummaryNode>> {
        let Some(view) = self.compaction_view(session)? else {
            return Ok(Vec::new());
        };
        view.summary_ids().map(|id| self.summary(id)).collect()
    }

    /// One level of a summary: its raw turns and lower summaries, in order.
    /// Checked as far as one level allows: each raw turn against its content
    /// hash, the children contiguous over the node's range, and a level-0
    /// node against its source hash ([`MemoryError::SummaryMismatch`]).
    pub fn expand(&self, id: &str) -> Result<Expansion> {
        let node = self.summary(id)?;
        let mut children = Vec::with_capacity(node.covers.len());
        let mut next = node.from_seq;
        for cover in &node.covers {
            let (from, to, child) = match cover {
                Cover::Turns { from, to } => {
                    let turns = self.source_turns(&node, *from, *to)?;
                    check_turn_hashes(&node, &turns)?;
                    (*from, *to, Expanded::Turns { turns })
                }
                Cover::Summary { id } => {
                    let child = self.summary(id)?;
                    (
                        child.from_seq,
                        child.to_seq,
                        Expanded::Summary { node: child },
                    )
                }
            };
            if from != next {
                return Err(mismatch(
                    &node,
                    format!("a child starts at turn {from}, expected {next}"),
                ));
            }
            next = to + 1;
            children.push(child);
        }
        if next != node.to_seq + 1 {
            return Err(mismatch(
                &node,
                format!(
                    "the children end at turn {}, expected {}",
                    next.saturating_sub(1),
                    node.to_seq
                ),
            ));
        }
        if node.level == 0 {
            let turns = children.iter().flat_map(|c| match c {
                Expanded::Turns { turns } => turns.as_slice(),
                Expanded::Summary { .. } => &[],
            });
            if source_hash(turns) != node.source_hash {
                return Err(mismatch(&node, "the source hash differs".to_owned()));
            }
        }
        Ok(Expansion { node, children })
    }

    /// The exact turns a summary stands for, following the DAG down through
    /// summaries of summaries. Every node on the way is checked against its
    /// own range and source hash, so a corrupted record or node is named
    /// (byte-identical or [`MemoryError::SummaryMismatch`]).
    pub fn expand_all(&self, id: &str) -> Result<Vec<Turn>> {
        let node = self.summary(id)?;
        let mut turns = Vec::new();
        self.verified_leaves(&node, &mut turns, 0)?;
        Ok(turns)
    }

    /// Appends `node`'s source turns to `out` and checks them against it.
    fn verified_leaves(&self, node: &SummaryNode, out: &mut Vec<Turn>, depth: usize) -> Result<()> {
        if depth > 64 {
            return Err(mismatch(
                node,
                "the DAG is deeper than 64 levels (a cycle?)".to_owned(),
            ));
        }
        let start = out.len();
        for cover in &node.covers {
            match cover {
                Cover::Turns { from, to } => {
                    let turns = self.source_turns(node, *from, *to)?;
                    check_turn_hashes(node, &turns)?;
                    out.extend(turns);
                }
                Cover::Summary { id } => {
                    let child = self.summary(id)?;
                    self.verified_leaves(&child, out, depth + 1)?;
                }
            }
        }
        let mine = &out[start..];
        let expected = node.to_seq - node.from_seq + 1;
        if mine.len() as u64 != expected
            || mine
                .iter()
                .enumerate()
                .any(|(i, t)| t.seq != node.from_seq + i as u64)
        {
            return Err(mismatch(
                node,
                format!(
                    "expected turns {}-{}, found {} turn(s)",
                    node.from_seq,
                    node.to_seq,
                    mine.len()
                ),
            ));
        }
        if source_hash(mine) != node.source_hash {
            return Err(mismatch(node, "the source hash differs".to_owned()));
        }
        Ok(())
    }

    fn source_turns(&self, node: &SummaryNode, from: u64, to: u64) -> Result<Vec<Turn>> {
        let len = usize::try_from(to.saturating_sub(from) + 1).unwrap_or(usize::MAX);
        let turns = self.transcript(&node.session, from, Some(len))?;
        if turns.len() != len {
            return Err(mismatch(
                node,
                format!("turns {from}-{to} are not all in the record"),
            ));
        }
        Ok(turns)
    }
}

fn mismatch(node: &SummaryNode, reason: String) -> MemoryError {
    MemoryError::SummaryMismatch {
        id: node.id.clone(),
        reason,
    }
}

/// Each raw turn still matches the content hash it was stored with.
fn check_turn_hashes(node: &SummaryNode, turns: &[Turn]) -> Result<()> {
    match turns
        .iter()
        .find(|t| content_hash(&t.content) != t.content_hash)
    {
        Some(t) => Err(mismatch(
            node,
            format!("turn {} does not match its hash", t.seq),
        )),
        None => Ok(()),
    }
}
