//! Keeping memory current: what later turns settle, and what restates a
//! live entry.
//!
//! Capture (in the actors) calls these pure rules on the sentences of the
//! user turns it processes, so that an answered question or a finished task
//! does not stay open, and the same decision said twice is one entry. Every
//! rule is deterministic, compares words only (no model), and is
//! deliberately narrow: leaving a loop open costs a line in a card, closing
//! one that is still open loses it.
//!
//! **Settling** ([`settles`]): a statement (a user's sentence that is not a
//! question) in a turn *after* the loop's own turn closes
//!
//! - `answer.report`: an open question, or a task to find something out
//!   (ask, check, confirm, find out, look into…), when the statement
//!   reports an answer (someone *says*, *said*, *confirmed*, *told*,
//!   *agreed*; it *turns out*; *the answer is*…) and shares at least two
//!   salient terms with the loop ("Dana says support can take the waitlist
//!   one week after launch" answers "do we invite the waitlist in the first
//!   wave or a week later?": *waitlist*, *week*);
//! - `answer.decision`: an open question, or a task to choose something
//!   (pick, choose, decide, select, settle, agree on…), when the statement
//!   is a decision ("let's go with", "we decided"…) and either shares at
//!   least two salient terms with the loop, or — in the same session, at
//!   most four turns later — supplies the kind of value the loop asks for:
//!   a date for a loop about a date, day or deadline, a number for one
//!   about how many, how much, a price or a count ("We need to pick a
//!   launch date" is settled by "Let's go with April 1");
//! - `task.done`: a task, when the statement says it is done — a
//!   completion word (*done*, *finished*, *completed*, *taken care of*…)
//!   or the past tense of one of the task's own words (*booked* for
//!   "book the window", *sent* for "send the invite") — is not negated, is
//!   not itself a task, and shares at least two salient terms with it.
//!
//! Salient terms are the content words and values of a text (stopwords
//! dropped, stemmed), without the words of the pattern that made it a
//! question or task ("open question", "I need to", "remind me to"…).
//!
//! **Restating** ([`restatement`]): two texts of the same family of kinds
//! (decisions, questions, tasks, facts), with the same number of negations,
//! where the salient terms of one are all among those of the other (at
//! least two of them). The one with fewer terms says nothing the other does
//! not: "Let's go with April 1 and sync on" restates "Launch the Orion beta
//! on April 1 with sync enabled".

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::log::{EntryKind, EntryView, TaskStatus};
use crate::text::{is_value, negations, salient, stem, tokens};

/// A user's sentence that may settle an open loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// Its session.
    pub session: String,
    /// Its turn.
    pub seq: u64,
    /// When the turn was said.
    pub at: DateTime<Utc>,
    /// The sentence.
    pub text: String,
    /// It matched a decision pattern.
    pub decision: bool,
    /// It is a question or an open loop itself (never settles anything).
    pub question: bool,
    /// It matched a task pattern.
    pub task: bool,
}

/// The rule that settled a loop.
pub type Rule = &'static str;

/// Words that report an answer.
const REPORT_MARKERS: &[&str] = &[
    "says",
    "said",
    "confirmed",
    "confirms",
    "told me",
    "told us",
    "agreed",
    "agrees",
    "replied",
    "answered",
    "the answer is",
    "turns out",
    "turned out",
    "found out",
    "we know",
    "it's settled",
    "settled on",
    "got back",
];

/// Verbs of a task to find something out.
const INQUIRY_VERBS: &[&str] = &[
    "ask",
    "check",
    "confirm",
    "find",
    "look",
    "verify",
    "clarify",
    "research",
    "investigate",
    "figure",
    "learn",
    "enquire",
    "inquire",
];

/// Verbs of a task to choose something.
const CHOICE_VERBS: &[&str] = &[
    "pick",
    "choose",
    "decide",
    "select",
    "settle",
    "agree",
    "determine",
    "fix",
    "set",
    "figure",
];

