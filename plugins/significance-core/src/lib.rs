//! The default significance policy as plain Rust: is a turn worth capturing,
//! and how deeply?
//!
//! This crate has no dependencies and does not allocate, so the same code
//! runs inside the `significance-default` wasm component and natively in the
//! host's benchmark (the "same policy compiled natively" baseline).
//!
//! The policy scores a turn in [0, 1] from its role, a single pass over its
//! words (decision, task, hand-off and preference language), questions,
//! entity mentions and length, then compares the score with a threshold. The
//! threshold is the host's base threshold, lowered by the research multiplier
//! when the user is researching inside an active work context
//! (`0.5 × 0.6 = 0.3`; see docs/DESIGN.md,
//! *Significance gate and capture depth*).
//!
//! ```
//! use significance_core::*;
//!
//! let turn = Turn {
//!     role: Role::User,
//!     session_kind: SessionKind::Main,
//!     text: "We decided to go with Postgres for the job queue.",
//!     entity_mentions: 1,
//!     has_work_context: true,
//! };
//! let eval = evaluate(&turn, &Context::default());
//! assert!(eval.captures());
//! assert!(eval.reasons.contains(Reason::DecisionLanguage));
//! ```
#![no_std]

/// Who produced a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A person.
    User,
    /// The agent.
    Assistant,
    /// A tool's output.
    Tool,
    /// A system message.
    System,
}

/// Which kind of session a turn belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKind {
    /// A person's conversation.
    Main,
    /// Spawned by another session's agent.
    SubAgent,
    /// Scheduled and unattended.
    Cron,
}

/// The routing classification of the current activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// "find", "research", "look up", "analyze".
    Research,
    /// Any other activity.
    Other,
}

/// What the policy sees of one turn.
#[derive(Clone, Copy, Debug)]
pub struct Turn<'a> {
    /// Who produced it.
    pub role: Role,
    /// Its session's kind.
    pub session_kind: SessionKind,
    /// Its text.
    pub text: &'a str,
    /// How many known entities the host recognised in it.
    pub entity_mentions: usize,
    /// Whether its session belongs to a work context.
    pub has_work_context: bool,
}

/// The moment the turn arrived in.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    /// What the user is doing.
    pub activity: Activity,
    /// Whether a work context is live.
    pub has_active_work_context: bool,
    /// The base threshold (default 0.5).
    pub base_threshold: f32,
    /// The research multiplier (default 0.6).
    pub research_multiplier: f32,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            activity: Activity::Other,
            has_active_work_context: true,
            base_threshold: DEFAULT_BASE_THRESHOLD,
            research_multiplier: DEFAULT_RESEARCH_MULTIPLIER,
        }
    }
}

/// The default base threshold.
pub const DEFAULT_BASE_THRESHOLD: f32 = 0.5;
/// The default research multiplier (`0.5 × 0.6 = 0.3`).
pub const DEFAULT_RESEARCH_MULTIPLIER: f32 = 0.6;

/// What to do with the turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collection {
    /// Extract nothing.
    DoNotCollect,
    /// Extract nothing; count the turn as activity.
    ObserveOnly,
    /// Extract candidates.
    ExtractCandidate,
    /// Extract durable-eligible entries.
    ExtractDurableEligible,
    /// Extract deeply.
    DeepExtract,
}

/// How deeply to extract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Not at all.
    None,
    /// Shallow.
    Shallow,
    /// Standard.
    Standard,
    /// Deep.
    Deep,
}

/// Why the policy decided as it did (a subset of the WIT `reason-code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reason {
    /// The score reached the threshold.
    AboveThreshold,
    /// The score stayed below it.
    BelowThreshold,
    /// The threshold was lowered for research.
    ResearchThreshold,
    /// A user turn.
    UserTurn,
    /// An assistant turn.
    AssistantTurn,
    /// A tool turn.
    ToolTurn,
    /// A system turn.
    SystemTurn,
    /// Decision language.
    DecisionLanguage,
    /// Task language.
    TaskLanguage,
    /// A question.
    Question,
    /// Hand-off language.
    HandoffLanguage,
    /// Preference language.
    PreferenceLanguage,
    /// Known entities were mentioned.
    EntityMention,
    /// A very short turn.
    ShortTurn,
    /// A bare acknowledgement.
    Acknowledgement,
    /// A sub-agent session.
    SubAgentSession,
    /// A cron session.
    CronSession,
    /// No work context.
    NoWorkContext,
}

