//! Topics: user-defined watchers over the conversation stream (docs/DESIGN.md,
//! *Topic directives*). This module holds their definitions, validation and
//! the durable topic store; [`matcher`] is the shared tier-1 pattern matcher,
//! [`lexical`] the tier-2 similarity, [`gate`] the bypass table, the gate
//! log, memberships and proposals.
//!
//! A topic is named by a slug, unique in its workspace. Every change to a
//! definition (update, pause, resume) bumps its `generation`, which keys the
//! gate's decision cache: an answer given for one definition is never reused
//! for another. Each write is one atomic batch, validated whole before
//! anything is stored; a refused definition names the offending field.
//!
//! ```
//! use std::sync::Arc;
//! use cairn_memory::{Memory, MemoryConfig, SystemClock};
//! use cairn_memory::topics::{TopicSpec, Trigger};
//!
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::open_sled(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))?;
//! let ws = memory.workspace("acme")?;
//! let spec = TopicSpec::new("billing", "Invoices, refunds and payment failures")
//!     .trigger(Trigger::Keyword("invoice".into()));
//! let topic = ws.create_topic(&spec)?;
//! assert_eq!(topic.generation, 1);
//! assert_eq!(ws.topics()?.len(), 1);
//! let err = ws.create_topic(&spec).unwrap_err();
//! assert_eq!(err.code(), "topic_exists");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod gate;
pub mod lexical;
pub mod matcher;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::ids::{validate_id, validate_slug};
use crate::memory::{Workspace, decode, encode};
use crate::store::{Collection, TopicFamily, TopicKey, WriteBatch};

/// The most triggers one topic may have.
pub const MAX_TRIGGERS: usize = 64;
/// The most subscriptions one topic may have.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// The longest pattern (keyword, phrase, regex) in bytes.
pub const MAX_PATTERN_BYTES: usize = 512;
/// The longest description in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;

/// What makes a topic look at an input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum Trigger {
    /// A single word, matched case-insensitively on word boundaries.
    Keyword(String),
    /// A phrase, matched case-insensitively on word boundaries.
    Phrase(String),
    /// A regular expression (`regex` crate syntax), matched case-insensitively.
    Regex(String),
    /// A subject slug: matches the slug or its words (`auth-migration`,
    /// `auth migration`).
    Subject(String),
    /// A cron schedule (five fields) on which the topic is asked to collect.
    Schedule(String),
    /// Text posted to the topic's inbound webhook feeds the gate.
    Webhook,
}

impl Trigger {
    /// True for the triggers the tier-1 matcher compiles (keyword, phrase,
    /// regex, subject).
    pub fn is_pattern(&self) -> bool {
        matches!(
            self,
            Trigger::Keyword(_) | Trigger::Phrase(_) | Trigger::Regex(_) | Trigger::Subject(_)
        )
    }
}

/// Which turns a topic watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// User and tool turns (the default).
    #[default]
    Input,
    /// Assistant turns: output-triggered steering.
    Output,
    /// Every turn.
    Both,
}

impl Scope {
    /// Whether a turn of `role` is in scope.
    pub fn covers(self, role: crate::Role) -> bool {
        use crate::Role;
        match self {
            Scope::Both => true,
            Scope::Input => matches!(role, Role::User | Role::Tool),
            Scope::Output => matches!(role, Role::Assistant),
        }
    }
}

/// When a topic collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// Whenever the gate says so.
    Auto,
    /// Only what passes every tier, the policy included, and then as a
    /// proposal a person approves (the default).
    #[default]
    Gated,
    /// Only on request (`collect`).
    Manual,
}

/// How much evidence a topic needs, and which tiers it may skip (the bypass
/// table, [`gate::route`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Needs a strong lexical score before the policy is asked.
    Low,
    /// Needs the lexical threshold (the default).
    #[default]
    Medium,
    /// A strong lexical score skips the policy.
    High,
    /// A pattern match alone collects.
    Critical,
}

impl Priority {
    /// The priority as the `topic-directive` world's 0–255 scale.
    pub fn as_u8(self) -> u8 {
        match self {
            Priority::Low => 64,
            Priority::Medium => 128,
            Priority::High => 192,
            Priority::Critical => 255,
        }
    }
}