/// Nouns that ask for a date.
const DATE_CUES: &[&str] = &[
    "date", "day", "when", "deadline", "schedule", "time", "week", "month",
];

/// Words that ask for a number.
const NUMBER_CUES: &[&str] = &[
    "many", "much", "number", "count", "price", "cost", "budget", "amount", "size", "limit",
];

/// Completion words.
const DONE_MARKERS: &[&str] = &[
    "done",
    "finished",
    "completed",
    "taken care of",
    "sorted out",
    "wrapped up",
    "checked off",
];

/// Irregular past forms: past → base.
const IRREGULAR_PAST: &[(&str, &str)] = &[
    ("sent", "send"),
    ("wrote", "write"),
    ("written", "write"),
    ("made", "make"),
    ("bought", "buy"),
    ("paid", "pay"),
    ("met", "meet"),
    ("spoke", "speak"),
    ("gave", "give"),
    ("took", "take"),
    ("built", "build"),
    ("found", "find"),
    ("got", "get"),
    ("ran", "run"),
    ("drew", "draw"),
    ("drawn", "draw"),
    ("read", "read"),
    ("set", "set"),
    ("put", "put"),
    ("shut", "shut"),
    ("left", "leave"),
    ("told", "tell"),
    ("sold", "sell"),
    ("began", "begin"),
    ("kept", "keep"),
];

/// The words of the open-loop and task patterns a text matched: they say
/// what kind of entry it is, not what it is about.
const LOOP_PATTERNS: &[&str] = &[
    "open question",
    "come back to",
    "deal with that later",
    "still need to figure out",
    "need to figure out",
    "not sure",
    "to be decided",
    "todo",
    "need to check",
    "action item",
    "i need to",
    "we need to",
    "i have to",
    "remember to",
    "remind me to",
    "next step",
];

/// A set of terms held compactly: sorted, distinct, joined by single
/// spaces in one string (a term is a stem of a token and never holds a
/// space). A [`Prepared`] reading is held for every live entry a capture
/// compares with, so its terms are one allocation, not a tree node and a
/// string per term.
///
/// ```
/// use cairn_memory::settle::{Terms, loop_terms};
/// let a = Terms::from(loop_terms("Send the signed contract to legal"));
/// let b = Terms::from(loop_terms("Send the contract"));
/// assert!(a.contains("contract") && !a.contains("the"));
/// assert!(b.is_subset(&a) && !a.is_subset(&b));
/// assert_eq!(a.iter().collect::<Vec<_>>(), ["contract", "legal", "send", "sign"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms(Box<str>);

impl Terms {
    /// The terms, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        crate::text::joined_words(&self.0)
    }

    /// How many terms.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `term` is one of them.
    pub fn contains(&self, term: &str) -> bool {
        self.iter().any(|t| t == term)
    }

    /// Whether every term of these is one of `other`'s (both sorted: one
    /// walk over each).
    pub fn is_subset(&self, other: &Terms) -> bool {
        let mut theirs = other.iter();
        self.iter()
            .all(|t| theirs.by_ref().find(|o| *o >= t).is_some_and(|o| o == t))
    }

    /// How many of these terms `other` holds.
    pub fn shared_with(&self, other: &BTreeSet<String>) -> usize {
        self.iter().filter(|t| other.contains(*t)).count()
    }
}

impl From<BTreeSet<String>> for Terms {
    /// The terms of `terms`. The terms [`loop_terms`] makes hold no space;
    /// a term that does counts as the words between its spaces, so the
    /// one string always splits back into the set it holds.
    fn from(terms: BTreeSet<String>) -> Terms {
        let words: BTreeSet<&str> = terms
            .iter()
            .flat_map(|t| crate::text::joined_words(t))
            .collect();
        Terms(
            words
                .into_iter()
                .collect::<Vec<_>>()
                .join(" ")
                .into_boxed_str(),
        )
    }
}

