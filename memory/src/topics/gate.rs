//! The tiered gate's pure parts: the bypass table by priority
//! ([`route`]), and the durable records it leaves: the gate log
//! ([`GateRecord`]), memberships ([`Membership`]) and proposals
//! ([`Proposal`]).
//!
//! A decision and what it collects are written in one atomic batch
//! ([`Workspace::record_gate`]): a membership never exists without the gate
//! record that explains it.
//!
//! The bypass table (docs/DESIGN.md, *Activation and the tiered gate*; with the tier-2 threshold `t`,
//! default 0.15, configurable per topic):
//!
//! | priority | tier-2 score | route |
//! |----------|--------------|-------|
//! | critical | any          | collect (tiers 2 and 3 skipped) |
//! | high     | ≥ 2t         | collect (tier 3 skipped) |
//! | high     | < 2t         | ask the policy |
//! | medium   | ≥ t          | ask the policy |
//! | medium   | < t          | drop |
//! | low      | ≥ 2t         | ask the policy |
//! | low      | < 2t         | drop |
//!
//! Only topics whose patterns matched (tier 1) reach the table. A `gated`
//! topic never skips the policy (every tier, then a proposal); a `manual`
//! topic never collects live.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Activation, Priority};
use crate::error::{MemoryError, Result};
use crate::ids::validate_id;
use crate::memory::{Workspace, decode, encode};
use crate::store::{Collection, TopicFamily, TopicKey, WriteBatch};

/// The longest snippet of a turn a membership or proposal keeps.
pub const SNIPPET_BYTES: usize = 400;

/// A gate tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The shared pattern matcher.
    Pattern,
    /// Lexical similarity to the topic's profile.
    Lexical,
    /// The installed `topic-directive` policy.
    Policy,
}

impl Tier {
    /// 1, 2 or 3.
    pub fn number(self) -> u8 {
        match self {
            Tier::Pattern => 1,
            Tier::Lexical => 2,
            Tier::Policy => 3,
        }
    }
}

/// What the bypass table says for a pattern-matched candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// Collect without asking the policy; `at` is the tier that decided.
    Collect {
        /// The deciding tier.
        at: Tier,
    },
    /// Ask the policy (tier 3).
    AskPolicy,
    /// Do not collect; `at` is the tier that decided.
    Drop {
        /// The deciding tier.
        at: Tier,
    },
}

/// The bypass table: where a pattern-matched candidate goes, given its
/// topic's activation and priority, its tier-2 score and threshold.
///
/// ```
/// use cairn_memory::topics::{Activation, Priority, gate::{Route, Tier, route}};
/// assert_eq!(route(Activation::Auto, Priority::Critical, 0.0, 0.15), Route::Collect { at: Tier::Pattern });
/// assert_eq!(route(Activation::Auto, Priority::High, 0.4, 0.15), Route::Collect { at: Tier::Lexical });
/// assert_eq!(route(Activation::Gated, Priority::High, 0.4, 0.15), Route::AskPolicy);
/// assert_eq!(route(Activation::Auto, Priority::Medium, 0.1, 0.15), Route::Drop { at: Tier::Lexical });
/// ```
pub fn route(activation: Activation, priority: Priority, score: f32, threshold: f32) -> Route {
    if activation == Activation::Manual {
        return Route::Drop { at: Tier::Pattern };
    }
    let strong = score >= 2.0 * threshold;
    let gated = activation == Activation::Gated;
    match priority {
        Priority::Critical if gated => Route::AskPolicy,
        Priority::Critical => Route::Collect { at: Tier::Pattern },
        Priority::High if strong && !gated => Route::Collect { at: Tier::Lexical },
        Priority::High => Route::AskPolicy,
        Priority::Medium if score >= threshold => Route::AskPolicy,
        Priority::Low if strong => Route::AskPolicy,
        Priority::Medium | Priority::Low => Route::Drop { at: Tier::Lexical },
    }
}