/// The class of source a turn came from, as a topic selects its sources
/// (the `topic-directive` world's `source-class`, restricted to the classes
/// a turn can have).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A user, assistant or system turn.
    Chat,
    /// A tool's output (a `tool` turn, text fed to a webhook).
    ToolOutput,
}

impl Source {
    /// The class of a turn of `role`.
    ///
    /// ```
    /// use cairn_memory::Role;
    /// use cairn_memory::topics::Source;
    /// assert_eq!(Source::of(Role::Tool), Source::ToolOutput);
    /// assert_eq!(Source::of(Role::User), Source::Chat);
    /// ```
    pub fn of(role: crate::Role) -> Source {
        if role == crate::Role::Tool {
            Source::ToolOutput
        } else {
            Source::Chat
        }
    }
}

/// What a topic listens to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case", tag = "kind", content = "id")]
pub enum Subscription {
    /// Every session of the workspace.
    Workspace,
    /// The sessions of one work context (which must have a session).
    WorkContext(String),
    /// One session (which must exist).
    Session(String),
}

/// A topic's definition as given by a person: what `create` and `update`
/// take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopicSpec {
    /// The topic's name: a lowercase kebab-case slug, unique in the workspace.
    pub name: String,
    /// What the topic wants collected (its extraction goal), in the user's
    /// words; part of its tier-2 profile.
    pub description: String,
    /// What makes it look at an input; at least one.
    pub triggers: Vec<Trigger>,
    /// Which turns it watches.
    #[serde(default)]
    pub scope: Scope,
    /// When it collects.
    #[serde(default)]
    pub activation: Activation,
    /// Which tiers it may skip.
    #[serde(default)]
    pub priority: Priority,
    /// What it listens to; empty means the whole workspace.
    #[serde(default)]
    pub subscriptions: Vec<Subscription>,
    /// Its tier-2 threshold in [0, 1]; the runtime's default (0.15) when
    /// unset.
    #[serde(default)]
    pub similarity_threshold: Option<f32>,
    /// A paused topic watches nothing.
    #[serde(default)]
    pub paused: bool,
    /// The source classes it draws from (its source selection); empty
    /// means every class. The live gate and a requested collection skip a
    /// turn of another class; a directive that answers
    /// `extract-from-selected-sources` collects only from these, and
    /// nothing when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<Source>,
}

impl TopicSpec {
    /// A spec with a name and description, no triggers, and the defaults
    /// (scope input, activation gated, priority medium, the whole workspace).
    pub fn new(name: &str, description: &str) -> Self {
        TopicSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            triggers: Vec::new(),
            scope: Scope::default(),
            activation: Activation::default(),
            priority: Priority::default(),
            subscriptions: Vec::new(),
            similarity_threshold: None,
            paused: false,
            sources: Vec::new(),
        }
    }

    /// Adds a trigger.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.triggers.push(trigger);
        self
    }

    /// Sets the activation.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the scope.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Adds a subscription.
    pub fn subscribe(mut self, subscription: Subscription) -> Self {
        self.subscriptions.push(subscription);
        self
    }

    /// Adds a source class to its selection.
    pub fn source(mut self, source: Source) -> Self {
        if !self.sources.contains(&source) {
            self.sources.push(source);
        }
        self
    }

    /// Whether the topic draws from turns of `role` (its source selection
    /// is empty or names the turn's class).
    pub fn draws_from(&self, role: crate::Role) -> bool {
        self.sources.is_empty() || self.sources.contains(&Source::of(role))
    }

    /// Whether the topic listens to a session of `work_context`.
    pub fn listens_to(&self, session: &str, work_context: &str) -> bool {
        self.subscriptions.is_empty()
            || self.subscriptions.iter().any(|s| match s {
                Subscription::Workspace => true,
                Subscription::WorkContext(wc) => wc == work_context,
                Subscription::Session(id) => id == session,
            })
    }
}

/// A stored topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Topic {
    /// The definition.
    #[serde(flatten)]
    pub spec: TopicSpec,
    /// Bumped by every change of the definition (from 1).
    pub generation: u64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

fn refuse(field: impl Into<String>, reason: impl Into<String>) -> MemoryError {
    MemoryError::InvalidTopic {
        field: field.into(),
        reason: reason.into(),
    }
}