impl Reason {
    const ALL: [Reason; 18] = [
        Reason::AboveThreshold,
        Reason::BelowThreshold,
        Reason::ResearchThreshold,
        Reason::UserTurn,
        Reason::AssistantTurn,
        Reason::ToolTurn,
        Reason::SystemTurn,
        Reason::DecisionLanguage,
        Reason::TaskLanguage,
        Reason::Question,
        Reason::HandoffLanguage,
        Reason::PreferenceLanguage,
        Reason::EntityMention,
        Reason::ShortTurn,
        Reason::Acknowledgement,
        Reason::SubAgentSession,
        Reason::CronSession,
        Reason::NoWorkContext,
    ];
}

/// A set of reasons, in a fixed order, without allocating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasonSet(u32);

impl ReasonSet {
    /// Adds a reason.
    pub fn insert(&mut self, reason: Reason) {
        self.0 |= 1 << reason as u8;
    }

    /// Whether the set holds `reason`.
    pub fn contains(&self, reason: Reason) -> bool {
        self.0 & (1 << reason as u8) != 0
    }

    /// How many reasons the set holds.
    pub fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The reasons, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = Reason> + '_ {
        Reason::ALL.into_iter().filter(|r| self.contains(*r))
    }
}

/// The policy's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// What to do.
    pub collection: Collection,
    /// How deeply.
    pub depth: Depth,
    /// The score, in [0, 1].
    pub score: f32,
    /// The threshold it was compared with, in [0, 1].
    pub threshold: f32,
    /// Why.
    pub reasons: ReasonSet,
}

impl Evaluation {
    /// Whether the turn is captured (anything is extracted).
    pub fn captures(&self) -> bool {
        self.depth != Depth::None
    }
}

/// The threshold for this context: the base, times the research multiplier
/// when the user researches inside an active work context.
/// Inputs outside [0, 1] (or NaN) are clamped.
pub fn threshold(ctx: &Context) -> f32 {
    let base = clamp01(ctx.base_threshold);
    if ctx.activity == Activity::Research && ctx.has_active_work_context {
        clamp01(base * clamp01(ctx.research_multiplier))
    } else {
        base
    }
}

/// Scores and decides about one turn.
pub fn evaluate(turn: &Turn<'_>, ctx: &Context) -> Evaluation {
    let mut reasons = ReasonSet::default();
    let mut score: f32 = match turn.role {
        Role::User => {
            reasons.insert(Reason::UserTurn);
            0.30
        }
        Role::Assistant => {
            reasons.insert(Reason::AssistantTurn);
            0.20
        }
        Role::Tool => {
            reasons.insert(Reason::ToolTurn);
            0.10
        }
        Role::System => {
            reasons.insert(Reason::SystemTurn);
            0.05
        }
    };

    let words = scan(turn.text);
    if words.decision {
        reasons.insert(Reason::DecisionLanguage);
        score += 0.30;
    }
    if words.task {
        reasons.insert(Reason::TaskLanguage);
        score += 0.20;
    }
    if words.handoff {
        reasons.insert(Reason::HandoffLanguage);
        score += 0.20;
    }
    if words.preference {
        reasons.insert(Reason::PreferenceLanguage);
        score += 0.25;
    }
    // Facts about the person: what they say of their life is worth a
    // shallow read (reported as preference language, the WIT's code for
    // what the user states about themselves).
    if words.personal && turn.role == Role::User && !words.preference {
        reasons.insert(Reason::PreferenceLanguage);
        score += 0.25;
    }
    if words.question && turn.role == Role::User {
        reasons.insert(Reason::Question);
        score += 0.10;
    }
    // An open loop ("open question", "figure out", "come back to", "not
    // sure") is a question even without its mark, and what capture keeps.
    if words.open_loop && turn.role == Role::User {
        reasons.insert(Reason::Question);
        score += 0.20;
    }
    // The work moved to another phase ("start drafting", "ready for
    // review", "waiting on"): where the work stands, like a handoff.
    if words.phase && turn.role == Role::User {
        reasons.insert(Reason::HandoffLanguage);
        score += 0.20;
    }
    if turn.entity_mentions > 0 {
        reasons.insert(Reason::EntityMention);
        score += 0.05 * turn.entity_mentions.min(3) as f32;
    }
    if turn.text.trim().len() < 20 {
        reasons.insert(Reason::ShortTurn);
        score -= 0.15;
    }
    if words.acknowledgement_only {
        reasons.insert(Reason::Acknowledgement);
        score = score.min(0.05);
    }
    match turn.session_kind {
        SessionKind::Main => {}
        SessionKind::SubAgent => {
            reasons.insert(Reason::SubAgentSession);
            score *= 0.8;
        }
        SessionKind::Cron => {
            reasons.insert(Reason::CronSession);
            score *= 0.6;
        }
    }
    if !turn.has_work_context {
        reasons.insert(Reason::NoWorkContext);
    }
    let score = clamp01(score);

    let threshold = threshold(ctx);
    if threshold < clamp01(ctx.base_threshold) {
        reasons.insert(Reason::ResearchThreshold);
    }

    let (collection, depth) = if score >= threshold {
        reasons.insert(Reason::AboveThreshold);
        if score >= 0.85 {
            (Collection::DeepExtract, Depth::Deep)
        } else if score >= threshold + 0.25 {
            (Collection::ExtractDurableEligible, Depth::Standard)
        } else {
            (Collection::ExtractCandidate, Depth::Shallow)
        }
    } else {
        reasons.insert(Reason::BelowThreshold);
        if score >= threshold / 2.0 {
            (Collection::ObserveOnly, Depth::None)
        } else {
            (Collection::DoNotCollect, Depth::None)
        }
    };

    Evaluation {
        collection,
        depth,
        score,
        threshold,
        reasons,
    }
}