/// How much the topics of a workspace hold ([`Workspace::topic_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicCounts {
    /// Topic definitions.
    pub topics: u64,
    /// Gate decisions logged.
    pub decisions: u64,
    /// Turns collected (memberships).
    pub collected: u64,
    /// Proposals of gated topics (any status).
    pub proposals: u64,
}

/// A turn, by session and sequence number; written `session/seq`.
///
/// ```
/// use cairn_memory::topics::gate::TurnRef;
/// let turn: TurnRef = "s/1/7".parse()?;
/// assert_eq!((turn.session.as_str(), turn.seq), ("s/1", 7));
/// assert_eq!(turn.to_string(), "s/1/7");
/// # Ok::<(), cairn_memory::MemoryError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnRef {
    /// The session.
    pub session: String,
    /// The turn's sequence number.
    pub seq: u64,
}

impl TurnRef {
    /// A turn reference.
    pub fn new(session: &str, seq: u64) -> Self {
        TurnRef {
            session: session.to_owned(),
            seq,
        }
    }
}

impl fmt::Display for TurnRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.session, self.seq)
    }
}

impl FromStr for TurnRef {
    type Err = MemoryError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || MemoryError::Invalid {
            what: "turn reference",
            reason: format!("{s:?} is not `session/seq`"),
        };
        let (session, seq) = s.rsplit_once('/').ok_or_else(bad)?;
        validate_id("session id", session)?;
        Ok(TurnRef {
            session: session.to_owned(),
            seq: seq.parse().map_err(|_| bad())?,
        })
    }
}

/// What came of a gate decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The turn became a member of the topic.
    Collected,
    /// A proposal awaits a person (gated topics).
    Proposed,
    /// Nothing was collected.
    Dropped,
}

/// One gate decision, as logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GateRecord {
    /// The decision's id (a ULID).
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The topic's generation when it decided.
    pub topic_generation: u64,
    /// The turn.
    pub turn: TurnRef,
    /// A keyed digest of the turn's content, hex
    /// ([`Workspace::reader_hash`](crate::Workspace::reader_hash)): it tells
    /// turns apart without confirming a guess at their text (records
    /// written before it was keyed hold a plain BLAKE3; reads show the
    /// keyed one).
    pub content_hash: String,
    /// The last tier that ran.
    pub tier: Tier,
    /// Whether tier 1 matched.
    pub pattern_matched: bool,
    /// Tier 2's score.
    pub score: f32,
    /// Tier 2's threshold in force.
    pub threshold: f32,
    /// What came of it.
    pub outcome: Outcome,
    /// Why, as short codes (`critical-bypass`, `below-threshold`,
    /// `policy-collect`, `policy-fault`, the policy's own reason codes…).
    pub reasons: Vec<String>,
    /// The policy generation (`name@hash#n`) when tier 3 ran.
    pub policy_generation: Option<String>,
    /// The policy's note, if any.
    pub note: Option<String>,
    /// True when tier 3's answer came from the decision cache.
    pub cached: bool,
    /// When it was decided.
    pub decided_at: DateTime<Utc>,
    /// What tier 3's directive answered besides `collect` (absent when no
    /// directive was asked, and in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directive: Option<DirectiveAnswer>,
}

/// What a topic directive answered, as its gate record keeps it (the
/// `topic-directive` world's field values, kebab-case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DirectiveAnswer {
    /// `backfill-existing-memory`, `extract-from-selected-sources`,
    /// `watch-future-sources` or `suggest-only`.
    pub collection_mode: String,
    /// `none`, `shallow`, `standard` or `deep`.
    pub extraction_depth: String,
    /// The output targets, in the directive's order.
    pub output_targets: Vec<String>,
    /// Whether a person must review before anything becomes durable.
    pub review_required: bool,
}

