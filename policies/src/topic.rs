//! The `topic-directive` world: its input (a topic and a turn or entry),
//! its decision (the `TopicCollectionDirective` of docs/DESIGN.md,
//! *Topic directives*), the checks the host applies, and its fail-safe.
//!
//! **Fail-safe:** do not collect (`collect` false, `suggest-only`, depth
//! `none`, no outputs, review required). The input stays in the raw record
//! or the memory log, so a backfill can collect it once the plugin is fixed.

use serde::{Deserialize, Serialize};
use wasmtime::Store;
use wasmtime::component::InstancePre;

use crate::bindings::topic as b;
use crate::decisions::DecisionOutput;
use crate::digest::{Digester, Feed, InputsDigest};
use crate::fault::{self, Fault};
use crate::store::StoreState;
use crate::vocab::{
    EntryKind, ExtractionDepth, ReasonCode, TurnRole, TurnView, canary_text, mirror_enum,
};
use crate::world::{TopicDirective, World, WorldKind};

use b::cairn::policy::topic as wt;
use wt::{
    Activation as WitActivation, CollectionMode as WitCollectionMode,
    OutputTarget as WitOutputTarget, SourceClass as WitSourceClass,
};

mirror_enum! {
    /// When a topic collects.
    pub enum Activation <=> WitActivation {
        /// Whenever its gate says so.
        Auto = "auto",
        /// Only what passes every gate tier, the plugin included.
        Gated = "gated",
        /// Only when a person asks.
        Manual = "manual",
    }
}

mirror_enum! {
    /// The class of source an input came from.
    pub enum SourceClass <=> WitSourceClass {
        /// A conversation turn.
        Chat = "chat",
        /// A tool's output.
        ToolOutput = "tool-output",
        /// A document.
        Document = "document",
        /// A web page.
        WebPage = "web-page",
        /// An email.
        Email = "email",
        /// A task's output.
        TaskOutput = "task-output",
        /// A note.
        Note = "note",
        /// An entry of the memory log.
        MemoryEntry = "memory-entry",
    }
}

mirror_enum! {
    /// How a topic collects.
    pub enum CollectionMode <=> WitCollectionMode {
        /// From what memory already holds.
        BackfillExistingMemory = "backfill-existing-memory",
        /// From selected sources.
        ExtractFromSelectedSources = "extract-from-selected-sources",
        /// From future inputs.
        WatchFutureSources = "watch-future-sources",
        /// Propose members only.
        SuggestOnly = "suggest-only",
    }
}

mirror_enum! {
    /// What collection produces.
    pub enum OutputTarget <=> WitOutputTarget {
        /// An assertion candidate.
        AssertionCandidate = "assertion-candidate",
        /// An evidence record.
        EvidenceRecord = "evidence-record",
        /// A topic membership edge.
        TopicMembership = "topic-membership",
        /// An issue-frame update.
        IssueFrameUpdate = "issue-frame-update",
        /// A null result.
        NullResult = "null-result",
    }
}

/// Which sources a topic draws from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
#[non_exhaustive]
pub enum SourceScope {
    /// Every eligible source.
    AllEligibleSources,
    /// A library, by id.
    SelectedLibrary(String),
    /// Selected documents, by id.
    SelectedDocuments(Vec<String>),
    /// Future inputs of these classes.
    FutureStream(Vec<SourceClass>),
}

/// One of a topic's compiled match criteria.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
#[non_exhaustive]
pub enum MatchCriterion {
    /// A single word, matched case-insensitively.
    Keyword(String),
    /// A phrase, matched case-insensitively.
    Phrase(String),
    /// A subject slug.
    Subject(String),
    /// Turns of this role only.
    Role(TurnRole),
}

/// A user-defined topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDefinition {
    /// The topic's id.
    pub topic_id: String,
    /// Its name.
    pub name: String,
    /// What it wants collected, in the user's words.
    pub extraction_goal: String,
    /// Where it draws from.
    pub source_scope: SourceScope,
    /// What matches it.
    pub match_criteria: Vec<MatchCriterion>,
    /// When it collects.
    pub activation: Activation,
    /// 0 (lowest) to 255.
    pub priority: u8,
}

/// What the host knows of one memory-log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryView {
    /// The entry's id.
    pub entry_id: String,
    /// Its kind.
    pub kind: EntryKind,
    /// Its text.
    pub text: String,
    /// The subject slugs it is filed under.
    pub subjects: Vec<String>,
    /// Its work context, if any.
    pub work_context_id: Option<String>,
}

/// What a topic is asked about: a live turn or an existing entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum TopicSubject {
    /// A live turn.
    Turn(TurnView),
    /// An entry of the memory log.
    Entry(EntryView),
}

/// What the host's cheaper gate tiers already found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GateSignals {
    /// The pattern tier matched one of the topic's triggers.
    pub pattern_matched: bool,
    /// The lexical tier's similarity, in [0, 1].
    pub lexical_similarity: f32,
}