/// The salient terms of an open loop's text, without the words of the
/// pattern that made it one.
pub fn loop_terms(text: &str) -> BTreeSet<String> {
    let lower = text.to_lowercase();
    let mut pattern_words: BTreeSet<String> = BTreeSet::new();
    for p in LOOP_PATTERNS.iter().filter(|p| lower.contains(*p)) {
        pattern_words.extend(p.split(' ').map(stem));
    }
    salient(text)
        .into_iter()
        .filter(|t| !pattern_words.contains(t))
        .collect()
}

fn has(lower: &str, markers: &[&str]) -> bool {
    markers.iter().any(|m| {
        lower
            .match_indices(m)
            .any(|(at, _)| word_bounded(lower, at, m.len()))
    })
}

fn word_bounded(text: &str, at: usize, len: usize) -> bool {
    let before = text[..at].chars().next_back();
    let after = text[at + len..].chars().next();
    before.is_none_or(|c| !c.is_alphanumeric()) && after.is_none_or(|c| !c.is_alphanumeric())
}

/// What kind of value a statement supplies: (a date, a number).
fn supplies(text: &str) -> (bool, bool) {
    let toks = tokens(text);
    let date = toks
        .iter()
        .any(|t| is_value(t) && !t.chars().any(|c| c.is_ascii_digit()))
        || toks.iter().any(|t| {
            t.len() == 10 && t.as_bytes()[4] == b'-' && t.chars().filter(|c| *c == '-').count() == 2
        });
    let number = toks.iter().any(|t| t.chars().any(|c| c.is_ascii_digit()));
    (date, number)
}

/// Whether the statement says a task of these `terms` is done.
fn says_done(statement: &str, task_terms: &Terms) -> bool {
    let lower = statement.to_lowercase();
    if has(&lower, DONE_MARKERS) {
        return true;
    }
    tokens(statement).iter().any(|w| {
        let base = IRREGULAR_PAST
            .iter()
            .find(|(past, _)| past == w)
            .map(|(_, base)| stem(base))
            .or_else(|| w.ends_with("ed").then(|| stem(w)));
        base.is_some_and(|b| task_terms.contains(&b))
    })
}

/// A text read once for the rules: an open loop checked against many
/// statements, or an entry compared with many new items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Its kind.
    pub kind: EntryKind,
    /// Its salient terms, without loop-pattern words ([`loop_terms`]).
    pub terms: Terms,
    negations: usize,
    inquiry: bool,
    choice: bool,
    asks_date: bool,
    asks_number: bool,
}

impl Prepared {
    /// [`Prepared::new`], remembered by kind and text: a live entry is
    /// compared with the new items of every capture in its work context,
    /// and is read once instead of on each (a bounded, process-wide
    /// [`TextMemo`](crate::memo::TextMemo) of recent texts).
    ///
    /// ```
    /// use cairn_memory::EntryKind;
    /// use cairn_memory::settle::Prepared;
    /// let a = Prepared::shared(EntryKind::Task, "Send the contract to legal");
    /// let b = Prepared::shared(EntryKind::Task, "Send the contract to legal");
    /// assert!(std::sync::Arc::ptr_eq(&a, &b));
    /// assert_eq!(*a, Prepared::new(EntryKind::Task, "Send the contract to legal"));
    /// ```
    pub fn shared(kind: EntryKind, text: &str) -> std::sync::Arc<Prepared> {
        static MEMO: std::sync::OnceLock<crate::memo::TextMemo<std::sync::Arc<Prepared>>> =
            std::sync::OnceLock::new();
        MEMO.get_or_init(|| crate::memo::TextMemo::new(32_768))
            .get_or_make(kind.as_str().as_bytes(), text, || {
                std::sync::Arc::new(Prepared::new(kind, text))
            })
    }