fn check_pattern(field: &str, text: &str) -> Result<()> {
    if text.trim().is_empty() {
        return Err(refuse(field, "must not be empty"));
    }
    if text.len() > MAX_PATTERN_BYTES {
        return Err(refuse(
            field,
            format!("is {} bytes, the limit is {MAX_PATTERN_BYTES}", text.len()),
        ));
    }
    Ok(())
}

/// Checks a cron schedule's shape: five fields of digits, `*`, `/`, `,`, `-`.
fn check_schedule(field: &str, cron: &str) -> Result<()> {
    parse_schedule(cron)
        .map(|_| ())
        .map_err(|reason| refuse(field, reason))
}

/// A five-field cron schedule (minute, hour, day of month, month, day of
/// week; UTC), parsed by `croner`.
fn parse_schedule(cron: &str) -> std::result::Result<croner::Cron, String> {
    if cron.split_whitespace().count() != 5 {
        return Err(format!("{cron:?} is not a five-field cron schedule"));
    }
    cron.parse::<croner::Cron>()
        .map_err(|e| format!("{cron:?} is not a valid cron schedule: {e}"))
}

/// When a schedule fires next strictly after `after` (UTC); `None` for a
/// schedule that does not parse or never fires again.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use cairn_memory::topics::next_fire;
/// let monday_9 = Utc.with_ymd_and_hms(2026, 11, 23, 9, 0, 0).unwrap();
/// let next = next_fire("0 9 * * *", monday_9).unwrap();
/// assert_eq!(next, Utc.with_ymd_and_hms(2026, 11, 24, 9, 0, 0).unwrap());
/// ```
pub fn next_fire(cron: &str, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    parse_schedule(cron)
        .ok()?
        .find_next_occurrence(&after, false)
        .ok()
}

/// Validates a spec's own fields (not the references to the store); the
/// error names the offending field.
///
/// ```
/// use cairn_memory::topics::{TopicSpec, Trigger, validate_spec};
/// let spec = TopicSpec::new("billing", "Invoices").trigger(Trigger::Regex("inv(".into()));
/// let err = validate_spec(&spec).unwrap_err();
/// assert!(err.to_string().contains("triggers[0].regex"));
/// ```
pub fn validate_spec(spec: &TopicSpec) -> Result<()> {
    validate_slug(&spec.name).map_err(|e| refuse("name", e.to_string()))?;
    if spec.description.trim().is_empty() {
        return Err(refuse("description", "must not be empty"));
    }
    if spec.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(refuse(
            "description",
            format!(
                "is {} bytes, the limit is {MAX_DESCRIPTION_BYTES}",
                spec.description.len()
            ),
        ));
    }
    if spec.triggers.is_empty() {
        return Err(refuse("triggers", "a topic needs at least one trigger"));
    }
    if spec.triggers.len() > MAX_TRIGGERS {
        return Err(refuse(
            "triggers",
            format!(
                "{} triggers, the limit is {MAX_TRIGGERS}",
                spec.triggers.len()
            ),
        ));
    }
    for (i, trigger) in spec.triggers.iter().enumerate() {
        match trigger {
            Trigger::Keyword(k) => {
                let field = format!("triggers[{i}].keyword");
                check_pattern(&field, k)?;
                if k.trim().contains(char::is_whitespace) {
                    return Err(refuse(field, "a keyword is one word (use a phrase)"));
                }
            }
            Trigger::Phrase(p) => check_pattern(&format!("triggers[{i}].phrase"), p)?,
            Trigger::Regex(r) => {
                let field = format!("triggers[{i}].regex");
                check_pattern(&field, r)?;
                regex::RegexBuilder::new(r)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| refuse(field, e.to_string()))?;
            }
            Trigger::Subject(s) => validate_slug(s)
                .map(|_| ())
                .map_err(|e| refuse(format!("triggers[{i}].subject"), e.to_string()))?,
            Trigger::Schedule(c) => check_schedule(&format!("triggers[{i}].schedule"), c)?,
            Trigger::Webhook => {}
        }
    }
    if spec.subscriptions.len() > MAX_SUBSCRIPTIONS {
        return Err(refuse(
            "subscriptions",
            format!(
                "{} subscriptions, the limit is {MAX_SUBSCRIPTIONS}",
                spec.subscriptions.len()
            ),
        ));
    }
    if let Some(t) = spec.similarity_threshold
        && !(0.0..=1.0).contains(&t)
    {
        return Err(refuse(
            "similarity_threshold",
            format!("{t} is not in [0, 1]"),
        ));
    }
    Ok(())
}

