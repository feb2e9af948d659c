//! The capture gate: does a turn make its work context dirty?
//!
//! [`CaptureGate`] is the seam where the WebAssembly policy of the
//! `significance-gate` world (`cairn_policies::SignificanceGate`, hosted by
//! `policies/`) slots in: `cairn::Cairn` starts
//! the runtime with the installed wasm gate (`runtime/src/policy.rs`);
//! [`ActorRuntime::start`](crate::ActorRuntime::start) uses
//! [`HeuristicGate`] (the dirty rules of docs/DESIGN.md: user turns, tool use, known-entity
//! mentions). A gate is called on an arbiter thread for every stored turn
//! (and again when an actor rebuilds its state from the store), so it must
//! be cheap, must not block and must not panic.

use cairn_memory::extract::{Depth, mentions};
use cairn_memory::{Role, Session, SessionKind, Subject, Turn};

/// What a gate sees of one stored turn.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    /// The workspace the turn belongs to.
    pub workspace: &'a str,
    /// The session the turn belongs to.
    pub session: &'a str,
    /// Its kind (main, sub-agent, cron).
    pub session_kind: SessionKind,
    /// The session's work context.
    pub work_context: &'a str,
    /// The turn's sequence number in its session.
    pub seq: u64,
    /// Who spoke.
    pub role: Role,
    /// The text.
    pub content: &'a str,
    /// True for a tool call or result.
    pub tool_use: bool,
    /// The workspace's subject registry (known entities).
    pub subjects: &'a [Subject],
    /// The work context's active phase (`drafting`, `research`…), if known.
    pub work_phase: Option<&'a str>,
}

/// What a gate decided about one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Significance {
    /// Counts towards the dirty threshold of user turns.
    pub user_turn: bool,
    /// A tool was used (dirty at once).
    pub tool_use: bool,
    /// Known subjects mentioned (dirty at once when non-empty).
    pub mentions: Vec<String>,
    /// A policy judged the turn worth capturing (dirty at once). The
    /// heuristic gate never sets it; the wasm gate sets it when the plugin
    /// asks for any extraction.
    pub significant: bool,
    /// How deeply a capture extracts from the turn: the gate's
    /// `extraction-depth`, or `do-not-collect` / `observe-only` (a
    /// do-not-collect turn counts as no activity at all and is not read by
    /// the capture). [`Depth::Standard`] without a policy.
    pub depth: Depth,
    /// The policy generation that decided (`name@hash#n`); `None` for the
    /// heuristic gate.
    pub generation: Option<String>,
}

impl Significance {
    /// True when the turn alone makes its context dirty.
    pub fn is_immediately_dirty(&self) -> bool {
        self.significant || self.tool_use || !self.mentions.is_empty()
    }
}

