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
        Effect::Collect(member) => put_member(batch, member, &record.id)?,
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
    /// Writes a gate decision and what it collects (a membership or a
    /// pending proposal) in one atomic batch. Not synced here: the gate's
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

    /// Approves or rejects a pending proposal. Approval writes the
    /// membership in the same batch.
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
            put_member(&mut batch, &member, &ulid::Ulid::new().to_string())?;
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