    /// Reads `text` of an entry of `kind`.
    pub fn new(kind: EntryKind, text: &str) -> Prepared {
        let toks = tokens(text);
        let stems: BTreeSet<String> = toks.iter().map(|t| stem(t)).collect();
        let words: BTreeSet<&str> = toks.iter().map(String::as_str).collect();
        Prepared {
            kind,
            terms: Terms::from(loop_terms(text)),
            negations: negations(&toks),
            inquiry: INQUIRY_VERBS.iter().any(|v| stems.contains(&stem(v))),
            choice: CHOICE_VERBS.iter().any(|v| stems.contains(&stem(v))),
            asks_date: DATE_CUES.iter().any(|c| words.contains(c)),
            asks_number: NUMBER_CUES.iter().any(|c| words.contains(c)),
        }
    }
}

/// Whether `statement` settles the open loop `kind` / `text` (the caller
/// checks that the statement comes after the loop); `same_session_turns`
/// is how many turns later it was said when in the loop's session. The
/// rule's name, or `None`. See the [module docs](self).
pub fn settles(
    kind: EntryKind,
    text: &str,
    statement: &Statement,
    same_session_turns: Option<u64>,
) -> Option<Rule> {
    settles_prepared(&Prepared::new(kind, text), statement, same_session_turns)
}

/// [`settles`] with the loop read once.
pub fn settles_prepared(
    open: &Prepared,
    statement: &Statement,
    same_session_turns: Option<u64>,
) -> Option<Rule> {
    if statement.question {
        return None;
    }
    let is_question = matches!(open.kind, EntryKind::Question | EntryKind::OpenQuestion);
    let is_task = open.kind == EntryKind::Task;
    if !is_question && !is_task {
        return None;
    }
    let said = salient(&statement.text);
    let shared = open.terms.shared_with(&said);
    if shared == 0 && !(statement.decision && same_session_turns.is_some()) {
        return None; // the cheap common case
    }
    let lower = statement.text.to_lowercase();
    if (is_question || open.inquiry) && shared >= 2 && has(&lower, REPORT_MARKERS) {
        return Some("answer.report");
    }
    if (is_question || open.choice) && statement.decision {
        if shared >= 2 {
            return Some("answer.decision");
        }
        let (date, number) = supplies(&statement.text);
        let near = same_session_turns.is_some_and(|n| (1..=4).contains(&n));
        if near && ((open.asks_date && date) || (open.asks_number && number)) {
            return Some("answer.decision");
        }
    }
    if is_task
        && !statement.task
        && shared >= 2
        && negations(&tokens(&statement.text)) == 0
        && says_done(&statement.text, &open.terms)
    {
        return Some("task.done");
    }
    None
}

/// Which of two restating texts says more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restatement {
    /// The new text says nothing the old one does not: keep the old.
    Covered,
    /// The new text says everything the old one does, and more: the new
    /// one replaces it.
    Extends,
}

/// The family of kinds that can restate each other.
fn family(kind: EntryKind) -> Option<u8> {
    match kind {
        EntryKind::Decision | EntryKind::KeyDecision => Some(0),
        EntryKind::Question | EntryKind::OpenQuestion => Some(1),
        EntryKind::Task => Some(2),
        EntryKind::Fact => Some(3),
        _ => None,
    }
}

/// Whether a new text restates an old one (see the [module docs](self)).
pub fn restatement(
    new_kind: EntryKind,
    new: &str,
    old_kind: EntryKind,
    old: &str,
) -> Option<Restatement> {
    restatement_prepared(&Prepared::new(new_kind, new), &Prepared::new(old_kind, old))
}

/// [`restatement`] with both texts read once.
pub fn restatement_prepared(new: &Prepared, old: &Prepared) -> Option<Restatement> {
    if family(new.kind).is_none() || family(new.kind) != family(old.kind) {
        return None;
    }
    if new.negations % 2 != old.negations % 2 {
        return None;
    }
    let (a, b) = (&new.terms, &old.terms);
    if a.len().min(b.len()) < 2 {
        return None;
    }
    if a.is_subset(b) {
        Some(Restatement::Covered)
    } else if b.is_subset(a) {
        Some(Restatement::Extends)
    } else {
        None
    }
}

