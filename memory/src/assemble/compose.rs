//! The composition: candidates in order of precedence, each checked by the
//! policy, charged against the budget, traced; then the render and the
//! final count.
//!
//! [`assemble`] reads its [`Inputs`] once (request checks, the session, the
//! live log, subjects, the tail's turns, the query, the pins), lays out the
//! frame, then runs one function per step of the precedence in the
//! [module docs](super): [`hard_invariants`], [`minimum_tail`] (then the
//! invariants' budget check), [`tier3`], [`extend_tail`], [`tier1`],
//! [`tier2`], [`projection`], and [`finish`], the final recount. Each step
//! offers candidates through [`Ctx::offer`], which asks the policy, renders
//! the line and charges it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::hash::BuildHasher;

// Per-assembly maps and sets hash with foldhash (seeded per process), not
// SipHash: their keys are sessions, entry ids and texts an assembly reads
// many times, and SipHash was 2-3 % of an assembly's samples.
use foldhash::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::MAX_BUDGET_TOKENS;
use super::render::{self, CLOSE, RULES, RULES_CLOSE, RULES_OPEN};
use super::seams::{
    CandidateRef, PolicyCheck, PolicyContext, PolicyItem, PolicyVerdict, RetrievalQuery, Retriever,
};
use super::tail::Tail;
use super::tiers::{self, ResumePart};
use super::{
    AssembleRequest, AssembleSettings, AssembledContext, BlockItem, Fidelity, ItemSource,
    PolicyNote, RetrievalMode, RetrievalReport, ScopeRelation, Section, TierReport, TraceItem,
    Warrant,
};
use crate::compact::SummaryNode;
use crate::error::{MemoryError, Result};
use crate::log::EntryView;
use crate::memory::{DEFAULT_WORK_CONTEXT, Workspace};
use crate::record::{Role, Session, Turn};
use crate::subjects::Subject;
use crate::tokens::TokenCounter;
use crate::topics::Topic;
use crate::topics::gate::Membership;

/// One rendered candidate.
struct Piece {
    line: String,
    /// Where `line` may be cut for counting ([`Line::cuts`]).
    cuts: [usize; 3],
    tokens: usize,
    item: BlockItem,
    keys: Vec<&'static str>,
    trace: usize,
}

/// What an item is, before the policy and the renderer see it.
struct Raw<'t> {
    source: ItemSource,
    section: Section,
    text: &'t str,
    role: &'static str,
    warrant: Warrant,
    support: String,
    at: Option<DateTime<Utc>>,
    /// Borrowed until the item is in the block: most candidates never are.
    work_context: Option<&'t str>,
    session: Option<&'t str>,
    low_trust: bool,
    /// Prefix of the line before the content (tier cards).
    prefix: Cow<'t, str>,
    score: Option<f32>,
}

struct Ctx<'a> {
    session: &'a Session,
    now: DateTime<Utc>,
    counter: &'a TokenCounter,
    policy: &'a dyn PolicyCheck,
    destination: super::Destination,
    budget: usize,
    used: usize,
    charged: HashSet<&'static str>,
    sections: SectionPieces,
    trace: Vec<TraceItem>,
    in_block: HashSet<ItemSource>,
    generations: BTreeSet<String>,
    resume_attrs: String,
    /// Token costs of section headers and rule lines, counted once per call.
    key_costs: RefCell<HashMap<&'static str, usize>>,
    /// The policy's verdicts, asked in batches ahead of the offers.
    verdicts: HashMap<VerdictKey, PolicyVerdict>,
    /// Hashes the judged texts of [`VerdictKey`]s (seeded per assembly).
    text_hash: foldhash::quality::RandomState,
}

/// What a verdict is about: the item, and (a hash of) the text judged,
/// since one entry may be offered as its content or as a briefing line.
type VerdictKey = (ItemSource, u64);

fn policy_item<'r>(raw: &'r Raw<'_>) -> PolicyItem<'r> {
    PolicyItem {
        source: &raw.source,
        section: raw.section,
        text: raw.text,
        work_context: raw.work_context,
        session: raw.session,
        low_trust: raw.low_trust,
    }
}

fn policy_error(e: super::SeamError) -> MemoryError {
    MemoryError::AssemblySeam {
        seam: "policy",
        message: e.0,
    }
}

/// Pieces per section, in section order.
#[derive(Default)]
struct SectionPieces(Vec<(Section, Vec<Piece>)>);

impl SectionPieces {
    fn list(&mut self, section: Section) -> &mut Vec<Piece> {
        let at = match self.0.iter().position(|(s, _)| *s == section) {
            Some(at) => at,
            None => {
                self.0.push((section, Vec::new()));
                self.0.sort_by_key(|(s, _)| *s);
                self.0.iter().position(|(s, _)| *s == section).unwrap_or(0)
            }
        };
        &mut self.0[at].1
    }

    fn tokens(&self, section: Section) -> usize {
        self.0
            .iter()
            .filter(|(s, _)| *s == section)
            .flat_map(|(_, p)| p.iter().map(|p| p.tokens))
            .sum()
    }
}

fn section_key(section: Section) -> &'static str {
    match section {
        Section::Directive => "sec:directive",
        Section::Pinned => "sec:pinned",
        Section::Handoff => "sec:handoff",
        Section::LivingMemory => "sec:living_memory",
        Section::Resume => "sec:resume",
        Section::RecentActivity => "sec:recent_activity",
        Section::Topics => "sec:topics",
        Section::Briefing => "sec:briefing",
        Section::Retrieved => "sec:retrieved",
        Section::Compacted => "sec:compacted",
        Section::Tail => "sec:tail",
    }
}

/// An outcome of offering a candidate.
enum Offer {
    /// In the block.
    Added,
    /// The policy blocked it (traced).
    Blocked,
    /// It does not fit (traced by the caller through `trace_index`).
    TooBig {
        trace: usize,
        over_cap: bool,
        cost: usize,
    },
}

impl<'a> Ctx<'a> {
    /// What a verdict on `text` about `source` is remembered under.
    fn verdict_key(&self, source: &ItemSource, text: &str) -> VerdictKey {
        (source.clone(), self.text_hash.hash_one(text))
    }

    fn count(&self, text: &str) -> usize {
        self.counter.count(text)
    }

    fn key_cost(&self, key: &'static str) -> usize {
        if let Some(cost) = self.key_costs.borrow().get(key) {
            return *cost;
        }
        let cost = self.count_key(key);
        self.key_costs.borrow_mut().insert(key, cost);
        cost
    }

