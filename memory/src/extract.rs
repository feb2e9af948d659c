//! Deterministic heuristic extraction: what in a span of turns is worth a
//! log entry, found without a model.
//!
//! [`extract`] reads turns (the new material of a capture) and the subject
//! registry and returns [`Extracted`] items — open questions, decisions,
//! tasks, handoffs and work-phase changes — each tied to the turn it came
//! from, plus what the span touched (subjects mentioned, tools used, user
//! turns). The patterns follow docs/DESIGN.md, *Capture* ("we decided", "let's go with",
//! "I'll come back to", "still need to figure out"…). They are honest
//! heuristics: they miss things and sometimes misfire; every entry they
//! produce carries the exact turn it came from, so a reader can check.
//!
//! The function is pure: same turns and subjects, same output. The actor
//! runtime calls it at capture time; an LLM pass can be added later on top.
//!
//! ```
//! use cairn_memory::extract::{extract, Extracted};
//! use cairn_memory::{EntryKind, Role, Turn};
//! # use chrono::Utc;
//! # fn turn(seq: u64, role: Role, content: &str) -> Turn {
//! #     Turn { workspace: "w".into(), session: "s1".into(), work_context: "wc".into(), seq, role,
//! #            content: content.into(), tool_call_id: None, timestamp: Utc::now(), content_hash: String::new() }
//! # }
//! let turns = [
//!     turn(0, Role::User, "Let's go with the price impact approach."),
//!     turn(1, Role::User, "I still need to figure out the data timeline?"),
//! ];
//! let out = extract(&turns, &[], None);
//! assert_eq!(out.items[0].kind, EntryKind::KeyDecision);
//! assert_eq!(out.items[1].kind, EntryKind::OpenQuestion);
//! assert_eq!(out.items[1].seq, 1);
//! ```

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::log::EntryKind;
use crate::record::{Role, Turn};
use crate::settle::Statement;
use crate::subjects::Subject;

/// Longest content an extracted item keeps, in characters.
pub const MAX_ITEM_CHARS: usize = 300;

/// One thing the heuristics found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// What kind of entry it becomes.
    pub kind: EntryKind,
    /// The sentence (trimmed, at most [`MAX_ITEM_CHARS`] characters).
    pub content: String,
    /// The turn it came from.
    pub seq: u64,
    /// The first known subject the sentence mentions.
    pub subject: Option<String>,
    /// Which pattern fired (for the explanation).
    pub rule: &'static str,
    /// For a fact, what it is about ([`crate::facts`]).
    pub attribute: Option<crate::facts::Attribute>,
    /// For a fact, who said it, when the turn names a speaker.
    pub speaker: Option<String>,
}

/// Everything [`extract`] found in a span of turns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extraction {
    /// Items in turn order.
    pub items: Vec<Extracted>,
    /// Known subjects (canonical slugs) mentioned anywhere in the span.
    pub mentioned: BTreeSet<String>,
    /// Tool-call ids seen (tool use).
    pub tools: BTreeSet<String>,
    /// Number of user turns in the span.
    pub user_turns: usize,
    /// The work phase after the span (the last phase change, or the one given).
    pub phase: Option<String>,
    /// The user's sentences, in order, for settling open loops
    /// ([`crate::settle`]); a do-not-collect turn gives none.
    pub statements: Vec<Statement>,
}

/// How deeply to extract from one turn: the significance gate's answer
/// (docs/DESIGN.md, *Significance gate and capture depth*).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Depth {
    /// `do-not-collect`: the turn is not read at all (the raw record keeps it).
    DoNotCollect,
    /// `observe-only` (depth `none`): no entry comes from the turn; its
    /// sentences may still settle open loops and its mentions count.
    ObserveOnly,
    /// The state of the work in the user's turns: decisions, open
    /// questions, tasks and work-phase changes; and the facts the user
    /// states about themselves.
    Shallow,
    /// Every heuristic pattern in the user's turns: also handoffs (the
    /// default without a gate).
    #[default]
    Standard,
    /// Standard, plus decisions and tasks the assistant states.
    Deep,
}

