//! cairn's default topic collection directive, as a wasm component.
//!
//! Decides whether a topic collects an input (a live turn or an existing
//! memory-log entry), and into what (see docs/DESIGN.md,
//! *Topic directives*):
//!
//! 1. A `manual` topic never collects on its own.
//! 2. An input whose source class lies outside the topic's source scope is
//!    not collected.
//! 3. Evidence that the input belongs to the topic: the host's pattern tier
//!    matched, one of the topic's keyword / phrase / subject criteria
//!    matches, or the lexical tier scored it at least 0.35. A weaker lexical
//!    score (0.20 to 0.35) only suggests, with review.
//! 4. The depth follows the strength of the evidence and the topic's
//!    priority; `gated` topics and merely suggested inputs always require
//!    review before anything becomes durable.
//! 5. The mode: a stored input (an entry, or a turn a requested collection
//!    asks about as `memory-entry`) is collected as
//!    `backfill-existing-memory`, a new one as `watch-future-sources`
//!    (`extract-from-selected-sources` for a library or document scope).
//! 6. The outputs: the membership and an update of the topic's frame.

wit_bindgen::generate!({
    world: "topic-directive",
    path: "../../wit",
});

use cairn::policy::topic::{
    Activation, CollectionMode, MatchCriterion, OutputTarget, SourceClass, SourceScope,
    TopicSubject,
};
use cairn::policy::types::{ExtractionDepth, ReasonCode, TurnRole};

struct DefaultDirective;

/// Lexical similarity at or above which an input is collected.
const LEXICAL_COLLECT: f32 = 0.35;
/// Lexical similarity at or above which an input is suggested for review.
const LEXICAL_SUGGEST: f32 = 0.20;
/// Priority at or above which a topic bypasses the lexical tier.
const BYPASS_PRIORITY: u8 = 200;

impl Guest for DefaultDirective {
    fn direct(input: TopicInput) -> TopicDirectiveDecision {
        let topic = &input.topic;
        let mut reasons = Vec::new();

        if topic.activation == Activation::Manual {
            return skip(vec![ReasonCode::ManualActivation]);
        }
        if !in_scope(&topic.source_scope, input.source_class, &input.subject) {
            return skip(vec![ReasonCode::OutOfScope]);
        }

        let (text, subjects, role, is_entry) = match &input.subject {
            TopicSubject::Turn(t) => (t.text.as_str(), &t.entity_mentions, Some(t.role), false),
            TopicSubject::Entry(e) => (e.text.as_str(), &e.subjects, None, true),
        };
        let lower = text.to_lowercase();

        let mut strength = 0u8; // 0 none, 1 suggest, 2 collect, 3 strong
        if input.signals.pattern_matched {
            reasons.push(ReasonCode::PatternMatch);
            strength = strength.max(3);
        }
        let mut role_ok = true;
        for criterion in &topic.match_criteria {
            match criterion {
                MatchCriterion::Keyword(k) => {
                    if has_word(&lower, &k.to_lowercase()) {
                        push_once(&mut reasons, ReasonCode::CriterionMatch);
                        strength = strength.max(2);
                    }
                }
                MatchCriterion::Phrase(p) => {
                    if !p.is_empty() && lower.contains(&p.to_lowercase()) {
                        push_once(&mut reasons, ReasonCode::CriterionMatch);
                        strength = strength.max(3);
                    }
                }
                MatchCriterion::Subject(s) => {
                    if subjects.iter().any(|x| x == s) {
                        push_once(&mut reasons, ReasonCode::SubjectMatch);
                        strength = strength.max(3);
                    }
                }
                MatchCriterion::Role(r) => {
                    if let Some(role) = role {
                        role_ok &= role == *r;
                    }
                }
            }
        }
        if !role_ok {
            return skip(vec![ReasonCode::NoMatch]);
        }
        let lexical = input.signals.lexical_similarity;
        if lexical >= LEXICAL_COLLECT {
            reasons.push(ReasonCode::LexicalMatch);
            strength = strength.max(2);
        } else if lexical >= LEXICAL_SUGGEST {
            reasons.push(ReasonCode::WeakLexicalMatch);
            strength = strength.max(1);
        }
        if strength < 2 && topic.priority >= BYPASS_PRIORITY && input.signals.pattern_matched {
            reasons.push(ReasonCode::PriorityBypass);
            strength = 2;
        }

        if strength == 0 {
            reasons.push(ReasonCode::NoMatch);
            return skip(reasons);
        }
        let suggest = strength == 1;
        let depth = match (strength, topic.priority) {
            (1, _) => ExtractionDepth::Shallow,
            (2, p) if p < 128 => ExtractionDepth::Shallow,
            (2, _) => ExtractionDepth::Standard,
            (_, p) if p >= BYPASS_PRIORITY => ExtractionDepth::Deep,
            _ => ExtractionDepth::Standard,
        };
        // The membership, and the input feeds the topic's frame (what its
        // lexical tier compares new inputs with). No evidence record or
        // assertion candidate: those are separate outputs a person reviews,
        // which a topic's own directive asks for.
        let output_targets = vec![
            OutputTarget::TopicMembership,
            OutputTarget::IssueFrameUpdate,
        ];
        TopicDirectiveDecision {
            collect: true,
            collection_mode: if suggest {
                CollectionMode::SuggestOnly
            } else if is_entry || input.source_class == SourceClass::MemoryEntry {
                CollectionMode::BackfillExistingMemory
            } else {
                match topic.source_scope {
                    SourceScope::FutureStream(_) | SourceScope::AllEligibleSources => {
                        CollectionMode::WatchFutureSources
                    }
                    _ => CollectionMode::ExtractFromSelectedSources,
                }
            },
            extraction_depth: depth,
            output_targets,
            review_required_before_durable_promotion: suggest
                || topic.activation == Activation::Gated,
            reason_codes: reasons,
            note: None,
        }
    }
}