    fn count_key(&self, key: &'static str) -> usize {
        if let Some(section) = key.strip_prefix("sec:") {
            let section = match section {
                "directive" => Section::Directive,
                "pinned" => Section::Pinned,
                "handoff" => Section::Handoff,
                "living_memory" => Section::LivingMemory,
                "resume" => Section::Resume,
                "recent_activity" => Section::RecentActivity,
                "briefing" => Section::Briefing,
                "retrieved" => Section::Retrieved,
                "topics" => Section::Topics,
                "compacted" => Section::Compacted,
                _ => Section::Tail,
            };
            return self.count(&render::section_open(section, &self.resume_attrs))
                + self.count(render::section_close(section));
        }
        RULES
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0, |(_, line)| self.count(line))
    }

    /// Tokens `keys` add beyond what is already charged.
    fn extra(&self, keys: &[&'static str]) -> usize {
        let mut seen = HashSet::default();
        keys.iter()
            .filter(|k| !self.charged.contains(*k) && seen.insert(**k))
            .map(|k| self.key_cost(k))
            .sum()
    }

    fn scope_of(&self, session: Option<&str>, work_context: Option<&str>) -> ScopeRelation {
        if session == Some(self.session.id.as_str()) {
            return ScopeRelation::ThisSession;
        }
        match work_context {
            Some(wc) if wc == self.session.work_context => ScopeRelation::ThisContext,
            Some(wc) if wc == DEFAULT_WORK_CONTEXT => ScopeRelation::Workspace,
            Some(_) => ScopeRelation::OtherContext,
            None => ScopeRelation::Workspace,
        }
    }

    fn push_trace(&mut self, raw: &Raw<'_>, rule: &str, reason: String) -> usize {
        self.trace.push(TraceItem {
            source: raw.source.clone(),
            section: raw.section,
            tier: raw.section.tier(),
            included: false,
            tokens: 0,
            rule: rule.to_owned(),
            reason,
            score: raw.score,
            policy: None,
        });
        self.trace.len() - 1
    }

    fn policy_context(&self) -> PolicyContext<'a> {
        PolicyContext {
            destination: self.destination,
            session: &self.session.id,
            work_context: &self.session.work_context,
        }
    }

    /// Whether the policy's verdict on `text` about `source` is known.
    fn judged(&self, source: &ItemSource, text: &str) -> bool {
        self.verdicts.contains_key(&self.verdict_key(source, text))
    }

    /// Asks the policy about every candidate in `raws` not judged yet, in
    /// one call ([`PolicyCheck::check_many`]); [`Ctx::offer`] then finds
    /// the verdicts. Judging a candidate that is not offered in the end
    /// costs little; a call per candidate costs much more.
    fn prejudge(&mut self, raws: &[Raw<'_>]) -> Result<()> {
        let mut keys = Vec::new();
        let mut items = Vec::new();
        let mut asked = HashSet::default();
        for raw in raws {
            let key = self.verdict_key(&raw.source, raw.text);
            if self.verdicts.contains_key(&key) || !asked.insert(key.clone()) {
                continue;
            }
            keys.push(key);
            items.push(policy_item(raw));
        }
        if items.is_empty() {
            return Ok(());
        }
        let verdicts = self
            .policy
            .check_many(&items, &self.policy_context())
            .map_err(policy_error)?;
        if verdicts.len() != items.len() {
            return Err(policy_error(super::SeamError(format!(
                "{} verdicts for {} items",
                verdicts.len(),
                items.len()
            ))));
        }
        self.verdicts.extend(keys.into_iter().zip(verdicts));
        Ok(())
    }

    /// Asks the policy, renders, and adds the candidate if `cap` (tokens
    /// still free in its part, headers and rule lines included) and the
    /// whole budget allow. `rule`/`reason` describe an inclusion.
    fn offer(&mut self, raw: Raw<'_>, cap: usize, rule: &str, reason: &str) -> Result<Offer> {
        let key = self.verdict_key(&raw.source, raw.text);
        let verdict = match self.verdicts.get(&key) {
            Some(verdict) => verdict.clone(),
            None => {
                let verdict = self
                    .policy
                    .check(&policy_item(&raw), &self.policy_context())
                    .map_err(policy_error)?;
                self.verdicts.insert(key, verdict.clone());
                verdict
            }
        };
        self.generations.insert(verdict.generation.clone());
        let note = PolicyNote {
            fidelity: verdict.fidelity,
            reason_codes: verdict.reason_codes.clone(),
            generation: verdict.generation.clone(),
        };
        let trace = self.push_trace(&raw, rule, String::new());
        self.trace[trace].policy = Some(note);
        if verdict.fidelity == Fidelity::Blocked {
            self.trace[trace].rule = "policy.blocked".to_owned();
            self.trace[trace].reason = format!(
                "blocked by the memory policy for {} ({})",
                self.destination.as_str(),
                verdict.reason_codes.join(", ")
            );
            return Ok(Offer::Blocked);
        }
        let warrant = if verdict.label_low_trust || raw.low_trust {
            Warrant::LowTrust
        } else {
            raw.warrant
        };
        let scope = self.scope_of(raw.session, raw.work_context);
        let freshness = raw
            .at
            .map(|at| render::age(self.now, at))
            .unwrap_or_default();
        let line = line_of(
            &raw,
            warrant,
            verdict.fidelity,
            &freshness,
            scope,
            verdict.attribute_source,
        );
        let tokens = line.tokens(self.counter);
        let Line { text: line, cuts } = line;
        let mut keys = render::rule_keys(raw.section, warrant, verdict.fidelity);
        keys.push(section_key(raw.section));
        // The section's own cost (line, header) counts against `cap`; rule
        // lines count against the whole budget only.
        let section_cost = tokens + self.extra(&[section_key(raw.section)]);
        let cost = tokens + self.extra(&keys);
        self.trace[trace].tokens = tokens;
        if section_cost > cap || self.used + cost > self.budget {
            return Ok(Offer::TooBig {
                trace,
                over_cap: section_cost > cap,
                cost,
            });
        }
        self.used += cost;
        self.charged.extend(keys.iter().copied());
        self.trace[trace].included = true;
        self.trace[trace].rule = rule.to_owned();
        self.trace[trace].reason = reason.to_owned();
        self.in_block.insert(raw.source.clone());
        let item = BlockItem {
            source: raw.source,
            section: raw.section,
            role: raw.role.to_owned(),
            warrant,
            support: raw.support,
            at: raw.at,
            freshness,
            scope,
            work_context: raw.work_context.map(str::to_owned),
            fidelity: verdict.fidelity,
            tokens,
        };
        self.sections.list(item.section).push(Piece {
            line,
            cuts,
            tokens,
            item,
            keys,
            trace,
        });
        Ok(Offer::Added)
    }

    fn mark_out(&mut self, trace: usize, rule: &str, reason: String) {
        self.trace[trace].included = false;
        self.trace[trace].rule = rule.to_owned();
        self.trace[trace].reason = reason;
    }

    fn remaining(&self) -> usize {
        self.budget.saturating_sub(self.used)
    }
}

/// A rendered line, with where it may be cut for counting: a retrieved
/// line's head (source, age, scope) changes between calls while its body
/// does not, so the parts are counted (and memoized) apart.
struct Line {
    text: String,
    /// Byte offsets before spaces, ascending; 0 is no cut.
    cuts: [usize; 3],
}

impl Line {
    fn tokens(&self, counter: &TokenCounter) -> usize {
        counter.count_cut(&self.text, &self.cuts)
    }
}

/// The line `raw` renders to, as `fidelity` and `warrant` have it.
fn line_of(
    raw: &Raw<'_>,
    warrant: Warrant,
    fidelity: Fidelity,
    freshness: &str,
    scope: ScopeRelation,
    attribute: bool,
) -> Line {
    let content = render::shown(raw.text, fidelity, &raw.source);
    let fid = render::fidelity_label(fidelity);
    let mut cuts = [0; 3];
    // Sized once: `format!` guesses from its literal pieces and grows a long
    // turn's line by doubling, a copy per step.
    let mut line = String::with_capacity(
        content.len() + raw.role.len() + raw.support.len() + raw.prefix.len() + 64,
    );
    let text = match (&raw.source, raw.section) {
        (ItemSource::Directive { .. }, _) => {
            let _ = writeln!(line, "- {content}");
            line
        }
        (ItemSource::Turn { seq, .. }, Section::Tail) => {
            let low = if warrant == Warrant::LowTrust {
                "; low_trust"
            } else {
                ""
            };
            let source = if attribute {
                format!("[source: {}] ", source_of(raw))
            } else {
                String::new()
            };
            if low.is_empty() && fid.is_empty() {
                let _ = writeln!(line, "[{seq}] {}: {source}{content}", raw.role);
            } else {
                let _ = writeln!(
                    line,
                    "[{seq}] {} ({}{low}{fid}): {source}{content}",
                    raw.role, raw.support
                );
            }
            line
        }
        (
            _,
            Section::LivingMemory
            | Section::Resume
            | Section::RecentActivity
            | Section::Briefing
            | Section::Handoff,
        ) => {
            line.push_str(&raw.prefix);
            if !fid.is_empty() || warrant == Warrant::LowTrust {
                let _ = write!(line, "({}{fid}) ", warrant.as_str());
            }
            // The head (prefix, label) apart from the content: the variants
            // a line is counted in (its floor, the verdict's rendering)
            // share the content's count.
            if attribute {
                let _ = write!(line, "[source: {}] ", source_of(raw));
            }
            if line.ends_with(' ') {
                cuts[0] = line.len() - 1;
            }
            line.push_str(&content);
            line.push('\n');
            line
        }
        _ => {
            let freshness = if freshness.is_empty() {
                "undated"
            } else {
                freshness
            };
            let _ = write!(
                line,
                "- ({}; {}; {};",
                raw.role,
                warrant.as_str(),
                raw.support
            );
            cuts[0] = line.len();
            line.push(' ');
            line.push_str(freshness);
            line.push(';');
            cuts[1] = line.len();
            line.push(' ');
            line.push_str(scope.as_str());
            line.push_str(fid);
            line.push(')');
            cuts[2] = line.len();
            line.push(' ');
            line.push_str(&content);
            line.push('\n');
            line
        }
    };
    Line { text, cuts }
}

/// Where an item came from, as an `attribute-source` obligation names it:
/// its source turns, else (an entry written without provenance) its work
/// context.
fn source_of<'r>(raw: &'r Raw<'_>) -> Cow<'r, str> {
    match (raw.support.as_str(), raw.work_context) {
        (NO_SOURCE_TURNS, Some(wc)) => Cow::Owned(format!("work context {wc}")),
        (support, _) => Cow::Borrowed(support),
    }
}

/// The support of an entry written without provenance.
const NO_SOURCE_TURNS: &str = "no source turns";