impl Depth {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Depth::DoNotCollect => "do_not_collect",
            Depth::ObserveOnly => "observe_only",
            Depth::Shallow => "shallow",
            Depth::Standard => "standard",
            Depth::Deep => "deep",
        }
    }

    /// Whether an item of `kind` from a turn of `role` is extracted at this depth.
    pub fn keeps(self, kind: EntryKind, role: Role) -> bool {
        let shallow = matches!(
            kind,
            EntryKind::KeyDecision
                | EntryKind::OpenQuestion
                | EntryKind::Task
                | EntryKind::WorkPhaseChange
                | EntryKind::Fact
        );
        match (self, role) {
            (Depth::DoNotCollect | Depth::ObserveOnly, _) => false,
            (Depth::Deep, Role::Assistant) => {
                matches!(kind, EntryKind::KeyDecision | EntryKind::Task)
            }
            (_, Role::Assistant) => false,
            (Depth::Shallow, _) => shallow,
            (Depth::Standard | Depth::Deep, _) => true,
        }
    }
}

/// Open loops whatever the punctuation.
const QUESTION_MARKERS: &[&str] = &[
    "come back to",
    "deal with that later",
    "still need to figure out",
    "need to figure out",
    "open question",
    "not sure",
    "to be decided",
];

const DECISION_MARKERS: &[&str] = &[
    "we decided",
    "i decided",
    "decided to",
    "let's go with",
    "lets go with",
    "going with",
    "we'll go with",
    "i'll commit to",
    "we're committing to",
    "decision:",
    "we will use",
    "we'll use",
];

/// To-dos; inside a question they make it an open question instead.
const TASK_MARKERS: &[&str] = &[
    "todo",
    "need to check",
    "action item",
    "i need to",
    "we need to",
    "i have to",
    "remember to",
    "next step",
    "i'll send",
    "i'll draft",
    "i'll write",
    "remind me to",
];

const HANDOFF_MARKERS: &[&str] = &[
    "handoff",
    "hand off",
    "where we left off",
    "where things stand",
    "pick up tomorrow",
    "pick this up",
    "next session",
    "stopping here",
];

const PHASES: &[(&str, &[&str])] = &[
    (
        "research",
        &["researching", "research phase", "back to research"],
    ),
    (
        "drafting",
        &[
            "start drafting",
            "drafting now",
            "begin drafting",
            "move to drafting",
            "moving to drafting",
        ],
    ),
    (
        "review",
        &[
            "ready for review",
            "move to review",
            "moving to review",
            "start reviewing",
            "in review",
        ],
    ),
    ("revision", &["revise", "revising", "revision"]),
    (
        "waiting_for_external",
        &["waiting on", "waiting for", "blocked on"],
    ),
    (
        "completed",
        &["we're done", "it's done", "completed", "shipped"],
    ),
];

/// Finds entries in `turns` (user and assistant turns; tool results only
/// count as tool use). `subjects` is the registry used for mentions;
/// `phase` the work phase before the span. Every turn at
/// [`Depth::Standard`]; [`extract_with`] takes a depth per turn.
pub fn extract(turns: &[Turn], subjects: &[Subject], phase: Option<&str>) -> Extraction {
    extract_with(turns, subjects, phase, |_| Depth::Standard)
}