/// How deeply a topic extracts from a turn it collects (the directive's
/// `extraction-depth`; what the member carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Depth {
    /// The turn reference (and its snippet) only.
    Shallow,
    /// The sentences of the turn that match the topic's patterns.
    Standard,
    /// Those sentences, and the neighbouring turns of the session as
    /// context.
    Deep,
}

/// One neighbouring turn a `deep` member carries as context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextTurn {
    /// The turn.
    pub turn: TurnRef,
    /// The start of its text, as the reader may see it.
    pub snippet: String,
}

/// What a `standard` or `deep` member carries besides its reference: made
/// when it is read, from the turn as the reader may see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Extract {
    /// The sentences of the turn that match the topic's patterns (the
    /// turn's first sentence when none does).
    pub sentences: Vec<String>,
    /// `deep` only: the turns before and after it in its session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextTurn>,
}

/// An evidence record: a turn a topic's directive named as evidence for
/// the topic (output target `evidence-record`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EvidenceRecord {
    /// The topic.
    pub topic: String,
    /// The turn.
    pub turn: TurnRef,
    /// The quoted span: the first sentence of the turn that matches the
    /// topic's patterns, as the reader may see it (made when read).
    #[serde(default)]
    pub quote: String,
    /// The gate decision that made it.
    pub gate_record: String,
    /// The topic's generation then.
    pub topic_generation: u64,
    /// The directive's policy generation.
    pub policy_generation: Option<String>,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// Where an assertion candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CandidateStatus {
    /// Awaiting a person.
    Pending,
    /// Accepted: a memory-log entry holds it.
    Accepted,
    /// Rejected.
    Rejected,
}

/// An assertion candidate: what a topic's directive proposes to assert in
/// memory from a turn (output target `assertion-candidate`); a person
/// accepts it into the memory log as a `fact` entry, or rejects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AssertionCandidate {
    /// The topic.
    pub topic: String,
    /// The turn.
    pub turn: TurnRef,
    /// The assertion: the sentences of the turn that match the topic's
    /// patterns, as the reader may see them (made when read).
    #[serde(default)]
    pub text: String,
    /// The gate decision that made it.
    pub gate_record: String,
    /// The directive's policy generation.
    pub policy_generation: Option<String>,
    /// Where it stands.
    pub status: CandidateStatus,
    /// The entry accepting it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// When it was proposed.
    pub proposed_at: DateTime<Utc>,
    /// When a person decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
}

/// How a membership came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// The live gate collected it.
    Live,
    /// A person approved a proposal.
    Approved,
    /// A requested collection (`collect`) over the existing record.
    Backfill,
    /// Text fed to the topic's webhook.
    Webhook,
}

/// A turn a topic collected, with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Membership {
    /// The topic.
    pub topic: String,
    /// The turn.
    pub turn: TurnRef,
    /// The deciding tier.
    pub tier: Tier,
    /// Tier 2's score.
    pub score: f32,
    /// The policy generation when tier 3 decided.
    pub policy_generation: Option<String>,
    /// The policy's output targets (`topic-membership`, `evidence-record`…).
    pub output_targets: Vec<String>,
    /// The gate record that explains it.
    pub gate_record: String,
    /// How it came to be.
    pub via: Via,
    /// The start of the turn's text.
    pub snippet: String,
    /// The turn's work context (absent in records written before it was
    /// kept).
    #[serde(default)]
    pub work_context: Option<String>,
    /// Tool output or text fed through a webhook: data, never instructions.
    #[serde(default)]
    pub low_trust: bool,
    /// When it was collected.
    pub collected_at: DateTime<Utc>,
    /// How deeply the topic extracts from the turn (absent in records
    /// written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extraction_depth: Option<Depth>,
    /// What was extracted (`standard` and `deep`), made when read from the
    /// turn as the reader may see it; never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<Extract>,
}

