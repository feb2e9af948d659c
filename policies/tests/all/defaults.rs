//! The default plugins make sensible decisions (and the example policy does
//! what its README says), run through the real host.

use cairn_policies::*;

use crate::support::{host, policy_request, topic_input, turn};

fn set() -> PolicySet {
    let (host, _) = host(HostConfig::default());
    PolicySet::with_defaults(&host).unwrap()
}

fn research() -> GateContext {
    GateContext {
        activity_type: ActivityType::Research,
        has_active_work_context: true,
        ..GateContext::default()
    }
}

#[test]
fn significance_gate() {
    let set = set();
    // (text, context, expected collection decision, a reason it must give)
    let cases: &[(&str, GateContext, CollectionDecision, ReasonCode)] = &[
        (
            "ok thanks",
            GateContext::default(),
            CollectionDecision::DoNotCollect,
            ReasonCode::Acknowledgement,
        ),
        (
            "We decided to go with sled for the raw record.",
            GateContext::default(),
            CollectionDecision::ExtractCandidate,
            ReasonCode::DecisionLanguage,
        ),
        (
            "We decided on sled. I need to write the handoff notes, and I prefer short ones.",
            GateContext::default(),
            CollectionDecision::DeepExtract,
            ReasonCode::HandoffLanguage,
        ),
        // The activity-aware threshold (see docs/DESIGN.md,
        // *Significance gate and capture depth*): a plain research note
        // (score 0.30 + 0.05 for an entity) stays below the base threshold
        // 0.5 ...
        (
            "Look up how the Ninth Circuit reads scienter in securities cases",
            GateContext::default(),
            CollectionDecision::ObserveOnly,
            ReasonCode::BelowThreshold,
        ),
        // ... and passes the research threshold 0.5 × 0.6 = 0.3.
        (
            "Look up how the Ninth Circuit reads scienter in securities cases",
            research(),
            CollectionDecision::ExtractCandidate,
            ReasonCode::ResearchThreshold,
        ),
        // Research without an active work context keeps the base threshold.
        (
            "Look up how the Ninth Circuit reads scienter in securities cases",
            GateContext {
                has_active_work_context: false,
                ..research()
            },
            CollectionDecision::ObserveOnly,
            ReasonCode::BelowThreshold,
        ),
    ];
    for (text, context, expected, reason) in cases {
        let mut input = turn(text);
        input.turn.entity_mentions = vec!["ninth-circuit".into()];
        input.context = context.clone();
        let d = set.significance.decide(&input).unwrap();
        assert!(d.outcome.is_plugin());
        assert_eq!(
            d.decision.collection_decision, *expected,
            "{text:?} in {context:?}: {:?}",
            d.decision
        );
        assert!(
            d.decision.reason_codes.contains(reason),
            "{text:?}: {:?}",
            d.decision.reason_codes
        );
    }

    let research_note = {
        let mut input = turn("Look up how the Ninth Circuit reads scienter in securities cases");
        input.turn.entity_mentions = vec!["ninth-circuit".into()];
        input.context = research();
        set.significance.decide(&input).unwrap().decision
    };
    assert!(
        (research_note.threshold - 0.3).abs() < 1e-6,
        "{}",
        research_note.threshold
    );
    assert!(
        (research_note.score - 0.35).abs() < 1e-6,
        "{}",
        research_note.score
    );
}

#[test]
fn topic_directive() {
    let set = set();
    let d = set
        .topic
        .decide(&topic_input("We moved the job queue to sled today."))
        .unwrap()
        .decision;
    assert!(d.collect);
    assert_eq!(d.collection_mode, CollectionMode::WatchFutureSources);
    assert_eq!(
        d.output_targets,
        [
            OutputTarget::TopicMembership,
            OutputTarget::IssueFrameUpdate
        ]
    );
    assert!(d.reason_codes.contains(&ReasonCode::CriterionMatch));

    // A stored turn a requested collection asks about (as `memory-entry`)
    // is collected as a backfill, in a chat-only scope too.
    let mut stored = topic_input("We moved the job queue to sled today.");
    stored.source_class = SourceClass::MemoryEntry;
    let d = set.topic.decide(&stored).unwrap().decision;
    assert!(d.collect);
    assert_eq!(d.collection_mode, CollectionMode::BackfillExistingMemory);

    let d = set
        .topic
        .decide(&topic_input("Lunch at noon?"))
        .unwrap()
        .decision;
    assert!(!d.collect);
    assert_eq!(d.reason_codes, [ReasonCode::NoMatch]);

    // A weak lexical signal only suggests, with review.
    let mut weak = topic_input("Maybe the storage layer again");
    weak.signals.lexical_similarity = 0.25;
    let d = set.topic.decide(&weak).unwrap().decision;
    assert!(d.collect);
    assert_eq!(d.collection_mode, CollectionMode::SuggestOnly);
    assert!(d.review_required_before_durable_promotion);

    // A manual topic never collects on its own; tool output is out of a
    // chat-only scope.
    let mut manual = topic_input("sled sled sled");
    manual.topic.activation = Activation::Manual;
    assert_eq!(
        set.topic.decide(&manual).unwrap().decision.reason_codes,
        [ReasonCode::ManualActivation]
    );
    let mut tool = topic_input("sled output");
    tool.source_class = SourceClass::ToolOutput;
    assert_eq!(
        set.topic.decide(&tool).unwrap().decision.reason_codes,
        [ReasonCode::OutOfScope]
    );
}