/// [`extract`] with each turn read at the depth `depth_of` gives it (the
/// significance gate's answer for that turn).
pub fn extract_with(
    turns: &[Turn],
    subjects: &[Subject],
    phase: Option<&str>,
    depth_of: impl Fn(&Turn) -> Depth,
) -> Extraction {
    let mut out = Extraction {
        phase: phase.map(str::to_owned),
        ..Extraction::default()
    };
    for turn in turns {
        let depth = depth_of(turn);
        if depth == Depth::DoNotCollect {
            continue;
        }
        if let Some(tool) = &turn.tool_call_id {
            out.tools.insert(tool.clone());
        }
        match turn.role {
            Role::User => out.user_turns += 1,
            Role::Assistant => {}
            Role::Tool | Role::System => continue,
        }
        for subject in mentions(&turn.content, subjects) {
            out.mentioned.insert(subject);
        }
        if turn.role != Role::User && depth != Depth::Deep {
            // Decisions and questions are the user's; the assistant's text is
            // only searched for mentions (read deeply, its decisions and
            // tasks too).
            continue;
        }
        if turn.role == Role::User && depth.keeps(EntryKind::Fact, turn.role) {
            for fact in crate::facts::find_facts(&turn.content, &crate::facts::ENGLISH) {
                // A sentence the work-state rules read (a decision, a task,
                // an open loop) is theirs.
                let said = fact.said.to_lowercase();
                if said.ends_with('?')
                    || [
                        DECISION_MARKERS,
                        TASK_MARKERS,
                        QUESTION_MARKERS,
                        HANDOFF_MARKERS,
                    ]
                    .iter()
                    .any(|markers| find(&said, markers).is_some())
                {
                    continue;
                }
                // About the speaker when the registry knows them, else
                // about the first subject the sentence names.
                let subject = fact
                    .speaker
                    .as_deref()
                    .and_then(|name| mentions(name, subjects).into_iter().next())
                    .or_else(|| mentions(&fact.content, subjects).into_iter().next());
                out.items.push(Extracted {
                    kind: EntryKind::Fact,
                    content: fact.content,
                    seq: turn.seq,
                    subject,
                    rule: fact.cue,
                    attribute: Some(fact.attribute),
                    speaker: fact.speaker,
                });
            }
        }
        for sentence in sentences(&turn.content) {
            let lower = sentence.to_lowercase();
            let subject = mentions(sentence, subjects).into_iter().next();
            let decision = find(&lower, DECISION_MARKERS);
            let question = lower.ends_with('?') || find(&lower, QUESTION_MARKERS).is_some();
            let task = find(&lower, TASK_MARKERS);
            if turn.role == Role::User {
                out.statements.push(Statement {
                    session: turn.session.clone(),
                    seq: turn.seq,
                    at: turn.timestamp,
                    text: clip(sentence),
                    decision: decision.is_some(),
                    question,
                    task: task.is_some(),
                });
            }
            let mut push = |kind, rule| {
                if depth.keeps(kind, turn.role) {
                    out.items.push(Extracted {
                        kind,
                        content: clip(sentence),
                        seq: turn.seq,
                        subject: subject.clone(),
                        rule,
                        attribute: None,
                        speaker: None,
                    })
                }
            };
            if let Some(rule) = decision {
                push(EntryKind::KeyDecision, rule);
            } else if question {
                if let Some(rule) = find(&lower, QUESTION_MARKERS) {
                    push(EntryKind::OpenQuestion, rule);
                } else if let Some(rule) = task {
                    // "do we need to ...?" — an open loop, not a task.
                    push(EntryKind::OpenQuestion, rule);
                }
            } else if let Some(rule) = find(&lower, HANDOFF_MARKERS) {
                push(EntryKind::Handoff, rule);
            } else if let Some(rule) = task {
                push(EntryKind::Task, rule);
            }
            if !depth.keeps(EntryKind::WorkPhaseChange, turn.role) {
                continue;
            }
            for (name, markers) in PHASES {
                if let Some(rule) = find(&lower, markers) {
                    if out.phase.as_deref() != Some(*name) {
                        out.items.push(Extracted {
                            kind: EntryKind::WorkPhaseChange,
                            content: (*name).to_owned(),
                            seq: turn.seq,
                            subject: subject.clone(),
                            rule,
                            attribute: None,
                            speaker: None,
                        });
                        out.phase = Some((*name).to_owned());
                    }
                    break;
                }
            }
        }
    }
    out
}

/// Known subjects (canonical slugs) that `text` mentions, by slug words or
/// display name, case-insensitively and on word boundaries.
///
/// Every gate assessment and every extraction asks this of a text against
/// all of a workspace's subjects, so a subject's names are matched where
/// they lie, without a copy: a slug or an alias is split on its hyphens in
/// place, and a display name is lowercased only when it has a letter to
/// lower.
///
/// ```
/// use cairn_memory::extract::mentions;
/// use cairn_memory::{Subject, SubjectKind};
/// let orion = Subject {
///     slug: "orion-beta".to_owned(),
///     display: "Orion Beta".to_owned(),
///     kind: SubjectKind::Project,
///     aliases: vec!["orion".to_owned()],
///     created_at: chrono::Utc::now(),
/// };
/// let subjects = [orion];
/// assert_eq!(mentions("Ship the ORION beta on Monday", &subjects), ["orion-beta"]);
/// assert_eq!(mentions("Orionids are a meteor shower", &subjects), Vec::<String>::new());
/// ```
pub fn mentions(text: &str, subjects: &[Subject]) -> Vec<String> {
    let words: Vec<Cow<'_, str>> = name_words(text).map(lowered).collect();
    let mut found = Vec::new();
    for subject in subjects {
        let display = lowered(&subject.display);
        let hit = std::iter::once(subject.slug.as_str())
            .chain(std::iter::once(display.as_ref()))
            .chain(subject.aliases.iter().map(String::as_str))
            .any(|name| says(&words, name));
        if hit && !found.contains(&subject.slug) {
            found.push(subject.slug.clone());
        }
    }
    found
}