impl Membership {
    /// Whether the directive asked for this output target
    /// (`topic-membership`, `evidence-record`…).
    pub fn wants(&self, target: &str) -> bool {
        self.output_targets.iter().any(|t| t == target)
    }
}

/// Where a proposal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ProposalStatus {
    /// Awaiting a person.
    Pending,
    /// Approved: the turn is a member.
    Approved,
    /// Rejected.
    Rejected,
}

/// A turn a gated topic proposes to collect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Proposal {
    /// What would become the membership on approval.
    pub membership: Membership,
    /// Where it stands.
    pub status: ProposalStatus,
    /// When a person decided.
    pub decided_at: Option<DateTime<Utc>>,
}

/// What a gate decision writes besides its log record.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Nothing.
    None,
    /// A membership.
    Collect(Membership),
    /// A pending proposal.
    Propose(Membership),
}

/// The sentences of `text` that match a topic's patterns (keyword,
/// phrase, regex, subject; `matcher` is compiled from that topic alone),
/// in order, each at most [`SNIPPET_BYTES`] bytes; the first sentence when
/// none matches (the turn reached the gate on its whole text).
///
/// ```
/// use cairn_memory::topics::{TopicSpec, Trigger, gate::matching_sentences, matcher::TopicMatcher};
/// let spec = TopicSpec::new("billing", "Invoices").trigger(Trigger::Keyword("invoice".into()));
/// let matcher = TopicMatcher::new([&spec]);
/// let text = "Hello there. The invoice is late! Lunch at noon.";
/// assert_eq!(matching_sentences(&matcher, text), ["The invoice is late!"]);
/// ```
pub fn matching_sentences(matcher: &super::matcher::TopicMatcher, text: &str) -> Vec<String> {
    let all = crate::extract::sentences(text);
    let mut out: Vec<String> = all
        .iter()
        .filter(|s| !matcher.matches(s).is_empty())
        .map(|s| snippet(s))
        .collect();
    if out.is_empty()
        && let Some(first) = all.first()
    {
        out.push(snippet(first));
    }
    out
}

/// The start of `text`, at most [`SNIPPET_BYTES`] bytes, on a char boundary.
pub fn snippet(text: &str) -> String {
    crate::text::head_bytes(text, SNIPPET_BYTES).to_owned()
}

fn member_key(topic: &str, turn: &TurnRef) -> Vec<u8> {
    TopicKey::Member {
        topic: topic.to_owned(),
        session: turn.session.clone(),
        seq: turn.seq,
    }
    .encode()
}

/// A membership and its entry in the topic's recent list.
fn put_member(batch: &mut WriteBatch, member: &Membership, id: &str) -> Result<()> {
    let bytes = encode(member)?;
    batch.put(
        Collection::Topics,
        TopicKey::Recent {
            topic: member.topic.clone(),
            id: id.to_owned(),
        }
        .encode(),
        bytes.clone(),
    );
    batch.put(
        Collection::Topics,
        member_key(&member.topic, &member.turn),
        bytes,
    );
    Ok(())
}

/// A gate decision and what it collects, into `batch`.
fn put_gate(batch: &mut WriteBatch, record: &GateRecord, effect: &Effect) -> Result<()> {
    batch.put(
        Collection::Topics,
        TopicKey::GateLog {
            topic: record.topic.clone(),
            id: record.id.clone(),
        }
        .encode(),
        encode(record)?,
    );
    match effect {
        Effect::None => {}
        Effect::Collect(member) => {
            put_outputs(batch, member, record.topic_generation, &record.id)?;
        }
        Effect::Propose(member) => batch.put(
            Collection::Topics,
            proposal_key(&member.topic, &member.turn),
            encode(&Proposal {
                membership: member.clone(),
                status: ProposalStatus::Pending,
                decided_at: None,
            })?,
        ),
    }
    Ok(())
}

