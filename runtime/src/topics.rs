//! Topics through the facade: CRUD, proposals, requested collection
//! (backfill), the gate log and `why`, and the live tiered gate that every
//! ingested turn passes (docs/DESIGN.md, *Activation and the tiered gate*).
//!
//! The gate, per workspace:
//!
//! 1. **Tier 1**: one shared [`TopicMatcher`] over every live topic's
//!    pattern triggers (compiled on first use, dropped on any topic change)
//!    names the candidate topics; a turn costs one scan whatever the number
//!    of topics. Only candidates go on, and only those whose scope covers
//!    the turn's role and whose subscriptions cover its session.
//! 2. **Tier 2**: cosine similarity of the turn's terms with the topic's
//!    profile (description, triggers, what it collected when compiled).
//! 3. The bypass table ([`gate::route`]) decides by priority whether to
//!    collect, drop, or ask **tier 3**: the installed `topic-directive`
//!    plugin, given the real gate signals. Its answers are cached by (topic,
//!    topic generation, policy generation, content hash); a fault is the
//!    world's fail-safe (do not collect), never cached.
//! 4. The decision is logged durably with what it collects (a membership,
//!    or a proposal for a `gated` topic) in one atomic batch.
//!
//! The gate runs after the ingest is acknowledged (the turns are durable
//! first), off the caller's thread: `LiveTopics` is the actors'
//! `TopicJudge`; the session actor runs tier 1 after its reply, then tiers
//! 2–4 for each turn and all its candidate topics at once on the blocking
//! pool: the turn is read, tokenized and digested once, not once per topic,
//! and its decisions are written in one batch. A failure of the gate is
//! logged and never fails the ingest. `Cairn::flush` waits for it.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_actors::{ActorError, TopicJudge, TopicTurn};
use cairn_memory::topics::gate::{self, Effect, Route};
pub use cairn_memory::topics::gate::{
    AssertionCandidate, CandidateStatus, ContextTurn, Depth, DirectiveAnswer, EvidenceRecord,
    Extract, GateRecord, Membership, Outcome, Proposal, ProposalStatus, Tier, TopicCounts, TurnRef,
    Via,
};
pub use cairn_memory::topics::lexical::DEFAULT_THRESHOLD;
use cairn_memory::topics::lexical::TermVector;
use cairn_memory::topics::matcher::TopicMatcher;
pub use cairn_memory::topics::{
    Activation, Priority, Scope, Source, Subscription, Topic, TopicSpec, Trigger, next_fire,
};
use cairn_memory::{Role, Turn, Workspace};
use cairn_policies::{
    self as worlds, CollectionMode, ExtractionDepth, GateSignals, MatchCriterion, OutputTarget,
    SourceClass, SourceScope, TopicDefinition, TopicInput, TopicSubject, TurnRole, TurnView,
};
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::Cairn;
use crate::reads::{ReadAs, ReadJudge};
use cairn_policies::Policies;

/// How many members feed a topic's tier-2 profile.
const PROFILE_MEMBERS: usize = 50;
/// How many tier-3 answers the decision cache keeps.
const CACHE_ENTRIES: usize = 16_384;

/// A topic with what it collected: what `cairn topics show` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TopicDetails {
    /// The topic.
    pub topic: Topic,
    /// Its most recent members, newest first.
    pub members: Vec<Membership>,
    /// Its pending proposals.
    pub pending: Vec<Proposal>,
    /// Its most recent evidence records, newest first (output target
    /// `evidence-record`).
    #[serde(default)]
    pub evidence: Vec<EvidenceRecord>,
    /// Its pending assertion candidates (output target
    /// `assertion-candidate`), oldest first.
    #[serde(default)]
    pub candidates: Vec<AssertionCandidate>,
}

/// What a requested collection (`collect`) did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectReport {
    /// Turns looked at.
    pub scanned: usize,
    /// Turns the pattern tier matched.
    pub matched: usize,
    /// Turns collected.
    pub collected: usize,
    /// Turns proposed (gated topics).
    pub proposed: usize,
    /// Turns already members, skipped.
    pub already: usize,
}

/// What feeding a topic's webhook did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeedReport {
    /// The turn the text was recorded as.
    pub turn: TurnRef,
    /// The gate's outcome (`None`: the topic did not judge it).
    pub outcome: Option<Outcome>,
}

/// One scheduled collection that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduledRun {
    /// The topic.
    pub topic: String,
    /// It collected turns from this time on (its previous run).
    pub since: DateTime<Utc>,
    /// What it collected.
    pub report: CollectReport,
}

/// One workspace's topics, compiled for the gate.
#[derive(Debug)]
struct Compiled {
    topics: Vec<Topic>,
    /// Index in `topics` by name: a watcher finds its topic in O(1),
    /// whatever the number of topics.
    by_name: HashMap<String, usize>,
    matcher: TopicMatcher,
    profiles: Vec<TermVector>,
}

/// A directive's answer, as the gate keeps it.
#[derive(Debug, Clone)]
struct CachedAnswer {
    collect: bool,
    mode: CollectionMode,
    depth: ExtractionDepth,
    targets: Vec<OutputTarget>,
    review: bool,
    reasons: Vec<String>,
    note: Option<String>,
}

/// (topic, topic generation, policy generation, content hash, source
/// class asked with).
type CacheKey = (String, u64, String, String, SourceClass);

/// The output targets of a collection no directive was asked about (a
/// bypass): the membership, and the turn feeds the topic's frame.
const BYPASS_TARGETS: [&str; 2] = ["topic-membership", "issue-frame-update"];

/// The live gate's state: compiled topics per workspace and the decision
/// cache. Shared by clones of [`Cairn`].
#[derive(Debug)]
pub(crate) struct TopicGate {
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
    cache: quick_cache::sync::Cache<CacheKey, CachedAnswer>,
    threshold: f32,
}