fn entry_raw<'t>(v: &'t EntryView, section: Section, warrant: Option<Warrant>) -> Raw<'t> {
    let support = match &v.entry.provenance {
        Some(p) => {
            let mut s = String::with_capacity(p.session.len() + 42);
            let _ = write!(s, "{}:{}", p.session, p.from_seq);
            if p.from_seq != p.to_seq {
                let _ = write!(s, "-{}", p.to_seq);
            }
            s
        }
        None => NO_SOURCE_TURNS.to_owned(),
    };
    Raw {
        source: ItemSource::Entry {
            id: v.entry.id.clone(),
            kind: v.entry.kind,
        },
        section,
        text: &v.entry.content,
        role: v.entry.kind.as_str(),
        warrant: warrant.unwrap_or(if v.entry.provenance.is_some() {
            Warrant::Recorded
        } else {
            Warrant::Asserted
        }),
        support,
        at: Some(v.entry.timestamp),
        work_context: Some(&v.entry.work_context),
        session: v.entry.provenance.as_ref().map(|p| &*p.session),
        low_trust: false,
        prefix: Cow::Borrowed(""),
        score: None,
    }
}

fn turn_raw<'t>(
    t: &'t Turn,
    work_context: &'t str,
    section: Section,
    score: Option<f32>,
) -> Raw<'t> {
    let low_trust = t.role == Role::Tool;
    // Sized once: `format!` starts these at no capacity and grows them.
    let mut support = String::with_capacity(
        t.session.len() + 21 + t.tool_call_id.as_ref().map_or(0, |id| id.len() + 6),
    );
    let _ = write!(support, "{}:{}", t.session, t.seq);
    if let Some(id) = &t.tool_call_id {
        let _ = write!(support, " call {id}");
    }
    Raw {
        source: ItemSource::Turn {
            session: t.session.clone(),
            seq: t.seq,
        },
        section,
        text: &t.content,
        role: t.role.as_str(),
        warrant: if low_trust {
            Warrant::LowTrust
        } else {
            Warrant::Verbatim
        },
        support,
        at: Some(t.timestamp),
        work_context: Some(work_context),
        session: Some(&t.session),
        low_trust,
        prefix: Cow::Borrowed(""),
        score,
    }
}

/// What one call reads, once, before anything is offered: the request and
/// its settings, and what the workspace holds for it.
struct Inputs<'r> {
    request: &'r AssembleRequest,
    settings: AssembleSettings,
    counter: TokenCounter,
    session: Session,
    now: DateTime<Utc>,
    /// Every live entry, newest first.
    live: Arc<crate::live::LiveList>,
    /// What is kept with the live list (its indexes).
    derived: Arc<crate::memory::LiveDerived>,
    subjects: Arc<Vec<Subject>>,
    /// The request's query, else the last user turn.
    query: String,
    /// The pinned entries as they stand now (a pin follows its entry's
    /// corrections; a forgotten entry drops out), without repeats.
    pinned: Vec<EntryView>,
    /// The summaries standing for the session's compacted turns, oldest
    /// first (empty for a session never compacted).
    summaries: Vec<SummaryNode>,
    /// What the topics following the session collected lately: per topic
    /// (highest priority first), its newest memberships.
    topics: Vec<(String, Vec<Membership>)>,
    /// The newest live handoff of the session's work context.
    handoff: Option<EntryView>,
}

/// Checks the request and reads everything the steps need (the tail's
/// turns as far back as the query needs; the steps read further).
fn read_inputs<'r, 'w>(
    ws: &'w Workspace,
    request: &'r AssembleRequest,
) -> Result<(Inputs<'r>, Tail<'w>)> {
    let settings: AssembleSettings = request.settings.clone().unwrap_or_default();
    settings.validate()?;
    if request.budget_tokens > MAX_BUDGET_TOKENS {
        return Err(MemoryError::Invalid {
            what: "budget_tokens",
            reason: format!(
                "{} is over the maximum of {MAX_BUDGET_TOKENS}",
                request.budget_tokens
            ),
        });
    }
    let limit = ws.config().limits.max_content_bytes;
    for (i, d) in request.directives.iter().enumerate() {
        if d.trim().is_empty() {
            return Err(MemoryError::Invalid {
                what: "directives",
                reason: format!("directive {i} is empty"),
            });
        }
        if d.len() > limit {
            return Err(MemoryError::Invalid {
                what: "directives",
                reason: format!(
                    "directive {i} has {} bytes, over the limit of {limit}",
                    d.len()
                ),
            });
        }
    }
    if let Some(q) = &request.query
        && q.len() > limit
    {
        return Err(MemoryError::TooLarge {
            what: "query",
            bytes: q.len(),
            limit,
        });
    }
    let counter = match &settings.encoding {
        Some(e) => TokenCounter::new(e)?,
        None => ws.tokens().clone(),
    };
    let session = ws.session(&request.session)?;
    let now = ws.clock().now();
    let (live, derived) = ws.live_state()?;
    let subjects = ws.subject_list()?;
    let view = ws.compaction_view(&session.id)?;
    let covered_to = view.as_ref().map_or(0, |v| v.covered_to);
    let summaries = match &view {
        Some(v) => v
            .summary_ids()
            .map(|id| ws.summary(id))
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    // Compacted turns are in the view as summaries, not in the tail.
    let mut tail = Tail::read(ws, &session, covered_to)?;
    let query = match &request.query {
        Some(q) => q.clone(),
        None => last_user_turn(&mut tail)?,
    };
    let topics = topic_candidates(ws, &session, &settings)?;
    let handoff = ws.latest_handoff(&session.work_context)?;
    let mut pinned: Vec<EntryView> = Vec::new();
    for id in ws.pinned()? {
        let current = match derived.position(&live, &id) {
            Some(i) => Some(live[i].clone()),
            None => match ws.history(&id) {
                Ok(h) => h.into_iter().last().filter(EntryView::is_live),
                Err(MemoryError::EntryNotFound { .. }) => None,
                Err(e) => return Err(e),
            },
        };
        if let Some(v) = current
            && !pinned.iter().any(|p| p.entry.id == v.entry.id)
        {
            pinned.push(v);
        }
    }
    let inputs = Inputs {
        request,
        settings,
        counter,
        session,
        now,
        live,
        derived,
        subjects,
        query,
        pinned,
        summaries,
        topics,
        handoff,
    };
    Ok((inputs, tail))
}

/// The newest user turn's text in the tail (empty when it has none).
fn last_user_turn(tail: &mut Tail<'_>) -> Result<String> {
    let mut age = 0;
    while let Some(t) = tail.get(age)? {
        if t.role == Role::User {
            return Ok(t.content.clone());
        }
        age += 1;
    }
    Ok(String::new())
}

/// The most topics whose collections an assembly offers.
const MAX_TOPIC_CANDIDATES: usize = 16;

/// The live topics following `session` (highest priority first, then by
/// name; at most [`MAX_TOPIC_CANDIDATES`]) with their newest memberships.
fn topic_candidates(
    ws: &Workspace,
    session: &Session,
    settings: &AssembleSettings,
) -> Result<Vec<(String, Vec<Membership>)>> {
    if settings.topic_items == 0 || settings.topics_max_tokens == 0 {
        return Ok(Vec::new());
    }
    let all = ws.topic_list()?;
    let mut following: Vec<&Topic> = all
        .iter()
        .filter(|t| !t.spec.paused && t.spec.listens_to(&session.id, &session.work_context))
        .collect();
    following.sort_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then_with(|| a.spec.name.cmp(&b.spec.name))
    });
    let mut out = Vec::new();
    for topic in following.into_iter().take(MAX_TOPIC_CANDIDATES) {
        let members = ws.recent_memberships(&topic.spec.name, settings.topic_items)?;
        if !members.is_empty() {
            out.push((topic.spec.name.clone(), members));
        }
    }
    Ok(out)
}