/// Whether entries of `kind` are compared with new items (restatements,
/// open loops): decisions, questions, tasks and facts, the kinds that
/// restate or settle one another (the rest — summaries, handoffs, phase
/// changes, updates — are records of their moment).
///
/// ```
/// use cairn_memory::EntryKind;
/// assert!(cairn_memory::settle::comparable(EntryKind::Task));
/// assert!(!cairn_memory::settle::comparable(EntryKind::Handoff));
/// ```
pub fn comparable(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::KeyDecision
            | EntryKind::Decision
            | EntryKind::OpenQuestion
            | EntryKind::Question
            | EntryKind::Task
            | EntryKind::Fact
    )
}

/// A live entry a capture compares new items with, read once.
#[derive(Debug, Clone)]
pub struct Comparable {
    /// The entry.
    pub view: EntryView,
    /// Its reading.
    pub read: Arc<Prepared>,
}

/// Per work context, the live entries a capture compares new items with
/// ([`comparable`] kinds, tasks not done), oldest first (new entries are
/// pushed at the end), each with its reading. Kept with the live list and
/// patched with it, so a capture reads its context's entries without a
/// pass over the workspace's (and without reading them again once they
/// outnumber the readings' memo).
#[derive(Debug, Default)]
pub(crate) struct ComparableIndex {
    contexts: HashMap<crate::log::Name, Arc<Vec<Comparable>>>,
}

impl crate::live::Patched for ComparableIndex {
    /// Takes `removed` out (matched by entry id) and puts `added` in.
    fn patch<'a>(
        &mut self,
        removed: impl IntoIterator<Item = &'a EntryView>,
        added: impl IntoIterator<Item = &'a EntryView>,
    ) {
        for v in removed {
            if !compared(v) {
                continue;
            }
            if let Some(list) = self.contexts.get_mut(v.entry.work_context.as_str()) {
                let list = Arc::make_mut(list);
                if let Some(at) = list.iter().rposition(|c| c.view.entry.id == v.entry.id) {
                    list.remove(at);
                }
            }
        }
        for v in added {
            if !compared(v) {
                continue;
            }
            let list = Arc::make_mut(
                self.contexts
                    .entry(v.entry.work_context.clone())
                    .or_default(),
            );
            let at = list.partition_point(|c| c.view.entry.newest_first(&v.entry).is_gt());
            list.insert(
                at,
                Comparable {
                    view: v.clone(),
                    read: Prepared::shared(v.entry.kind, &v.entry.content),
                },
            );
        }
        self.contexts.retain(|_, list| !list.is_empty());
    }
}

impl ComparableIndex {
    /// The entries of `work_context`, oldest first.
    pub(crate) fn of_context(&self, work_context: &str) -> Arc<Vec<Comparable>> {
        self.contexts.get(work_context).cloned().unwrap_or_default()
    }
}