impl Default for TopicGate {
    fn default() -> Self {
        TopicGate {
            compiled: Mutex::new(HashMap::new()),
            cache: quick_cache::sync::Cache::new(CACHE_ENTRIES),
            threshold: DEFAULT_THRESHOLD,
        }
    }
}

fn profile(ws: &Workspace, topic: &Topic) -> Result<TermVector> {
    let mut texts: Vec<String> = vec![topic.spec.description.clone()];
    for trigger in &topic.spec.triggers {
        match trigger {
            Trigger::Keyword(t) | Trigger::Phrase(t) => texts.push(t.clone()),
            Trigger::Subject(s) => texts.push(s.replace('-', " ")),
            Trigger::Regex(_) | Trigger::Schedule(_) | Trigger::Webhook => {}
        }
    }
    for member in ws.frame_members(&topic.spec.name, PROFILE_MEMBERS)? {
        texts.push(member.snippet);
    }
    Ok(TermVector::new(texts.iter().map(String::as_str)))
}

fn compile(ws: &Workspace) -> Result<Compiled> {
    let topics: Vec<Topic> = ws
        .topics()?
        .into_iter()
        .filter(|t| !t.spec.paused)
        .collect();
    let matcher = TopicMatcher::new(topics.iter().map(|t| &t.spec));
    let profiles = topics
        .iter()
        .map(|t| profile(ws, t))
        .collect::<Result<Vec<_>>>()?;
    let by_name = topics
        .iter()
        .enumerate()
        .map(|(i, t)| (t.spec.name.clone(), i))
        .collect();
    Ok(Compiled {
        topics,
        by_name,
        matcher,
        profiles,
    })
}

fn role_view(role: Role) -> TurnRole {
    match role {
        Role::User => TurnRole::User,
        Role::Assistant => TurnRole::Assistant,
        Role::Tool => TurnRole::Tool,
        _ => TurnRole::System,
    }
}

fn definition(spec: &TopicSpec) -> TopicDefinition {
    let match_criteria = spec
        .triggers
        .iter()
        .filter_map(|t| match t {
            Trigger::Keyword(k) => Some(MatchCriterion::Keyword(k.clone())),
            Trigger::Phrase(p) => Some(MatchCriterion::Phrase(p.clone())),
            Trigger::Subject(s) => Some(MatchCriterion::Subject(s.clone())),
            Trigger::Regex(_) | Trigger::Schedule(_) | Trigger::Webhook => None,
        })
        .collect();
    TopicDefinition {
        topic_id: spec.name.clone(),
        name: spec.name.clone(),
        extraction_goal: spec.description.clone(),
        source_scope: if spec.sources.is_empty() {
            SourceScope::AllEligibleSources
        } else {
            SourceScope::FutureStream(spec.sources.iter().map(|&s| source_class(s)).collect())
        },
        match_criteria,
        activation: match spec.activation {
            Activation::Auto => worlds::Activation::Auto,
            Activation::Gated => worlds::Activation::Gated,
            Activation::Manual => worlds::Activation::Manual,
        },
        priority: spec.priority.as_u8(),
    }
}

fn source_class(source: Source) -> SourceClass {
    match source {
        Source::Chat => SourceClass::Chat,
        Source::ToolOutput => SourceClass::ToolOutput,
    }
}

/// How a turn reaches the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Live from ingest: manual topics do not collect.
    Live,
    /// Requested by a person: a manual topic collects like an auto one.
    Requested,
    /// Fed to the topic's webhook: addressed to this topic, so its scope
    /// and subscriptions do not apply, and a manual topic collects.
    Webhook,
}

/// A turn as the gate sees it, made once for every topic that judges it:
/// its terms and its reader digest.
struct Seen<'a> {
    turn: &'a Turn,
    kind: cairn_memory::SessionKind,
    vector: TermVector,
    reader_hash: String,
}

impl<'a> Seen<'a> {
    fn new(ws: &Workspace, turn: &'a Turn, kind: cairn_memory::SessionKind) -> Self {
        Seen {
            turn,
            kind,
            vector: TermVector::new([turn.content.as_str()]),
            reader_hash: ws.reader_hash(&turn.content),
        }
    }
}

impl TopicGate {
    fn compiled(&self, ws: &Workspace) -> Result<Arc<Compiled>> {
        if let Some(c) = self.compiled.lock().get(ws.id()) {
            return Ok(c.clone());
        }
        let compiled = Arc::new(compile(ws)?);
        self.compiled
            .lock()
            .insert(ws.id().to_owned(), compiled.clone());
        Ok(compiled)
    }

    /// Drops a workspace's compiled topics: the next turn recompiles.
    pub(crate) fn invalidate(&self, workspace: &str) {
        self.compiled.lock().remove(workspace);
    }

    /// Tier 1: per turn, the names of the live topics whose patterns match.
    fn candidates(&self, ws: &Workspace, turns: &[TopicTurn]) -> Result<Vec<Vec<String>>> {
        let compiled = self.compiled(ws)?;
        Ok(turns
            .iter()
            .map(|turn| {
                if compiled.topics.is_empty() {
                    return Vec::new();
                }
                compiled
                    .matcher
                    .matches(&turn.content)
                    .into_iter()
                    .filter_map(|idx| compiled.topics.get(idx).map(|t| t.spec.name.clone()))
                    .collect()
            })
            .collect())
    }