#[test]
fn memory_policy() {
    let set = set();
    let decide = |request: &PolicyRequest| set.memory.decide(request).unwrap().decision;

    // Local use of a normal entry: in full, locally.
    let d = decide(&policy_request("e-1", Destination::LocalModel));
    assert_eq!(
        (d.content_fidelity, d.locality),
        (ContentFidelity::Full, Locality::LocalOnly)
    );

    // A secret never goes to a cloud model.
    let mut secret = policy_request("e-2", Destination::CloudModel);
    secret.object_ref.sensitivity = Sensitivity::Secret;
    let d = decide(&secret);
    assert!(!d.allows_content());
    assert!(d.reason_codes.contains(&ReasonCode::SensitivitySecret));

    // Personal data goes out redacted, with the obligation to redact.
    let mut personal = policy_request("e-3", Destination::CloudModel);
    personal.object_ref.sensitivity = Sensitivity::Personal;
    let d = decide(&personal);
    assert_eq!(d.content_fidelity, ContentFidelity::Redacted);
    assert!(
        d.obligations
            .contains(&PolicyObligation::RedactPersonalData)
    );

    // Another work context without lineage: a reference only.
    let mut foreign = policy_request("e-4", Destination::LocalModel);
    foreign.object_ref.work_context_id = Some("wc-other".into());
    let d = decide(&foreign);
    assert_eq!(d.content_fidelity, ContentFidelity::ReferenceOnly);
    assert!(d.reason_codes.contains(&ReasonCode::LineageDenied));
    foreign.lineage_permitted = true;
    let d = decide(&foreign);
    assert_eq!(d.content_fidelity, ContentFidelity::Full);
    assert!(d.obligations.contains(&PolicyObligation::AttributeSource));

    // The session's agents write durably (the host acts on it: a
    // candidate would wait for the user); an unknown principal may not.
    let mut capture = policy_request("e-5", Destination::LocalModel);
    capture.action = Action::Capture;
    assert_eq!(
        decide(&capture).mutation_authority,
        MutationAuthority::DurableAllowed
    );
    capture.principal_ref = None;
    assert_eq!(decide(&capture).mutation_authority, MutationAuthority::None);
}

#[test]
fn example_custom_keeps_everything_local() {
    let (host, _) = host(HostConfig::default());
    let slot = host
        .slot(
            &host
                .prepare::<MemoryPolicy>("example-custom", defaults::EXAMPLE_CUSTOM.wasm)
                .unwrap(),
        )
        .unwrap();
    let d = slot
        .decide(&policy_request("e-1", Destination::CloudModel))
        .unwrap()
        .decision;
    assert_eq!(d.locality, Locality::Blocked);
    assert_eq!(
        d.note.as_deref(),
        Some("local-only policy: nothing leaves this machine")
    );
    let d = slot
        .decide(&policy_request("e-1", Destination::LocalModel))
        .unwrap()
        .decision;
    assert_eq!(d.content_fidelity, ContentFidelity::Full);
}

#[test]
fn the_default_gate_uses_a_small_part_of_its_fuel_on_a_1kb_turn() {
    let (host, sink) = host(HostConfig::default());
    let set = PolicySet::with_defaults(&host).unwrap();
    let text = "We decided to keep the raw record forever. ".repeat(24);
    assert!(text.len() >= 1000);
    set.significance.decide(&turn(&text)).unwrap();
    let fuel = sink.records().pop().unwrap().fuel_consumed.unwrap();
    assert!(
        fuel < Limits::default().fuel / 20,
        "{fuel} fuel for a 1 KB turn"
    );
}