fn compared(v: &EntryView) -> bool {
    v.is_live()
        && comparable(v.entry.kind)
        && !(v.entry.kind == EntryKind::Task && v.entry.status == Some(TaskStatus::Done))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn st(text: &str) -> Statement {
        let lower = text.to_lowercase();
        Statement {
            session: "s".into(),
            seq: 9,
            at: Utc.with_ymd_and_hms(2026, 3, 5, 9, 0, 0).unwrap(),
            text: text.into(),
            decision: ["let's go with", "we decided", "we'll use", "going with"]
                .iter()
                .any(|m| lower.contains(m)),
            question: text.ends_with('?'),
            task: ["need to", "remind me"].iter().any(|m| lower.contains(m)),
        }
    }

    const Q: EntryKind = EntryKind::OpenQuestion;
    const T: EntryKind = EntryKind::Task;

    #[test]
    fn answers_and_choices() {
        let q = "Open question: do we invite the waitlist in the first wave or a week later?";
        let answer =
            st("Dana says support can take the waitlist one week after launch, not on day one.");
        assert_eq!(settles(Q, q, &answer, None), Some("answer.report"));
        let ask = "I need to ask Dana from support how much load they can take.";
        assert_eq!(settles(T, ask, &answer, None), Some("answer.report"));
        // A report on something else, a question, a bare mention: open.
        assert_eq!(settles(Q, q, &st("Dana says the API is down."), None), None);
        assert_eq!(
            settles(
                Q,
                q,
                &st("Does Dana know about the waitlist this week?"),
                None
            ),
            None
        );
        assert_eq!(
            settles(Q, q, &st("The waitlist grew this week."), None),
            None
        );
        // A choice settled by the next decision that names a date, close by.
        let pick = "We need to pick a launch date for the Orion beta.";
        let go = st("Let's go with April 1 and sync on.");
        assert_eq!(settles(T, pick, &go, Some(2)), Some("answer.decision"));
        assert_eq!(settles(T, pick, &go, Some(9)), None);
        assert_eq!(settles(T, pick, &go, None), None);
        assert_eq!(
            settles(T, pick, &st("Let's go with the blue logo."), Some(1)),
            None
        );
        let choose = "We need to choose a database for the job queue.";
        assert_eq!(
            settles(
                T,
                choose,
                &st("We'll use Postgres for the job queue."),
                None
            ),
            Some("answer.decision")
        );
        // A decision sharing the loop's terms settles it wherever it is.
        let db = "We still need to figure out the job queue database?";
        assert_eq!(
            settles(Q, db, &st("Postgres handles the job queue fine."), None),
            None,
            "no decision pattern in the statement"
        );
        assert_eq!(
            settles(Q, db, &st("We'll use Postgres for the job queue."), None),
            Some("answer.decision")
        );
        // A task to do something is not answered by a report; a report
        // that it was done settles it as done.
        let book = "Book the status-page maintenance window";
        assert_eq!(
            settles(
                T,
                book,
                &st("Dana says we should book the maintenance window."),
                None
            ),
            None
        );
        assert_eq!(
            settles(
                T,
                book,
                &st("Dana says the maintenance window is booked."),
                None
            ),
            Some("task.done")
        );
    }

    #[test]
    fn tasks_done() {
        let book = "Remind me to book the status-page maintenance window.";
        assert_eq!(
            settles(
                T,
                book,
                &st("I booked the maintenance window for Tuesday."),
                None
            ),
            Some("task.done")
        );
        assert_eq!(
            settles(
                T,
                "I'll send the invite to the beta list",
                &st("Sent the beta invite this morning."),
                None
            ),
            Some("task.done")
        );
        assert_eq!(
            settles(
                T,
                book,
                &st("The maintenance window booking is done."),
                None
            ),
            Some("task.done")
        );
        // Negated, still to do, about something else: open.
        assert_eq!(
            settles(
                T,
                book,
                &st("I haven't booked the maintenance window."),
                None
            ),
            None
        );
        assert_eq!(
            settles(
                T,
                book,
                &st("I still need to book the maintenance window."),
                None
            ),
            None
        );
        assert_eq!(settles(T, book, &st("I booked the flights."), None), None);
    }

    #[test]
    fn restatements() {
        let rich = "Launch the Orion beta on April 1 with sync enabled";
        let d = EntryKind::Decision;
        let k = EntryKind::KeyDecision;
        assert_eq!(
            restatement(k, "Let's go with April 1 and sync on.", d, rich),
            Some(Restatement::Covered)
        );
        assert_eq!(
            restatement(d, rich, k, "Let's go with April 1 and sync on."),
            Some(Restatement::Extends)
        );
        assert_eq!(
            restatement(
                T,
                "remind me to book the status-page maintenance window.",
                T,
                "Book the status-page maintenance window for the launch"
            ),
            Some(Restatement::Covered)
        );
        // Another value, another kind, a negation, too little: not the same.
        assert_eq!(
            restatement(k, "Let's go with April 8 and sync on.", d, rich),
            None
        );
        assert_eq!(restatement(T, "Launch the beta on April 1", d, rich), None);
        assert_eq!(
            restatement(d, "Launch the Orion beta on April 1 without sync", d, rich),
            None
        );
        assert_eq!(restatement(d, "Launch it.", d, rich), None);
    }

    proptest::proptest! {
        /// An index patched entry by entry, in any order of additions and
        /// removals, is the index made from the entries left: per work
        /// context its comparable entries (tasks not done), oldest first.
        #[test]
        fn patches_keep_the_comparable_entries_a_pass_finds(
            entries in proptest::collection::vec((0i64..300, 0usize..5, 0usize..3, proptest::prelude::any::<bool>()), 1..40),
            steps in proptest::collection::vec(
                (proptest::prelude::any::<bool>(), proptest::prelude::any::<proptest::sample::Index>()),
                1..60,
            ),
        ) {
            use chrono::TimeZone;
            let kinds = [EntryKind::Task, EntryKind::Decision, EntryKind::Fact, EntryKind::Handoff, EntryKind::OpenQuestion];
            let views: Vec<EntryView> = entries
                .iter()
                .enumerate()
                .map(|(n, &(minute, kind, wc, done))| {
                    let at = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap() + chrono::Duration::minutes(minute);
                    let mut entry = crate::log::Entry::bare(&format!("e{n:03}"), kinds[kind], &format!("item {n}"), None, &format!("wc{wc}"), at);
                    if kinds[kind] == EntryKind::Task {
                        entry.status = Some(if done { TaskStatus::Done } else { TaskStatus::Open });
                    }
                    EntryView { entry: Arc::new(entry), subject: None, status: crate::log::EntryStatus::Live, decay_at: None }
                })
                .collect();
            use crate::live::Patched;
            let ids = |index: &ComparableIndex, wc: &str| -> Vec<String> {
                index.of_context(wc).iter().map(|c| c.view.entry.id.clone()).collect()
            };
            crate::live::walk_patches(&views, &steps, |index: &ComparableIndex, mut left| {
                left.sort_by(|a, b| b.entry.newest_first(&a.entry));
                let made = ComparableIndex::of(left.iter().copied());
                for wc in ["wc0", "wc1", "wc2"] {
                    let expected: Vec<String> = left
                        .iter()
                        .filter(|v| v.entry.work_context == wc && compared(v))
                        .map(|v| v.entry.id.clone())
                        .collect();
                    proptest::prop_assert_eq!(&ids(index, wc), &expected);
                    proptest::prop_assert_eq!(&ids(&made, wc), &expected);
                }
                Ok(())
            })?;
        }
    }

    proptest::proptest! {
        /// `Terms` answers what the `BTreeSet` it is made from would.
        #[test]
        fn terms_answer_as_their_set(
            a in proptest::collection::btree_set("[a-c0-2]{1,3}", 0..8),
            b in proptest::collection::btree_set("[a-c0-2]{1,3}", 0..8),
            probe in "[a-c0-2]{1,3}",
        ) {
            let (ta, tb) = (Terms::from(a.clone()), Terms::from(b.clone()));
            proptest::prop_assert_eq!(ta.is_subset(&tb), a.is_subset(&b));
            proptest::prop_assert_eq!(ta.shared_with(&b), a.intersection(&b).count());
            proptest::prop_assert_eq!(ta.len(), a.len());
            proptest::prop_assert_eq!(ta.is_empty(), a.is_empty());
            proptest::prop_assert_eq!(ta.contains(&probe), a.contains(&probe));
            proptest::prop_assert!(ta.iter().eq(a.iter().map(String::as_str)));
        }

        /// A term given with spaces in it counts as its words: the string
        /// still splits back into the set it holds.
        #[test]
        fn terms_given_with_spaces_are_their_words(
            a in proptest::collection::btree_set("[ab ]{0,5}", 0..6),
        ) {
            let words: BTreeSet<String> = a
                .iter()
                .flat_map(|t| t.split(' '))
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect();
            let terms = Terms::from(a);
            proptest::prop_assert!(terms.iter().eq(words.iter().map(String::as_str)));
            proptest::prop_assert_eq!(terms.len(), words.len());
            proptest::prop_assert!(terms.is_subset(&Terms::from(words)));
        }
    }
}