fn turn_key(family: TopicFamily, topic: &str, turn: &TurnRef) -> Vec<u8> {
    let (topic, session, seq) = (topic.to_owned(), turn.session.clone(), turn.seq);
    match family {
        TopicFamily::Evidence => TopicKey::Evidence {
            topic,
            session,
            seq,
        },
        TopicFamily::Candidate => TopicKey::Candidate {
            topic,
            session,
            seq,
        },
        TopicFamily::Frame => TopicKey::Frame {
            topic,
            session,
            seq,
        },
        TopicFamily::Proposal => TopicKey::Proposal {
            topic,
            session,
            seq,
        },
        _ => TopicKey::Member {
            topic,
            session,
            seq,
        },
    }
    .encode()
}

/// What a collected turn produces, by the directive's output targets:
/// the membership (`topic-membership`), an evidence record
/// (`evidence-record`), a pending assertion candidate
/// (`assertion-candidate`), a frame update (`issue-frame-update`).
/// `topic_generation` is the topic's when its gate decided.
fn put_outputs(
    batch: &mut WriteBatch,
    member: &Membership,
    topic_generation: u64,
    id: &str,
) -> Result<()> {
    if member.wants("topic-membership") {
        put_member(batch, member, id)?;
    }
    if member.wants("evidence-record") {
        batch.put(
            Collection::Topics,
            turn_key(TopicFamily::Evidence, &member.topic, &member.turn),
            encode(&EvidenceRecord {
                topic: member.topic.clone(),
                turn: member.turn.clone(),
                quote: String::new(),
                gate_record: member.gate_record.clone(),
                topic_generation,
                policy_generation: member.policy_generation.clone(),
                recorded_at: member.collected_at,
            })?,
        );
    }
    if member.wants("assertion-candidate") {
        batch.put(
            Collection::Topics,
            turn_key(TopicFamily::Candidate, &member.topic, &member.turn),
            encode(&AssertionCandidate {
                topic: member.topic.clone(),
                turn: member.turn.clone(),
                text: String::new(),
                gate_record: member.gate_record.clone(),
                policy_generation: member.policy_generation.clone(),
                status: CandidateStatus::Pending,
                entry: None,
                proposed_at: member.collected_at,
                decided_at: None,
            })?,
        );
    }
    if member.wants("issue-frame-update") {
        batch.put(
            Collection::Topics,
            turn_key(TopicFamily::Frame, &member.topic, &member.turn),
            encode(member)?,
        );
    }
    Ok(())
}

fn proposal_key(topic: &str, turn: &TurnRef) -> Vec<u8> {
    TopicKey::Proposal {
        topic: topic.to_owned(),
        session: turn.session.clone(),
        seq: turn.seq,
    }
    .encode()
}

// The gate's durable records on a workspace.
impl Workspace {
    /// Writes a gate decision and what it collects in one atomic batch: a
    /// pending proposal, or what the membership's output targets ask for
    /// (the membership for `topic-membership`, an evidence record, a
    /// pending assertion candidate, a frame update). Not synced here: the gate's
    /// records derive from turns already durable, and one fsync per
    /// decision cut ingest throughput 5× with 1,000 topics (docs/BENCHMARKS.md).
    /// The store's next group commit (any ingest's, or
    /// `Memory::sync`, which `Cairn::flush` calls) makes them durable; a crash before it may lose
    /// the last decisions, never a turn.
    pub fn record_gate(&self, record: &GateRecord, effect: &Effect) -> Result<()> {
        let mut batch = WriteBatch::default();
        put_gate(&mut batch, record, effect)?;
        self.apply(batch)
    }