    /// Tiers 2–3 for one acknowledged turn and every live topic tier 1
    /// named for it (`visit` is told each topic's name, in order, before
    /// the topic judges): the turn is read, tokenized and digested once,
    /// and every decision is written in one atomic batch. A topic deleted
    /// or paused since tier 1 judges nothing.
    fn judge_turn(
        &self,
        ws: &Workspace,
        policies: &Policies,
        turn: &TopicTurn,
        topics: &[String],
        visit: &mut dyn FnMut(&str),
    ) -> Result<()> {
        let compiled = self.compiled(ws)?;
        let Some(stored) = ws
            .transcript(&turn.session, turn.seq, Some(1))?
            .into_iter()
            .next()
        else {
            return Ok(());
        };
        let seen = Seen::new(ws, &stored, ws.session(&turn.session)?.kind);
        let mut decisions = Vec::with_capacity(topics.len());
        for name in topics {
            visit(name);
            let Some(&idx) = compiled.by_name.get(name) else {
                continue;
            };
            let (Some(topic), Some(profile)) =
                (compiled.topics.get(idx), compiled.profiles.get(idx))
            else {
                continue;
            };
            if let Some(decision) = self.assess(ws, policies, topic, profile, &seen, Mode::Live)? {
                decisions.push(decision);
            }
        }
        ws.record_gates(&decisions)?;
        Ok(())
    }

    /// One topic, one turn: tiers 2–3, the log record and what it
    /// collects, written. `None` when the topic does not watch this turn.
    fn decide(
        &self,
        ws: &Workspace,
        policies: &Policies,
        topic: &Topic,
        profile: &TermVector,
        seen: &Seen<'_>,
        mode: Mode,
    ) -> Result<Option<Outcome>> {
        let Some((record, effect)) = self.assess(ws, policies, topic, profile, seen, mode)? else {
            return Ok(None);
        };
        ws.record_gate(&record, &effect)?;
        Ok(Some(record.outcome))
    }

    /// One topic, one turn: tiers 2–3, the log record and what it
    /// collects, not yet written. `None` when the topic does not watch this
    /// turn.
    fn assess(
        &self,
        ws: &Workspace,
        policies: &Policies,
        topic: &Topic,
        profile: &TermVector,
        seen: &Seen<'_>,
        mode: Mode,
    ) -> Result<Option<(GateRecord, Effect)>> {
        let Seen {
            turn,
            kind,
            vector: turn_vec,
            reader_hash,
        } = seen;
        let (turn, kind) = (*turn, *kind);
        let spec = &topic.spec;
        let turn_ref = TurnRef::new(&turn.session, turn.seq);
        let addressed = mode == Mode::Webhook;
        if spec.paused
            || (!addressed && !spec.scope.covers(turn.role))
            || (!addressed && !spec.draws_from(turn.role))
            || (!addressed && !spec.listens_to(&turn.session, &turn.work_context))
            || (mode == Mode::Live && spec.activation == Activation::Manual)
            || ws.is_collected(&spec.name, &turn_ref)?
        {
            return Ok(None);
        }
        let threshold = spec.similarity_threshold.unwrap_or(self.threshold);
        let score = profile.cosine(turn_vec);
        let activation = match (mode, spec.activation) {
            (Mode::Requested | Mode::Webhook, Activation::Manual) => Activation::Auto,
            (_, a) => a,
        };
        let mut record = GateRecord {
            id: ulid::Ulid::new().to_string(),
            topic: spec.name.clone(),
            topic_generation: topic.generation,
            turn: turn_ref.clone(),
            content_hash: reader_hash.clone(),
            tier: Tier::Pattern,
            pattern_matched: true,
            score,
            threshold,
            outcome: Outcome::Dropped,
            reasons: vec![
                if addressed {
                    "webhook"
                } else {
                    "pattern-match"
                }
                .to_owned(),
            ],
            policy_generation: None,
            note: None,
            cached: false,
            decided_at: ws.clock().now(),
            directive: None,
        };
        let mut targets: Vec<String> = BYPASS_TARGETS.iter().map(|t| (*t).to_owned()).collect();
        let mut depth = Depth::Shallow;
        // Why a person must review first (the directive's answer).
        let mut review: Vec<&str> = Vec::new();
        let collect = match gate::route(activation, spec.priority, score, threshold) {
            Route::Collect { at } => {
                record.tier = at;
                record.reasons.push(match at {
                    Tier::Pattern => "critical-bypass".to_owned(),
                    _ => "strong-similarity-bypass".to_owned(),
                });
                true
            }
            Route::Drop { at } => {
                record.tier = at;
                record.reasons.push("below-threshold".to_owned());
                false
            }
            Route::AskPolicy => {
                record.tier = Tier::Policy;
                let class = match mode {
                    Mode::Requested => SourceClass::MemoryEntry,
                    Mode::Live | Mode::Webhook => source_class(Source::of(turn.role)),
                };
                let answer = self.ask_policy(
                    ws.id(),
                    policies,
                    topic,
                    turn,
                    kind,
                    score,
                    class,
                    &mut record,
                )?;
                targets = answer
                    .targets
                    .iter()
                    .map(|t| t.as_str().to_owned())
                    .collect();
                for reason in &answer.reasons {
                    if !record.reasons.contains(reason) {
                        record.reasons.push(reason.clone());
                    }
                }
                record.note = answer.note.clone();
                record.directive = Some(DirectiveAnswer {
                    collection_mode: answer.mode.as_str().to_owned(),
                    extraction_depth: answer.depth.as_str().to_owned(),
                    output_targets: targets.clone(),
                    review_required: answer.review,
                });
                depth = match answer.depth {
                    ExtractionDepth::Deep => Depth::Deep,
                    ExtractionDepth::Standard => Depth::Standard,
                    _ => Depth::Shallow,
                };
                if answer.mode == CollectionMode::SuggestOnly {
                    review.push("suggest-only");
                }
                if answer.review {
                    review.push("review-required");
                }
                match honoured(&answer, mode, spec, turn.role) {
                    Ok(()) => answer.collect,
                    Err(why) => {
                        record.reasons.push(why.to_owned());
                        false
                    }
                }
            }
        };
        let member = Membership {
            topic: spec.name.clone(),
            turn: turn_ref,
            tier: record.tier,
            score,
            policy_generation: record.policy_generation.clone(),
            output_targets: targets,
            gate_record: record.id.clone(),
            via: match mode {
                Mode::Live => Via::Live,
                Mode::Requested => Via::Backfill,
                Mode::Webhook => Via::Webhook,
            },
            snippet: gate::snippet(&turn.content),
            work_context: Some(turn.work_context.clone()),
            low_trust: turn.role == Role::Tool || addressed,
            collected_at: record.decided_at,
            extraction_depth: Some(depth),
            extract: None,
        };
        let effect = if !collect {
            Effect::None
        } else if !review.is_empty() || activation == Activation::Gated {
            record
                .reasons
                .extend(review.iter().map(|r| (*r).to_owned()));
            record.outcome = Outcome::Proposed;
            Effect::Propose(member)
        } else {
            record.outcome = Outcome::Collected;
            Effect::Collect(member)
        };
        Ok(Some((record, effect)))
    }