fn skip(reason_codes: Vec<ReasonCode>) -> TopicDirectiveDecision {
    TopicDirectiveDecision {
        collect: false,
        collection_mode: CollectionMode::SuggestOnly,
        extraction_depth: ExtractionDepth::None,
        output_targets: Vec::new(),
        review_required_before_durable_promotion: true,
        reason_codes,
        note: None,
    }
}

fn push_once(reasons: &mut Vec<ReasonCode>, code: ReasonCode) {
    if !reasons.contains(&code) {
        reasons.push(code);
    }
}

fn in_scope(scope: &SourceScope, class: SourceClass, subject: &TopicSubject) -> bool {
    match scope {
        SourceScope::AllEligibleSources => true,
        // A requested collection over the record asks about a stored turn
        // as `memory-entry`: in scope when the turn's own class is.
        SourceScope::FutureStream(classes) => {
            classes.contains(&class)
                || match (class, subject) {
                    (SourceClass::MemoryEntry, TopicSubject::Turn(t)) => {
                        classes.contains(&if t.role == TurnRole::Tool {
                            SourceClass::ToolOutput
                        } else {
                            SourceClass::Chat
                        })
                    }
                    _ => false,
                }
        }
        // Library and document membership is the host's to check; an entry
        // from the memory log is in scope for a backfill.
        SourceScope::SelectedLibrary(_) | SourceScope::SelectedDocuments(_) => {
            matches!(subject, TopicSubject::Entry(_))
                || matches!(class, SourceClass::Document | SourceClass::Note)
        }
    }
}

/// Whether `word` occurs in `text` as a whole word (both lowercased).
fn has_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    text.match_indices(word).any(|(i, _)| {
        boundary(text[..i].chars().next_back()) && boundary(text[i + word.len()..].chars().next())
    })
}

export!(DefaultDirective);
