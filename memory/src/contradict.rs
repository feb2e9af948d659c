//! Contradictions between live entries: two decisions or facts about the
//! same thing that cannot both hold.
//!
//! [`find_contradictions`] is deterministic and deliberately conservative: a
//! false alarm costs a person's attention, a miss only leaves the older
//! entry to be replaced by hand later. It compares only
//!
//! - **live** entries of the assertive kinds (`decision`, `key_decision`,
//!   `fact`),
//! - **on the same subject** (the canonical slug after renames and merges),
//!   or, for two entries without a subject, in the same work context,
//!
//! and flags a pair under exactly two rules:
//!
//! 1. **`negation`**: the two texts are the same words once negations are
//!    set aside (`not`, `no`, `never`, `without`, `-n't`…), and one of them
//!    is negated where the other is not: "Use feature flags for sync" /
//!    "Don't use feature flags for sync". At least two content words must
//!    remain, so "No." / "Yes." never match.
//! 2. **`value_change`**: the two texts are the same words in the same
//!    order except inside **one** run of values (numbers, dates, months,
//!    weekdays), where they differ: "Launch the beta on April 1" /
//!    "Launch the beta on April 8"; "Backoff intervals 1s, 5s, 15s" /
//!    "Backoff intervals 2s, 10s, 30s". The words around the run (at least
//!    two content words) are the slot; two runs that differ ("1,284
//!    sign-ups on March 2" / "1,500 sign-ups on March 9") are an update of
//!    several things at once, not one slot with two values, and are left
//!    alone.
//!
//! Texts that merely share a topic, paraphrases and restatements are never
//! flagged. Known limit: a value that is part of a name ("Sprint 3 retro
//! done" / "Sprint 4 retro done") reads as a slot.
//!
//! The newer entry (by timestamp, then id) is presumed right: a
//! contradiction asks a person to confirm that the older one should be
//! replaced.
//!
//! ```
//! use cairn_memory::contradict::{find_contradictions, ContradictionRule};
//! # use cairn_memory::{Entry, EntryKind, EntryStatus, EntryView};
//! # use chrono::{TimeZone, Utc};
//! # use std::sync::Arc;
//! # fn view(id: &str, day: u32, text: &str) -> EntryView {
//! #     let at = Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap();
//! #     EntryView { entry: Arc::new(Entry { id: id.into(), kind: EntryKind::Decision, content: text.into(),
//! #         detail: None, subject: Some("beta".into()), work_context: "launch".into(), provenance: None,
//! #         replaces: None, status: None, timestamp: at, recorded_at: at, gate_generation: None }),
//! #         subject: Some("beta".into()), status: EntryStatus::Live, decay_at: None }
//! # }
//! let entries = [
//!     view("a", 2, "Launch the beta on April 1"),
//!     view("b", 5, "Launch the beta on April 8"),
//! ];
//! let found = find_contradictions(&entries);
//! assert_eq!(found.len(), 1);
//! assert_eq!((found[0].older.as_str(), found[0].newer.as_str()), ("a", "b"));
//! assert_eq!(found[0].rule, ContradictionRule::ValueChange);
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::live::Patched;
use crate::log::{EntryKind, EntryView};
use crate::text::{NEG, is_stopword, is_value, joined_words, negations, tokens};

/// Which rule found a contradiction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ContradictionRule {
    /// The same statement, negated in one entry only.
    Negation,
    /// The same statement with another value in one slot.
    ValueChange,
}

impl ContradictionRule {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContradictionRule::Negation => "negation",
            ContradictionRule::ValueChange => "value_change",
        }
    }
}

/// Two live entries that cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Contradiction {
    /// The canonical subject both are about (none: both have none and
    /// share `work_context`).
    pub subject: Option<String>,
    /// The newer entry's work context.
    pub work_context: String,
    /// The older entry's id (the one to confirm or replace).
    pub older: String,
    /// The newer entry's id (presumed right).
    pub newer: String,
    /// When the older entry was captured.
    pub older_at: DateTime<Utc>,
    /// When the newer entry was captured.
    pub newer_at: DateTime<Utc>,
    /// The rule that matched.
    pub rule: ContradictionRule,
    /// What differs, e.g. `"April 1" → "April 8"` or `negated in the newer entry`.
    pub detail: String,
}