    #[allow(clippy::too_many_arguments)]
    fn ask_policy(
        &self,
        workspace: &str,
        policies: &Policies,
        topic: &Topic,
        turn: &Turn,
        kind: cairn_memory::SessionKind,
        score: f32,
        source_class: SourceClass,
        record: &mut GateRecord,
    ) -> Result<CachedAnswer> {
        let policy_generation = policies.topic().generation().as_str().to_owned();
        let key = (
            topic.spec.name.clone(),
            topic.generation,
            policy_generation.clone(),
            turn.content_hash.clone(),
            source_class,
        );
        record.policy_generation = Some(policy_generation);
        if let Some(hit) = self.cache.get(&key) {
            record.cached = true;
            return Ok(hit);
        }
        let mut view = TurnView::new(&turn.session, turn.seq, role_view(turn.role), &turn.content);
        view.work_context_id = Some(turn.work_context.clone());
        view.session_kind = match kind {
            cairn_memory::SessionKind::Subagent => worlds::SessionKind::SubAgent,
            cairn_memory::SessionKind::Cron => worlds::SessionKind::Cron,
            _ => worlds::SessionKind::Main,
        };
        let input = TopicInput {
            topic: definition(&topic.spec),
            subject: TopicSubject::Turn(view),
            source_class,
            signals: GateSignals {
                pattern_matched: true,
                lexical_similarity: score,
            },
        };
        let decided = policies.topic_directive_in(workspace, &input)?;
        record.policy_generation = Some(decided.generation.as_str().to_owned());
        let d = &decided.decision;
        let mut answer = CachedAnswer {
            collect: d.collect,
            mode: d.collection_mode,
            depth: d.extraction_depth,
            targets: d.output_targets.clone(),
            review: d.review_required_before_durable_promotion,
            reasons: d
                .reason_codes
                .iter()
                .map(|r| r.as_str().to_owned())
                .collect(),
            note: d.note.clone(),
        };
        answer.reasons.push(if d.collect {
            "policy-collect".to_owned()
        } else {
            "policy-declined".to_owned()
        });
        if decided.outcome.is_plugin() {
            self.cache.insert(key, answer.clone());
        } else {
            answer.reasons.push("policy-fault".to_owned());
        }
        Ok(answer)
    }
}

/// Whether the host acts on a directive's answer to collect, given how the
/// turn reached the gate (wit/README.md, *topic-directive-decision*); `Err`
/// names why not, for the gate record. An answer that does not collect
/// passes.
fn honoured(
    answer: &CachedAnswer,
    mode: Mode,
    spec: &TopicSpec,
    role: Role,
) -> std::result::Result<(), &'static str> {
    if !answer.collect {
        return Ok(());
    }
    if answer.targets.contains(&OutputTarget::NullResult) {
        return Err("null-result");
    }
    match answer.mode {
        CollectionMode::WatchFutureSources if mode == Mode::Requested => {
            Err("mode-excludes-backfill")
        }
        CollectionMode::BackfillExistingMemory if mode != Mode::Requested => {
            Err("mode-excludes-new-input")
        }
        CollectionMode::ExtractFromSelectedSources if spec.sources.is_empty() => {
            Err("no-selected-sources")
        }
        CollectionMode::ExtractFromSelectedSources if !spec.sources.contains(&Source::of(role)) => {
            Err("outside-selected-sources")
        }
        _ => Ok(()),
    }
}

impl Cairn {
    fn topics_changed(&self, workspace: &str) {
        self.topic_gate().invalidate(workspace);
    }