pub(super) fn assemble(
    ws: &Workspace,
    request: &AssembleRequest,
    retriever: &dyn Retriever,
    policy: &dyn PolicyCheck,
) -> Result<AssembledContext> {
    let (inputs, mut tail) = read_inputs(ws, request)?;
    let settings = &inputs.settings;

    // Tier 1 eligibility does not depend on the budget; decide it first so
    // the activity type (inherited from its context) is known for the frame.
    let continuity = tiers::Continuity::of(&inputs.live, &inputs.derived);
    let resume = tiers::resume(
        continuity,
        &inputs.subjects,
        &inputs.session,
        &inputs.query,
        inputs.now,
        settings,
    );
    let phase_context = match &resume {
        Ok(r) => r.work_context.clone(),
        Err(_) => inputs.session.work_context.clone(),
    };
    let activity = tiers::activity(
        &inputs.query,
        tiers::active_phase(continuity, &phase_context),
        &phase_context,
    );
    let resume_attrs = match &resume {
        Ok(r) => format!(
            " work_context=\"{}\" phase=\"{}\"",
            r.work_context,
            r.phase.as_deref().unwrap_or("unknown")
        ),
        Err(_) => String::new(),
    };
    let open = format!(
        "<cairn-memory session=\"{}\" work_context=\"{}\" destination=\"{}\" activity=\"{}{}\">\n",
        inputs.session.id,
        inputs.session.work_context,
        request.destination.as_str(),
        activity.activity_type,
        if activity.inherited {
            " (inherited)"
        } else {
            ""
        }
    );
    let counter = &inputs.counter;
    let frame = counter.count(&open)
        + counter.count(CLOSE)
        + counter.count(RULES_OPEN)
        + counter.count(RULES_CLOSE);
    if frame > request.budget_tokens {
        return Err(MemoryError::BudgetTooSmall {
            budget: request.budget_tokens,
            needed: frame,
        });
    }
    let mut cx = Ctx {
        now: inputs.now,
        counter: &inputs.counter,
        policy,
        destination: request.destination,
        budget: request.budget_tokens,
        used: frame,
        charged: HashSet::default(),
        sections: SectionPieces::default(),
        trace: Vec::new(),
        in_block: HashSet::default(),
        generations: BTreeSet::new(),
        resume_attrs,
        key_costs: RefCell::new(HashMap::default()),
        verdicts: HashMap::default(),
        text_hash: foldhash::quality::RandomState::default(),
        session: &inputs.session,
    };
    // Tiers 3 and 2 draw from these lists; the verdicts are asked ahead.
    let living = tiers::living_memory(&inputs.live, &inputs.derived, &inputs.subjects, |s| {
        policy.in_lineage(s)
    });
    let mut exclude = vec![inputs.session.work_context.as_str()];
    if let Ok(r) = &resume {
        exclude.push(r.work_context.as_str());
    }
    let recent = tiers::recent_activity(
        &inputs.live,
        &inputs.derived,
        &exclude,
        inputs.now,
        settings,
    );
    prejudge_known(&mut cx, &inputs, &mut tail, &resume, &living, &recent)?;

    let mut parts = hard_invariants(&mut cx, &inputs)?;
    let minimum = minimum_tail(&mut cx, &inputs, &mut tail, &mut parts)?;
    if cx.used > cx.budget {
        return Err(MemoryError::InvariantsExceedBudget {
            budget: cx.budget,
            needed: cx.used,
            parts: if parts.is_empty() {
                "the frame and rules".to_owned()
            } else {
                format!("frame and rules, {}", parts.join(", "))
            },
        });
    }
    handoff(&mut cx, &inputs)?;
    let mut tier_reports = Vec::new();
    let t3_tokens = tier3(&mut cx, &inputs, &living, &mut tier_reports)?;
    let tail_sources = extend_tail(&mut cx, &inputs, &mut tail, minimum)?;
    compacted(&mut cx, &inputs)?;
    let tiers_left = settings.tiers_max_tokens.saturating_sub(t3_tokens);
    let t1_tokens = tier1(&mut cx, &inputs, &resume, tiers_left, &mut tier_reports)?;
    tier2(
        &mut cx,
        &inputs,
        &recent,
        t3_tokens + t1_tokens,
        &mut tier_reports,
    )?;
    tier_reports.sort_by_key(|t| t.tier);
    topic_collections(&mut cx, &inputs)?;
    let retrieval = projection(&mut cx, ws, &inputs, retriever, &tail_sources)?;
    briefing(&mut cx, ws, &inputs)?;
    finish(cx, open, request, tier_reports, activity, retrieval)
}

/// Step 2b, the last-session handoff: the newest live handoff of the
/// session's work context, when another session wrote it before this one
/// started; within its cap and the budget, or traced out.
fn handoff(cx: &mut Ctx<'_>, inputs: &Inputs<'_>) -> Result<()> {
    let cap = inputs.settings.handoff_max_tokens;
    if cap == 0 {
        return Ok(());
    }
    let session = &inputs.session;
    let Some(v) = &inputs.handoff else {
        return Ok(());
    };
    let from = v.entry.provenance.as_ref().map(|p| p.session.as_str());
    if from == Some(session.id.as_str()) || v.entry.timestamp > session.created_at {
        // This session's own, or written after it started: not a handoff to it.
        return Ok(());
    }
    let mut raw = entry_raw(v, Section::Handoff, Some(Warrant::Orientation));
    raw.prefix = Cow::Owned(format!(
        "Last session, {} ago: ",
        render::age(inputs.now, v.entry.timestamp)
    ));
    let remaining = cx.remaining();
    if let Offer::TooBig {
        trace, over_cap, ..
    } = cx.offer(
        raw,
        cap,
        "handoff.injected",
        "the last session's handoff of this work context, at the next session's start",
    )? {
        let why = if over_cap {
            format!("longer than the handoff cap ({cap} tokens)")
        } else {
            format!("does not fit the {remaining} tokens left")
        };
        cx.mark_out(trace, "handoff.left_out", why);
    }
    Ok(())
}

/// A line of the workspace briefing as an assembly offers it, with the
/// fewest tokens it could take under any verdict. Made once per rendering
/// of the briefing and encoding ([`AssemblyBriefing::lines`]), shared by
/// every assembly that uses the rendering.
///
/// [`AssemblyBriefing::lines`]: crate::brief::AssemblyBriefing::lines
#[derive(Debug)]
pub(crate) struct BriefingLine {
    text: String,
    /// The entry the line stands for (its item's first).
    entry: String,
    prefix: &'static str,
    /// The fewest tokens the line renders to, whatever the policy says.
    floor: usize,
}

/// The candidate a briefing line is.
fn briefing_raw<'t>(line: &'t BriefingLine, v: &'t EntryView) -> Raw<'t> {
    let mut raw = entry_raw(v, Section::Briefing, Some(Warrant::Orientation));
    raw.text = &line.text;
    raw.prefix = Cow::Borrowed(line.prefix);
    raw
}

/// The fewest tokens `raw` renders to under any verdict that shows it
/// (any fidelity, labelled low-trust or not).
fn floor_tokens(counter: &TokenCounter, raw: &Raw<'_>) -> usize {
    let warrants: &[Warrant] = if raw.low_trust {
        &[Warrant::LowTrust]
    } else {
        &[raw.warrant, Warrant::LowTrust]
    };
    let fidelities = [Fidelity::Full, Fidelity::Redacted, Fidelity::ReferenceOnly];
    warrants
        .iter()
        .flat_map(|w| fidelities.map(|f| (*w, f)))
        .map(|(w, f)| line_of(raw, w, f, "", ScopeRelation::Workspace, false).tokens(counter))
        .min()
        .unwrap_or(0)
}