/// How many entries of one group are compared at most (the newest ones):
/// a group is a set of near-identical texts, so this bounds the pairs.
const MAX_GROUP: usize = 32;

/// Finds contradictions among `entries` under the two rules of the
/// [module docs](self). Entries that are not live, or not a decision, key
/// decision or fact, are ignored. Deterministic: newest `newer` first, then
/// by ids.
pub fn find_contradictions<'a>(
    entries: impl IntoIterator<Item = &'a EntryView>,
) -> Vec<Contradiction> {
    ContradictionIndex::of(entries).found()
}

/// The entries that can contradict each other, grouped by what a rule
/// compares (the rule, the scope and the key), each group oldest first
/// with the contradictions found inside it. Kept with the live list and
/// patched with it ([`Patched::patch`]): a new version of the
/// list compares again only the groups its change touched, where a pass
/// reads and groups every live entry.
#[derive(Debug, Default)]
pub(crate) struct ContradictionIndex {
    groups: HashMap<GroupKey, Group>,
}

/// Both rules compare entries with equal keys in one scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    rule: ContradictionRule,
    scope: OwnedScope,
    /// The reading's key for the rule, shared with it.
    key: Arc<str>,
}

/// What two entries must share to be compared: a subject, or (both without
/// one) a work context.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum OwnedScope {
    Subject(Arc<str>),
    Context(crate::log::Name),
}

#[derive(Debug, Default)]
struct Group {
    /// Oldest first (an entry newer than all is pushed at the end).
    members: Vec<Member>,
    found: Vec<Contradiction>,
}

#[derive(Debug)]
struct Member {
    view: EntryView,
    read: Arc<Reading>,
}

impl Patched for ContradictionIndex {
    /// Takes `removed` out (matched by entry id) and puts `added` in, then
    /// compares again the groups either touched.
    fn patch<'a>(
        &mut self,
        removed: impl IntoIterator<Item = &'a EntryView>,
        added: impl IntoIterator<Item = &'a EntryView>,
    ) {
        let mut touched: HashSet<GroupKey> = HashSet::new();
        for v in removed {
            let Some(read) = reading_of(v) else { continue };
            for key in keys_of(v, &read) {
                if let Some(group) = self.groups.get_mut(&key)
                    && let Some(at) = group
                        .members
                        .iter()
                        .rposition(|m| m.view.entry.id == v.entry.id)
                {
                    group.members.remove(at);
                    touched.insert(key);
                }
            }
        }
        for v in added {
            let Some(read) = reading_of(v) else { continue };
            for key in keys_of(v, &read) {
                let group = self.groups.entry(key.clone()).or_default();
                let at = group
                    .members
                    .partition_point(|m| m.view.entry.newest_first(&v.entry).is_gt());
                group.members.insert(
                    at,
                    Member {
                        view: v.clone(),
                        read: read.clone(),
                    },
                );
                touched.insert(key);
            }
        }
        for key in touched {
            if let Some(group) = self.groups.get_mut(&key) {
                if group.members.is_empty() {
                    self.groups.remove(&key);
                } else {
                    group.found = compare(key.rule, &group.members);
                }
            }
        }
    }
}

impl ContradictionIndex {
    /// Every contradiction found, newest `newer` first, then by ids; a
    /// pair both rules found is named once.
    pub(crate) fn found(&self) -> Vec<Contradiction> {
        let mut found: Vec<Contradiction> = self
            .groups
            .values()
            .flat_map(|g| g.found.iter().cloned())
            .collect();
        found.sort_by(|a, b| {
            (b.newer_at, &b.newer, &b.older, b.rule).cmp(&(a.newer_at, &a.newer, &a.older, a.rule))
        });
        found.dedup_by(|a, b| a.newer == b.newer && a.older == b.older);
        found
    }
}