    /// Creates a topic. A bad definition (invalid regex, no trigger, an
    /// unknown subscription target…) is refused with `invalid_topic`
    /// naming the field; a taken name with `topic_exists`. Nothing is
    /// written on refusal.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig};
    /// use cairn::topics::{TopicSpec, Trigger};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let spec = TopicSpec::new("billing", "Invoices and refunds").trigger(Trigger::Keyword("invoice".into()));
    /// cairn.create_topic("acme", &spec)?;
    /// assert_eq!(cairn.topics("acme")?[0].spec.name, "billing");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_topic(&self, workspace: &str, spec: &TopicSpec) -> Result<Topic> {
        let topic = self.workspace(workspace)?.create_topic(spec)?;
        self.topics_changed(workspace);
        Ok(topic)
    }

    /// Replaces a topic's definition (same name); bumps its generation, so
    /// no cached gate answer of the old definition is reused.
    pub fn update_topic(&self, workspace: &str, name: &str, spec: &TopicSpec) -> Result<Topic> {
        let topic = self
            .memory()
            .existing_workspace(workspace)?
            .update_topic(name, spec)?;
        self.topics_changed(workspace);
        Ok(topic)
    }

    /// The workspace's topics, by name.
    pub fn topics(&self, workspace: &str) -> Result<Vec<Topic>> {
        if !self.memory().workspaces()?.iter().any(|w| w == workspace) {
            return Ok(Vec::new());
        }
        Ok(self.memory().existing_workspace(workspace)?.topics()?)
    }

    /// A topic with its recent members (newest first, at most `limit`) and
    /// pending proposals, as `reader` may see them: the rules of every read
    /// apply to each collected turn (an `asking` sub-agent sees its
    /// lineage only; the memory policy judges the turn for the reader's
    /// destination; secrets are masked in the snippet, which is made from
    /// the turn as the reader sees it).
    pub fn topic<'a>(
        &self,
        workspace: &str,
        name: &str,
        limit: usize,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<TopicDetails> {
        let ws = self.memory().existing_workspace(workspace)?;
        let judge = self.judge_for(&ws, reader.into(), "topics")?;
        let topic = ws.topic(name)?;
        let matcher = TopicMatcher::new([&topic.spec]);
        let spec = &matcher;
        let mut members = shown_memberships(&ws, &judge, spec, ws.memberships(name, limit)?);
        if members.len() < limit {
            // Some were withheld: the limit counts what the reader sees.
            members = shown_memberships(&ws, &judge, spec, ws.memberships(name, usize::MAX)?);
            members.truncate(limit);
        }
        let pending = ws
            .proposals(name, false)?
            .into_iter()
            .filter_map(|p| shown_proposal(&ws, &judge, spec, p))
            .collect();
        let mut evidence: Vec<EvidenceRecord> = ws
            .evidence(name, usize::MAX)?
            .into_iter()
            .filter_map(|e| shown_evidence(&ws, &judge, spec, e))
            .collect();
        evidence.truncate(limit);
        let candidates = ws
            .candidates(name, false)?
            .into_iter()
            .filter_map(|c| shown_candidate(&ws, &judge, spec, c))
            .collect();
        Ok(TopicDetails {
            topic,
            members,
            pending,
            evidence,
            candidates,
        })
    }

    /// Pauses (`true`) or resumes (`false`) a topic.
    pub fn pause_topic(&self, workspace: &str, name: &str, paused: bool) -> Result<Topic> {
        let topic = self
            .memory()
            .existing_workspace(workspace)?
            .set_topic_paused(name, paused)?;
        self.topics_changed(workspace);
        Ok(topic)
    }

    /// Deletes a topic with its memberships, proposals and gate log (the
    /// turns stay in the record).
    pub fn delete_topic(&self, workspace: &str, name: &str) -> Result<Topic> {
        let topic = self
            .memory()
            .existing_workspace(workspace)?
            .delete_topic(name)?;
        self.topics_changed(workspace);
        Ok(topic)
    }

    /// A topic's proposals, oldest first; only pending ones unless `all`;
    /// as `reader` may see them (see [`Cairn::topic`]).
    pub fn topic_proposals<'a>(
        &self,
        workspace: &str,
        name: &str,
        all: bool,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Vec<Proposal>> {
        let ws = self.memory().existing_workspace(workspace)?;
        let judge = self.judge_for(&ws, reader.into(), "topics")?;
        let matcher = TopicMatcher::new([&ws.topic(name)?.spec]);
        Ok(ws
            .proposals(name, all)?
            .into_iter()
            .filter_map(|p| shown_proposal(&ws, &judge, &matcher, p))
            .collect())
    }

    /// A topic's assertion candidates (output target
    /// `assertion-candidate`), oldest first; only pending ones unless
    /// `all`; as `reader` may see them (see [`Cairn::topic`]).
    pub fn topic_candidates<'a>(
        &self,
        workspace: &str,
        name: &str,
        all: bool,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Vec<AssertionCandidate>> {
        let ws = self.memory().existing_workspace(workspace)?;
        let judge = self.judge_for(&ws, reader.into(), "topics")?;
        let matcher = TopicMatcher::new([&ws.topic(name)?.spec]);
        Ok(ws
            .candidates(name, all)?
            .into_iter()
            .filter_map(|c| shown_candidate(&ws, &judge, &matcher, c))
            .collect())
    }

    /// Accepts (`true`) or rejects a pending assertion candidate.
    /// Accepting appends a `fact` entry to the memory log (through
    /// [`Cairn::append_entry`], its provenance the turn): the sentences of
    /// the turn that match the topic's patterns, secrets masked; the
    /// candidate names the entry. `candidate_not_found` when the turn has
    /// no pending candidate or the turn is gone.
    ///
    /// ```
    /// use cairn::topics::{Activation, TopicSpec, Trigger};
    /// use cairn::worlds::{WorldKind, defaults::test_guests};
    /// use cairn::{Role, TurnInput};
    /// # let dir = tempfile::tempdir()?;
    /// # let cairn = cairn::Cairn::open(cairn::CairnConfig { data_dir: dir.path().into(), ..Default::default() })?;
    /// // A directive that answers `assertion-candidate` for a topic so named.
    /// let wasm = std::fs::read(test_guests::TEST_TOPIC_DIRECTIVE)?;
    /// cairn.install_plugin(WorldKind::TopicDirective, "test-topic-directive", &wasm)?;
    /// let mut spec = TopicSpec::new("wombat-assertion", "Zoo animals")
    ///     .trigger(Trigger::Keyword("wombat".into())).activation(Activation::Auto);
    /// spec.similarity_threshold = Some(0.0);
    /// cairn.create_topic("acme", &spec)?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Hi. A wombat ate my lunch!")])?;
    /// cairn.flush()?;
    /// let pending = cairn.topic_candidates("acme", "wombat-assertion", false, None)?;
    /// assert_eq!(pending[0].text, "A wombat ate my lunch!");
    /// let accepted = cairn.decide_candidate("acme", "wombat-assertion", &pending[0].turn, true)?;
    /// let entry = cairn.entry("acme", accepted.entry.as_deref().unwrap_or_default(), None)?;
    /// assert_eq!(entry.entry.content, "A wombat ate my lunch!");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decide_candidate(
        &self,
        workspace: &str,
        name: &str,
        turn: &TurnRef,
        accept: bool,
    ) -> Result<AssertionCandidate> {
        let ws = self.memory().existing_workspace(workspace)?;
        let topic = ws.topic(name)?;
        ws.pending_candidate(name, turn)?;
        if !accept {
            return Ok(ws.settle_candidate(name, turn, None)?);
        }
        let stored = ws.turn(&turn.session, turn.seq)?.ok_or_else(|| {
            cairn_memory::MemoryError::CandidateNotFound {
                topic: name.to_owned(),
                turn: format!("{turn} (the turn is gone)"),
            }
        })?;
        let text = gate::matching_sentences(
            &TopicMatcher::new([&topic.spec]),
            &cairn_memory::redact::redact(&stored.content),
        )
        .join(" ");
        let mut input = cairn_memory::EntryInput::new(cairn_memory::EntryKind::Fact, &text)
            .from_turns(&turn.session, turn.seq, turn.seq);
        input.work_context = Some(stored.work_context.clone());
        let entry = self.append_entry(workspace, &input)?;
        let mut settled = ws.settle_candidate(name, turn, Some(entry.id))?;
        settled.text = text;
        Ok(settled)
    }

    /// Approves (`true`) or rejects a pending proposal; approval makes the
    /// turn a member.
    pub fn decide_proposal(
        &self,
        workspace: &str,
        name: &str,
        turn: &TurnRef,
        approve: bool,
    ) -> Result<Proposal> {
        Ok(self
            .memory()
            .existing_workspace(workspace)?
            .decide_proposal(name, turn, approve)?)
    }

    /// A topic's gate log, newest first, as `reader` may see it: records
    /// about turns outside an `asking` sub-agent's lineage, or that the
    /// memory policy withholds from the reader's destination, are left
    /// out; the policy's notes are masked; the content digest is keyed
    /// ([`GateRecord::content_hash`]).
    pub fn gate_log<'a>(
        &self,
        workspace: &str,
        name: &str,
        limit: usize,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Vec<GateRecord>> {
        let ws = self.memory().existing_workspace(workspace)?;
        let judge = self.judge_for(&ws, reader.into(), "topics")?;
        Ok(shown_records(&ws, &judge, ws.gate_log(name, None, limit)?))
    }

    /// Why a topic did or did not collect a turn: its gate decisions about
    /// it, newest first (empty when the turn never reached the topic's gate,
    /// i.e. no pattern matched), as `reader` may see them (see
    /// [`Cairn::gate_log`]).
    pub fn why<'a>(
        &self,
        workspace: &str,
        name: &str,
        turn: &TurnRef,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Vec<GateRecord>> {
        let ws = self.memory().existing_workspace(workspace)?;
        let judge = self.judge_for(&ws, reader.into(), "topics")?;
        Ok(shown_records(
            &ws,
            &judge,
            ws.gate_log(name, Some(turn), 100)?,
        ))
    }

    /// Collects on request over the existing record (turns at or after
    /// `since`, in the topic's scope and subscriptions): the gate runs as
    /// for live turns, except that a `manual` topic collects like an `auto`
    /// one. Turns already members are skipped.
    pub fn collect_topic(
        &self,
        workspace: &str,
        name: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<CollectReport> {
        if let Some(since) = since {
            cairn_memory::ids::validate_time("since", since)?;
        }
        let ws = self.memory().existing_workspace(workspace)?;
        let report = self
            .topic_gate()
            .collect(&ws, self.policies(), &ws.topic(name)?, since)?;
        self.topics_changed(workspace);
        Ok(report)
    }

    /// Feeds text to a topic's inbound webhook. The text is recorded as a
    /// tool result (its call id `webhook-<ulid>`) (low trust: data, never instructions) of the session
    /// `webhook-<topic>` in the topic's first subscribed work context (the
    /// default one otherwise), through [`Cairn::ingest`] like any turn; then
    /// this topic's gate judges it as addressed to it (its scope and
    /// subscriptions do not apply; a manual topic collects). Refused with
    /// `invalid_topic` for a topic without a `webhook` trigger or paused.
    ///
    /// ```
    /// use cairn::topics::{Activation, TopicSpec, Trigger, Priority, Outcome};
    /// # let dir = tempfile::tempdir()?;
    /// # let cairn = cairn::Cairn::open(cairn::CairnConfig { data_dir: dir.path().into(), ..Default::default() })?;
    /// let spec = TopicSpec::new("alerts", "Production alerts").trigger(Trigger::Webhook)
    ///     .activation(Activation::Auto).priority(Priority::Critical);
    /// cairn.create_topic("acme", &spec)?;
    /// let fed = cairn.feed_topic("acme", "alerts", "CPU on db-1 above 95% for 10 minutes")?;
    /// assert_eq!(fed.outcome, Some(Outcome::Collected));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn feed_topic(&self, workspace: &str, name: &str, text: &str) -> Result<FeedReport> {
        let ws = self.memory().existing_workspace(workspace)?;
        let topic = ws.topic(name)?;
        let refuse = |reason: &str| {
            crate::error::CairnError::Memory(cairn_memory::MemoryError::InvalidTopic {
                field: "triggers".to_owned(),
                reason: format!("topic {name} {reason}"),
            })
        };
        if !topic.spec.triggers.contains(&Trigger::Webhook) {
            return Err(refuse("has no webhook trigger"));
        }
        if topic.spec.paused {
            return Err(refuse("is paused"));
        }
        let session = format!("webhook-{name}");
        let work_context = topic.spec.subscriptions.iter().find_map(|s| match s {
            Subscription::WorkContext(wc) => Some(wc.clone()),
            _ => None,
        });
        // A tool result needs a call id: each feed is its own delivery.
        let mut input = cairn_memory::TurnInput::new(&session, Role::Tool, text)
            .with_tool_call_id(&format!("webhook-{}", ulid::Ulid::new()));
        if let Some(wc) = &work_context {
            input = input.in_context(wc);
        }
        let ack = self.ingest(workspace, std::slice::from_ref(&input))?;
        let seq = ack.first().map_or(0, |a| a.seq);
        let Some(turn) = ws.transcript(&session, seq, Some(1))?.into_iter().next() else {
            return Err(refuse("lost the turn it was fed"));
        };
        let gate = self.topic_gate();
        let profile = profile(&ws, &topic)?;
        let seen = Seen::new(&ws, &turn, ws.session(&session)?.kind);
        let outcome = gate.decide(&ws, self.policies(), &topic, &profile, &seen, Mode::Webhook)?;
        self.topics_changed(workspace);
        Ok(FeedReport {
            turn: TurnRef::new(&session, seq),
            outcome,
        })
    }

    /// How much a workspace's topics hold: definitions, gate decisions,
    /// collected turns, proposals. Counts what the watchers have decided
    /// so far (call [`Cairn::flush`] first to wait for them).
    pub fn topic_counts(&self, workspace: &str) -> Result<TopicCounts> {
        Ok(self
            .memory()
            .existing_workspace(workspace)?
            .topic_counts()?)
    }

    /// Runs the schedules of a workspace's topics that are due at the
    /// clock's time: each due topic collects over the turns since its last
    /// run (or since it was created), as [`Cairn::collect_topic`] does, and
    /// its run is recorded. The actors' ticker does this on every tick.
    pub fn run_topic_schedules(&self, workspace: &str) -> Result<Vec<ScheduledRun>> {
        let ws = self.memory().existing_workspace(workspace)?;
        let runs = self.topic_gate().run_schedules(&ws, self.policies())?;
        if !runs.is_empty() {
            self.topics_changed(workspace);
        }
        Ok(runs)
    }
}