    /// [`Workspace::record_gate`] for many decisions (those of every topic
    /// that judged one turn) in **one** atomic batch: all or none are
    /// written.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use cairn_memory::*;
    /// # let dir = tempfile::tempdir()?;
    /// # let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
    /// let ws = memory.workspace("acme")?;
    /// ws.record_gates(&[])?; // nothing to write, nothing written
    /// assert_eq!(ws.topic_counts()?.decisions, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_gates(&self, decisions: &[(GateRecord, Effect)]) -> Result<()> {
        if decisions.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        for (record, effect) in decisions {
            put_gate(&mut batch, record, effect)?;
        }
        self.apply(batch)
    }

    /// A topic's gate log, newest first, optionally for one turn only.
    pub fn gate_log(
        &self,
        topic: &str,
        turn: Option<&TurnRef>,
        limit: usize,
    ) -> Result<Vec<GateRecord>> {
        self.topic(topic)?;
        let prefix = TopicFamily::GateLog.topic_prefix(topic);
        let mut out = Vec::new();
        for (key, value) in self
            .store
            .scan_prefix(Collection::Topics, &prefix)?
            .into_iter()
            .rev()
        {
            let record: GateRecord = decode("gate record", &key, &value)?;
            if turn.is_none_or(|t| *t == record.turn) {
                out.push(record);
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// What a topic collected, newest first.
    pub fn memberships(&self, topic: &str, limit: usize) -> Result<Vec<Membership>> {
        self.topic(topic)?;
        let mut out = self
            .store
            .scan_prefix(Collection::Topics, &TopicFamily::Member.topic_prefix(topic))?
            .into_iter()
            .map(|(k, v)| decode::<Membership>("membership", &k, &v))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by_key(|m| std::cmp::Reverse(m.collected_at));
        out.truncate(limit);
        Ok(out)
    }

    /// What a topic collected most recently, newest first: a bounded
    /// reverse scan, whatever the topic's size (what assembly asks).
    pub fn recent_memberships(&self, topic: &str, limit: usize) -> Result<Vec<Membership>> {
        self.store
            .scan_prefix_rev(
                Collection::Topics,
                &TopicFamily::Recent.topic_prefix(topic),
                limit,
            )?
            .into_iter()
            .map(|(k, v)| decode::<Membership>("membership", &k, &v))
            .collect()
    }

    /// Counts over every topic of the workspace: definitions, gate
    /// decisions, memberships and pending-or-decided proposals (key scans,
    /// nothing decoded).
    pub fn topic_counts(&self) -> Result<TopicCounts> {
        let count = |family: TopicFamily| -> Result<u64> {
            Ok(self
                .store
                .scan_prefix(Collection::Topics, family.prefix())?
                .len() as u64)
        };
        Ok(TopicCounts {
            topics: count(TopicFamily::Definition)?,
            decisions: count(TopicFamily::GateLog)?,
            collected: count(TopicFamily::Member)?,
            proposals: count(TopicFamily::Proposal)?,
        })
    }

    /// When the topic's schedule last ran (`None`: never).
    pub fn schedule_mark(&self, topic: &str) -> Result<Option<DateTime<Utc>>> {
        let key = TopicKey::Schedule {
            topic: topic.to_owned(),
        }
        .encode();
        match self.store.get(Collection::Topics, &key)? {
            Some(raw) => Ok(Some(decode("schedule mark", &key, &raw)?)),
            None => Ok(None),
        }
    }

    /// Records that the topic's schedule ran at `at` (durable).
    pub fn set_schedule_mark(&self, topic: &str, at: DateTime<Utc>) -> Result<()> {
        self.topic(topic)?;
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::Topics,
            TopicKey::Schedule {
                topic: topic.to_owned(),
            }
            .encode(),
            encode(&at)?,
        );
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }

    /// Whether a turn is a member of a topic.
    pub fn is_member(&self, topic: &str, turn: &TurnRef) -> Result<bool> {
        Ok(self
            .store
            .get(Collection::Topics, &member_key(topic, turn))?
            .is_some())
    }

    /// A topic's proposals, oldest first; only pending ones unless `all`.
    pub fn proposals(&self, topic: &str, all: bool) -> Result<Vec<Proposal>> {
        self.topic(topic)?;
        Ok(self
            .store
            .scan_prefix(
                Collection::Topics,
                &TopicFamily::Proposal.topic_prefix(topic),
            )?
            .into_iter()
            .map(|(k, v)| decode::<Proposal>("proposal", &k, &v))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|p| all || p.status == ProposalStatus::Pending)
            .collect())
    }

    /// One gate record of a topic, by id.
    pub fn gate_record(&self, topic: &str, id: &str) -> Result<Option<GateRecord>> {
        let key = TopicKey::GateLog {
            topic: topic.to_owned(),
            id: id.to_owned(),
        }
        .encode();
        match self.store.get(Collection::Topics, &key)? {
            Some(raw) => Ok(Some(decode("gate record", &key, &raw)?)),
            None => Ok(None),
        }
    }

    /// Whether a topic already produced something from a turn: a
    /// membership, an evidence record, an assertion candidate or a frame
    /// update (a collected turn is not judged again).
    pub fn is_collected(&self, topic: &str, turn: &TurnRef) -> Result<bool> {
        for family in [
            TopicFamily::Member,
            TopicFamily::Evidence,
            TopicFamily::Candidate,
            TopicFamily::Frame,
        ] {
            if self
                .store
                .get(Collection::Topics, &turn_key(family, topic, turn))?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A topic's evidence records, newest first.
    pub fn evidence(&self, topic: &str, limit: usize) -> Result<Vec<EvidenceRecord>> {
        self.topic(topic)?;
        let mut out = self
            .store
            .scan_prefix(
                Collection::Topics,
                &TopicFamily::Evidence.topic_prefix(topic),
            )?
            .into_iter()
            .map(|(k, v)| decode::<EvidenceRecord>("evidence record", &k, &v))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by_key(|e| std::cmp::Reverse(e.recorded_at));
        out.truncate(limit);
        Ok(out)
    }

    /// A topic's assertion candidates, oldest first; only pending ones
    /// unless `all`.
    pub fn candidates(&self, topic: &str, all: bool) -> Result<Vec<AssertionCandidate>> {
        self.topic(topic)?;
        Ok(self
            .store
            .scan_prefix(
                Collection::Topics,
                &TopicFamily::Candidate.topic_prefix(topic),
            )?
            .into_iter()
            .map(|(k, v)| decode::<AssertionCandidate>("assertion candidate", &k, &v))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|c| all || c.status == CandidateStatus::Pending)
            .collect())
    }

    /// A topic's pending assertion candidate for a turn;
    /// `candidate_not_found` when there is none.
    pub fn pending_candidate(&self, topic: &str, turn: &TurnRef) -> Result<AssertionCandidate> {
        self.topic(topic)?;
        let key = turn_key(TopicFamily::Candidate, topic, turn);
        let missing = || MemoryError::CandidateNotFound {
            topic: topic.to_owned(),
            turn: turn.to_string(),
        };
        let raw = self
            .store
            .get(Collection::Topics, &key)?
            .ok_or_else(missing)?;
        let candidate: AssertionCandidate = decode("assertion candidate", &key, &raw)?;
        if candidate.status != CandidateStatus::Pending {
            return Err(missing());
        }
        Ok(candidate)
    }

    /// Settles a pending assertion candidate: accepted with the entry that
    /// now holds it (`Some`), or rejected (`None`). Durable.
    pub fn settle_candidate(
        &self,
        topic: &str,
        turn: &TurnRef,
        entry: Option<String>,
    ) -> Result<AssertionCandidate> {
        let _guard = self.lock_entries();
        let mut candidate = self.pending_candidate(topic, turn)?;
        candidate.status = if entry.is_some() {
            CandidateStatus::Accepted
        } else {
            CandidateStatus::Rejected
        };
        candidate.entry = entry;
        candidate.decided_at = Some(self.now());
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::Topics,
            turn_key(TopicFamily::Candidate, topic, turn),
            encode(&candidate)?,
        );
        self.apply(batch)?;
        self.shared.store.sync()?;
        Ok(candidate)
    }

    /// The collected turns that feed a topic's frame (its tier-2 profile),
    /// newest first: those whose directive asked for `issue-frame-update`,
    /// and members recorded before the directive's depth was kept.
    pub fn frame_members(&self, topic: &str, limit: usize) -> Result<Vec<Membership>> {
        self.topic(topic)?;
        let mut out = self
            .store
            .scan_prefix(Collection::Topics, &TopicFamily::Frame.topic_prefix(topic))?
            .into_iter()
            .map(|(k, v)| decode::<Membership>("frame update", &k, &v))
            .collect::<Result<Vec<_>>>()?;
        let framed: std::collections::HashSet<TurnRef> =
            out.iter().map(|f| f.turn.clone()).collect();
        for (k, v) in self
            .store
            .scan_prefix(Collection::Topics, &TopicFamily::Member.topic_prefix(topic))?
        {
            let member: Membership = decode("membership", &k, &v)?;
            if member.extraction_depth.is_none() && !framed.contains(&member.turn) {
                out.push(member);
            }
        }
        out.sort_by_key(|m| std::cmp::Reverse(m.collected_at));
        out.truncate(limit);
        Ok(out)
    }

    /// Approves or rejects a pending proposal. Approval writes what the
    /// directive asked for (see [`Workspace::record_gate`]) in the same
    /// batch.
    pub fn decide_proposal(&self, topic: &str, turn: &TurnRef, approve: bool) -> Result<Proposal> {
        let _guard = self.lock_entries();
        self.topic(topic)?;
        let key = proposal_key(topic, turn);
        let missing = || MemoryError::ProposalNotFound {
            topic: topic.to_owned(),
            turn: turn.to_string(),
        };
        let raw = self
            .store
            .get(Collection::Topics, &key)?
            .ok_or_else(missing)?;
        let mut proposal: Proposal = decode("proposal", &key, &raw)?;
        if proposal.status != ProposalStatus::Pending {
            return Err(missing());
        }
        let now = self.now();
        proposal.status = if approve {
            ProposalStatus::Approved
        } else {
            ProposalStatus::Rejected
        };
        proposal.decided_at = Some(now);
        let mut batch = WriteBatch::default();
        batch.put(Collection::Topics, key, encode(&proposal)?);
        if approve {
            let mut member = proposal.membership.clone();
            member.via = Via::Approved;
            member.collected_at = now;
            let topic_generation = match self.gate_record(topic, &member.gate_record)? {
                Some(r) => r.topic_generation,
                None => self.topic(topic)?.generation,
            };
            put_outputs(
                &mut batch,
                &member,
                topic_generation,
                &ulid::Ulid::new().to_string(),
            )?;
        }
        self.apply(batch)?;
        self.shared.store.sync()?;
        Ok(proposal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the bypass table, auto activation, t = 0.15.
    #[test]
    fn bypass_table() {
        use Priority::*;
        let t = 0.15;
        let cases = [
            (Critical, 0.0, Route::Collect { at: Tier::Pattern }),
            (High, 0.3, Route::Collect { at: Tier::Lexical }),
            (High, 0.29, Route::AskPolicy),
            (Medium, 0.15, Route::AskPolicy),
            (Medium, 0.14, Route::Drop { at: Tier::Lexical }),
            (Low, 0.3, Route::AskPolicy),
            (Low, 0.29, Route::Drop { at: Tier::Lexical }),
        ];
        for (priority, score, want) in cases {
            assert_eq!(
                route(Activation::Auto, priority, score, t),
                want,
                "{priority:?} {score}"
            );
        }
        assert_eq!(route(Activation::Gated, Critical, 0.0, t), Route::AskPolicy);
        assert_eq!(
            route(Activation::Manual, Critical, 1.0, t),
            Route::Drop { at: Tier::Pattern }
        );
    }
}