// The topic store on a workspace: create, update, list, show, pause,
// resume, delete.
impl Workspace {
    /// Checks a spec whole, references to sessions and work contexts
    /// included.
    fn check_topic(&self, spec: &TopicSpec) -> Result<()> {
        validate_spec(spec)?;
        for (i, sub) in spec.subscriptions.iter().enumerate() {
            let field = format!("subscriptions[{i}]");
            match sub {
                Subscription::Workspace => {}
                Subscription::Session(id) => {
                    validate_id("session id", id).map_err(|e| refuse(&field, e.to_string()))?;
                    if self.session(id).is_err() {
                        return Err(refuse(field, format!("session {id:?} does not exist")));
                    }
                }
                Subscription::WorkContext(wc) => {
                    validate_id("work context", wc).map_err(|e| refuse(&field, e.to_string()))?;
                    if self.sessions(Some(wc))?.is_empty() {
                        return Err(refuse(field, format!("work context {wc:?} has no session")));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks `spec` (new, or replacing the topic of its name) against the
    /// workspace's other topics: the caps on topics and on scheduled
    /// topics (`[memory.limits]`), and that every regex trigger of the
    /// workspace still compiles into the one set tier 1 scans a turn with
    /// (a set too large to build would switch every regex trigger off).
    /// The caller holds the entries lock.
    fn check_with_others(&self, spec: &TopicSpec) -> Result<()> {
        let limits = &self.shared.config.limits;
        let others: Vec<TopicSpec> = self
            .topics()?
            .into_iter()
            .filter(|t| t.spec.name != spec.name)
            .map(|t| t.spec)
            .collect();
        let cap = |what, setting, limit| MemoryError::CapReached {
            workspace: self.id.clone(),
            what,
            setting,
            limit,
        };
        if others.len() >= limits.max_topics {
            return Err(cap("topics", "max_topics", limits.max_topics));
        }
        let scheduled = |t: &TopicSpec| {
            t.triggers
                .iter()
                .any(|tr| matches!(tr, Trigger::Schedule(_)))
        };
        if scheduled(spec)
            && others.iter().filter(|t| scheduled(t)).count() >= limits.max_scheduled_topics
        {
            return Err(cap(
                "scheduled topics",
                "max_scheduled_topics",
                limits.max_scheduled_topics,
            ));
        }
        if spec.triggers.iter().any(|t| matches!(t, Trigger::Regex(_))) {
            crate::topics::matcher::TopicMatcher::try_new(others.iter().chain([spec]))
                .map_err(|reason| refuse("triggers", reason))?;
        }
        Ok(())
    }

    fn load_topic(&self, name: &str) -> Result<Option<Topic>> {
        let key = TopicKey::Definition {
            topic: name.to_owned(),
        }
        .encode();
        match self.store.get(Collection::Topics, &key)? {
            Some(raw) => Ok(Some(decode("topic", &key, &raw)?)),
            None => Ok(None),
        }
    }

    fn put_topic(&self, topic: &Topic) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::Topics,
            TopicKey::Definition {
                topic: topic.spec.name.clone(),
            }
            .encode(),
            encode(topic)?,
        );
        self.apply(batch)?;
        Ok(self.shared.store.sync()?)
    }

    /// Creates a topic; `topic_exists` when the name is taken,
    /// `invalid_topic` (naming the field) for a bad definition.
    pub fn create_topic(&self, spec: &TopicSpec) -> Result<Topic> {
        self.check_topic(spec)?;
        let _guard = self.lock_entries();
        if self.load_topic(&spec.name)?.is_some() {
            return Err(MemoryError::TopicExists {
                name: spec.name.clone(),
            });
        }
        self.check_with_others(spec)?;
        let now = self.now();
        let topic = Topic {
            spec: spec.clone(),
            generation: 1,
            created_at: now,
            updated_at: now,
        };
        self.put_topic(&topic)?;
        Ok(topic)
    }

    /// Replaces a topic's definition (its name stays); bumps its generation.
    pub fn update_topic(&self, name: &str, spec: &TopicSpec) -> Result<Topic> {
        if spec.name != name {
            return Err(refuse("name", "a topic cannot be renamed"));
        }
        self.check_topic(spec)?;
        let _guard = self.lock_entries();
        let old = self.topic(name)?;
        self.check_with_others(spec)?;
        let topic = Topic {
            spec: spec.clone(),
            generation: old.generation + 1,
            created_at: old.created_at,
            updated_at: self.now(),
        };
        self.put_topic(&topic)?;
        Ok(topic)
    }

    /// Pauses or resumes a topic; bumps its generation when it changes.
    pub fn set_topic_paused(&self, name: &str, paused: bool) -> Result<Topic> {
        let _guard = self.lock_entries();
        let mut topic = self.topic(name)?;
        if topic.spec.paused != paused {
            topic.spec.paused = paused;
            topic.generation += 1;
            topic.updated_at = self.now();
            self.put_topic(&topic)?;
        }
        Ok(topic)
    }

    /// One topic.
    pub fn topic(&self, name: &str) -> Result<Topic> {
        validate_slug(name)?;
        self.load_topic(name)?
            .ok_or_else(|| MemoryError::TopicNotFound {
                name: name.to_owned(),
            })
    }

    /// Every topic of the workspace, by name.
    pub fn topics(&self) -> Result<Vec<Topic>> {
        self.store
            .scan_prefix(Collection::Topics, TopicFamily::Definition.prefix())?
            .into_iter()
            .map(|(k, v)| decode("topic", &k, &v))
            .collect()
    }

    /// Deletes a topic with its memberships, proposals and gate log, in one
    /// atomic batch. The turns it collected stay in the record.
    pub fn delete_topic(&self, name: &str) -> Result<Topic> {
        let _guard = self.lock_entries();
        let topic = self.topic(name)?;
        let mut batch = WriteBatch::default();
        batch.delete(
            Collection::Topics,
            TopicKey::Definition {
                topic: name.to_owned(),
            }
            .encode(),
        );
        for family in [
            TopicFamily::Member,
            TopicFamily::Proposal,
            TopicFamily::GateLog,
            TopicFamily::Recent,
            TopicFamily::Schedule,
            TopicFamily::Evidence,
            TopicFamily::Candidate,
            TopicFamily::Frame,
        ] {
            for (key, _) in self
                .store
                .scan_prefix(Collection::Topics, &family.topic_prefix(name))?
            {
                batch.delete(Collection::Topics, key);
            }
        }
        self.apply(batch)?;
        self.shared.store.sync()?;
        Ok(topic)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::gate::{Effect, GateRecord, Membership, Outcome, Tier, TurnRef, Via};
    use super::*;
    use crate::{MemoryConfig, Role, SystemClock, TurnInput};

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let memory =
            crate::testing::memory(dir.path(), MemoryConfig::default(), Arc::new(SystemClock))
                .unwrap();
        let ws = memory.workspace("acme").unwrap();
        (dir, ws)
    }

    fn billing() -> TopicSpec {
        TopicSpec::new("billing", "Invoices and refunds")
            .trigger(Trigger::Keyword("invoice".into()))
    }

    /// Each bad definition is refused naming its field, and nothing is written.
    #[test]
    fn bad_definitions_name_the_field_and_write_nothing() {
        let (_dir, ws) = workspace();
        let cases: Vec<(TopicSpec, &str)> = vec![
            (
                billing().trigger(Trigger::Regex("(unclosed".into())),
                "triggers[1].regex",
            ),
            (TopicSpec::new("billing", "Invoices"), "triggers"),
            (
                billing().subscribe(Subscription::Session("ghost".into())),
                "subscriptions[0]",
            ),
            (
                billing().subscribe(Subscription::WorkContext("nowhere".into())),
                "subscriptions[0]",
            ),
            (
                TopicSpec {
                    name: "Bad Name".into(),
                    ..billing()
                },
                "name",
            ),
            (
                billing().trigger(Trigger::Schedule("daily".into())),
                "triggers[1].schedule",
            ),
            (
                billing().trigger(Trigger::Keyword("two words".into())),
                "triggers[1].keyword",
            ),
        ];
        for (spec, field) in cases {
            let err = ws.create_topic(&spec).unwrap_err();
            assert_eq!(err.code(), "invalid_topic", "{err}");
            assert!(
                matches!(&err, MemoryError::InvalidTopic { field: f, .. } if f == field),
                "{err}"
            );
        }
        assert!(ws.topics().unwrap().is_empty());
        ws.create_topic(&billing()).unwrap();
        let dup = ws.create_topic(&billing()).unwrap_err();
        assert_eq!(dup.code(), "topic_exists");
        assert_eq!(ws.topics().unwrap().len(), 1);
    }

    #[test]
    fn crud_bumps_generations_and_delete_takes_everything() {
        let (_dir, ws) = workspace();
        ws.append_turn(&TurnInput::new("s1", Role::User, "the invoice").in_context("fin"))
            .unwrap();
        let spec = billing().subscribe(Subscription::WorkContext("fin".into()));
        assert_eq!(ws.create_topic(&spec).unwrap().generation, 1);
        let updated = ws
            .update_topic("billing", &spec.clone().priority(Priority::High))
            .unwrap();
        assert_eq!(updated.generation, 2);
        assert!(ws.set_topic_paused("billing", true).unwrap().spec.paused);
        assert_eq!(ws.topic("billing").unwrap().generation, 3);
        let turn = TurnRef::new("s1", 0);
        let member = Membership {
            topic: "billing".into(),
            turn: turn.clone(),
            tier: Tier::Pattern,
            score: 0.5,
            policy_generation: None,
            output_targets: [
                "topic-membership",
                "evidence-record",
                "assertion-candidate",
                "issue-frame-update",
            ]
            .map(String::from)
            .to_vec(),
            gate_record: "01".into(),
            via: Via::Live,
            snippet: "the invoice".into(),
            work_context: None,
            low_trust: false,
            collected_at: ws.now(),
            extraction_depth: None,
            extract: None,
        };
        let record = GateRecord {
            id: "01".into(),
            topic: "billing".into(),
            topic_generation: 3,
            turn: turn.clone(),
            content_hash: String::new(),
            tier: Tier::Policy,
            pattern_matched: true,
            score: 0.5,
            threshold: 0.15,
            outcome: Outcome::Proposed,
            reasons: vec![],
            policy_generation: Some("topic-default@x#1".into()),
            note: None,
            cached: false,
            decided_at: ws.now(),
            directive: None,
        };
        ws.record_gate(&record, &Effect::Propose(member)).unwrap();
        assert_eq!(ws.proposals("billing", false).unwrap().len(), 1);
        assert!(!ws.is_member("billing", &turn).unwrap());
        assert!(!ws.is_collected("billing", &turn).unwrap());
        assert!(ws.recent_memberships("billing", 5).unwrap().is_empty());
        ws.decide_proposal("billing", &turn, true).unwrap();
        assert!(ws.is_member("billing", &turn).unwrap());
        assert_eq!(ws.recent_memberships("billing", 5).unwrap()[0].turn, turn);
        // Approval wrote every output the directive asked for.
        let evidence = ws.evidence("billing", 10).unwrap();
        assert_eq!(evidence.len(), 1);
        assert_eq!(evidence[0].topic_generation, 3);
        assert_eq!(ws.candidates("billing", false).unwrap().len(), 1);
        assert_eq!(ws.frame_members("billing", 10).unwrap().len(), 1);
        ws.settle_candidate("billing", &turn, None).unwrap();
        assert!(ws.candidates("billing", false).unwrap().is_empty());
        assert_eq!(
            ws.pending_candidate("billing", &turn).unwrap_err().code(),
            "candidate_not_found"
        );
        assert_eq!(
            ws.decide_proposal("billing", &turn, false)
                .unwrap_err()
                .code(),
            "proposal_not_found"
        );
        assert_eq!(ws.gate_log("billing", Some(&turn), 10).unwrap().len(), 1);
        ws.delete_topic("billing").unwrap();
        assert_eq!(ws.topic("billing").unwrap_err().code(), "topic_not_found");
        ws.create_topic(&billing()).unwrap();
        assert!(ws.memberships("billing", 10).unwrap().is_empty());
        assert!(ws.recent_memberships("billing", 10).unwrap().is_empty());
        assert!(ws.gate_log("billing", None, 10).unwrap().is_empty());
        assert!(ws.evidence("billing", 10).unwrap().is_empty());
        assert!(ws.candidates("billing", true).unwrap().is_empty());
        assert!(ws.frame_members("billing", 10).unwrap().is_empty());
    }
}