impl TopicGate {
    /// A requested collection over the record (see [`Cairn::collect_topic`]).
    fn collect(
        &self,
        ws: &Workspace,
        policies: &Policies,
        topic: &Topic,
        since: Option<DateTime<Utc>>,
    ) -> Result<CollectReport> {
        let name = topic.spec.name.as_str();
        let matcher = TopicMatcher::new([&topic.spec]);
        let profile = profile(ws, topic)?;
        let mut report = CollectReport::default();
        for session in ws.sessions(None)? {
            if !topic.spec.listens_to(&session.id, &session.work_context) {
                continue;
            }
            // A session with no turn since `since` is not read at all, so a
            // frequent schedule costs the new turns, not the whole record.
            if let Some(since) = since
                && ws
                    .session(&session.id)?
                    .last_turn_at
                    .is_none_or(|last| last < since)
            {
                continue;
            }
            for turn in ws.transcript(&session.id, 0, None)? {
                if since.is_some_and(|s| turn.timestamp < s) {
                    continue;
                }
                report.scanned += 1;
                if matcher.matches(&turn.content).is_empty() {
                    continue;
                }
                report.matched += 1;
                if ws.is_collected(name, &TurnRef::new(&turn.session, turn.seq))? {
                    report.already += 1;
                    continue;
                }
                let seen = Seen::new(ws, &turn, session.kind);
                match self.decide(ws, policies, topic, &profile, &seen, Mode::Requested)? {
                    Some(Outcome::Collected) => report.collected += 1,
                    Some(Outcome::Proposed) => report.proposed += 1,
                    Some(Outcome::Dropped) | None => {}
                }
            }
        }
        Ok(report)
    }