/// Decides how significant a turn is for capture. (Named apart from the
/// `significance-gate` WIT world, which is one way to implement it.)
///
/// ```
/// use cairn_actors::{GateInput, HeuristicGate, CaptureGate};
/// use cairn_memory::{Role, SessionKind};
/// let s = HeuristicGate.assess(&GateInput {
///     workspace: "acme",
///     session: "s1",
///     session_kind: SessionKind::Main,
///     work_context: "launch",
///     seq: 0,
///     role: Role::User,
///     content: "hi",
///     tool_use: false,
///     subjects: &[],
///     work_phase: None,
/// });
/// assert!(s.user_turn && !s.is_immediately_dirty());
/// ```
pub trait CaptureGate: Send + Sync + std::fmt::Debug {
    /// Assesses one turn.
    fn assess(&self, input: &GateInput<'_>) -> Significance;

    /// The turn as a capture may read it, asked when the capture reads it
    /// (after [`assess`](Self::assess) let it be collected): `None` keeps
    /// it out of the capture like a do-not-collect turn (the raw record
    /// keeps it); a changed content (personal data masked, say) is what
    /// extraction reads. The default reads every turn as it is; the
    /// runtime asks its memory policy (`capture`).
    fn capture_view(&self, workspace: &str, session: &Session, turn: Turn) -> Option<Turn> {
        let _ = (workspace, session);
        Some(turn)
    }
}

/// The default gate: the dirty rules of docs/DESIGN.md, *Dirty*; no model.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeuristicGate;

impl CaptureGate for HeuristicGate {
    fn assess(&self, input: &GateInput<'_>) -> Significance {
        let tool_use = input.tool_use || input.role == Role::Tool;
        let counts = matches!(input.role, Role::User | Role::Assistant);
        Significance {
            user_turn: input.role == Role::User,
            tool_use,
            mentions: if counts {
                mentions(input.content, input.subjects)
            } else {
                Vec::new()
            },
            significant: false,
            depth: Depth::Standard,
            generation: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cairn_memory::{EntryFilter, EntryKind, ManualClock, MemoryConfig, TurnInput, Workspace};
    use chrono::{Duration, TimeZone, Utc};
    use parking_lot::Mutex;

    use super::*;
    use crate::{ActorConfig, ActorRuntime, Trigger};

    /// A gate that answers by the turn's first word: `secret` do-not-collect,
    /// `aside` observe-only, `quick` shallow, `tell` deep, anything else
    /// standard; and remembers the phases it was told.
    #[derive(Debug, Default)]
    struct Scripted {
        phases: Mutex<Vec<Option<String>>>,
    }

    impl CaptureGate for Scripted {
        fn assess(&self, input: &GateInput<'_>) -> Significance {
            self.phases.lock().push(input.work_phase.map(str::to_owned));
            let first = input.content.split(' ').next().unwrap_or_default();
            let depth = match first {
                "secret:" => Depth::DoNotCollect,
                "aside:" => Depth::ObserveOnly,
                "quick:" => Depth::Shallow,
                "tell:" => Depth::Deep,
                _ => Depth::Standard,
            };
            let mut s = HeuristicGate.assess(input);
            if depth == Depth::DoNotCollect {
                s = Significance::default();
            }
            s.depth = depth;
            s.generation = Some("scripted@abc#7".to_owned());
            s
        }
    }

    fn start() -> (
        tempfile::TempDir,
        ActorRuntime,
        ManualClock,
        Arc<Scripted>,
        Workspace,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap());
        let memory = cairn_memory::testing::memory(
            dir.path(),
            MemoryConfig::default(),
            Arc::new(clock.clone()),
        )
        .unwrap();
        let gate = Arc::new(Scripted::default());
        let runtime = ActorRuntime::start_with_gate(
            memory.clone(),
            ActorConfig {
                tick_interval_secs: 0,
                ..ActorConfig::default()
            },
            gate.clone(),
        )
        .unwrap();
        let ws = memory.workspace("w").unwrap();
        (dir, runtime, clock, gate, ws)
    }

    fn user(session: &str, wc: &str, text: &str) -> TurnInput {
        TurnInput::new(session, Role::User, text).in_context(wc)
    }

    /// Ingests `turns` into workspace `w` and waits until the actors saw them.
    fn ingest(runtime: &ActorRuntime, turns: &[TurnInput]) {
        runtime.ingest("w", turns).unwrap();
        runtime.settle().unwrap();
    }

    /// The gate's depth decides what a capture takes from each turn, and
    /// every entry says which gate generation made its context dirty.
    #[test]
    fn the_gates_depth_is_honoured() {
        let (_dir, runtime, _clock, _gate, ws) = start();
        ingest(
            &runtime,
            &[
                user("s1", "launch", "We decided to ship on Friday."),
                user(
                    "s1",
                    "launch",
                    "secret: we decided to let Bob go. TODO: tell HR.",
                ),
                user("s1", "launch", "aside: TODO buy milk."),
                user(
                    "s1",
                    "launch",
                    "quick: TODO email Ana. Stopping here, start drafting.",
                ),
                TurnInput::new(
                    "s1",
                    Role::Assistant,
                    "tell: Decision: we'll use the blue logo. I need to check the font.",
                )
                .in_context("launch"),
            ],
        );
        let report = runtime.capture("w", "launch").unwrap();
        let mut got: Vec<String> = report
            .entries
            .iter()
            .filter(|e| e.kind != EntryKind::SessionSummaryRef)
            .map(|e| format!("{} {}", e.kind, e.content))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                "key_decision We decided to ship on Friday.",
                "key_decision tell: Decision: we'll use the blue logo.",
                "task I need to check the font.",
                "task quick: TODO email Ana.",
                "work_phase_change Work phase: drafting",
            ]
        );
        let live = ws.entries(&EntryFilter::default()).unwrap();
        for v in &live {
            assert!(!v.entry.content.contains("Bob"), "{v:?}");
            assert!(!v.entry.content.contains("milk"), "{v:?}");
            assert_eq!(
                v.entry.gate_generation.as_deref(),
                Some("scripted@abc#7"),
                "{v:?}"
            );
        }
    }

