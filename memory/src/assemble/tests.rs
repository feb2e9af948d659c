//! Assembly tests on real sled, the real tokenizer and (for retrieval) a
//! real tantivy index; time is a `ManualClock`. The tier scenarios, the
//! tail and budget rules (docs/DESIGN.md, *Context assembly*), the properties.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;

use super::*;
use crate::search::{IndexRetriever, SearchDoc, SearchIndex};
use crate::{
    EntryInput, EntryKind, ManualClock, Memory, MemoryConfig, Role, SubjectKind, TurnInput,
    Workspace,
};

struct Fx {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    memory: Memory,
}

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap());
        let memory =
            crate::testing::memory(dir.path(), MemoryConfig::default(), Arc::new(clock.clone()))
                .unwrap();
        Fx {
            _dir: dir,
            clock,
            memory,
        }
    }

    fn ws(&self) -> Workspace {
        self.memory.workspace("acme").unwrap()
    }

    fn now(&self) -> DateTime<Utc> {
        use crate::Clock;
        self.clock.now()
    }
}

fn entry(kind: EntryKind, text: &str, wc: &str, session: &str, at: DateTime<Utc>) -> EntryInput {
    let mut e = EntryInput::new(kind, text)
        .in_context(wc)
        .from_turns(session, 0, 0);
    e.timestamp = Some(at);
    e
}

/// Assembles and checks what must hold for every block.
fn check(ws: &Workspace, request: &AssembleRequest) -> AssembledContext {
    let block = ws.assemble(request, &NoRetrieval, &TrustAll).unwrap();
    assert_block(ws, &block);
    block
}

fn assert_block(ws: &Workspace, block: &AssembledContext) {
    assert!(
        block.tokens <= block.budget,
        "{} > {}",
        block.tokens,
        block.budget
    );
    assert_eq!(ws.tokens().count(&block.text), block.tokens);
    let mut seen = HashSet::new();
    for item in &block.items {
        assert!(seen.insert(item.source.clone()), "twice: {:?}", item.source);
    }
    assert_eq!(block.included().count(), block.items.len());
}

fn tier(block: &AssembledContext, n: u8) -> &TierReport {
    block.tiers.iter().find(|t| t.tier == n).unwrap()
}

/// The Henderson work context (docs/DESIGN.md, *The three tiers*): a session two hours ago
/// left a handoff, an open question, a decision, a phase and an update.
fn henderson(fx: &Fx) -> Workspace {
    let ws = fx.ws();
    let t0 = fx.now();
    ws.add_subject("henderson", SubjectKind::Project, Some("Henderson"))
        .unwrap();
    ws.append_turns(&[
        TurnInput::new("s-mon", Role::User, "Drafting the damages section.")
            .in_context("henderson")
            .at(t0),
    ])
    .unwrap();
    let mut entries = vec![
        entry(
            EntryKind::WorkPhaseChange,
            "Phase: drafting",
            "henderson",
            "s-mon",
            t0,
        ),
        entry(
            EntryKind::Handoff,
            "Completed subsections 1-3 (price impact); event study waits on Christensen data.",
            "henderson",
            "s-mon",
            t0,
        ),
        entry(
            EntryKind::OpenQuestion,
            "Address Dura more directly in the intro.",
            "henderson",
            "s-mon",
            t0,
        ),
        entry(
            EntryKind::KeyDecision,
            "Price impact approach over corrective disclosure alone.",
            "henderson",
            "s-mon",
            t0,
        ),
        entry(
            EntryKind::CrossConversationUpdate,
            "Expert report deadline moved to Friday in another conversation.",
            "henderson",
            "s-mon",
            t0,
        ),
    ];
    for e in &mut entries {
        e.subject = Some("henderson".into());
    }
    ws.append_entries(&entries).unwrap();
    ws
}

/// A past session `id` in `wc` with one turn, for provenance.
fn past(ws: &Workspace, id: &str, wc: &str) {
    ws.append_turn(&TurnInput::new(id, Role::User, "earlier work").in_context(wc))
        .unwrap();
}

fn new_session(ws: &Workspace, id: &str, wc: &str, text: &str, at: DateTime<Utc>) {
    ws.append_turn(&TurnInput::new(id, Role::User, text).in_context(wc).at(at))
        .unwrap();
}

#[test]
fn tier1_fires_in_a_new_session_after_thirty_minutes() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    fx.clock.advance(Duration::hours(2));
    new_session(&ws, "s-tue", "henderson", "let's continue", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-tue", 2000));
    let t1 = tier(&block, 1);
    assert!(t1.fired, "{t1:?}");
    assert!(t1.tokens <= 120);
    assert_eq!(t1.work_context.as_deref(), Some("henderson"));
    assert!(block.text.contains(
        "<card tier=\"1\" tag=\"resume\" work_context=\"henderson\" phase=\"drafting\">"
    ));
    assert!(block.text.contains("Open: Address Dura"));
    assert!(block.text.contains("Decision: Price impact"));
    assert!(block.text.contains("Since last session: Expert report"));
    // Activity-type inheritance: a brief "let's continue" inherits drafting.
    assert_eq!(block.activity.activity_type, "drafting");
    assert!(block.activity.inherited);
}