/// The words of `text` as [`mentions`] matches them: runs of alphanumeric
/// characters (a hyphen or a space between them is the same boundary).
fn name_words(text: &str) -> impl Iterator<Item = &str> + Clone {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// `text` lowercased, borrowed when lowering would not change it.
fn lowered(text: &str) -> Cow<'_, str> {
    if text
        .bytes()
        .any(|b| b.is_ascii_uppercase() || !b.is_ascii())
    {
        Cow::Owned(text.to_lowercase())
    } else {
        Cow::Borrowed(text)
    }
}

/// True when the words of `name` appear in `words` one after another.
fn says(words: &[Cow<'_, str>], name: &str) -> bool {
    let mut needle = name_words(name);
    let Some(first) = needle.next() else {
        return false;
    };
    words.iter().enumerate().any(|(at, word)| {
        word == first
            && needle
                .clone()
                .enumerate()
                .all(|(i, next)| words.get(at + 1 + i).is_some_and(|w| w == next))
    })
}

fn find(lower: &str, markers: &[&'static str]) -> Option<&'static str> {
    markers.iter().copied().find(|m| lower.contains(m))
}

/// Splits on sentence ends, keeping the terminator (so questions keep `?`),
/// and on semicolons, which part two statements (the `;` is dropped).
pub(crate) fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?' | '\n' | ';') {
            let end = i + c.len_utf8();
            let s = text[start..end].trim().trim_end_matches(';').trim_end();
            if s.chars().any(char::is_alphanumeric) {
                out.push(s);
            }
            start = end;
        }
    }
    let rest = text[start..].trim();
    if rest.chars().any(char::is_alphanumeric) {
        out.push(rest);
    }
    out
}