/// Step 8, the briefing: the workspace's briefing, one line per entry not
/// in the block yet (pending tasks and open questions first), within its
/// cap and what the budget has left; dropped whole under budget pressure.
///
/// A line is judged only when it could fit: once the cap has fewer tokens
/// left than the line's [floor](BriefingLine::floor), it is over the cap
/// whatever the policy would say, and is traced so without a verdict. The
/// lines are judged in at most a few calls: first as many as the cap
/// could hold together, then, if a line was blocked or rendered shorter,
/// every line left that could still fit.
fn briefing(cx: &mut Ctx<'_>, ws: &Workspace, inputs: &Inputs<'_>) -> Result<()> {
    use crate::brief::BriefSectionKind as K;
    let cap = inputs.settings.briefing_max_tokens;
    if cap == 0 || cx.remaining() == 0 {
        return Ok(());
    }
    let briefing = ws.briefing_for_assembly()?;
    let lines = briefing.lines(cx.counter.encoding(), |earlier| {
        // A line's floor depends on its prefix, text and entry only: the
        // lines the earlier rendering had keep theirs.
        let floors: HashMap<(&str, &str, &str), usize> = earlier
            .iter()
            .map(|l| ((l.prefix, l.text.as_str(), l.entry.as_str()), l.floor))
            .collect();
        let order = [
            (K::Pending, "Pending: "),
            (K::OpenQuestions, "Open: "),
            (K::Contradictions, "Conflict: "),
            (K::Changed, "Changed: "),
            (K::Decisions, "Decision: "),
            (K::Active, "Active: "),
            (K::Stale, "Stale: "),
        ];
        let mut lines = Vec::new();
        for (kind, prefix) in order {
            for item in &briefing.brief.section(kind).items {
                let Some(v) = item.entries.first().and_then(|id| briefing.entry(id)) else {
                    continue;
                };
                let mut line = BriefingLine {
                    text: format!("{} {}", item.text, item.reference()),
                    entry: v.entry.id.clone(),
                    prefix,
                    floor: 0,
                };
                let key = (prefix, line.text.as_str(), line.entry.as_str());
                line.floor = match floors.get(&key) {
                    Some(floor) => *floor,
                    None => floor_tokens(cx.counter, &briefing_raw(&line, v)),
                };
                lines.push(line);
            }
        }
        lines
    });
    let offered: Vec<(&BriefingLine, &EntryView)> = lines
        .iter()
        .filter_map(|line| Some((line, briefing.entry(&line.entry)?)))
        .filter(|(_, v)| !cx.in_block.contains(&entry_source(v)))
        // The briefing is the workspace's: a sub-agent gets the lines of
        // what was said in its lineage (and those with no source session).
        .filter(|(_, v)| {
            v.entry
                .provenance
                .as_ref()
                .is_none_or(|p| cx.policy.in_lineage(Some(&p.session)))
        })
        .collect();
    let header = |cx: &Ctx<'_>| cx.extra(&[section_key(Section::Briefing)]);
    let free = |cx: &Ctx<'_>| cap.saturating_sub(section_total(cx, Section::Briefing));
    let before = cx.used;
    let mut added = Vec::new();
    let mut over = Vec::new();
    let mut first_ask = true;
    for (at, (line, v)) in offered.iter().enumerate() {
        let raw = briefing_raw(line, v);
        if cx.in_block.contains(&raw.source) {
            // Two lines of one entry: the first stands for it.
            continue;
        }
        let judged = cx
            .verdicts
            .contains_key(&cx.verdict_key(&raw.source, raw.text));
        if !judged && line.floor + header(cx) > free(cx) {
            let trace = cx.push_trace(&raw, "briefing.cap", String::new());
            cx.trace[trace].tokens = line.floor;
            over.push((trace, true));
            continue;
        }
        if !judged {
            // The first ask: this line and the next ones the cap could hold
            // with it. A later ask (a line was blocked or rendered short):
            // every line left that could still fit.
            let mut room = free(cx).saturating_sub(header(cx));
            let mut ahead = Vec::new();
            for (line, v) in &offered[at..] {
                if cx.in_block.contains(&entry_source(v)) {
                    continue;
                }
                if line.floor <= room || ahead.is_empty() {
                    ahead.push(briefing_raw(line, v));
                    if first_ask {
                        room = room.saturating_sub(line.floor);
                    }
                }
            }
            first_ask = false;
            cx.prejudge(&ahead)?;
        }
        match cx.offer(
            raw,
            free(cx),
            "briefing.line",
            "the workspace briefing (MEMORY.md), with what the budget has left",
        )? {
            Offer::Added => added.push(cx.trace.len() - 1),
            Offer::Blocked => {}
            Offer::TooBig {
                trace, over_cap, ..
            } => over.push((trace, over_cap)),
        }
    }
    if over.iter().any(|(_, cap_hit)| !cap_hit) {
        undo(cx, &added, before);
        for t in added.iter().chain(over.iter().map(|(t, _)| t)) {
            cx.mark_out(
                *t,
                "briefing.dropped",
                "the briefing goes whole when the budget is short".to_owned(),
            );
        }
    } else {
        for (t, _) in &over {
            cx.mark_out(
                *t,
                "briefing.cap",
                format!("over the briefing cap ({cap} tokens)"),
            );
        }
    }
    Ok(())
}

/// Step 1, hard invariants: directives, pinned entries. Never trimmed. Returns
/// what they are, for the error when the invariants do not fit.
fn hard_invariants(cx: &mut Ctx<'_>, inputs: &Inputs<'_>) -> Result<Vec<String>> {
    let directives = &inputs.request.directives;
    let mut parts: Vec<String> = Vec::new();
    for (index, text) in directives.iter().enumerate() {
        let raw = Raw {
            source: ItemSource::Directive { index },
            section: Section::Directive,
            text,
            role: "directive",
            warrant: Warrant::Standing,
            support: "request".to_owned(),
            at: None,
            work_context: None,
            session: None,
            low_trust: false,
            prefix: Cow::Borrowed(""),
            score: None,
        };
        force(
            cx,
            raw,
            "invariant.directive",
            "standing directive (hard invariant)",
        )?;
    }
    if !directives.is_empty() {
        parts.push(format!("{} directive(s)", directives.len()));
    }
    for v in &inputs.pinned {
        let raw = entry_raw(v, Section::Pinned, Some(Warrant::Standing));
        force(cx, raw, "invariant.pinned", "pinned entry (hard invariant)")?;
    }
    if !inputs.pinned.is_empty() {
        parts.push(format!("{} pinned entr(y/ies)", inputs.pinned.len()));
    }
    Ok(parts)
}

/// Step 2, the minimum tail: the last m turns, with the calls of their tool
/// results. Returns how many of the newest turns it holds.
fn minimum_tail(
    cx: &mut Ctx<'_>,
    inputs: &Inputs<'_>,
    tail: &mut Tail<'_>,
    parts: &mut Vec<String>,
) -> Result<usize> {
    let min_tail_turns = inputs.settings.min_tail_turns;
    tail.hold(min_tail_turns)?;
    let mut held = min_tail_turns.min(tail.held().len());
    loop {
        let mut deepest = held;
        for age in 0..held {
            if let Some(call) = tail.call_of(age)? {
                deepest = deepest.max(call + 1);
            }
        }
        if deepest == held {
            break;
        }
        held = deepest;
    }
    let wc = &inputs.session.work_context;
    for t in tail.held()[..held].iter().rev() {
        let raw = turn_raw(t, wc, Section::Tail, None);
        force(
            cx,
            raw,
            "tail.min_turns",
            &format!("one of the last {min_tail_turns} turns (m wins over the tail budget)"),
        )?;
    }
    if held > 0 {
        parts.push(format!("the last {held} turn(s)"));
    }
    Ok(held)
}

/// Step 3, tier 3: living memory, never dropped for anything below it. Returns
/// the tokens it takes.
fn tier3(
    cx: &mut Ctx<'_>,
    inputs: &Inputs<'_>,
    living: &[&EntryView],
    reports: &mut Vec<TierReport>,
) -> Result<usize> {
    let settings = &inputs.settings;
    let t3_cap = settings
        .living_memory_max_tokens
        .min(settings.tiers_max_tokens);
    let mut t3_reason = String::new();
    for v in living {
        if cx.in_block.contains(&entry_source(v)) {
            continue;
        }
        let mut raw = entry_raw(v, Section::LivingMemory, None);
        raw.prefix = Cow::Borrowed("- ");
        let free = t3_cap.saturating_sub(section_total(cx, Section::LivingMemory));
        if let Offer::TooBig {
            trace, over_cap, ..
        } = cx.offer(
            raw,
            free,
            "tier3.living_memory",
            "stable fact (tier 3, never dropped)",
        )? {
            let why = if over_cap {
                format!("over the living-memory cap ({t3_cap} tokens)")
            } else {
                format!("the budget has {} tokens left", cx.remaining())
            };
            t3_reason = why.clone();
            cx.mark_out(trace, "tier3.cap", why);
        }
    }
    let t3_tokens = section_total(cx, Section::LivingMemory);
    reports.push(TierReport {
        tier: 3,
        tag: "living_memory".to_owned(),
        fired: t3_tokens > 0,
        tokens: t3_tokens,
        cap: t3_cap,
        work_context: None,
        reason: if living.is_empty() {
            "no stable facts recorded".to_owned()
        } else if t3_reason.is_empty() {
            "stable facts (never dropped)".to_owned()
        } else {
            format!("stable facts; some left out: {t3_reason}")
        },
    });
    Ok(t3_tokens)
}

/// Step 4, tail extension: older turns, contiguous, up to the tail budget; a
/// tool call and its result go in together or not at all. `held` is how
/// many of the newest turns the minimum tail holds. Returns the turns the
/// tail covers (the projection does not repeat them).
fn extend_tail(
    cx: &mut Ctx<'_>,
    inputs: &Inputs<'_>,
    tail: &mut Tail<'_>,
    mut held: usize,
) -> Result<HashSet<ItemSource>> {
    let wc = &inputs.session.work_context;
    let tail_target = tail_target(inputs);
    while tail.get(held)?.is_some() {
        let last = held;
        let first = tail.call_of(last)?.unwrap_or(last);
        let tail_used = section_total(cx, Section::Tail);
        prejudge_ahead(
            cx,
            &tail.held()[last..],
            first - last,
            wc,
            tail_target.saturating_sub(tail_used),
        )?;
        let before = cx.used;
        let mut added: Vec<usize> = Vec::new();
        let mut refused = None;
        for t in &tail.held()[last..=first] {
            let free = tail_target.saturating_sub(section_total(cx, Section::Tail));
            match cx.offer(
                turn_raw(t, wc, Section::Tail, None),
                free,
                "tail.extend",
                "recent tail, within the tail budget",
            )? {
                Offer::Added => added.push(cx.trace.len() - 1),
                Offer::Blocked => {}
                Offer::TooBig { trace, .. } => {
                    refused = Some(trace);
                    break;
                }
            }
        }
        if let Some(trace) = refused {
            // A tool call and its result stay together: undo the unit.
            undo(cx, &added, before);
            let why = if tail_used >= tail_target {
                format!(
                    "the tail budget ({tail_target} tokens) is used up; older turns are left to retrieval"
                )
            } else {
                format!(
                    "would pass the tail budget ({tail_target} tokens) or the budget; older turns are left to retrieval"
                )
            };
            cx.mark_out(trace, "tail.closed", why);
            break;
        }
        held = first + 1;
    }
    Ok(tail.held()[..held]
        .iter()
        .map(|t| ItemSource::Turn {
            session: t.session.clone(),
            seq: t.seq,
        })
        .collect())
}