/// The reading of a live decision, key decision or fact.
fn reading_of(v: &EntryView) -> Option<Arc<Reading>> {
    (v.is_live() && is_assertive(v.entry.kind)).then(|| Reading::shared(&v.entry.content))
}

/// The groups `v` belongs to: one per rule whose key its text has.
fn keys_of(v: &EntryView, read: &Reading) -> impl Iterator<Item = GroupKey> {
    let scope = match &v.subject {
        Some(s) => OwnedScope::Subject(s.clone()),
        None => OwnedScope::Context(v.entry.work_context.clone()),
    };
    [
        (ContradictionRule::Negation, &read.without_negation),
        (ContradictionRule::ValueChange, &read.masked),
    ]
    .into_iter()
    .filter_map(move |(rule, key)| {
        Some(GroupKey {
            rule,
            scope: scope.clone(),
            key: key.clone()?,
        })
    })
}

/// The contradictions among the newest [`MAX_GROUP`] members of one group
/// (oldest first) under `rule`.
fn compare(rule: ContradictionRule, members: &[Member]) -> Vec<Contradiction> {
    let members: Vec<&Member> = members.iter().rev().take(MAX_GROUP).collect();
    // Each member's tokens split once, for the value rule's comparisons.
    let split: Vec<Vec<&str>> = match rule {
        ContradictionRule::Negation => Vec::new(),
        ContradictionRule::ValueChange => members.iter().map(|m| m.read.tokens()).collect(),
    };
    let mut found = Vec::new();
    for (x, newer) in members.iter().enumerate() {
        for (y, older) in members.iter().enumerate().skip(x + 1) {
            let detail = match rule {
                ContradictionRule::Negation => {
                    let (nn, on) = (newer.read.negations, older.read.negations);
                    (nn % 2 != on % 2).then(|| {
                        let which = if nn % 2 == 1 { "newer" } else { "older" };
                        format!("the same statement, negated in the {which} entry only")
                    })
                }
                ContradictionRule::ValueChange => one_slot_differs(&split[y], &split[x]),
            };
            if let Some(detail) = detail {
                let (n, o) = (&newer.view, &older.view);
                found.push(Contradiction {
                    subject: n.subject.as_deref().map(str::to_owned),
                    work_context: n.entry.work_context.to_string(),
                    older: o.entry.id.clone(),
                    newer: n.entry.id.clone(),
                    older_at: o.entry.timestamp,
                    newer_at: n.entry.timestamp,
                    rule,
                    detail,
                });
            }
        }
    }
    found
}

fn is_assertive(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::Decision | EntryKind::KeyDecision | EntryKind::Fact
    )
}

/// A text read once for both rules: the live list is searched again on
/// every change, and its texts are mostly the ones read last time. Held
/// for every live decision and fact, so each token list is one string,
/// its tokens joined by single spaces (a token never holds one: see
/// [`tokens`]), not a string per token; the two keys are shared with the
/// groups they name.
#[derive(Debug)]
struct Reading {
    tokens: Box<str>,
    negations: usize,
    /// The tokens without negations (the negation rule's key), when at
    /// least two content words remain.
    without_negation: Option<Arc<str>>,
    /// The tokens with every value masked (the value rule's key), when
    /// there is a value and at least two content words.
    masked: Option<Arc<str>>,
}

impl Reading {
    fn new(text: &str) -> Reading {
        let tokens = tokens(text);
        let without: Vec<&str> = tokens
            .iter()
            .map(String::as_str)
            .filter(|t| *t != NEG && !matches!(*t, "do" | "does" | "did"))
            .collect();
        let without_negation = (content_words(&without) >= 2).then(|| Arc::from(without.join(" ")));
        let masked: Vec<&str> = tokens
            .iter()
            .map(|t| if is_value(t) { "#" } else { t.as_str() })
            .collect();
        let masked = (masked.contains(&"#") && content_words(&masked) >= 2)
            .then(|| Arc::from(masked.join(" ")));
        Reading {
            negations: negations(&tokens),
            tokens: tokens.join(" ").into_boxed_str(),
            without_negation,
            masked,
        }
    }

    /// The tokens, one by one.
    fn tokens(&self) -> Vec<&str> {
        joined_words(&self.tokens).collect()
    }