    /// The topics of `ws` whose schedule is due: each collects since its
    /// last run, then its run is recorded.
    fn run_schedules(&self, ws: &Workspace, policies: &Policies) -> Result<Vec<ScheduledRun>> {
        let now = ws.clock().now();
        let mut runs = Vec::new();
        for topic in ws.topics()? {
            if topic.spec.paused {
                continue;
            }
            let schedules: Vec<&str> = topic
                .spec
                .triggers
                .iter()
                .filter_map(|t| match t {
                    Trigger::Schedule(cron) => Some(cron.as_str()),
                    _ => None,
                })
                .collect();
            if schedules.is_empty() {
                continue;
            }
            let last = ws
                .schedule_mark(&topic.spec.name)?
                .unwrap_or(topic.created_at);
            let due = schedules
                .iter()
                .filter_map(|cron| next_fire(cron, last))
                .min()
                .is_some_and(|at| at <= now);
            if !due {
                continue;
            }
            let report = self.collect(ws, policies, &topic, Some(last))?;
            ws.set_schedule_mark(&topic.spec.name, now)?;
            tracing::info!(
                workspace = ws.id(),
                topic = %topic.spec.name,
                collected = report.collected,
                proposed = report.proposed,
                "topic schedule ran"
            );
            runs.push(ScheduledRun {
                topic: topic.spec.name.clone(),
                since: last,
                report,
            });
        }
        Ok(runs)
    }
}

/// The runtime's [`TopicJudge`]: the actors run the tiered gate through it
/// after the acknowledgement (tier 1 in the session's task, tiers 2–3 for
/// each turn and all its candidate topics on the blocking pool).
#[derive(Debug, Clone)]
pub(crate) struct LiveTopics {
    pub(crate) gate: Arc<TopicGate>,
    pub(crate) policies: Policies,
}