fn clamp01(x: f32) -> f32 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

/// What one pass over the words found.
#[derive(Default)]
struct Words {
    decision: bool,
    task: bool,
    handoff: bool,
    preference: bool,
    /// A first-person statement about the speaker's life ("I moved",
    /// "my daughter", "I'm allergic"): what capture's facts come from.
    personal: bool,
    question: bool,
    open_loop: bool,
    phase: bool,
    acknowledgement_only: bool,
}

/// A word's key: its first 7 bytes, lowercased, packed into the low 56
/// bits, and its length (capped at 255) in the top 8. Classifying a word is
/// then one integer `match`, not a string comparison per keyword. Two words
/// share a key only if they are longer than 7 bytes, share their first 7
/// and have the same length: fine for a heuristic (no two keywords do).
const fn key(word: &[u8]) -> u64 {
    let mut k = 0u64;
    let mut i = 0;
    while i < word.len() && i < 7 {
        k = (k << 8) | word[i] as u64;
        i += 1;
    }
    k | ((if word.len() > 255 { 255 } else { word.len() }) as u64) << 56
}

/// Declares one `const` key per keyword, named after it.
macro_rules! keys {
    ($($name:ident = $word:literal,)*) => {
        $(const $name: u64 = key($word);)*
    };
}

keys! {
    DECIDED = b"decided", DECIDE = b"decide", DECISION = b"decision", AGREED = b"agreed",
    CHOSE = b"chose", SETTLED = b"settled", COMMIT = b"commit", COMMITTING = b"committing",
    APPROVED = b"approved", WITH = b"with", GO = b"go", GOING = b"going",
    TODO = b"todo", TASK = b"task", TASKS = b"tasks", DEADLINE = b"deadline", DUE = b"due",
    REMIND = b"remind", REMINDER = b"reminder", MUST = b"must", TO = b"to", NEED = b"need",
    NEEDS = b"needs", HAVE = b"have", HAS = b"has",
    HANDOFF = b"handoff", HANDOVER = b"handover", RESUME = b"resume", STEPS = b"steps",
    NEXT = b"next", UP = b"up", PICK = b"pick", PICKS = b"picks", OFF = b"off", HAND = b"hand",
    HANDING = b"handing",
    PREFER = b"prefer", PREFERS = b"prefers", PREFERENCE = b"preference", ALWAYS = b"always",
    NEVER = b"never", ME = b"me", CALL = b"call",
    OK = b"ok", OKAY = b"okay", K = b"k", THANKS = b"thanks", THANK = b"thank", YOU = b"you",
    TY = b"ty", YES = b"yes", NO = b"no", SURE = b"sure", COOL = b"cool", GREAT = b"great",
    NICE = b"nice", GOT = b"got", IT = b"it",
    OPEN = b"open", QUESTION = b"question", FIGURE = b"figure", OUT = b"out", COME = b"come",
    BACK = b"back", NOT = b"not", LATER = b"later", THAT = b"that",
    DRAFTING = b"drafting", REVIEW = b"review", REVIEWING = b"reviewing",
    REVISION = b"revision", REVISING = b"revising", RESEARCHING = b"researching",
    WAITING = b"waiting", BLOCKED = b"blocked", SHIPPED = b"shipped", COMPLETED = b"completed",
    I = b"i", MY = b"my", IM = b"i'm", IVE = b"i've",
    LIVE = b"live", MOVED = b"moved", LOVE = b"love", LIKE = b"like", ENJOY = b"enjoy",
    HATE = b"hate", WORK = b"work", WENT = b"went", STARTED = b"started", JOINED = b"joined",
    BOUGHT = b"bought", ADOPTED = b"adopted", VISITED = b"visited", ATTENDED = b"attended",
    PAINTED = b"painted", GREW = b"grew", FEEL = b"feel", FELT = b"felt", STUDY = b"study",
    HAD = b"had", TOOK = b"took", MET = b"met", LEARNED = b"learned", USUALLY = b"usually",
    KIDS = b"kids", SON = b"son", DAUGHTER = b"daughter", HUSBAND = b"husband", WIFE = b"wife",
    PARTNER = b"partner", FAMILY = b"family", MOM = b"mom", DAD = b"dad", MOTHER = b"mother",
    FATHER = b"father", SISTER = b"sister", BROTHER = b"brother", PARENTS = b"parents",
    FRIEND = b"friend", FRIENDS = b"friends", DOG = b"dog", CAT = b"cat", JOB = b"job",
    HOME = b"home", HOUSE = b"house", DOCTOR = b"doctor", FAVORITE = b"favorite",
    HOBBY = b"hobby", BOSS = b"boss", ALLERGIC = b"allergic", MOVING = b"moving",
    PLANNING = b"planning", LEARNING = b"learning", WORKING = b"working",
    STUDYING = b"studying", VEGAN = b"vegan", BEEN = b"been",
}

