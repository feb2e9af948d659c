//! The vocabulary shared by the three worlds (the WIT `types` interface):
//! turns, roles, activity, extraction depth and reason codes.
//!
//! Every enum here mirrors a WIT enum case for case, in the host's own types
//! (serde-ready, `#[non_exhaustive]` because a later WIT version may add
//! cases); conversions to and from the generated bindings stay crate-private.

use serde::{Deserialize, Serialize};

use crate::bindings::significance::cairn::policy::types as wit;
use crate::digest::{Digester, Feed};

/// Declares a host enum that mirrors a WIT enum case for case, with
/// conversions both ways and kebab-case serde names (the WIT spelling).
macro_rules! mirror_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident <=> $wit:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
    ) => {
        named_enum! {
            $(#[$meta])*
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            #[non_exhaustive]
            pub enum $name {
                $( $(#[$vmeta])* $variant = $text, )*
            }
            /// The case's name in the WIT package (kebab-case).
            fn as_str;
        }

        #[allow(unreachable_patterns, reason = "some mirrors are only lowered or only lifted")]
        impl From<$name> for $wit {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $wit::$variant, )*
                }
            }
        }

        impl From<$wit> for $name {
            fn from(value: $wit) -> Self {
                match value {
                    $( $wit::$variant => $name::$variant, )*
                }
            }
        }

        impl $crate::digest::Feed for $name {
            #[inline]
            fn feed(&self, h: &mut $crate::digest::Digester) {
                h.update(self.as_str().as_bytes());
                h.put([0xff]);
            }
        }
    };
}
pub(crate) use mirror_enum;

use wit::{
    ActivityType as WitActivityType, EntryKind as WitEntryKind,
    ExtractionDepth as WitExtractionDepth, ReasonCode as WitReasonCode,
    SessionKind as WitSessionKind, TurnRole as WitTurnRole, WorkPhase as WitWorkPhase,
};

mirror_enum! {
    /// Which kind of session a turn belongs to.
    pub enum SessionKind <=> WitSessionKind {
        /// A conversation a person is having with the agent.
        Main = "main",
        /// A session spawned by another session's agent.
        SubAgent = "sub-agent",
        /// A scheduled, unattended session.
        Cron = "cron",
    }
}

mirror_enum! {
    /// Who produced a turn.
    pub enum TurnRole <=> WitTurnRole {
        /// A person.
        User = "user",
        /// The agent.
        Assistant = "assistant",
        /// The output of a tool call.
        Tool = "tool",
        /// A system message.
        System = "system",
    }
}

mirror_enum! {
    /// What the user is doing right now, as classified by routing ("find",
    /// "research", "look up", "analyze" are `Research`; see docs/DESIGN.md,
    /// *Activity types and work phases*).
    pub enum ActivityType <=> WitActivityType {
        /// Finding things out.
        Research = "research",
        /// Writing.
        Drafting = "drafting",
        /// Talking to people.
        Communication = "communication",
        /// Planning.
        Strategic = "strategic",
        /// Operating things.
        Operational = "operational",
        /// Remembering.
        Recall = "recall",
        /// Not classified.
        Unknown = "unknown",
    }
}

mirror_enum! {
    /// The dominant phase of a work context (see docs/DESIGN.md,
    /// *Activity types and work phases*).
    pub enum WorkPhase <=> WitWorkPhase {
        /// Research.
        Research = "research",
        /// Drafting.
        Drafting = "drafting",
        /// Review.
        Review = "review",
        /// Revision.
        Revision = "revision",
        /// Waiting on someone else.
        WaitingForExternal = "waiting-for-external",
        /// Done.
        Completed = "completed",
        /// Paused.
        Paused = "paused",
        /// Not known.
        Unknown = "unknown",
    }
}

mirror_enum! {
    /// How deeply to extract.
    pub enum ExtractionDepth <=> WitExtractionDepth {
        /// Nothing is extracted; the raw record keeps the turn regardless.
        None = "none",
        /// Shallow.
        Shallow = "shallow",
        /// Standard.
        Standard = "standard",
        /// Deep.
        Deep = "deep",
    }
}