/// The directive's input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopicInput {
    /// The topic.
    pub topic: TopicDefinition,
    /// The turn or entry.
    pub subject: TopicSubject,
    /// Its source class.
    pub source_class: SourceClass,
    /// What the cheaper tiers found.
    pub signals: GateSignals,
}

/// A topic directive's answer, checked by the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TopicDirectiveDecision {
    /// Whether the topic collects the input.
    pub collect: bool,
    /// How.
    pub collection_mode: CollectionMode,
    /// How deeply; `None` exactly when nothing is collected.
    pub extraction_depth: ExtractionDepth,
    /// Into what; empty exactly when nothing is collected.
    pub output_targets: Vec<OutputTarget>,
    /// Whether a person must confirm before anything becomes durable.
    pub review_required_before_durable_promotion: bool,
    /// Why.
    pub reason_codes: Vec<ReasonCode>,
    /// The plugin's free-text note, if any.
    pub note: Option<String>,
}

impl Feed for SourceScope {
    fn feed(&self, h: &mut Digester) {
        match self {
            SourceScope::AllEligibleSources => 0u8.feed(h),
            SourceScope::SelectedLibrary(id) => {
                1u8.feed(h);
                id.feed(h);
            }
            SourceScope::SelectedDocuments(ids) => {
                2u8.feed(h);
                ids.feed(h);
            }
            SourceScope::FutureStream(classes) => {
                3u8.feed(h);
                classes.feed(h);
            }
        }
    }
}

impl Feed for MatchCriterion {
    fn feed(&self, h: &mut Digester) {
        match self {
            MatchCriterion::Keyword(s) => {
                0u8.feed(h);
                s.feed(h);
            }
            MatchCriterion::Phrase(s) => {
                1u8.feed(h);
                s.feed(h);
            }
            MatchCriterion::Subject(s) => {
                2u8.feed(h);
                s.feed(h);
            }
            MatchCriterion::Role(r) => {
                3u8.feed(h);
                r.feed(h);
            }
        }
    }
}

impl Feed for TopicInput {
    fn feed(&self, h: &mut Digester) {
        let t = &self.topic;
        t.topic_id.feed(h);
        t.name.feed(h);
        t.extraction_goal.feed(h);
        t.source_scope.feed(h);
        t.match_criteria.feed(h);
        t.activation.feed(h);
        t.priority.feed(h);
        match &self.subject {
            TopicSubject::Turn(turn) => {
                0u8.feed(h);
                turn.feed(h);
            }
            TopicSubject::Entry(e) => {
                1u8.feed(h);
                e.entry_id.feed(h);
                e.kind.feed(h);
                e.text.feed(h);
                e.subjects.feed(h);
                e.work_context_id.feed(h);
            }
        }
        self.source_class.feed(h);
        self.signals.pattern_matched.feed(h);
        self.signals.lexical_similarity.feed(h);
    }
}

fn to_wit(input: &TopicInput) -> b::TopicInput {
    let t = &input.topic;
    b::TopicInput {
        topic: wt::TopicDefinition {
            topic_id: t.topic_id.clone(),
            name: t.name.clone(),
            extraction_goal: t.extraction_goal.clone(),
            source_scope: match &t.source_scope {
                SourceScope::AllEligibleSources => wt::SourceScope::AllEligibleSources,
                SourceScope::SelectedLibrary(id) => wt::SourceScope::SelectedLibrary(id.clone()),
                SourceScope::SelectedDocuments(ids) => {
                    wt::SourceScope::SelectedDocuments(ids.clone())
                }
                SourceScope::FutureStream(classes) => {
                    wt::SourceScope::FutureStream(classes.iter().map(|&c| c.into()).collect())
                }
            },
            match_criteria: t
                .match_criteria
                .iter()
                .map(|c| match c {
                    MatchCriterion::Keyword(s) => wt::MatchCriterion::Keyword(s.clone()),
                    MatchCriterion::Phrase(s) => wt::MatchCriterion::Phrase(s.clone()),
                    MatchCriterion::Subject(s) => wt::MatchCriterion::Subject(s.clone()),
                    MatchCriterion::Role(r) => wt::MatchCriterion::Role((*r).into()),
                })
                .collect(),
            activation: t.activation.into(),
            priority: t.priority,
        },
        subject: match &input.subject {
            TopicSubject::Turn(turn) => wt::TopicSubject::Turn(turn.to_wit()),
            TopicSubject::Entry(e) => wt::TopicSubject::Entry(wt::EntryView {
                entry_id: e.entry_id.clone(),
                kind: e.kind.into(),
                text: e.text.clone(),
                subjects: e.subjects.clone(),
                work_context_id: e.work_context_id.clone(),
            }),
        },
        source_class: input.source_class.into(),
        signals: wt::GateSignals {
            pattern_matched: input.signals.pattern_matched,
            lexical_similarity: input.signals.lexical_similarity,
        },
    }
}