/// For each byte: 0 if it separates words, else the byte lowercased
/// (ASCII letters and digits, and the apostrophe, make words).
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || c == b'\'' {
            t[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    t
};

/// One pass over the text; each word is classified with the word before
/// it (for "go with", "need to", "next steps", "pick up", "hand off",
/// "call me").
fn scan(text: &str) -> Words {
    let mut found = Words::default();
    let mut words = 0usize;
    let mut acknowledgements = 0usize;
    let mut prefix = 0u64;
    let mut len = 0usize;
    let mut prev = 0u64;
    let mut end_word = |prefix: u64, len: usize, found: &mut Words| {
        words += 1;
        let k = prefix | (len.min(255) as u64) << 56;
        classify(k, prev, found, &mut acknowledgements);
        prev = k;
    };
    for &b in text.as_bytes() {
        let c = CLASS[b as usize];
        if c != 0 {
            if len < 7 {
                prefix = (prefix << 8) | c as u64;
            }
            len += 1;
        } else {
            if len > 0 {
                end_word(prefix, len, &mut found);
                prefix = 0;
                len = 0;
            }
            if b == b'?' {
                found.question = true;
            }
        }
    }
    if len > 0 {
        end_word(prefix, len, &mut found);
    }
    found.acknowledgement_only = words > 0 && words <= 3 && acknowledgements == words;
    found
}

fn classify(word: u64, prev: u64, found: &mut Words, acknowledgements: &mut usize) {
    match word {
        DECIDED | DECIDE | DECISION | AGREED | CHOSE | SETTLED | COMMIT | COMMITTING | APPROVED => {
            found.decision = true
        }
        WITH if prev == GO || prev == GOING => found.decision = true,
        TODO | TASK | TASKS | DEADLINE | DUE | REMIND | REMINDER | MUST => found.task = true,
        TO if matches!(prev, NEED | NEEDS | HAVE | HAS) => found.task = true,
        HANDOFF | HANDOVER | RESUME => found.handoff = true,
        STEPS if prev == NEXT => found.handoff = true,
        UP if prev == PICK || prev == PICKS => found.handoff = true,
        OFF if prev == HAND || prev == HANDING => found.handoff = true,
        PREFER | PREFERS | PREFERENCE | ALWAYS | NEVER => found.preference = true,
        ME if prev == CALL => found.preference = true,
        QUESTION if prev == OPEN => found.open_loop = true,
        OUT if prev == FIGURE => found.open_loop = true,
        BACK if prev == COME => found.open_loop = true,
        SURE if prev == NOT => found.open_loop = true,
        LATER if prev == THAT => found.open_loop = true,
        DRAFTING | REVIEW | REVIEWING | REVISION | REVISING | RESEARCHING | WAITING | BLOCKED
        | SHIPPED | COMPLETED => found.phase = true,
        _ => {}
    }
    // A first-person statement about the speaker's life.
    let life = match prev {
        I => matches!(
            word,
            LIVE | MOVED
                | LOVE
                | LIKE
                | ENJOY
                | HATE
                | WORK
                | WENT
                | STARTED
                | JOINED
                | BOUGHT
                | ADOPTED
                | VISITED
                | ATTENDED
                | PAINTED
                | GREW
                | FEEL
                | FELT
                | STUDY
                | HAD
                | TOOK
                | MET
                | LEARNED
                | USUALLY
                | PREFER
                | ALWAYS
                | NEVER
                | GOT
        ),
        MY => matches!(
            word,
            KIDS | SON
                | DAUGHTER
                | HUSBAND
                | WIFE
                | PARTNER
                | FAMILY
                | MOM
                | DAD
                | MOTHER
                | FATHER
                | SISTER
                | BROTHER
                | PARENTS
                | FRIEND
                | FRIENDS
                | DOG
                | CAT
                | JOB
                | WORK
                | HOME
                | HOUSE
                | DOCTOR
                | FAVORITE
                | HOBBY
                | BOSS
        ),
        IM => matches!(
            word,
            ALLERGIC | MOVING | PLANNING | LEARNING | WORKING | STUDYING | VEGAN | GOING
        ),
        IVE => matches!(word, BEEN | STARTED | LEARNED | MOVED),
        _ => false,
    };
    // Any first-person statement counts: "I color-code my goals", "my
    // business", "I've been rehearsing" say something about the speaker
    // (capture's fact rules decide what is kept).
    if life || matches!(prev, I | IM | IVE) || word == MY {
        found.personal = true;
    }
    if matches!(
        word,
        OK | OKAY
            | K
            | THANKS
            | THANK
            | YOU
            | TY
            | YES
            | NO
            | SURE
            | COOL
            | GREAT
            | NICE
            | GOT
            | IT
    ) {
        *acknowledgements += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Turn<'_> {
        Turn {
            role: Role::User,
            session_kind: SessionKind::Main,
            text,
            entity_mentions: 0,
            has_work_context: true,
        }
    }

    #[test]
    fn research_lowers_the_threshold_by_the_multiplier() {
        let research = Context {
            activity: Activity::Research,
            ..Context::default()
        };
        assert!((threshold(&research) - 0.3).abs() < 1e-6);
        let idle = Context {
            has_active_work_context: false,
            ..research
        };
        assert!((threshold(&idle) - 0.5).abs() < 1e-6);
    }

    #[test]
    fn a_plain_research_note_passes_only_the_lowered_gate() {
        let mut turn = user("Look up how the Ninth Circuit reads scienter in securities fraud");
        turn.entity_mentions = 1;
        let normal = evaluate(&turn, &Context::default());
        assert!(!normal.captures(), "{normal:?}");
        let research = Context {
            activity: Activity::Research,
            ..Context::default()
        };
        let lowered = evaluate(&turn, &research);
        assert!(lowered.captures(), "{lowered:?}");
        assert!(lowered.reasons.contains(Reason::ResearchThreshold));
    }

    #[test]
    fn what_the_user_says_of_their_life_is_read_shallowly() {
        let eval = evaluate(
            &user("I moved to Lisbon with my family in March."),
            &Context::default(),
        );
        assert!(eval.reasons.contains(Reason::PreferenceLanguage));
        assert_eq!(eval.depth, Depth::Shallow);
        // Small talk with no first-person statement is not.
        let eval = evaluate(
            &user("Wow, that sounds like a lovely trip there."),
            &Context::default(),
        );
        assert_eq!(eval.depth, Depth::None);
    }

    #[test]
    fn acknowledgements_are_not_collected() {
        let eval = evaluate(&user("ok thanks"), &Context::default());
        assert_eq!(eval.collection, Collection::DoNotCollect);
        assert!(eval.reasons.contains(Reason::Acknowledgement));
    }

    #[test]
    fn strong_turns_are_extracted_deeply() {
        let eval = evaluate(
            &user(
                "We decided to go with sled. I need to finish the handoff notes; I prefer short ones.",
            ),
            &Context::default(),
        );
        assert_eq!(eval.collection, Collection::DeepExtract);
        assert_eq!(eval.depth, Depth::Deep);
    }

    /// The open loops and phase changes capture keeps reach the threshold.
    #[test]
    fn open_loops_and_phase_changes_are_collected() {
        for text in [
            "Open question: do we ship on Monday or Tuesday?",
            "Time to start drafting.",
            "I'll come back to the pricing.",
            "The draft is ready for review.",
        ] {
            let eval = evaluate(&user(text), &Context::default());
            assert!(eval.captures(), "{text}: {eval:?}");
        }
        assert!(scan("not sure yet").open_loop);
        assert!(!scan("sure").open_loop);
        assert!(!evaluate(&user("Is it raining outside today?"), &Context::default()).captures());
    }

    #[test]
    fn bigrams_need_their_first_word() {
        assert!(scan("let's go with it").decision);
        assert!(!scan("with it").decision);
        assert!(scan("next steps are").handoff);
        assert!(scan("call me Will").preference);
    }
}