#[test]
fn tier1_waits_thirty_minutes() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    fx.clock.advance(Duration::minutes(29));
    new_session(&ws, "s-tue", "henderson", "back again", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-tue", 2000));
    let t1 = tier(&block, 1);
    assert!(!t1.fired);
    assert!(t1.reason.contains("only 29 minutes"), "{}", t1.reason);
    fx.clock.advance(Duration::minutes(1));
    let block = check(&ws, &AssembleRequest::new("s-tue", 2000));
    assert!(tier(&block, 1).fired);
}

#[test]
fn tier1_never_in_the_session_that_produced_it() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    fx.clock.advance(Duration::hours(3));
    new_session(&ws, "s-mon", "henderson", "one more thing", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-mon", 2000));
    let t1 = tier(&block, 1);
    assert!(!t1.fired);
    assert!(
        t1.reason.contains("came from this session"),
        "{}",
        t1.reason
    );
}

#[test]
fn tier1_fires_on_an_entity_match_from_an_unlinked_session() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    fx.clock.advance(Duration::hours(5));
    new_session(
        &ws,
        "s-chat",
        "default",
        "Where are we with Henderson?",
        fx.now(),
    );
    let block = check(&ws, &AssembleRequest::new("s-chat", 2000));
    let t1 = tier(&block, 1);
    assert!(t1.fired, "{t1:?}");
    assert!(
        t1.reason.contains("entity match: henderson"),
        "{}",
        t1.reason
    );
    // No entity, no card.
    new_session(&ws, "s-other", "default", "What's the weather?", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-other", 2000));
    assert!(!tier(&block, 1).fired);
}

#[test]
fn tier2_excludes_the_current_context_and_stale_activity() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    let t0 = fx.now();
    past(&ws, "s-synth", "synth");
    past(&ws, "s-smith", "smith");
    ws.append_entries(&[
        entry(
            EntryKind::Decision,
            "Marbles into Plaits for the evening patch.",
            "synth",
            "s-synth",
            t0,
        ),
        entry(
            EntryKind::Handoff,
            "Smith v. Acme: deposition prep outline done.",
            "smith",
            "s-smith",
            t0 - Duration::days(9),
        ),
    ])
    .unwrap();
    fx.clock.advance(Duration::hours(2));
    new_session(&ws, "s-tue", "henderson", "let's continue", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-tue", 2000));
    let t2 = tier(&block, 2);
    assert!(t2.fired && t2.tokens <= 200, "{t2:?}");
    let card = block.text.split("tag=\"recent_activity\"").nth(1).unwrap();
    let card = card.split("</card>").next().unwrap();
    assert!(card.contains("synth"), "{card}");
    assert!(
        !card.contains("henderson"),
        "tier 2 must exclude the tier 1 context: {card}"
    );
    assert!(!card.contains("Smith"), "older than 7 days: {card}");
}

#[test]
fn tier3_always_lands_and_tier2_is_dropped_first() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    let t0 = fx.now();
    past(&ws, "s-synth", "synth");
    past(&ws, "s-elnor", "elnor");
    ws.append_entries(&[
        EntryInput::new(
            EntryKind::Fact,
            "The user is a securities litigator and prefers direct answers.",
        ),
        entry(
            EntryKind::Decision,
            "Eurorack: Marbles into Plaits.",
            "synth",
            "s-synth",
            t0,
        ),
        entry(
            EntryKind::Handoff,
            "ELNOR red-team pass on the living memory section.",
            "elnor",
            "s-elnor",
            t0,
        ),
    ])
    .unwrap();
    fx.clock.advance(Duration::hours(2));
    new_session(&ws, "s-tue", "henderson", "let's continue", fx.now());
    // The tiers alone: the handoff stays a resume-card line, no briefing.
    let request = |budget| AssembleRequest {
        settings: Some(AssembleSettings {
            handoff_max_tokens: 0,
            briefing_max_tokens: 0,
            ..AssembleSettings::default()
        }),
        ..AssembleRequest::new("s-tue", budget)
    };
    let roomy = check(&ws, &request(2000));
    assert!(tier(&roomy, 1).fired && tier(&roomy, 2).fired && tier(&roomy, 3).fired);
    // Shrink the budget until tier 2 no longer fits: it goes whole, while
    // tier 3 stays and tier 1 is trimmed history first.
    let t2_tokens = tier(&roomy, 2).tokens;
    let mut budget = roomy.tokens - t2_tokens + t2_tokens / 2;
    let tight = loop {
        let block = check(&ws, &request(budget));
        if !tier(&block, 2).fired {
            break block;
        }
        budget -= 5;
    };
    assert!(tier(&tight, 3).fired, "tier 3 is never dropped");
    assert!(tight.trace.iter().any(|t| t.rule == "tier2.dropped_first"));
    assert!(tier(&tight, 1).fired);
    let mut smaller = budget;
    let trimmed = loop {
        smaller -= 5;
        let block = check(&ws, &request(smaller));
        if block.trace.iter().any(|t| t.rule == "tier1.trim") {
            break block;
        }
    };
    let first_trim = trimmed
        .trace
        .iter()
        .find(|t| t.rule == "tier1.trim")
        .unwrap();
    assert!(
        matches!(
            first_trim.source,
            ItemSource::Entry {
                kind: EntryKind::Handoff,
                ..
            }
        ),
        "history goes first: {first_trim:?}"
    );
    assert!(tier(&trimmed, 3).fired);
}

