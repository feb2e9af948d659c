//! Shared fixtures: hosts, plugin bytes, inputs.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use cairn_policies::*;

/// One compile cache directory for the whole test binary, so each component
/// is compiled once per run rather than once per test.
pub(crate) fn shared_cache_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
}

/// A host with a fresh in-memory decision log, caching compiled components
/// in the shared directory.
pub(crate) fn host(config: HostConfig) -> (PolicyHost, Arc<MemorySink>) {
    let sink = Arc::new(MemorySink::default());
    let host =
        PolicyHost::new(config.cache_dir(shared_cache_dir(), [3; 32]), sink.clone()).expect("host");
    (host, sink)
}

/// The hostile guests, each with the fault it must be contained as.
pub(crate) const HOSTILE: &[(&str, &str, FaultKind)] = &[
    (
        "hostile-trap",
        env!("CAIRN_PLUGIN_HOSTILE_TRAP"),
        FaultKind::Trap,
    ),
    (
        "hostile-infinite-loop",
        env!("CAIRN_PLUGIN_HOSTILE_INFINITE_LOOP"),
        FaultKind::OutOfFuel,
    ),
    (
        "hostile-memory-bomb",
        env!("CAIRN_PLUGIN_HOSTILE_MEMORY_BOMB"),
        FaultKind::MemoryLimit,
    ),
    (
        "hostile-stack-overflow",
        env!("CAIRN_PLUGIN_HOSTILE_STACK_OVERFLOW"),
        FaultKind::StackOverflow,
    ),
    (
        "hostile-invalid-output",
        env!("CAIRN_PLUGIN_HOSTILE_INVALID_OUTPUT"),
        FaultKind::InvalidOutput,
    ),
    (
        "hostile-oversized-output",
        env!("CAIRN_PLUGIN_HOSTILE_OVERSIZED_OUTPUT"),
        FaultKind::OutputTooLarge,
    ),
];

pub(crate) fn wasm(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// A significance input for a user turn in a main session.
pub(crate) fn turn(text: &str) -> SignificanceInput {
    let mut turn = TurnView::new("s-test", 1, TurnRole::User, text);
    turn.work_context_id = Some("wc-test".into());
    SignificanceInput {
        turn,
        context: GateContext::default(),
    }
}

/// A topic about sled, asked about a chat turn.
pub(crate) fn topic_input(text: &str) -> TopicInput {
    TopicInput {
        topic: TopicDefinition {
            topic_id: "t-storage".into(),
            name: "Storage engine".into(),
            extraction_goal: "Decisions and facts about the storage engine".into(),
            source_scope: SourceScope::FutureStream(vec![SourceClass::Chat]),
            match_criteria: vec![
                MatchCriterion::Keyword("sled".into()),
                MatchCriterion::Phrase("write-ahead log".into()),
            ],
            activation: Activation::Auto,
            priority: 100,
        },
        subject: TopicSubject::Turn(turn(text).turn),
        source_class: SourceClass::Chat,
        signals: GateSignals::default(),
    }
}

/// A request to render an entry to a model.
pub(crate) fn policy_request(id: &str, destination: Destination) -> PolicyRequest {
    let mut request = PolicyRequest::new(
        ContentReference {
            kind: ObjectKind::Entry,
            id: id.into(),
            work_context_id: Some("wc-test".into()),
            session_id: Some("s-test".into()),
            sensitivity: Sensitivity::Normal,
            low_trust: false,
        },
        Action::RenderInline,
        Some(destination),
    );
    request.requesting_work_context_id = Some("wc-test".into());
    request.principal_ref = Some(PrincipalRef {
        kind: PrincipalKind::Agent,
        id: "agent-1".into(),
    });
    request
}

/// The generation number at the end of a generation id (`name@hash#n`).
pub(crate) fn generation_number(id: &PolicyGenerationId) -> u64 {
    id.as_str()
        .rsplit('#')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("generation id {id} has no number"))
}