pub(crate) fn clip(sentence: &str) -> String {
    let trimmed = sentence.trim();
    if trimmed.chars().count() <= MAX_ITEM_CHARS {
        return trimmed.to_owned();
    }
    let mut s: String = trimmed.chars().take(MAX_ITEM_CHARS - 1).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use expect_test::{Expect, expect};

    use super::*;
    use crate::subjects::SubjectKind;

    fn check(turns: &[(Role, &str)], expect: Expect) {
        let turns: Vec<Turn> = turns
            .iter()
            .enumerate()
            .map(|(i, (role, content))| Turn {
                workspace: "w".into(),
                session: "s".into(),
                work_context: "wc".into(),
                seq: i as u64,
                role: *role,
                content: (*content).into(),
                tool_call_id: (*role == Role::Tool).then(|| format!("call-{i}")),
                timestamp: Utc::now(),
                content_hash: String::new(),
            })
            .collect();
        let subjects = vec![Subject {
            slug: "henderson".into(),
            display: "Henderson".into(),
            kind: SubjectKind::Project,
            aliases: vec![],
            created_at: Utc::now(),
        }];
        let out = extract(&turns, &subjects, None);
        let mut text = String::new();
        for item in &out.items {
            text.push_str(&format!(
                "{}@{} [{}] {:?} {}\n",
                item.kind, item.seq, item.rule, item.subject, item.content
            ));
        }
        text.push_str(&format!(
            "mentioned={:?} tools={:?} users={} phase={:?}\n",
            out.mentioned, out.tools, out.user_turns, out.phase
        ));
        expect.assert_eq(&text);
    }

    #[test]
    fn finds_each_kind() {
        check(
            &[
                (
                    Role::User,
                    "For Henderson, let's go with the price impact approach.",
                ),
                (Role::Assistant, "Noted. We decided nothing else."),
                (
                    Role::User,
                    "I still need to figure out the data timeline? Also TODO: email Christensen.",
                ),
                (Role::Tool, "{\"ok\":true}"),
                (
                    Role::User,
                    "Time to start drafting. Stopping here, pick this up tomorrow.",
                ),
                (Role::User, "Is it raining?"),
            ],
            expect![[r#"
                key_decision@0 [let's go with] Some("henderson") For Henderson, let's go with the price impact approach.
                open_question@2 [still need to figure out] None I still need to figure out the data timeline?
                task@2 [todo] None Also TODO: email Christensen.
                work_phase_change@4 [start drafting] None drafting
                handoff@4 [pick this up] None Stopping here, pick this up tomorrow.
                mentioned={"henderson"} tools={"call-3"} users=4 phase=Some("drafting")
            "#]],
        );
    }

    /// The gate's depth per turn decides what the turn gives: shallow keeps
    /// decisions, open questions, tasks and phase changes (not handoffs),
    /// observe-only keeps nothing but its
    /// sentences (to settle open loops), do-not-collect is not read, deep
    /// also reads the assistant.
    #[test]
    fn depth_decides_what_a_turn_gives() {
        let text = [
            (
                Role::User,
                "We decided to ship Friday. TODO: email Dana. Stopping here, start drafting.",
            ),
            (Role::User, "We decided to ship Monday. TODO: email Sam."),
            (
                Role::User,
                "Let's go with the red logo. Remind me to call Ana.",
            ),
            (
                Role::Assistant,
                "Decision: we'll use Postgres. I need to check the backups.",
            ),
            (Role::Assistant, "Going with blue; I'll draft it."),
        ];
        let turns: Vec<Turn> = text
            .iter()
            .enumerate()
            .map(|(i, (role, content))| Turn {
                workspace: "w".into(),
                session: "s".into(),
                work_context: "wc".into(),
                seq: i as u64,
                role: *role,
                content: (*content).into(),
                tool_call_id: None,
                timestamp: Utc::now(),
                content_hash: String::new(),
            })
            .collect();
        let depths = [
            Depth::Shallow,
            Depth::ObserveOnly,
            Depth::DoNotCollect,
            Depth::Deep,
            Depth::Standard,
        ];
        let out = extract_with(&turns, &[], None, |t| depths[t.seq as usize]);
        let items: Vec<String> = out
            .items
            .iter()
            .map(|i| format!("{}@{} {}", i.kind, i.seq, i.content))
            .collect();
        assert_eq!(
            items,
            [
                "key_decision@0 We decided to ship Friday.",
                "task@0 TODO: email Dana.",
                "work_phase_change@0 drafting",
                "key_decision@3 Decision: we'll use Postgres.",
                "task@3 I need to check the backups.",
            ]
        );
        let said: Vec<(u64, &str)> = out
            .statements
            .iter()
            .map(|s| (s.seq, s.text.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (0, "We decided to ship Friday."),
                (0, "TODO: email Dana."),
                (0, "Stopping here, start drafting."),
                (1, "We decided to ship Monday."),
                (1, "TODO: email Sam."),
            ]
        );
        assert!(out.statements[0].decision && out.statements[1].task);
        assert_eq!(out.user_turns, 2, "the do-not-collect turn is not counted");
    }

    #[test]
    fn mentions_need_word_boundaries() {
        check(
            &[(Role::User, "Hendersonville is a town. Nothing else to see.")],
            expect![[r#"
                mentioned={} tools={} users=1 phase=None
            "#]],
        );
    }

    /// The matching as it was written first, copying every name: the
    /// reference the borrowing [`mentions`] must agree with.
    fn mentions_by_copies(text: &str, subjects: &[Subject]) -> Vec<String> {
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let mut found = Vec::new();
        for subject in subjects {
            let names = std::iter::once(subject.slug.replace('-', " "))
                .chain(std::iter::once(subject.display.to_lowercase()))
                .chain(subject.aliases.iter().map(|a| a.replace('-', " ")));
            let hit = names.into_iter().any(|name| {
                let needle: Vec<&str> = name
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .collect();
                !needle.is_empty()
                    && words
                        .windows(needle.len())
                        .any(|window| window.iter().zip(&needle).all(|(a, b)| a == b))
            });
            if hit && !found.contains(&subject.slug) {
                found.push(subject.slug.clone());
            }
        }
        found
    }

    proptest::proptest! {
        /// Texts and names drawn from a few words (so that they meet), in
        /// any case, with hyphens, spaces, punctuation and non-ASCII letters
        /// (`İ` lowers to two characters, `Σ` by its place in a word).
        #[test]
        fn mentions_agree_with_matching_by_copies(
            text in "([aAbBİΣσé]{1,3}[ -.,]{0,2}){0,12}",
            names in proptest::collection::vec(
                ("[aAbBİΣσé]{0,3}([ -][aAbBİΣσé]{1,3}){0,2}", "[abé]{0,3}(-[ab]{1,3}){0,1}"),
                0..5,
            ),
        ) {
            let subjects: Vec<Subject> = names
                .iter()
                .enumerate()
                .map(|(i, (display, alias))| Subject {
                    slug: format!("{}-{i}", alias.to_lowercase()),
                    display: display.clone(),
                    kind: SubjectKind::Project,
                    aliases: vec![alias.clone()],
                    created_at: Utc::now(),
                })
                .collect();
            proptest::prop_assert_eq!(
                mentions(&text, &subjects),
                mentions_by_copies(&text, &subjects)
            );
        }
    }
}