mirror_enum! {
    /// The kinds of memory-log entry.
    pub enum EntryKind <=> WitEntryKind {
        /// A task.
        Task = "task",
        /// A fact.
        Fact = "fact",
        /// A decision.
        Decision = "decision",
        /// A question.
        Question = "question",
        /// A hand-off.
        Handoff = "handoff",
        /// A pointer to a session summary.
        SessionSummaryRef = "session-summary-ref",
        /// An open question.
        OpenQuestion = "open-question",
        /// A key decision.
        KeyDecision = "key-decision",
        /// An update made in another conversation.
        CrossConversationUpdate = "cross-conversation-update",
        /// A change of work phase.
        WorkPhaseChange = "work-phase-change",
    }
}

/// Declares [`ReasonCode`]: the WIT `reason-code` cases plus the codes only
/// the host may give.
macro_rules! reason_codes {
    (
        wit { $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )* }
        host { $( $(#[$hmeta:meta])* $hvariant:ident = $htext:literal, )* }
    ) => {
        /// Why a decision came out the way it did.
        ///
        /// The plugin-facing cases mirror the WIT `reason-code` enum; the
        /// host adds [`FailSafe`](ReasonCode::FailSafe),
        /// [`PluginFault`](ReasonCode::PluginFault) and
        /// [`CircuitOpen`](ReasonCode::CircuitOpen) to decisions it makes in
        /// a plugin's place. A plugin cannot return those.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ReasonCode {
            $( $(#[$vmeta])* $variant, )*
            $( $(#[$hmeta])* $hvariant, )*
        }

        serde_by_name!(ReasonCode::as_str, [$($variant,)* $($hvariant),*]);

        impl ReasonCode {
            /// The code as written in the WIT package and the decision log.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( ReasonCode::$variant => $text, )*
                    $( ReasonCode::$hvariant => $htext, )*
                }
            }

            /// Whether only the host may give this code.
            pub fn is_host_only(self) -> bool {
                matches!(self, $( ReasonCode::$hvariant )|*)
            }
        }

        impl From<WitReasonCode> for ReasonCode {
            fn from(value: WitReasonCode) -> Self {
                match value {
                    $( WitReasonCode::$variant => ReasonCode::$variant, )*
                }
            }
        }
    };
}

reason_codes! {
    wit {
        /// The plugin's default rule applied.
        DefaultRule = "default-rule",
        /// A plugin-specific reason, explained in the decision's note.
        Custom = "custom",
        /// The score reached the threshold.
        AboveThreshold = "above-threshold",
        /// The score stayed below the threshold.
        BelowThreshold = "below-threshold",
        /// The threshold was lowered for research in an active work context
        /// (base × 0.6).
        ResearchThreshold = "research-threshold",
        /// A user turn.
        UserTurn = "user-turn",
        /// An assistant turn.
        AssistantTurn = "assistant-turn",
        /// A tool turn.
        ToolTurn = "tool-turn",
        /// A system turn.
        SystemTurn = "system-turn",
        /// Decision language ("we decided", "let's go with").
        DecisionLanguage = "decision-language",
        /// Task language ("need to", "deadline").
        TaskLanguage = "task-language",
        /// The turn asks a question.
        Question = "question",
        /// Hand-off language ("next steps", "pick up").
        HandoffLanguage = "handoff-language",
        /// Preference language ("I prefer", "call me").
        PreferenceLanguage = "preference-language",
        /// Known entities were mentioned.
        EntityMention = "entity-mention",
        /// A very short turn.
        ShortTurn = "short-turn",
        /// A bare acknowledgement.
        Acknowledgement = "acknowledgement",
        /// A sub-agent session.
        SubAgentSession = "sub-agent-session",
        /// A cron session.
        CronSession = "cron-session",
        /// The session belongs to no work context.
        NoWorkContext = "no-work-context",
        /// The host's pattern tier matched.
        PatternMatch = "pattern-match",
        /// A keyword or phrase criterion matched.
        CriterionMatch = "criterion-match",
        /// A subject criterion matched.
        SubjectMatch = "subject-match",
        /// The lexical tier scored the input as relevant.
        LexicalMatch = "lexical-match",
        /// The lexical similarity was weak.
        WeakLexicalMatch = "weak-lexical-match",
        /// Nothing linked the input to the topic.
        NoMatch = "no-match",
        /// The input lies outside the topic's source scope.
        OutOfScope = "out-of-scope",
        /// The topic collects only when asked.
        ManualActivation = "manual-activation",
        /// The topic's priority bypassed the lexical tier.
        PriorityBypass = "priority-bypass",
        /// The object belongs to the requesting work context.
        SameContext = "same-context",
        /// The object belongs to another work context.
        CrossContext = "cross-context",
        /// Lineage allows the cross-context read.
        LineagePermitted = "lineage-permitted",
        /// Lineage does not allow the cross-context read.
        LineageDenied = "lineage-denied",
        /// The destination stays on this machine.
        LocalDestination = "local-destination",
        /// The destination leaves this machine.
        ExternalDestination = "external-destination",
        /// The object is personal.
        SensitivityPersonal = "sensitivity-personal",
        /// The object is confidential.
        SensitivityConfidential = "sensitivity-confidential",
        /// The object is secret.
        SensitivitySecret = "sensitivity-secret",
        /// The object came from a low-trust source.
        LowTrustSource = "low-trust-source",
        /// The principal is the user (or an operator).
        PrincipalUser = "principal-user",
        /// The principal is an agent.
        PrincipalAgent = "principal-agent",
        /// The principal is unknown.
        PrincipalUnknown = "principal-unknown",
        /// The action exports or carries content over.
        ExportRequested = "export-requested",
        /// Learning is restricted.
        LearningRestricted = "learning-restricted",
        /// Mutation is restricted.
        MutationRestricted = "mutation-restricted",
    }
    host {
        /// The host applied the world's fail-safe decision.
        FailSafe = "fail-safe",
        /// The plugin faulted on this call (see the decision's fault).
        PluginFault = "plugin-fault",
        /// The plugin's circuit breaker is open; it was not called.
        CircuitOpen = "circuit-open",
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the host knows of one turn. Plugins get values, never a storage
/// handle.
///
/// ```
/// use cairn_policies::{TurnRole, TurnView};
///
/// let turn = TurnView::new("s-1", 7, TurnRole::User, "We decided to ship on Friday.");
/// assert_eq!(turn.work_context_id, None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnView {
    /// The session's id.
    pub session_id: String,
    /// The session's kind.
    pub session_kind: SessionKind,
    /// The work context the session belongs to, if any.
    pub work_context_id: Option<String>,
    /// The turn's gapless sequence number within its session.
    pub seq: u64,
    /// Who produced it.
    pub role: TurnRole,
    /// Its text, as stored in the raw record.
    pub text: String,
    /// For tool turns: the tool's name.
    pub tool_name: Option<String>,
    /// Entities (subject slugs) the host recognised in the text.
    pub entity_mentions: Vec<String>,
}

impl TurnView {
    /// A turn of a main session, in no work context, with no tool and no
    /// entity mentions; set the other public fields as needed.
    pub fn new(session_id: &str, seq: u64, role: TurnRole, text: &str) -> TurnView {
        TurnView {
            session_id: session_id.to_owned(),
            session_kind: SessionKind::Main,
            work_context_id: None,
            seq,
            role,
            text: text.to_owned(),
            tool_name: None,
            entity_mentions: Vec::new(),
        }
    }

    pub(crate) fn to_wit(&self) -> wit::TurnView {
        wit::TurnView {
            session_id: self.session_id.clone(),
            session_kind: self.session_kind.into(),
            work_context_id: self.work_context_id.clone(),
            seq: self.seq,
            role: self.role.into(),
            text: self.text.clone(),
            tool_name: self.tool_name.clone(),
            entity_mentions: self.entity_mentions.clone(),
        }
    }
}

impl Feed for TurnView {
    fn feed(&self, h: &mut Digester) {
        self.session_id.feed(h);
        self.session_kind.feed(h);
        self.work_context_id.feed(h);
        self.seq.feed(h);
        self.role.feed(h);
        self.text.feed(h);
        self.tool_name.feed(h);
        self.entity_mentions.feed(h);
    }
}

/// The text of canary turns: about 1 KB of ordinary prose, the size of a
/// typical turn, so a canary call touches the memory a real one needs.
pub(crate) fn canary_text() -> String {
    "The canary checks that a new plugin generation decides before it serves. \
     We decided nothing here; this is an ordinary turn of ordinary length. "
        .repeat(7)
}