fn gate_error(topic: &str, error: crate::error::CairnError) -> ActorError {
    match error {
        crate::error::CairnError::Memory(e) => ActorError::Memory(e),
        crate::error::CairnError::Actor(e) => e,
        other => ActorError::TopicGate {
            topic: topic.to_owned(),
            reason: other.to_string(),
        },
    }
}

impl TopicJudge for LiveTopics {
    fn candidates(
        &self,
        ws: &Workspace,
        turns: &[TopicTurn],
    ) -> std::result::Result<Vec<Vec<String>>, ActorError> {
        self.gate
            .candidates(ws, turns)
            .map_err(|e| gate_error("(tier 1)", e))
    }

    fn judge_turn(
        &self,
        ws: &Workspace,
        turn: &TopicTurn,
        topics: &[String],
        visit: &mut dyn FnMut(&str),
    ) -> std::result::Result<(), ActorError> {
        self.gate
            .judge_turn(ws, &self.policies, turn, topics, visit)
            .map_err(|e| gate_error(&topics.join(","), e))
    }

    fn restarted(&self, workspace: &str) {
        self.gate.invalidate(workspace);
    }

    fn scheduled(&self, ws: &Workspace) -> std::result::Result<(), ActorError> {
        let runs = self
            .gate
            .run_schedules(ws, &self.policies)
            .map_err(|e| gate_error("(schedules)", e))?;
        if !runs.is_empty() {
            self.gate.invalidate(ws.id());
        }
        Ok(())
    }
}

/// The stored turn `turn` names, as `judge`'s reader may see it; `None`
/// when withheld (outside the lineage, blocked by the memory policy, or
/// erased).
fn shown_turn(ws: &Workspace, judge: &ReadJudge<'_>, turn: &TurnRef) -> Option<Turn> {
    if !judge.in_lineage(&turn.session) {
        return None;
    }
    let stored = match ws.turn(&turn.session, turn.seq) {
        Ok(found) => found?,
        Err(error) => {
            tracing::warn!(%error, session = %turn.session, seq = turn.seq, "topic read: the turn cannot be read; withheld");
            return None;
        }
    };
    judge.turn(stored)
}

/// A membership as the reader may see it: its snippet made from the turn
/// as shown (masked, at the policy's fidelity), never from the raw text;
/// for a `standard` or `deep` member, its extract made the same way.
fn shown_membership(
    ws: &Workspace,
    judge: &ReadJudge<'_>,
    matcher: &TopicMatcher,
    mut m: Membership,
) -> Option<Membership> {
    let turn = shown_turn(ws, judge, &m.turn)?;
    m.snippet = gate::snippet(&turn.content);
    m.extract = match m.extraction_depth {
        Some(depth @ (Depth::Standard | Depth::Deep)) => Some(Extract {
            sentences: gate::matching_sentences(matcher, &turn.content),
            context: if depth == Depth::Deep {
                neighbours(ws, judge, &m.turn)
            } else {
                Vec::new()
            },
        }),
        _ => None,
    };
    Some(m)
}

/// The turns before and after `turn` in its session, as the reader may
/// see them (a `deep` member's context).
fn neighbours(ws: &Workspace, judge: &ReadJudge<'_>, turn: &TurnRef) -> Vec<ContextTurn> {
    [turn.seq.checked_sub(1), turn.seq.checked_add(1)]
        .into_iter()
        .flatten()
        .filter_map(|seq| {
            let at = TurnRef::new(&turn.session, seq);
            let shown = shown_turn(ws, judge, &at)?;
            Some(ContextTurn {
                turn: at,
                snippet: gate::snippet(&shown.content),
            })
        })
        .collect()
}

fn shown_memberships(
    ws: &Workspace,
    judge: &ReadJudge<'_>,
    matcher: &TopicMatcher,
    all: Vec<Membership>,
) -> Vec<Membership> {
    all.into_iter()
        .filter_map(|m| shown_membership(ws, judge, matcher, m))
        .collect()
}

fn shown_proposal(
    ws: &Workspace,
    judge: &ReadJudge<'_>,
    matcher: &TopicMatcher,
    mut p: Proposal,
) -> Option<Proposal> {
    p.membership = shown_membership(ws, judge, matcher, p.membership)?;
    Some(p)
}

/// An evidence record as the reader may see it: its quote made from the
/// turn as shown.
fn shown_evidence(
    ws: &Workspace,
    judge: &ReadJudge<'_>,
    matcher: &TopicMatcher,
    mut e: EvidenceRecord,
) -> Option<EvidenceRecord> {
    let turn = shown_turn(ws, judge, &e.turn)?;
    e.quote = gate::matching_sentences(matcher, &turn.content)
        .into_iter()
        .next()
        .unwrap_or_default();
    Some(e)
}

/// An assertion candidate as the reader may see it: its text made from
/// the turn as shown.
fn shown_candidate(
    ws: &Workspace,
    judge: &ReadJudge<'_>,
    matcher: &TopicMatcher,
    mut c: AssertionCandidate,
) -> Option<AssertionCandidate> {
    let turn = shown_turn(ws, judge, &c.turn)?;
    c.text = gate::matching_sentences(matcher, &turn.content).join(" ");
    Some(c)
}

/// Gate records as the reader may see them: only about turns it may see,
/// the plugin's note masked, the digest keyed.
fn shown_records(
    ws: &Workspace,
    judge: &ReadJudge<'_>,
    records: Vec<GateRecord>,
) -> Vec<GateRecord> {
    records
        .into_iter()
        .filter_map(|mut r| {
            let turn = shown_turn(ws, judge, &r.turn)?;
            r.content_hash = turn.content_hash;
            r.note = r.note.as_deref().map(cairn_memory::redact::redact);
            Some(r)
        })
        .collect()
}