    /// A context whose new turns are all do-not-collect never becomes
    /// dirty, so no trigger captures it; its neighbour with ordinary turns
    /// is captured. The gate is told the context's phase.
    #[test]
    fn do_not_collect_stops_a_capture_and_the_phase_reaches_the_gate() {
        let (_dir, runtime, clock, gate, _ws) = start();
        let private: Vec<TurnInput> = (0..4)
            .map(|i| {
                user(
                    "p1",
                    "private",
                    &format!("secret: item {i} for the record."),
                )
            })
            .collect();
        runtime.ingest("w", &private).unwrap();
        ingest(
            &runtime,
            &[
                user("s1", "launch", "Time to start drafting the plan."),
                user("s1", "launch", "Sections one and two."),
                user("s1", "launch", "Then the budget."),
            ],
        );
        clock.advance(Duration::hours(1));
        let fired: Vec<(String, Trigger)> = runtime
            .tick()
            .unwrap()
            .into_iter()
            .map(|r| (r.work_context, r.trigger))
            .collect();
        assert_eq!(fired, [("launch".to_owned(), Trigger::IdleTimeout)]);
        // The capture recorded the drafting phase; the next turn's gate
        // call is told so.
        ingest(&runtime, &[user("s1", "launch", "Next, the intro.")]);
        let phases = gate.phases.lock();
        assert_eq!(
            phases.last().cloned().flatten().as_deref(),
            Some("drafting")
        );
        assert_eq!(phases[0], None);
    }

    /// A context record of the earlier layout (every session's mark in it)
    /// still counts, and the next capture moves its marks into records of
    /// their own: the record keeps only the marks that capture set, and
    /// erasing a session takes its mark with it.
    #[test]
    fn marks_move_out_of_a_record_of_the_earlier_layout() {
        use cairn_memory::ForgetTarget;
        use cairn_memory::store::StateKey;

        let (_dir, runtime, _clock, _gate, ws) = start();
        ingest(
            &runtime,
            &[
                user("s1", "launch", "We decided to ship on Friday."),
                user("s1", "launch", "TODO: tell HR."),
                user("s2", "launch", "We decided to use the blue logo."),
            ],
        );
        let record_key = StateKey::CaptureMark {
            work_context: "launch".into(),
        };
        let mark_key = |session: &str| StateKey::SessionMark {
            work_context: "launch".into(),
            session: session.into(),
        };
        let mark = |session: &str| {
            ws.state_get(&mark_key(session))
                .unwrap()
                .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
        };
        // As an earlier build left it: s1 captured whole, s2 not at all.
        ws.state_put(
            &record_key,
            br#"{"high_water":{"s1":2},"last_capture_at":null,"phase":null,"captures":[]}"#,
        )
        .unwrap();
        // What a capture of the context took: (session, from, to) per span.
        let capture = || -> Vec<(String, u64, u64)> {
            let report = runtime.capture("w", "launch").unwrap();
            report
                .spans
                .into_iter()
                .map(|p| (p.session.to_string(), p.from_seq, p.to_seq))
                .collect()
        };
        assert_eq!(capture(), [("s2".to_owned(), 0, 0)]);
        let record: crate::capture::ContextRecord =
            serde_json::from_slice(&ws.state_get(&record_key).unwrap().unwrap()).unwrap();
        assert_eq!(
            record.high_water,
            std::collections::BTreeMap::from([("s2".to_owned(), 1)])
        );
        assert_eq!((mark("s1"), mark("s2")), (Some(2), Some(1)));

        // The next turn of s1 is captured from its own mark.
        ingest(&runtime, &[user("s1", "launch", "We decided to hire Ana.")]);
        assert_eq!(capture(), [("s1".to_owned(), 2, 2)]);
        assert_eq!((mark("s1"), mark("s2")), (Some(3), Some(1)));

        ws.forget(&ForgetTarget::Session("s1".into()), "test")
            .unwrap();
        assert_eq!((mark("s1"), mark("s2")), (None, Some(1)));
    }
}