fn accept(
    raw: b::TopicDirectiveDecision,
    max_output_bytes: usize,
) -> Result<TopicDirectiveDecision, Fault> {
    let size = fault::RECORD_OVERHEAD
        + raw.output_targets.len()
        + raw.reason_codes.len()
        + raw.note.as_ref().map_or(0, String::len);
    fault::check_size(size, max_output_bytes)?;
    let extraction_depth = ExtractionDepth::from(raw.extraction_depth);
    if raw.collect {
        if extraction_depth == ExtractionDepth::None || raw.output_targets.is_empty() {
            return Err(fault::invalid(format!(
                "collects with depth {extraction_depth} into {} output targets",
                raw.output_targets.len()
            )));
        }
    } else if extraction_depth != ExtractionDepth::None || !raw.output_targets.is_empty() {
        return Err(fault::invalid(format!(
            "does not collect, yet has depth {extraction_depth} and {} output targets",
            raw.output_targets.len()
        )));
    }
    Ok(TopicDirectiveDecision {
        collect: raw.collect,
        collection_mode: raw.collection_mode.into(),
        extraction_depth,
        output_targets: raw
            .output_targets
            .into_iter()
            .map(OutputTarget::from)
            .collect(),
        review_required_before_durable_promotion: raw.review_required_before_durable_promotion,
        reason_codes: raw.reason_codes.into_iter().map(ReasonCode::from).collect(),
        note: raw.note,
    })
}

impl World for TopicDirective {
    type Input = TopicInput;
    type Decision = TopicDirectiveDecision;
    const KIND: WorldKind = WorldKind::TopicDirective;
    const EXPORT: &'static str = "direct";

    type Pre = b::TopicDirectivePre<StoreState>;
    type Instance = b::TopicDirective;
    type Raw = b::TopicDirectiveDecision;

    fn pre(pre: InstancePre<StoreState>) -> wasmtime::Result<Self::Pre> {
        b::TopicDirectivePre::new(pre)
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Self::Instance> {
        pre.instantiate(store)
    }

    fn call(
        instance: &Self::Instance,
        store: &mut Store<StoreState>,
        input: &Self::Input,
    ) -> wasmtime::Result<Self::Raw> {
        instance.call_direct(store, &to_wit(input))
    }

    fn accept(raw: Self::Raw, max_output_bytes: usize) -> Result<Self::Decision, Fault> {
        accept(raw, max_output_bytes)
    }

    fn fail_safe(_input: &Self::Input, cause: ReasonCode) -> Self::Decision {
        TopicDirectiveDecision {
            collect: false,
            collection_mode: CollectionMode::SuggestOnly,
            extraction_depth: ExtractionDepth::None,
            output_targets: Vec::new(),
            review_required_before_durable_promotion: true,
            reason_codes: vec![ReasonCode::FailSafe, cause],
            note: None,
        }
    }

    fn canary() -> Self::Input {
        TopicInput {
            topic: TopicDefinition {
                topic_id: "canary".into(),
                name: "Canary".into(),
                extraction_goal: "Anything about the canary".into(),
                source_scope: SourceScope::AllEligibleSources,
                match_criteria: vec![MatchCriterion::Keyword("canary".into())],
                activation: Activation::Auto,
                priority: 100,
            },
            subject: TopicSubject::Turn(TurnView::new("canary", 1, TurnRole::User, &canary_text())),
            source_class: SourceClass::Chat,
            signals: GateSignals::default(),
        }
    }

    fn digest(input: &Self::Input) -> InputsDigest {
        InputsDigest::of(input)
    }

    fn session_of(input: &Self::Input) -> Option<&str> {
        match &input.subject {
            TopicSubject::Turn(turn) => Some(&turn.session_id),
            TopicSubject::Entry(_) => None,
        }
    }

    fn output(decision: &Self::Decision) -> DecisionOutput {
        DecisionOutput::Topic(decision.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKind;
    use b::cairn::policy::types as wty;

    fn raw() -> b::TopicDirectiveDecision {
        b::TopicDirectiveDecision {
            collect: true,
            collection_mode: WitCollectionMode::WatchFutureSources,
            extraction_depth: wty::ExtractionDepth::Standard,
            output_targets: vec![WitOutputTarget::TopicMembership],
            review_required_before_durable_promotion: false,
            reason_codes: vec![wty::ReasonCode::CriterionMatch],
            note: None,
        }
    }

    #[test]
    fn output_rules() {
        let check = |r| accept(r, 1024).map_err(|f| f.kind);
        assert!(check(raw()).is_ok());
        assert_eq!(
            check(b::TopicDirectiveDecision {
                output_targets: vec![],
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::TopicDirectiveDecision {
                collect: false,
                ..raw()
            }),
            Err(FaultKind::InvalidOutput)
        );
        assert_eq!(
            check(b::TopicDirectiveDecision {
                output_targets: vec![WitOutputTarget::TopicMembership; 5000],
                ..raw()
            }),
            Err(FaultKind::OutputTooLarge)
        );
    }
}