    /// [`Reading::new`], remembered by text (a bounded process-wide memo).
    fn shared(text: &str) -> Arc<Reading> {
        static MEMO: std::sync::OnceLock<crate::memo::TextMemo<Arc<Reading>>> =
            std::sync::OnceLock::new();
        MEMO.get_or_init(|| crate::memo::TextMemo::new(32_768))
            .get_or_make(b"contradiction reading", text, || {
                Arc::new(Reading::new(text))
            })
    }
}

fn content_words(tokens: &[&str]) -> usize {
    tokens
        .iter()
        .filter(|t| **t != "#" && !is_value(t) && !is_stopword(t) && t.chars().count() >= 3)
        .count()
}

/// With equal masks (same words, values in the same places): `Some` when
/// the values differ, all inside one run of consecutive values.
fn one_slot_differs(older: &[&str], newer: &[&str]) -> Option<String> {
    if older.len() != newer.len() {
        return None;
    }
    let differing: Vec<usize> = (0..older.len()).filter(|&i| older[i] != newer[i]).collect();
    let (&first, &last) = (differing.first()?, differing.last()?);
    // The run of values around the differences.
    let mut start = first;
    while start > 0 && is_value(older[start - 1]) {
        start -= 1;
    }
    let mut end = first;
    while end + 1 < older.len() && is_value(older[end + 1]) {
        end += 1;
    }
    if last > end {
        return None; // differences in two runs
    }
    Some(format!(
        "\"{}\" → \"{}\"",
        older[start..=end].join(" "),
        newer[start..=end].join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{Duration, TimeZone};

    use super::*;
    use crate::log::{Entry, EntryStatus};

    fn view(id: &str, kind: EntryKind, subject: Option<&str>, hours: i64, text: &str) -> EntryView {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap() + Duration::hours(hours);
        EntryView {
            entry: Arc::new(Entry::bare(id, kind, text, subject, "launch", at)),
            subject: subject.map(Arc::from),
            status: EntryStatus::Live,
            decay_at: None,
        }
    }

    fn found(entries: &[EntryView]) -> Vec<String> {
        find_contradictions(entries)
            .into_iter()
            .map(|c| format!("{}<{} {} {}", c.older, c.newer, c.rule.as_str(), c.detail))
            .collect()
    }

    const D: EntryKind = EntryKind::Decision;
    const F: EntryKind = EntryKind::Fact;

    #[test]
    fn negation_on_the_same_subject() {
        let entries = [
            view(
                "a",
                D,
                Some("sync"),
                0,
                "Use feature flags for the sync engine.",
            ),
            view(
                "b",
                D,
                Some("sync"),
                5,
                "Don't use feature flags for the sync engine.",
            ),
        ];
        assert_eq!(
            found(&entries),
            ["a<b negation the same statement, negated in the newer entry only"]
        );
        // Twice negated is not negated.
        let entries = [
            view("a", D, Some("sync"), 0, "Never ship without sync tests."),
            view("b", D, Some("sync"), 5, "Ship with sync tests."),
        ];
        assert!(found(&entries).is_empty());
    }

    #[test]
    fn one_value_slot_differs() {
        let entries = [
            view("f1", F, Some("retry"), 0, "Backoff intervals: 1s, 5s, 15s"),
            view("f2", F, Some("retry"), 3, "Backoff intervals: 2s, 10s, 30s"),
            view("d1", D, Some("beta"), 1, "Launch the Orion beta on April 1"),
            view(
                "d2",
                EntryKind::KeyDecision,
                Some("beta"),
                2,
                "Launch the Orion beta on April 8",
            ),
        ];
        assert_eq!(
            found(&entries),
            [
                "f1<f2 value_change \"1s 5s 15s\" → \"2s 10s 30s\"",
                "d1<d2 value_change \"april 1\" → \"april 8\"",
            ]
        );
    }

    #[test]
    fn conservative_cases_are_not_flagged() {
        let entries = [
            // Other subjects.
            view("a", D, Some("beta"), 0, "Launch on April 1 with sync"),
            view("b", D, Some("ga"), 1, "Launch on April 8 with sync"),
            // Two slots changed at once: an update, not one contradiction.
            view("c", F, Some("signups"), 0, "1,284 sign-ups as of March 2"),
            view("d", F, Some("signups"), 1, "1,500 sign-ups as of March 9"),
            // Restatement, paraphrase, shared topic.
            view("e", D, Some("db"), 0, "Use Postgres for the job queue"),
            view("f", D, Some("db"), 1, "Use Postgres for the job queue"),
            view("g", D, Some("db"), 2, "Postgres will back the job queue"),
            // Too little besides the value or the negation.
            view("h", F, Some("api"), 0, "The API is v2"),
            view("i", F, Some("api"), 1, "The API is v3"),
            view("j", D, Some("x"), 0, "No."),
            view("k", D, Some("x"), 1, "Yes."),
            // Not an assertive kind.
            view(
                "l",
                EntryKind::Task,
                Some("beta"),
                0,
                "Ship the beta on April 1",
            ),
            view(
                "m",
                EntryKind::Task,
                Some("beta"),
                1,
                "Ship the beta on April 2",
            ),
        ];
        assert!(found(&entries).is_empty(), "{:?}", found(&entries));
    }

    #[test]
    fn replaced_entries_and_subjectless_scopes() {
        let mut old = view("a", D, None, 0, "Launch the beta on April 1");
        let new = view("b", D, None, 1, "Launch the beta on April 8");
        assert_eq!(found(&[old.clone(), new.clone()]).len(), 1);
        let mut other_context = new.clone();
        Arc::make_mut(&mut other_context.entry).work_context = "elsewhere".into();
        assert!(found(&[old.clone(), other_context]).is_empty());
        old.status = EntryStatus::Replaced { by: "b".into() };
        assert!(found(&[old, new]).is_empty());
    }

    proptest::proptest! {
        /// An index patched entry by entry, in any order of additions and
        /// removals, finds what the index made from the entries left finds,
        /// and that is the pairs the rules name.
        #[test]
        fn patches_find_what_a_pass_finds(
            entries in proptest::collection::vec(
                (0i64..200, 0usize..3, 0usize..6, 1u8..4, proptest::option::of(0u8..2)),
                1..40,
            ),
            steps in proptest::collection::vec(
                (proptest::prelude::any::<bool>(), proptest::prelude::any::<proptest::sample::Index>()),
                1..60,
            ),
        ) {
            const TEXTS: [&str; 6] = [
                "Launch the beta on April {}",
                "Do not launch the beta on April {}",
                "The status page runs on {} replicas",
                "The status page never runs on {} replicas",
                "Ship the billing export before release {}",
                "Rotate the staging keys",
            ];
            let kinds = [D, F, EntryKind::Task];
            let views: Vec<EntryView> = entries
                .iter()
                .enumerate()
                .map(|(n, &(hour, kind, text, value, subject))| {
                    let subject = subject.map(|s| format!("s{s}"));
                    let text = TEXTS[text].replace("{}", &value.to_string());
                    view(&format!("e{n:03}"), kinds[kind], subject.as_deref(), hour, &text)
                })
                .collect();
            crate::live::walk_patches(&views, &steps, |index: &ContradictionIndex, left| {
                let found = index.found();
                proptest::prop_assert_eq!(&found, &ContradictionIndex::of(left.iter().copied()).found());
                // Every pair is two assertive entries of one scope.
                for c in &found {
                    let of = |id: &str| left.iter().find(|v| v.entry.id == id).copied();
                    let (o, n) = (of(&c.older), of(&c.newer));
                    proptest::prop_assert!(o.is_some() && n.is_some());
                    let (o, n) = (o.unwrap(), n.unwrap());
                    proptest::prop_assert!(is_assertive(o.entry.kind) && is_assertive(n.entry.kind));
                    proptest::prop_assert_eq!(&o.subject, &n.subject);
                    proptest::prop_assert!(o.entry.newest_first(&n.entry).is_gt());
                }
                Ok(())
            })?;
        }
    }
}