#[test]
fn tier_caps_hold_with_much_memory() {
    let fx = Fx::new();
    let ws = henderson(&fx);
    let t0 = fx.now();
    let mut many = Vec::new();
    for i in 0..30 {
        past(&ws, &format!("s-x{i}"), &format!("side-{i}"));
        many.push(EntryInput::new(
            EntryKind::Fact,
            &format!("Stable preference number {i}: likes long walks and short memos."),
        ));
        many.push(entry(
            EntryKind::Decision,
            &format!("Decision {i} in a side project with a fairly long description."),
            &format!("side-{i}"),
            &format!("s-x{i}"),
            t0,
        ));
        many.push(entry(
            EntryKind::OpenQuestion,
            &format!("Open question {i} about Henderson damages and the event study."),
            "henderson",
            "s-mon",
            t0,
        ));
    }
    ws.append_entries(&many).unwrap();
    fx.clock.advance(Duration::hours(2));
    new_session(&ws, "s-tue", "henderson", "let's continue", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-tue", 8000));
    assert!(tier(&block, 1).tokens <= 120);
    assert!(tier(&block, 2).tokens <= 200);
    assert!(tier(&block, 3).tokens <= 100);
    assert!(block.tiers.iter().map(|t| t.tokens).sum::<usize>() <= 420);
    // Configurable.
    let mut request = AssembleRequest::new("s-tue", 8000);
    request.settings = Some(AssembleSettings {
        living_memory_max_tokens: 40,
        ..AssembleSettings::default()
    });
    let block = check(&ws, &request);
    assert!(tier(&block, 3).tokens <= 40 && tier(&block, 3).fired);
}

#[test]
fn min_tail_wins_over_the_tail_budget_and_keeps_tool_pairs() {
    let fx = Fx::new();
    let ws = fx.ws();
    let long = "word ".repeat(80);
    ws.append_turns(&[
        TurnInput::new("s", Role::User, "first"),
        TurnInput::new("s", Role::User, &long),
        TurnInput::new("s", Role::Assistant, "calling the tool").with_tool_call_id("c1"),
        TurnInput::new("s", Role::User, &long),
        TurnInput::new("s", Role::Tool, &long).with_tool_call_id("c1"),
        TurnInput::new("s", Role::Assistant, &long),
    ])
    .unwrap();
    let mut request = AssembleRequest::new("s", 2000);
    request.settings = Some(AssembleSettings {
        min_tail_turns: 3,
        tail_budget_tokens: Some(50),
        ..AssembleSettings::default()
    });
    let block = check(&ws, &request);
    let tail: Vec<u64> = block
        .items
        .iter()
        .filter_map(|i| match &i.source {
            ItemSource::Turn { seq, .. } if i.section == Section::Tail => Some(*seq),
            _ => None,
        })
        .collect();
    // The last 3 turns are 3..=5; the tool result at 4 pulls its call at 2.
    assert_eq!(tail, vec![2, 3, 4, 5]);
    let tool = block
        .items
        .iter()
        .find(|i| {
            i.source
                == ItemSource::Turn {
                    session: "s".into(),
                    seq: 4,
                }
        })
        .unwrap();
    assert_eq!(tool.warrant, Warrant::LowTrust);
    let closed = block
        .trace
        .iter()
        .find(|t| t.rule == "tail.closed")
        .unwrap();
    assert_eq!(
        closed.source,
        ItemSource::Turn {
            session: "s".into(),
            seq: 1
        }
    );
}

#[test]
fn invariants_that_do_not_fit_fail_clearly() {
    let fx = Fx::new();
    let ws = fx.ws();
    ws.append_turn(&TurnInput::new("s", Role::User, "hi"))
        .unwrap();
    let mut request = AssembleRequest::new("s", 150);
    request.directives = vec!["Always answer in formal English. ".repeat(20)];
    let err = ws.assemble(&request, &NoRetrieval, &TrustAll).unwrap_err();
    assert_eq!(err.code(), "invariants_exceed_budget");
    assert!(err.to_string().contains("the invariants alone"), "{err}");
    assert!(err.to_string().contains("1 directive"), "{err}");
    let err = ws
        .assemble(&AssembleRequest::new("s", 5), &NoRetrieval, &TrustAll)
        .unwrap_err();
    assert_eq!(err.code(), "budget_too_small");
    request.directives = vec!["  ".into()];
    let err = ws.assemble(&request, &NoRetrieval, &TrustAll).unwrap_err();
    assert!(err.to_string().contains("directive 0 is empty"), "{err}");
    let err = ws
        .assemble(&AssembleRequest::new("nope", 500), &NoRetrieval, &TrustAll)
        .unwrap_err();
    assert_eq!(err.code(), "session_not_found");
}

#[test]
fn pinned_entries_are_invariants_and_follow_corrections() {
    let fx = Fx::new();
    let ws = fx.ws();
    ws.append_turn(&TurnInput::new("s", Role::User, "hi"))
        .unwrap();
    let e = ws
        .append_entry(&EntryInput::new(EntryKind::Decision, "Use Postgres."))
        .unwrap();
    ws.pin(&e.id).unwrap();
    let fixed = ws
        .append_entry(&EntryInput::new(EntryKind::Decision, "Use Postgres 16.").replacing(&e.id))
        .unwrap();
    let block = check(&ws, &AssembleRequest::new("s", 400));
    let pinned: Vec<&BlockItem> = block
        .items
        .iter()
        .filter(|i| i.section == Section::Pinned)
        .collect();
    assert_eq!(pinned.len(), 1);
    assert_eq!(
        pinned[0].source,
        ItemSource::Entry {
            id: fixed.id,
            kind: EntryKind::Decision
        }
    );
    assert!(ws.pin("missing-entry").is_err());
}

#[test]
fn projection_retrieves_the_rest_of_memory_without_duplicates() {
    let fx = Fx::new();
    let ws = fx.ws();
    ws.append_turns(&[
        TurnInput::new(
            "old",
            Role::User,
            "The staging database password rotates every Monday.",
        ),
        TurnInput::new("old", Role::Assistant, "Noted: rotation on Mondays."),
    ])
    .unwrap();
    ws.append_turns(&[TurnInput::new(
        "s",
        Role::User,
        "When does the staging database password rotate?",
    )])
    .unwrap();
    let fact = ws
        .append_entry(
            &EntryInput::new(
                EntryKind::Fact,
                "Staging database moves to the new cluster.",
            )
            .in_context("infra"),
        )
        .unwrap();
    let mut index = SearchIndex::new(None).unwrap();
    index
        .add(&[
            SearchDoc::new(
                "old:0",
                "old",
                0,
                "The staging database password rotates every Monday.",
            ),
            SearchDoc::new("old:1", "old", 1, "Noted: rotation on Mondays."),
            SearchDoc::new(
                "s:0",
                "s",
                0,
                "When does the staging database password rotate?",
            ),
            SearchDoc::new(
                &fact.id,
                "entries",
                0,
                "Staging database moves to the new cluster.",
            ),
        ])
        .unwrap();
    let mut request = AssembleRequest::new("s", 1000);
    request.retrieval = RetrievalMode::Lexical;
    let block = ws
        .assemble(&request, &IndexRetriever(&index), &TrustAll)
        .unwrap();
    assert_block(&ws, &block);
    let retrieved: Vec<&ItemSource> = block
        .items
        .iter()
        .filter(|i| i.section == Section::Retrieved)
        .map(|i| &i.source)
        .collect();
    assert!(retrieved.contains(&&ItemSource::Turn {
        session: "old".into(),
        seq: 0
    }));
    assert!(retrieved.contains(&&ItemSource::Entry {
        id: fact.id.clone(),
        kind: EntryKind::Fact
    }));
    // The current turn is in the tail, so the projection leaves it out.
    assert!(block.trace.iter().any(|t| t.rule == "projection.partition"));
    assert_eq!(block.retrieval.mode, "bm25");
}

#[test]
fn block_snapshot() {
    let fx = Fx::new();
    let ws = fx.ws();
    ws.append_turns(&[
        TurnInput::new("s1", Role::User, "Should we migrate auth to OAuth?").in_context("auth"),
        TurnInput::new("s1", Role::Assistant, "Yes; start with the web client."),
    ])
    .unwrap();
    ws.append_entry(&EntryInput::new(
        EntryKind::Fact,
        "Ana prefers short answers.",
    ))
    .unwrap();
    past(&ws, "s0", "auth");
    let e = ws
        .append_entry(
            &EntryInput::new(EntryKind::Decision, "Keep sessions in Redis")
                .in_context("auth")
                .from_turns("s0", 0, 0),
        )
        .unwrap();
    ws.pin(&e.id).unwrap();
    fx.clock.advance(Duration::hours(30));
    let mut request = AssembleRequest::new("s1", 400);
    request.directives = vec!["Answer in English.".into()];
    let block = check(&ws, &request);
    expect_test::expect![[r#"
        <cairn-memory session="s1" work_context="auth" destination="local_model" activity="unknown">
        [CAIRN MEMORY: USE RULES] Use each item according to its label.
        - directive / pinned: standing instructions and settled points; follow them.
        - recorded items were captured from conversation (source turns given); asserted ones were written without a source. Rely on them as far as their warrant goes.
        - living_memory: stable facts and preferences about the user.
        - Recent turns are the raw conversation, verbatim.
        [/CAIRN MEMORY RULES]
        ## Standing directives
        - Answer in English.
        ## Pinned
        - (decision; standing; s0:0; 30h; this_context) Keep sessions in Redis
        <card tier="3" tag="living_memory">
        - Ana prefers short answers.
        </card>
        ## Recent turns (verbatim)
        [0] user: Should we migrate auth to OAuth?
        [1] assistant: Yes; start with the web client.
        </cairn-memory>
    "#]]
    .assert_eq(&block.text);
}

fn arb_turn() -> impl Strategy<Value = (u8, String)> {
    (0u8..4, "[a-zA-Z0-9 .,!?'éü漢字]{1,200}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Never over budget; invariants present or a clear error; the same
    /// input gives the same output; no item twice.
    #[test]
    fn assembly_properties(
        turns in proptest::collection::vec(arb_turn(), 1..16),
        facts in proptest::collection::vec("[a-z ]{5,120}", 0..6),
        directives in proptest::collection::vec("[A-Za-z ]{3,60}", 0..3),
        budget in 40usize..900,
        min_tail in 0usize..6,
        gap_minutes in 0i64..200,
    ) {
        let fx = Fx::new();
        let ws = fx.ws();
        let inputs: Vec<TurnInput> = turns
            .iter()
            .filter(|(_, t)| !t.trim().is_empty())
            .map(|(r, t)| match r {
                0 | 1 => TurnInput::new("s", Role::User, t),
                _ => TurnInput::new("s", Role::Assistant, t),
            })
            .collect();
        prop_assume!(!inputs.is_empty());
        ws.append_turns(&inputs).unwrap();
        let t0 = fx.now();
        for (i, f) in facts.iter().enumerate() {
            if f.trim().is_empty() { continue; }
            past(&ws, &format!("other-{i}"), &format!("wc-{i}"));
            ws.append_entry(&EntryInput::new(EntryKind::Fact, f)).unwrap();
            ws.append_entry(&entry(EntryKind::Decision, f, &format!("wc-{i}"), &format!("other-{i}"), t0)).unwrap();
        }
        fx.clock.advance(Duration::minutes(gap_minutes));
        let mut request = AssembleRequest::new("s", budget);
        request.directives = directives.iter().filter(|d| !d.trim().is_empty()).cloned().collect();
        request.settings = Some(AssembleSettings { min_tail_turns: min_tail, ..AssembleSettings::default() });
        let first = ws.assemble(&request, &NoRetrieval, &TrustAll);
        let second = ws.assemble(&request, &NoRetrieval, &TrustAll);
        match (first, second) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(&a, &b);
                prop_assert!(a.tokens <= budget);
                prop_assert_eq!(ws.tokens().count(&a.text), a.tokens);
                let mut seen = HashSet::new();
                for item in &a.items {
                    prop_assert!(seen.insert(item.source.clone()));
                }
                for d in &request.directives {
                    prop_assert!(a.text.contains(d.split_whitespace().collect::<Vec<_>>().join(" ").as_str()));
                }
                let tail = a.items.iter().filter(|i| i.section == Section::Tail).count();
                prop_assert!(tail >= min_tail.min(inputs.len()));
            }
            (Err(a), Err(b)) => {
                prop_assert_eq!(a.to_string(), b.to_string());
                prop_assert!(matches!(a.code(), "invariants_exceed_budget" | "budget_too_small"), "{}", a);
            }
            (a, b) => prop_assert!(false, "not deterministic: {:?} vs {:?}", a.is_ok(), b.is_ok()),
        }
    }
}

fn rules_of(block: &AssembledContext, section: Section) -> Vec<String> {
    block
        .trace
        .iter()
        .filter(|t| t.section == section)
        .map(|t| format!("{} {}", if t.included { "in" } else { "out" }, t.rule))
        .collect()
}

/// The last-session handoff: injected for a session that started after it
/// was written, labelled and traced; not for the session that wrote it,
/// nor for one that started before; the newest one once it changes; left
/// out, traced, when it does not fit.
#[test]
fn the_last_handoff_opens_the_next_session() {
    let fx = Fx::new();
    let ws = fx.ws();
    new_session(&ws, "s-early", "launch", "still here", fx.now());
    past(&ws, "s-mon", "launch");
    fx.clock.advance(Duration::hours(1));
    let first = entry(
        EntryKind::Handoff,
        "Checklist half done; status page next.",
        "launch",
        "s-mon",
        fx.now(),
    );
    let first = ws.append_entry(&first).unwrap();
    fx.clock.advance(Duration::hours(12));
    new_session(&ws, "s-tue", "launch", "morning", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-tue", 2000));
    assert!(
        block.text.contains(
            "## Last session handoff\nLast session, 12h ago: Checklist half done; status page next.\n"
        ),
        "{}",
        block.text
    );
    assert_eq!(rules_of(&block, Section::Handoff), ["in handoff.injected"]);
    // Not shown twice: the resume card does not repeat it.
    assert_eq!(
        block
            .items
            .iter()
            .filter(|i| i.source
                == ItemSource::Entry {
                    id: first.id.clone(),
                    kind: EntryKind::Handoff
                })
            .count(),
        1
    );
    // The session that wrote it, and one that started before it: none.
    for session in ["s-mon", "s-early"] {
        let block = check(&ws, &AssembleRequest::new(session, 2000));
        assert!(rules_of(&block, Section::Handoff).is_empty(), "{session}");
    }
    // A newer handoff (another session's) replaces it for later sessions.
    past(&ws, "s-tue-2", "launch");
    let second = entry(
        EntryKind::Handoff,
        "Status page booked.",
        "launch",
        "s-tue-2",
        fx.now(),
    );
    ws.append_entry(&second).unwrap();
    fx.clock.advance(Duration::hours(1));
    new_session(&ws, "s-wed", "launch", "hi", fx.now());
    let block = check(&ws, &AssembleRequest::new("s-wed", 2000));
    assert!(
        block
            .text
            .contains("Last session, 1h ago: Status page booked.\n"),
        "{}",
        block.text
    );
    // A budget too small for it: left out, with the reason.
    let mut request = AssembleRequest::new("s-wed", 95);
    request.settings = Some(AssembleSettings {
        min_tail_turns: 1,
        ..AssembleSettings::default()
    });
    let block = check(&ws, &request);
    assert_eq!(rules_of(&block, Section::Handoff), ["out handoff.left_out"]);
    // Off by configuration.
    let mut request = AssembleRequest::new("s-wed", 2000);
    request.settings = Some(AssembleSettings {
        handoff_max_tokens: 0,
        ..AssembleSettings::default()
    });
    assert!(rules_of(&check(&ws, &request), Section::Handoff).is_empty());
}

/// The briefing is the last candidate: with room left it brings the
/// workspace's open work (each line with its reference), never an entry
/// already in the block, within its cap; with too little room it goes
/// whole; with a cap of 0 it is never offered.
#[test]
fn the_briefing_fills_what_is_left() {
    let fx = Fx::new();
    let ws = fx.ws();
    past(&ws, "s-p", "pricing");
    let mut open = entry(
        EntryKind::Task,
        "Send the refund wording to legal",
        "pricing",
        "s-p",
        fx.now(),
    );
    open.id = Some("t-legal".into());
    ws.append_entry(&open).unwrap();
    let mut q = entry(
        EntryKind::OpenQuestion,
        "Monthly or yearly plans first?",
        "pricing",
        "s-p",
        fx.now(),
    );
    q.id = Some("q-plans".into());
    ws.append_entry(&q).unwrap();
    fx.clock.advance(Duration::hours(3));
    new_session(&ws, "s1", "launch", "What is left to do?", fx.now());
    let mut request = AssembleRequest::new("s1", 2000);
    request.retrieval = RetrievalMode::Off;
    let block = check(&ws, &request);
    assert!(
        block.text.contains(
            "<card tag=\"briefing\" note=\"the workspace's MEMORY.md briefing\">\nPending: Send the refund wording to legal (since 2026-03-02) [t-legal; s-p:0]\nOpen: Monthly or yearly plans first? (since 2026-03-02) [q-plans; s-p:0]\n"
        ),
        "{}",
        block.text
    );
    let briefing: Vec<String> = rules_of(&block, Section::Briefing);
    assert!(
        briefing.iter().all(|r| r == "in briefing.line"),
        "{briefing:?}"
    );
    // Every briefing line stands for an entry the block shows once.
    let tokens: usize = block
        .items
        .iter()
        .filter(|i| i.section == Section::Briefing)
        .map(|i| i.tokens)
        .sum();
    assert!(tokens <= 160, "{tokens}");
    // Little room left: the briefing goes whole, traced.
    let mut request = AssembleRequest::new("s1", 120);
    request.retrieval = RetrievalMode::Off;
    let block = check(&ws, &request);
    assert!(!block.text.contains("tag=\"briefing\""), "{}", block.text);
    assert!(
        rules_of(&block, Section::Briefing)
            .iter()
            .all(|r| r == "out briefing.dropped"),
        "{:?}",
        rules_of(&block, Section::Briefing)
    );
    // Off by configuration.
    let mut request = AssembleRequest::new("s1", 2000);
    request.settings = Some(AssembleSettings {
        briefing_max_tokens: 0,
        ..AssembleSettings::default()
    });
    assert!(rules_of(&check(&ws, &request), Section::Briefing).is_empty());
}

/// Blocks the briefing lines whose text has `blocked` in it, shows the
/// rest, and records the briefing lines it was asked about.
struct BlockBriefing {
    blocked: &'static str,
    asked: std::cell::RefCell<Vec<String>>,
}

impl PolicyCheck for BlockBriefing {
    fn check(
        &self,
        item: &PolicyItem<'_>,
        context: &PolicyContext<'_>,
    ) -> Result<PolicyVerdict, SeamError> {
        let mut verdict = TrustAll.check(item, context)?;
        if item.section == Section::Briefing {
            self.asked.borrow_mut().push(item.text.to_owned());
            if item.text.contains(self.blocked) {
                verdict.fidelity = Fidelity::Blocked;
            }
        }
        Ok(verdict)
    }
}

/// A briefing line is judged only when it could fit what the cap has
/// left: the lines after the cap is full are traced over the cap without
/// a verdict, and a line the policy blocks takes none of the cap, so the
/// next line takes its place, as when every line was judged.
#[test]
fn only_the_briefing_lines_that_could_fit_are_judged() {
    let fx = Fx::new();
    let ws = fx.ws();
    past(&ws, "s-p", "pricing");
    for n in 0..12 {
        let task = entry(
            EntryKind::Task,
            &format!("Follow up on the open pricing item number {n} with the vendor"),
            "pricing",
            "s-p",
            fx.now(),
        );
        ws.append_entry(&task).unwrap();
    }
    fx.clock.advance(Duration::hours(3));
    new_session(&ws, "s1", "launch", "What is left to do?", fx.now());
    let mut request = AssembleRequest::new("s1", 4000);
    request.retrieval = RetrievalMode::Off;
    request.settings = Some(AssembleSettings {
        briefing_max_tokens: 125,
        ..AssembleSettings::default()
    });
    let shown = |blocked: &'static str| {
        let policy = BlockBriefing {
            blocked,
            asked: Default::default(),
        };
        let block = ws.assemble(&request, &NoRetrieval, &policy).unwrap();
        assert_block(&ws, &block);
        let lines: Vec<&TraceItem> = block
            .trace
            .iter()
            .filter(|t| t.section == Section::Briefing)
            .collect();
        assert!(lines.len() >= 12, "{lines:?}");
        for t in &lines {
            if t.policy.is_none() {
                assert_eq!(t.rule, "briefing.cap", "{t:?}");
                assert!(!t.included && t.tokens > 0, "{t:?}");
            }
        }
        let judged = lines.iter().filter(|t| t.policy.is_some()).count();
        assert_eq!(judged, policy.asked.borrow().len());
        let included: Vec<String> = block
            .items
            .iter()
            .filter(|i| i.section == Section::Briefing)
            .map(|i| i.source.to_string())
            .collect();
        (included, judged, block)
    };
    let (all, judged, block) = shown("nothing is blocked");
    assert!(all.len() >= 2, "{}", block.text);
    assert!(judged < 12, "every line judged: {judged}");
    // The first line shown is blocked: the others move up, one more fits.
    let first = block
        .text
        .lines()
        .find(|l| l.starts_with("Pending: "))
        .and_then(|l| l.split("number ").nth(1))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .to_owned();
    let blocked: &'static str = Box::leak(format!("number {first} ").into_boxed_str());
    let (moved, _, block) = shown(blocked);
    assert_eq!(moved.len(), all.len(), "{}", block.text);
    assert_eq!(moved[..all.len() - 1], all[1..], "{}", block.text);
    assert!(!moved.contains(&all[0]));
    let first = block
        .trace
        .iter()
        .find(|t| t.section == Section::Briefing && t.source.to_string() == all[0])
        .unwrap();
    assert_eq!(
        (first.included, first.rule.as_str()),
        (false, "policy.blocked")
    );
}

/// Counts the policy's calls: one per [`PolicyCheck::check`], one per
/// batch, and the items each asked about.
#[derive(Default)]
struct CountCalls {
    singles: std::cell::RefCell<Vec<(Section, String)>>,
    batches: std::cell::RefCell<Vec<usize>>,
}

impl PolicyCheck for CountCalls {
    fn check(
        &self,
        item: &PolicyItem<'_>,
        context: &PolicyContext<'_>,
    ) -> Result<PolicyVerdict, SeamError> {
        self.singles
            .borrow_mut()
            .push((item.section, item.text.to_owned()));
        TrustAll.check(item, context)
    }

    fn check_many(
        &self,
        items: &[PolicyItem<'_>],
        context: &PolicyContext<'_>,
    ) -> Result<Vec<PolicyVerdict>, SeamError> {
        self.batches.borrow_mut().push(items.len());
        items.iter().map(|i| TrustAll.check(i, context)).collect()
    }
}

/// Turns that take far fewer tokens than four bytes each (long common
/// words) fit the tail beyond step 0's estimate; the extension judges
/// them in batches, not with one policy call per turn, and the block is
/// the one a policy asked item by item gives.
#[test]
fn the_tail_beyond_the_estimate_is_judged_in_batches() {
    let fx = Fx::new();
    let ws = fx.ws();
    let turns: Vec<TurnInput> = (0..60)
        .map(|n| {
            let role = if n % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            let text = format!("{n:02}{}", " information".repeat(10));
            TurnInput::new("s1", role, &text).in_context("launch")
        })
        .collect();
    ws.append_turns(&turns).unwrap();
    let mut request = AssembleRequest::new("s1", 4000);
    request.retrieval = RetrievalMode::Off;
    request.settings = Some(AssembleSettings {
        tail_budget_tokens: Some(400),
        ..AssembleSettings::default()
    });
    let policy = CountCalls::default();
    let block = ws.assemble(&request, &NoRetrieval, &policy).unwrap();
    assert_block(&ws, &block);
    let tail = block
        .items
        .iter()
        .filter(|i| i.section == Section::Tail)
        .count();
    // Step 0's estimate (four bytes a token) holds 400 * 4 / 122 ≈ 13
    // turns; more fit.
    assert!(tail > 20, "{tail} tail turns: {}", block.text);
    let singles = policy.singles.borrow();
    assert!(
        singles.iter().all(|(section, _)| *section != Section::Tail),
        "tail turns judged one by one: {singles:?}"
    );
    let batches = policy.batches.borrow();
    assert!(batches.len() <= 4, "{batches:?}");
    let one_by_one = ws.assemble(&request, &NoRetrieval, &OneByOne).unwrap();
    assert_eq!(block, one_by_one);
}

/// [`TrustAll`] without its batch: every item asked alone.
struct OneByOne;

impl PolicyCheck for OneByOne {
    fn check(
        &self,
        item: &PolicyItem<'_>,
        context: &PolicyContext<'_>,
    ) -> Result<PolicyVerdict, SeamError> {
        TrustAll.check(item, context)
    }
}

/// One write of the index property: an entry of one of the kinds the
/// index reads, in one of three contexts, maybe about a subject, maybe
/// correcting an earlier one, captured some minutes from now (so additions
/// are not always the newest).
fn arb_index_write() -> impl Strategy<Value = (usize, usize, Option<usize>, Option<usize>, i64)> {
    (
        0usize..9,
        0usize..3,
        proptest::option::of(0usize..2),
        proptest::option::weighted(0.25, 0usize..64),
        -120i64..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The assembly index of a patched live list, made from the previous
    /// list's index and the patch, is the index a pass over the new list
    /// makes; and the patch is what makes it (no pass).
    #[test]
    fn a_patched_assembly_index_is_the_index_of_its_list(
        writes in proptest::collection::vec(arb_index_write(), 1..40),
    ) {
        use super::tiers::AssemblyIndex;
        const KINDS: [EntryKind; 9] = [
            EntryKind::Handoff,
            EntryKind::SessionSummaryRef,
            EntryKind::Decision,
            EntryKind::KeyDecision,
            EntryKind::OpenQuestion,
            EntryKind::WorkPhaseChange,
            EntryKind::CrossConversationUpdate,
            EntryKind::Fact,
            EntryKind::Directive,
        ];
        const CONTEXTS: [&str; 3] = [crate::DEFAULT_WORK_CONTEXT, "wc-a", "wc-b"];
        const SUBJECTS: [&str; 2] = ["alpha", "beta"];
        let fx = Fx::new();
        let ws = fx.ws();
        for (i, wc) in CONTEXTS.iter().enumerate() {
            past(&ws, &format!("s{i}"), wc);
        }
        let mut written: Vec<String> = Vec::new();
        let mut patched = 0;
        let n_writes = writes.len();
        for (n, (kind, wc, subject, replaces, minutes)) in writes.into_iter().enumerate() {
            let mut input = entry(
                KINDS[kind],
                &format!("record {n}: from review to drafting"),
                CONTEXTS[wc],
                &format!("s{wc}"),
                fx.now() + Duration::minutes(minutes),
            );
            if let Some(s) = subject {
                input = input.about(SUBJECTS[s]);
            }
            // An entry is corrected once (a second correction is refused).
            if let Some(r) = replaces.filter(|_| !written.is_empty()) {
                let id = written.swap_remove(r % written.len());
                input = input.replacing(&id);
            }
            written.push(ws.append_entry(&input).unwrap().id);
            let (live, derived) = ws.live_state().unwrap();
            if derived.assembly.get().is_some() {
                patched += 1;
            }
            let index = AssemblyIndex::of(&live, &derived);
            prop_assert_eq!(index, &AssemblyIndex::build(&live), "after write {}", n);
        }
        // Every write after the first is a pure addition (entries and
        // corrections): its list is patched.
        prop_assert_eq!(patched, n_writes - 1, "lists patched");
    }
}

/// A generated session: user and assistant turns, tool calls and their
/// results (sometimes far apart), results whose call is gone. Its words are
/// random letters (more tokens than a byte in four) or long common words
/// (far fewer): the tail's read-ahead estimate errs both ways.
fn arb_tail_session() -> impl Strategy<Value = Vec<(u8, usize, String)>> {
    any::<bool>().prop_flat_map(|common| {
        let text = if common {
            proptest::collection::vec(
                prop::sample::select(vec!["international", "understanding", "responsibility"]),
                1..60,
            )
            .prop_map(|w| w.join(" "))
            .boxed()
        } else {
            "[a-z]{1,12}( [a-z]{1,12}){0,60}".boxed()
        };
        proptest::collection::vec((0u8..10, 0usize..40, text), 1..120)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The tail reads its turns a few at a time, from the newest back, as
    /// the steps ask: whatever the first read's size, the block is the one
    /// made with every candidate turn read at once.
    #[test]
    fn a_tail_read_on_demand_is_the_tail_read_at_once(
        turns in arb_tail_session(),
        budget in 200usize..4000,
        min_tail in 0usize..12,
        tail_budget in proptest::option::of(0usize..1500),
        query in proptest::option::of("[a-z]{3,10}"),
    ) {
        let fx = Fx::new();
        let ws = fx.ws();
        let mut inputs = Vec::new();
        let mut open_calls: Vec<String> = Vec::new();
        for (i, (kind, back, text)) in turns.iter().enumerate() {
            let input = match kind {
                0..=3 => TurnInput::new("s", Role::User, text),
                7 => {
                    let id = format!("c{i}");
                    open_calls.push(id.clone());
                    TurnInput::new("s", Role::Assistant, text).with_tool_call_id(&id)
                }
                8 if !open_calls.is_empty() => {
                    // The result of a call made `back` calls ago.
                    let at = open_calls.len() - 1 - back % open_calls.len();
                    let id = open_calls.remove(at);
                    TurnInput::new("s", Role::Tool, text).with_tool_call_id(&id)
                }
                9 if *back == 0 => {
                    TurnInput::new("s", Role::Tool, text).with_tool_call_id(&format!("gone{i}"))
                }
                _ => TurnInput::new("s", Role::Assistant, text),
            };
            inputs.push(input);
        }
        ws.append_turns(&inputs).unwrap();
        let mut request = AssembleRequest::new("s", budget);
        request.query = query;
        request.settings = Some(AssembleSettings {
            min_tail_turns: min_tail,
            tail_budget_tokens: tail_budget,
            ..AssembleSettings::default()
        });
        let at_once = {
            super::tail::FIRST_READ.with(|n| n.set(super::tail::MAX_TAIL_CANDIDATES));
            ws.assemble(&request, &NoRetrieval, &TrustAll)
        };
        let one_by_one = {
            super::tail::FIRST_READ.with(|n| n.set(1));
            ws.assemble(&request, &NoRetrieval, &TrustAll)
        };
        super::tail::FIRST_READ.with(|n| n.set(super::tail::FIRST_READ_TURNS));
        match (at_once, one_by_one) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "{:?} vs {:?}", a.map(|c| c.text), b.map(|c| c.text)),
        }
    }
}