/// Bytes per token the tail's read-ahead assumes: twice what prose takes
/// (about four), so the turns judged ahead are usually more than fit; when
/// they are not, the next turn without a verdict starts another read-ahead.
const AHEAD_BYTES_PER_TOKEN: usize = 8;

/// Before the tail's extension offers a turn step 0 did not judge (its
/// estimate of what fits is rough), judges in one policy call that turn's
/// unit (`turns[..=unit]`) and the held turns after it that could still
/// fit in `free` tokens, rather than one call per turn offered.
fn prejudge_ahead(
    cx: &mut Ctx<'_>,
    turns: &[Turn],
    unit: usize,
    work_context: &str,
    free: usize,
) -> Result<()> {
    let Some(next) = turns.first() else {
        return Ok(());
    };
    let source = ItemSource::Turn {
        session: next.session.clone(),
        seq: next.seq,
    };
    if cx.judged(&source, &next.content) {
        return Ok(());
    }
    let mut bytes = 0usize;
    let ahead = turns
        .iter()
        .enumerate()
        .take_while(|(i, t)| {
            bytes += t.content.len();
            *i <= unit || bytes / AHEAD_BYTES_PER_TOKEN <= free
        })
        .map(|(_, t)| turn_raw(t, work_context, Section::Tail, None))
        .collect::<Vec<_>>();
    cx.prejudge(&ahead)
}

/// The tokens the recent tail may take.
fn tail_target(inputs: &Inputs<'_>) -> usize {
    let settings = &inputs.settings;
    settings.tail_budget_tokens.unwrap_or(
        inputs.request.budget_tokens * usize::from(settings.tail_share_percent.min(100)) / 100,
    )
}

/// Step 0, the policy's verdicts on every candidate known from the inputs
/// alone (pinned entries, the tail the budget can hold, the three tiers,
/// the summaries, the topics' collections, the handoff), in one call.
/// What only later steps find (retrieved items, briefing lines) is judged
/// when found; tail turns beyond the estimate in batches
/// ([`prejudge_ahead`]).
fn prejudge_known(
    cx: &mut Ctx<'_>,
    inputs: &Inputs<'_>,
    tail: &mut Tail<'_>,
    resume: &std::result::Result<tiers::Resume<'_>, String>,
    living: &[&EntryView],
    recent: &[&EntryView],
) -> Result<()> {
    let settings = &inputs.settings;
    let wc = &inputs.session.work_context;
    let mut raws: Vec<Raw<'_>> = Vec::new();
    raws.extend(
        inputs
            .pinned
            .iter()
            .map(|v| entry_raw(v, Section::Pinned, None)),
    );
    // The tail, newest first, while it could fit the tail budget (about
    // four bytes a token; the last m turns always): read as far as that
    // first, then offered.
    let target = tail_target(inputs);
    let mut bytes = 0usize;
    let mut estimate = 0;
    while estimate < settings.min_tail_turns || bytes / 4 <= target {
        let Some(t) = tail.get(estimate)? else {
            break;
        };
        bytes += t.content.len();
        estimate += 1;
    }
    raws.extend(
        tail.held()[..estimate]
            .iter()
            .map(|t| turn_raw(t, wc, Section::Tail, None)),
    );
    raws.extend(
        living
            .iter()
            .map(|v| entry_raw(v, Section::LivingMemory, None)),
    );
    raws.extend(inputs.summaries.iter().map(|node| summary_raw(node, wc)));
    if let Ok(r) = resume {
        raws.extend(
            r.lines
                .iter()
                .map(|(_, v)| entry_raw(v, Section::Resume, None)),
        );
    }
    raws.extend(
        recent
            .iter()
            .map(|v| entry_raw(v, Section::RecentActivity, None)),
    );
    for (topic, members) in &inputs.topics {
        raws.extend(members.iter().map(|m| topic_raw(topic, m)));
    }
    if let Some(v) = &inputs.handoff {
        raws.push(entry_raw(v, Section::Handoff, None));
    }
    cx.prejudge(&raws)
}

/// Step 4b, the compacted history: for a compacted session, the summaries
/// standing for the turns before the tail, newest first while they fit;
/// the trace names each one and how to expand it.
fn compacted(cx: &mut Ctx<'_>, inputs: &Inputs<'_>) -> Result<()> {
    let wc = &inputs.session.work_context;
    let mut closed = false;
    for node in inputs.summaries.iter().rev() {
        let raw = summary_raw(node, wc);
        let support = raw.support.clone();
        if closed {
            let trace = cx.push_trace(&raw, "compacted.closed", String::new());
            cx.mark_out(
                trace,
                "compacted.closed",
                format!("an earlier summary did not fit; {support} returns its turns"),
            );
            continue;
        }
        let free = cx.remaining();
        if let Offer::TooBig { trace, .. } = cx.offer(
            raw,
            free,
            "compacted.summary",
            &format!(
                "summary of turns {}-{} of this session; {support} returns them",
                node.from_seq, node.to_seq
            ),
        )? {
            closed = true;
            cx.mark_out(
                trace,
                "compacted.closed",
                format!(
                    "the budget has {} tokens left; {support} returns its turns",
                    cx.remaining()
                ),
            );
        }
    }
    Ok(())
}

fn summary_raw<'t>(node: &'t SummaryNode, work_context: &'t str) -> Raw<'t> {
    Raw {
        source: ItemSource::Summary {
            id: node.id.clone(),
        },
        section: Section::Compacted,
        text: &node.text,
        role: "summary",
        warrant: Warrant::Recorded,
        support: node.expand_hint(),
        at: Some(node.latest),
        work_context: Some(work_context),
        session: Some(&node.session),
        low_trust: false,
        prefix: Cow::Borrowed(""),
        score: None,
    }
}

/// Step 5, tier 1, the resume card, within what the tiers have left. Returns the
/// tokens it takes.
fn tier1(
    cx: &mut Ctx<'_>,
    inputs: &Inputs<'_>,
    resume: &std::result::Result<tiers::Resume<'_>, String>,
    tiers_left: usize,
    reports: &mut Vec<TierReport>,
) -> Result<usize> {
    let settings = &inputs.settings;
    let r = match resume {
        Err(why) => {
            reports.push(TierReport {
                tier: 1,
                tag: "resume".to_owned(),
                fired: false,
                tokens: 0,
                cap: settings.resume_max_tokens,
                work_context: None,
                reason: why.clone(),
            });
            return Ok(0);
        }
        Ok(r) => r,
    };
    // Offer the lines in keep order (updates, open questions, decisions,
    // history; newest first), so trimming drops history first, then
    // decisions, then open questions.
    let mut order: Vec<&(ResumePart, &EntryView)> = r.lines.iter().collect();
    order.sort_by_key(|(p, _)| std::cmp::Reverse(p.keep_rank()));
    let cap = settings.resume_max_tokens.min(tiers_left);
    let mut trimmed = Vec::new();
    for (part, v) in order {
        if cx.in_block.contains(&entry_source(v)) {
            continue;
        }
        let mut raw = entry_raw(v, Section::Resume, Some(Warrant::Orientation));
        raw.prefix = Cow::Owned(match part {
            ResumePart::History => {
                format!(
                    "{} ({} ago): ",
                    part.prefix(),
                    render::age(inputs.now, v.entry.timestamp)
                )
            }
            _ => format!("{}: ", part.prefix()),
        });
        let free = cap.saturating_sub(section_total(cx, Section::Resume));
        if let Offer::TooBig { trace, .. } =
            cx.offer(raw, free, "tier1.resume", "resume card line (tier 1)")?
        {
            trimmed.push(part.prefix());
            cx.mark_out(
                trace,
                "tier1.trim",
                format!(
                    "trimmed from the resume card ({} tokens; history goes first, then decisions, then open questions)",
                    cap
                ),
            );
        }
    }
    let t1_tokens = section_total(cx, Section::Resume);
    reports.push(TierReport {
        tier: 1,
        tag: "resume".to_owned(),
        fired: t1_tokens > 0,
        tokens: t1_tokens,
        cap: settings.resume_max_tokens,
        work_context: Some(r.work_context.clone()),
        reason: if t1_tokens == 0 {
            "no room left for the resume card".to_owned()
        } else if trimmed.is_empty() {
            format!("fired: {}", r.matched)
        } else {
            format!("fired ({}), trimmed: {}", r.matched, trimmed.join(", "))
        },
    });
    Ok(t1_tokens)
}

/// Step 6, tier 2, recent activity in the other work contexts: all or nothing,
/// dropped first under pressure. `tiers_used` is what tiers 3 and 1 took.
fn tier2(
    cx: &mut Ctx<'_>,
    inputs: &Inputs<'_>,
    recent: &[&EntryView],
    tiers_used: usize,
    reports: &mut Vec<TierReport>,
) -> Result<()> {
    let settings = &inputs.settings;
    let now = inputs.now;
    let t2_cap = settings
        .recent_activity_max_tokens
        .min(settings.tiers_max_tokens.saturating_sub(tiers_used));
    if recent.is_empty() {
        reports.push(TierReport {
            tier: 2,
            tag: "recent_activity".to_owned(),
            fired: false,
            tokens: 0,
            cap: settings.recent_activity_max_tokens,
            work_context: None,
            reason: format!(
                "no activity in other work contexts in the last {} days",
                settings.recent_activity_max_age_days
            ),
        });
        return Ok(());
    }
    let before = cx.used;
    let mut added = Vec::new();
    let mut over = Vec::new();
    for v in recent {
        if cx.in_block.contains(&entry_source(v)) {
            continue;
        }
        let mut raw = entry_raw(v, Section::RecentActivity, Some(Warrant::Orientation));
        raw.prefix = Cow::Owned(format!(
            "- {} ({} ago): ",
            v.entry.work_context,
            render::age(now, v.entry.timestamp)
        ));
        let free = t2_cap.saturating_sub(section_total(cx, Section::RecentActivity));
        match cx.offer(
            raw,
            free,
            "tier2.recent_activity",
            "recent activity elsewhere (tier 2)",
        )? {
            Offer::Added => added.push(cx.trace.len() - 1),
            Offer::Blocked => {}
            Offer::TooBig {
                trace, over_cap, ..
            } => over.push((trace, over_cap)),
        }
    }
    // Under budget pressure (not merely its own cap) tier 2 goes whole.
    let pressured = over.iter().any(|(_, cap_hit)| !cap_hit);
    if pressured {
        undo(cx, &added, before);
        for t in added.iter().chain(over.iter().map(|(t, _)| t)) {
            cx.mark_out(
                *t,
                "tier2.dropped_first",
                "tier 2 is dropped first when the budget is short".to_owned(),
            );
        }
    } else {
        for (t, _) in &over {
            cx.mark_out(
                *t,
                "tier2.cap",
                format!("over the recent-activity cap ({t2_cap} tokens)"),
            );
        }
    }
    let t2_tokens = section_total(cx, Section::RecentActivity);
    reports.push(TierReport {
        tier: 2,
        tag: "recent_activity".to_owned(),
        fired: t2_tokens > 0,
        tokens: t2_tokens,
        cap: settings.recent_activity_max_tokens,
        work_context: None,
        reason: if pressured {
            "dropped first: the budget is short".to_owned()
        } else if t2_tokens == 0 {
            "no room within the tiers' total".to_owned()
        } else {
            format!(
                "other work contexts, last {} days",
                settings.recent_activity_max_age_days
            )
        },
    });
    Ok(())
}

/// Step 6b, topics: the newest turns each topic following this session
/// collected, within the topics cap; a turn already in the block is not
/// repeated.
fn topic_collections(cx: &mut Ctx<'_>, inputs: &Inputs<'_>) -> Result<()> {
    let cap = inputs.settings.topics_max_tokens;
    for (topic, members) in &inputs.topics {
        for m in members {
            let turn = ItemSource::Turn {
                session: m.turn.session.clone(),
                seq: m.turn.seq,
            };
            if cx.in_block.contains(&turn) {
                continue;
            }
            let raw = topic_raw(topic, m);
            let free = cap.saturating_sub(section_total(cx, Section::Topics));
            if let Offer::TooBig {
                trace, over_cap, ..
            } = cx.offer(
                raw,
                free,
                "topics.collection",
                &format!("collected by topic {topic} (tier {})", m.tier.number()),
            )? {
                if over_cap {
                    cx.mark_out(
                        trace,
                        "topics.cap",
                        format!("over the topics cap ({cap} tokens)"),
                    );
                } else {
                    cx.mark_out(
                        trace,
                        "topics.budget",
                        format!("the budget has {} tokens left", cx.remaining()),
                    );
                }
            }
        }
    }
    Ok(())
}

fn topic_raw<'t>(topic: &str, m: &'t Membership) -> Raw<'t> {
    Raw {
        source: ItemSource::Topic {
            topic: topic.to_owned(),
            session: m.turn.session.clone(),
            seq: m.turn.seq,
        },
        section: Section::Topics,
        text: &m.snippet,
        role: "turn",
        warrant: if m.low_trust {
            Warrant::LowTrust
        } else {
            Warrant::Verbatim
        },
        support: format!("{}:{} via topic {topic}", m.turn.session, m.turn.seq),
        at: Some(m.collected_at),
        work_context: m.work_context.as_deref(),
        session: Some(&m.turn.session),
        low_trust: m.low_trust,
        prefix: Cow::Borrowed(""),
        score: Some(m.score),
    }
}

/// Step 7, projection: retrieval over the rest of memory, in score order, while
/// the budget lasts.
fn projection(
    cx: &mut Ctx<'_>,
    ws: &Workspace,
    inputs: &Inputs<'_>,
    retriever: &dyn Retriever,
    tail_sources: &HashSet<ItemSource>,
) -> Result<RetrievalReport> {
    let request = inputs.request;
    let query = &inputs.query;
    let k = inputs.settings.retrieval_k;
    let mut retrieval = RetrievalReport {
        query: query.clone(),
        mode: "off".to_owned(),
        lexical_fallback: false,
        index_catching_up: false,
        candidates: 0,
    };
    if request.retrieval == RetrievalMode::Off || query.trim().is_empty() || cx.remaining() == 0 {
        return Ok(retrieval);
    }
    let found = retriever
        .retrieve(&RetrievalQuery {
            text: query,
            k,
            mode: request.retrieval,
            session: &cx.session.id,
            work_context: &cx.session.work_context,
            sessions: None,
        })
        .map_err(|e| MemoryError::AssemblySeam {
            seam: "retriever",
            message: e.0,
        })?;
    retrieval.mode = found.mode.clone();
    retrieval.lexical_fallback = found.lexical_fallback;
    retrieval.index_catching_up = found.catching_up;
    retrieval.candidates = found.candidates.len();
    let live_by_id: HashMap<&str, &EntryView> = inputs
        .live
        .iter()
        .map(|v| (v.entry.id.as_str(), v))
        .collect();
    // First the point reads and the skips, then one policy call for what
    // is left, then the offers, in score order with the skips traced where
    // they fall.
    enum Step<'v> {
        Skip(ItemSource, f32, &'static str, &'static str),
        Turn(Turn, f32),
        Entry(&'v EntryView, f32),
    }
    let mut steps = Vec::new();
    let mut seen: HashSet<CandidateRef> = HashSet::default();
    for cand in found.candidates.iter().take(k) {
        if !seen.insert(cand.target.clone()) {
            continue;
        }
        match &cand.target {
            CandidateRef::Turn { session, seq } => {
                let source = ItemSource::Turn {
                    session: session.clone(),
                    seq: *seq,
                };
                if tail_sources.contains(&source) || cx.in_block.contains(&source) {
                    steps.push(Step::Skip(
                        source,
                        cand.score,
                        "projection.partition",
                        "already in the recent tail",
                    ));
                    continue;
                }
                // A point read; the turn carries its session's work context.
                match ws.turn(session, *seq)? {
                    Some(turn) => steps.push(Step::Turn(turn, cand.score)),
                    None => steps.push(Step::Skip(
                        source,
                        cand.score,
                        "projection.missing",
                        "no longer in the record (forgotten)",
                    )),
                }
            }
            CandidateRef::Entry { id } => {
                let Some(v) = live_by_id.get(id.as_str()) else {
                    steps.push(Step::Skip(
                        ItemSource::Missing { id: id.clone() },
                        cand.score,
                        "projection.not_live",
                        "not live (replaced, expired or forgotten)",
                    ));
                    continue;
                };
                let source = entry_source(v);
                if cx.in_block.contains(&source) {
                    steps.push(Step::Skip(
                        source,
                        cand.score,
                        "projection.duplicate",
                        "already in the block",
                    ));
                    continue;
                }
                steps.push(Step::Entry(v, cand.score));
            }
        }
    }
    fn raw_of<'t>(step: &'t Step<'t>) -> Option<Raw<'t>> {
        match step {
            Step::Turn(turn, score) => Some(turn_raw(
                turn,
                &turn.work_context,
                Section::Retrieved,
                Some(*score),
            )),
            Step::Entry(v, score) => {
                let mut raw = entry_raw(v, Section::Retrieved, None);
                raw.score = Some(*score);
                Some(raw)
            }
            Step::Skip(..) => None,
        }
    }
    let candidates: Vec<Raw<'_>> = steps.iter().filter_map(raw_of).collect();
    cx.prejudge(&candidates)?;
    for step in &steps {
        match (step, raw_of(step)) {
            (Step::Skip(source, score, rule, reason), _) => {
                trace_skip(cx, source.clone(), *score, rule, reason);
            }
            (_, Some(raw)) => offer_projected(cx, raw)?,
            (_, None) => {}
        }
    }
    Ok(retrieval)
}

fn entry_source(v: &EntryView) -> ItemSource {
    ItemSource::Entry {
        id: v.entry.id.clone(),
        kind: v.entry.kind,
    }
}

fn header_if(cx: &Ctx<'_>, section: Section) -> usize {
    if cx.charged.contains(section_key(section)) {
        cx.key_cost(section_key(section))
    } else {
        0
    }
}

/// Tokens a section takes: its lines and, once it has one, its header.
fn section_total(cx: &Ctx<'_>, section: Section) -> usize {
    let lines = cx.sections.tokens(section);
    if lines == 0 {
        0
    } else {
        lines + header_if(cx, section)
    }
}

/// Adds an invariant whatever the budget says (the caller checks the total).
fn force(cx: &mut Ctx<'_>, raw: Raw<'_>, rule: &str, reason: &str) -> Result<()> {
    if let Offer::TooBig { trace, cost, .. } = cx.offer(raw, usize::MAX, rule, reason)? {
        // Over the budget: count it anyway, so the invariant check reports
        // what the invariants need; the call then fails.
        cx.used += cost;
        cx.trace[trace].included = true;
        cx.trace[trace].rule = rule.to_owned();
        cx.trace[trace].reason = reason.to_owned();
    }
    Ok(())
}

/// Takes back the pieces whose trace entries are `traces` (all of one unit,
/// the last ones added), restoring the budget to `before`.
fn undo(cx: &mut Ctx<'_>, traces: &[usize], before: usize) {
    if traces.is_empty() {
        return;
    }
    for (_, pieces) in cx.sections.0.iter_mut() {
        pieces.retain(|p| !traces.contains(&p.trace));
    }
    for t in traces {
        cx.trace[*t].included = false;
        let source = cx.trace[*t].source.clone();
        cx.in_block.remove(&source);
    }
    cx.used = before;
    // Keys charged by the unit alone are no longer needed.
    let needed: HashSet<&'static str> = cx
        .sections
        .0
        .iter()
        .flat_map(|(_, ps)| ps.iter().flat_map(|p| p.keys.iter().copied()))
        .collect();
    cx.charged.retain(|k| needed.contains(k));
}

fn trace_skip(cx: &mut Ctx<'_>, source: ItemSource, score: f32, rule: &str, reason: &str) {
    cx.trace.push(TraceItem {
        source,
        section: Section::Retrieved,
        tier: None,
        included: false,
        tokens: 0,
        rule: rule.to_owned(),
        reason: reason.to_owned(),
        score: Some(score),
        policy: None,
    });
}

fn offer_projected(cx: &mut Ctx<'_>, raw: Raw<'_>) -> Result<()> {
    let remaining = cx.remaining();
    if let Offer::TooBig { trace, .. } = cx.offer(
        raw,
        usize::MAX,
        "projection.retrieved",
        "retrieved for this turn; fits what the budget has left",
    )? {
        cx.mark_out(
            trace,
            "projection.budget",
            format!("does not fit the {remaining} tokens left"),
        );
    }
    Ok(())
}

/// The block's text, with the byte offsets where its lines may be cut for
/// counting (each line's [`Line::cuts`], ascending): the recount then reads
/// a line whose head moved (an age) mostly from the memo, as its offer did.
fn render_text(cx: &Ctx<'_>, open: &str) -> (String, Vec<usize>) {
    // Sized once (a section's tags are well under 256 bytes), not grown by
    // doubling with a copy per step.
    let sections: usize = cx
        .sections
        .0
        .iter()
        .map(|(_, ps)| 256 + ps.iter().map(|p| p.line.len()).sum::<usize>())
        .sum();
    let rules: usize = RULES.iter().map(|(_, l)| l.len()).sum();
    let mut text = String::with_capacity(
        open.len() + RULES_OPEN.len() + rules + RULES_CLOSE.len() + sections + CLOSE.len(),
    );
    text.push_str(open);
    let keys: HashSet<&'static str> = cx
        .sections
        .0
        .iter()
        .flat_map(|(_, ps)| ps.iter().flat_map(|p| p.keys.iter().copied()))
        .collect();
    text.push_str(RULES_OPEN);
    for (key, line) in RULES {
        if keys.contains(key) {
            text.push_str(line);
        }
    }
    text.push_str(RULES_CLOSE);
    let mut cuts = Vec::new();
    for (section, pieces) in &cx.sections.0 {
        if pieces.is_empty() {
            continue;
        }
        text.push_str(&render::section_open(*section, &cx.resume_attrs));
        for p in pieces {
            let at = text.len();
            cuts.extend(p.cuts.iter().filter(|&&c| c > 0).map(|c| at + c));
            text.push_str(&p.line);
        }
        text.push_str(render::section_close(*section));
    }
    text.push_str(CLOSE);
    (text, cuts)
}

/// Step 8, the final recount: renders the block and counts it whole (exact:
/// cut only where no token crosses, [`TokenCounter::count_cut`]); while BPE
/// merges across lines make it count over budget, trims in reverse
/// precedence (never the invariants).
fn finish(
    mut cx: Ctx<'_>,
    open: String,
    request: &AssembleRequest,
    mut tiers: Vec<TierReport>,
    activity: super::ActivityReport,
    retrieval: RetrievalReport,
) -> Result<AssembledContext> {
    // Sort each section into reading order: tail oldest first, projection
    // best first; tier cards and invariants keep their offer order except
    // the resume card, which prints in card order.
    for (section, pieces) in cx.sections.0.iter_mut() {
        match section {
            Section::Tail => pieces.sort_by(|a, b| a.item.source.cmp(&b.item.source)),
            // Offered newest first; read oldest first.
            Section::Compacted => pieces.reverse(),
            Section::Resume => pieces.sort_by_key(|p| resume_rank(&p.line)),
            _ => {}
        }
    }
    loop {
        let (text, cuts) = render_text(&cx, &open);
        let tokens = cx.counter.count_cut(&text, &cuts);
        if tokens <= cx.budget {
            let items = cx
                .sections
                .0
                .iter()
                .flat_map(|(_, ps)| ps.iter().map(|p| p.item.clone()))
                .collect();
            for t in tiers.iter_mut() {
                let section = match t.tier {
                    1 => Section::Resume,
                    2 => Section::RecentActivity,
                    _ => Section::LivingMemory,
                };
                t.tokens = section_total(&cx, section);
                t.fired = t.tokens > 0;
            }
            return Ok(AssembledContext {
                text,
                tokens,
                budget: cx.budget,
                encoding: cx.counter.encoding().to_owned(),
                destination: request.destination,
                items,
                trace: cx.trace,
                tiers,
                activity,
                retrieval,
                policy_generations: cx.generations.into_iter().collect(),
                obligations: Vec::new(),
            });
        }
        // BPE merges across lines made the sum of parts an underestimate:
        // trim in reverse precedence (projection, tier 2, tier 1, the tail
        // extension), never the invariants.
        let victim = [
            Section::Briefing,
            Section::Retrieved,
            Section::RecentActivity,
            Section::Resume,
            Section::Handoff,
            Section::Compacted,
        ]
        .into_iter()
        .find_map(|s| {
            cx.sections
                .0
                .iter()
                .position(|(sec, ps)| *sec == s && !ps.is_empty())
                .map(|at| (at, cx.sections.0[at].1.len() - 1))
        })
        .or_else(|| {
            cx.sections
                .0
                .iter()
                .position(|(sec, ps)| *sec == Section::Tail && ps.len() > 1)
                .and_then(|at| {
                    let t = cx.sections.0[at]
                        .1
                        .iter()
                        .position(|p| cx.trace[p.trace].rule == "tail.extend")?;
                    Some((at, t))
                })
        });
        match victim {
            Some((at, idx)) => {
                let piece = cx.sections.0[at].1.remove(idx);
                cx.in_block.remove(&piece.item.source);
                cx.mark_out(
                    piece.trace,
                    "render.trim",
                    "trimmed: the rendered block counted over budget".to_owned(),
                );
            }
            None => {
                return Err(MemoryError::InvariantsExceedBudget {
                    budget: cx.budget,
                    needed: tokens,
                    parts: "the rendered invariants".to_owned(),
                });
            }
        }
    }
}

fn resume_rank(line: &str) -> u8 {
    [
        ResumePart::History,
        ResumePart::Open,
        ResumePart::Decision,
        ResumePart::Update,
    ]
    .iter()
    .position(|p| line.starts_with(p.prefix()))
    .map_or(9, |i| i as u8)
}
