//! The three tiers (which entries feed which card, and whether tier 1 fires)
//! and activity-type inheritance; see docs/DESIGN.md, *Context assembly*. Budgets are
//! applied by `compose`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Duration, Utc};

use super::{ActivityReport, AssembleSettings};
use crate::live::{LiveList, Moves};
use crate::log::{EntryKind, EntryView};
use crate::memory::DEFAULT_WORK_CONTEXT;
use crate::memory::{LiveDerived, with_list};
use crate::record::Session;
use crate::subjects::{Subject, SubjectKind};

/// The parts of a resume card, in the order the card prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ResumePart {
    /// Where the last sessions left off.
    History,
    /// Open questions.
    Open,
    /// Decisions.
    Decision,
    /// Changes made elsewhere.
    Update,
}

impl ResumePart {
    /// Every part, in card order (their `as usize` places).
    const ALL: [ResumePart; 4] = [
        ResumePart::History,
        ResumePart::Open,
        ResumePart::Decision,
        ResumePart::Update,
    ];

    fn of(kind: EntryKind) -> Option<ResumePart> {
        match kind {
            EntryKind::SessionSummaryRef | EntryKind::Handoff => Some(ResumePart::History),
            // An obligation is an open question maintenance promoted; a
            // directive, a decision it promoted (see `crate::maintain`).
            EntryKind::OpenQuestion | EntryKind::Question | EntryKind::Obligation => {
                Some(ResumePart::Open)
            }
            EntryKind::KeyDecision | EntryKind::Decision | EntryKind::Directive => {
                Some(ResumePart::Decision)
            }
            EntryKind::CrossConversationUpdate => Some(ResumePart::Update),
            _ => None,
        }
    }

    /// How many of this part the card shows at most (docs/DESIGN.md, *The three tiers*).
    fn max(self) -> usize {
        match self {
            ResumePart::History => 3,
            ResumePart::Open => 3,
            ResumePart::Decision => 2,
            ResumePart::Update => 5,
        }
    }

    /// The line's prefix.
    pub(super) fn prefix(self) -> &'static str {
        match self {
            ResumePart::History => "Last session",
            ResumePart::Open => "Open",
            ResumePart::Decision => "Decision",
            ResumePart::Update => "Since last session",
        }
    }

    /// Trimming priority: higher is trimmed later (history goes first,
    /// then decisions, then open questions, then updates).
    pub(super) fn keep_rank(self) -> u8 {
        match self {
            ResumePart::History => 0,
            ResumePart::Decision => 1,
            ResumePart::Open => 2,
            ResumePart::Update => 3,
        }
    }
}

/// A resume card that may fire.
#[derive(Debug)]
pub(super) struct Resume<'a> {
    /// The work context it is about.
    pub(super) work_context: String,
    /// How it matched.
    pub(super) matched: String,
    /// The active work phase, if recorded.
    pub(super) phase: Option<String>,
    /// Its lines, in card order.
    pub(super) lines: Vec<(ResumePart, &'a EntryView)>,
}

fn is_continuity(kind: EntryKind) -> bool {
    ResumePart::of(kind).is_some() || kind == EntryKind::WorkPhaseChange
}

/// The phases a work context can be in (docs/DESIGN.md, *Activity types and work phases*).
const PHASES: [(&str, &str); 10] = [
    ("waiting", "waiting_for_external"),
    ("research", "research"),
    ("drafting", "drafting"),
    ("draft", "drafting"),
    ("review", "review"),
    ("revis", "revision"),
    ("complete", "completed"),
    ("done", "completed"),
    ("paused", "paused"),
    ("unknown", "unknown"),
];

/// The phase a work-phase-change entry names.
pub(super) fn phase_of(content: &str) -> Option<&'static str> {
    let lower = content.to_lowercase();
    // The last phase named wins ("from research to drafting").
    PHASES
        .iter()
        .filter_map(|(needle, phase)| lower.rfind(needle).map(|at| (at, *phase)))
        .max_by_key(|(at, _)| *at)
        .map(|(_, phase)| phase)
}

/// The live entries with, per work context, what its resume card and
/// phase read (an index kept with the live list: an assembly reads one
/// context's card, not the context's records, let alone the whole log).
#[derive(Clone, Copy)]
pub(super) struct Continuity<'a> {
    live: &'a LiveList,
    index: &'a AssemblyIndex,
}

impl<'a> Continuity<'a> {
    /// Over `live`, with the index `derived` (kept with that list) holds,
    /// built on first use.
    pub(super) fn of(live: &'a LiveList, derived: &'a LiveDerived) -> Self {
        let index = AssemblyIndex::of(live, derived);
        Continuity { live, index }
    }

    /// The card of `work_context` (none: it has no continuity records).
    fn card(self, work_context: &str) -> Option<&'a Card> {
        self.index.cards.get(work_context)
    }

    /// The entry `ord` places from the list's oldest end.
    fn at(self, ord: usize) -> &'a EntryView {
        nth_oldest(self.live, ord)
    }
}

/// The entry `ord` places from the oldest end of `live`: where an
/// [`AssemblyIndex`] says its records are (counted from that end, a
/// record's place does not move when newer entries come). Panics past the
/// list's end, as indexing does.
fn nth_oldest(live: &LiveList, ord: usize) -> &EntryView {
    &live[live.len() - 1 - ord]
}

/// [`nth_oldest`], or `None` past the list's end.
fn get_nth_oldest(live: &LiveList, ord: usize) -> Option<&EntryView> {
    let i = ord.checked_add(1).and_then(|n| live.len().checked_sub(n))?;
    live.get(i)
}

/// What a work context's resume card and phase read, made from its
/// continuity records (newest first). Places are counted from the list's
/// oldest end ([`nth_oldest`]).
#[derive(Debug, PartialEq)]
struct Card {
    /// Its newest continuity record.
    latest: usize,
    /// The card's lines in list order: each part up to its
    /// [`ResumePart::max`], and only the newest handoff (a handoff says
    /// where things stood when its session ended: the newest supersedes
    /// the others).
    lines: Vec<(ResumePart, usize)>,
    /// Its newest handoff (the one among the lines).
    handoff: Option<usize>,
    /// Its newest phase change.
    phase: Option<usize>,
}

/// How many records a [`Card`] holds in each of its places (or should).
#[derive(Debug, Default)]
struct Fill {
    /// Per [`ResumePart`], its lines.
    parts: [usize; ResumePart::ALL.len()],
    handoff: bool,
    phase: bool,
}

impl Fill {
    /// Whether this holds at least what `enough` says.
    fn holds(&self, enough: &Fill) -> bool {
        self.parts
            .iter()
            .zip(&enough.parts)
            .all(|(have, want)| have >= want)
            && (self.handoff || !enough.handoff)
            && (self.phase || !enough.phase)
    }
}

impl Card {
    /// The card of the continuity records at `ords` of `live` (newest
    /// first; not empty).
    fn of(ords: impl IntoIterator<Item = usize>, live: &LiveList) -> Self {
        Card::scan(ords, live, None)
    }

    /// [`Card::of`], stopping once the card holds `enough` (every record
    /// the context has for each of its places, or as many as it shows).
    fn scan(ords: impl IntoIterator<Item = usize>, live: &LiveList, enough: Option<Fill>) -> Self {
        let mut ords = ords.into_iter().peekable();
        let mut card = Card {
            latest: ords.peek().copied().unwrap_or_default(),
            lines: Vec::new(),
            handoff: None,
            phase: None,
        };
        for o in ords {
            // A place past the list (none should be) is passed over.
            if let Some(v) = get_nth_oldest(live, o) {
                card.note(v.entry.kind, o);
                if enough
                    .as_ref()
                    .is_some_and(|enough| card.fill().holds(enough))
                {
                    break;
                }
            }
        }
        card
    }

    /// How many records the card holds in each of its places.
    fn fill(&self) -> Fill {
        let mut parts = [0; ResumePart::ALL.len()];
        for (part, _) in &self.lines {
            parts[*part as usize] += 1;
        }
        Fill {
            parts,
            handoff: self.handoff.is_some(),
            phase: self.phase.is_some(),
        }
    }

    /// This card after a patch that replaced records it shows: the
    /// context's records (`ords`, newest first, in `live`) scanned only
    /// as far as the card's places fill. How far that is this card tells:
    /// a part it did not fill showed every record of its kinds, so the
    /// context has those less the ones replaced plus the ones `added`
    /// (places in `live`). Where that is not known (its handoff or phase
    /// replaced), the scan goes on until it finds one or the records end.
    fn rescanned(
        &self,
        moves: &Moves,
        added: &[usize],
        ords: impl IntoIterator<Item = usize>,
        live: &LiveList,
    ) -> Card {
        let lost = |o: usize| moves.ord_to(o).is_none();
        // The added records, counted per place.
        let mut added_to = Fill::default();
        let kinds = added
            .iter()
            .filter_map(|&o| get_nth_oldest(live, o))
            .map(|v| v.entry.kind);
        for kind in kinds {
            added_to.handoff |= kind == EntryKind::Handoff;
            added_to.phase |= kind == EntryKind::WorkPhaseChange;
            if let Some(part) = ResumePart::of(kind).filter(|_| kind != EntryKind::Handoff) {
                added_to.parts[part as usize] += 1;
            }
        }
        let had = self.fill();
        let mut enough = Fill {
            parts: [0; ResumePart::ALL.len()],
            // Its own, an added one, or (its own replaced) an older one,
            // looked for.
            handoff: had.handoff || added_to.handoff,
            phase: had.phase || added_to.phase,
        };
        for part in ResumePart::ALL {
            let p = part as usize;
            enough.parts[p] = if had.parts[p] == part.max() {
                part.max()
            } else {
                // Every record of the part was shown (for the history,
                // every summary and the newest handoff: counted when its
                // handoff is looked for, even if none is left, which only
                // makes the scan go on to the end).
                let kept = self
                    .lines
                    .iter()
                    .filter(|&&(q, o)| q == part && !lost(o) && Some(o) != self.handoff)
                    .count();
                let handoff = usize::from(part == ResumePart::History && enough.handoff);
                (kept + added_to.parts[p] + handoff).min(part.max())
            };
        }
        Card::scan(ords, live, Some(enough))
    }

    /// Takes the continuity record at `o` (records come newest first).
    fn note(&mut self, kind: EntryKind, o: usize) {
        if kind == EntryKind::WorkPhaseChange && self.phase.is_none() {
            self.phase = Some(o);
        }
        if kind == EntryKind::Handoff {
            if self.handoff.is_some() {
                return;
            }
            self.handoff = Some(o);
        }
        if let Some(part) = ResumePart::of(kind)
            && self.lines.iter().filter(|(p, _)| *p == part).count() < part.max()
        {
            self.lines.push((part, o));
        }
    }

    /// The places of the records this card shows (some more than once).
    fn places(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.latest)
            .chain(self.lines.iter().map(|&(_, o)| o))
            .chain(self.handoff)
            .chain(self.phase)
    }

    /// Whether `moves` replaced one of the records this card shows.
    fn lost_one(&self, moves: &Moves) -> bool {
        self.places().any(|o| moves.ord_to(o).is_none())
    }

    /// This card after a patch that replaced none of its records and added
    /// the records at `added` (newest first): its places moved as `moves`
    /// say, then its own records and the added ones noted in list order.
    /// A card holds the first records of each part, so the first ones
    /// after the patch are among those: the cost is the card's size and
    /// the additions, not the context's records.
    fn patched(&self, moves: &Moves, added: &[usize], live: &LiveList) -> Card {
        let at = |o: usize| moves.ord_to(o).unwrap_or(usize::MAX);
        let moved = Card {
            latest: at(self.latest),
            lines: self.lines.iter().map(|&(part, o)| (part, at(o))).collect(),
            handoff: self.handoff.map(at),
            phase: self.phase.map(at),
        };
        if added.is_empty() {
            return moved;
        }
        let mut ords: Vec<usize> = moved.places().chain(added.iter().copied()).collect();
        ords.sort_unstable_by(|a, b| b.cmp(a));
        ords.dedup();
        Card::of(ords, live)
    }
}

/// The active phase of a work context: its newest phase change.
pub(super) fn active_phase(live: Continuity<'_>, work_context: &str) -> Option<&'static str> {
    let at = live.card(work_context)?.phase?;
    phase_of(&live.at(at).entry.content)
}

fn mentions(query: &str, subject: &Subject) -> bool {
    let q = query.to_lowercase();
    let words: HashSet<&str> = q
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| !w.is_empty())
        .collect();
    std::iter::once(&subject.slug)
        .chain(&subject.aliases)
        .any(|slug| words.contains(slug.as_str()) || q.contains(&slug.replace('-', " ")))
        || (subject.display.len() >= 3 && q.contains(&subject.display.to_lowercase()))
}

/// Tier 1: the resume card, or why it does not fire.
///
/// Only the newest handoff of a context counts (a later one supersedes
/// it). Entity resolution: the session's own work context (when it is a
/// named one), else the work context with the most continuity records about the
/// subjects the query mentions. The card fires only when that context has
/// continuity data, its latest record came from another session, and at
/// least `resume_min_gap_minutes` have passed since.
pub(super) fn resume<'a>(
    live: Continuity<'a>,
    subjects: &[Subject],
    session: &Session,
    query: &str,
    now: DateTime<Utc>,
    settings: &AssembleSettings,
) -> Result<Resume<'a>, String> {
    let (work_context, matched) = if session.work_context != DEFAULT_WORK_CONTEXT
        && live.card(&session.work_context).is_some()
    {
        (
            session.work_context.clone(),
            "the session's work context".to_owned(),
        )
    } else {
        let named: Vec<&Subject> = subjects.iter().filter(|s| mentions(query, s)).collect();
        // Continuity records about the named subjects, per (named) context.
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let by_subject = live.index.continuity_by_subject(live.live);
        for about in named.iter().filter_map(|n| by_subject.get(&n.slug)) {
            for (wc, n) in about {
                *counts.entry(wc.as_str()).or_default() += n;
            }
        }
        let best = counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(wc, _)| (*wc).to_owned());
        match best {
            Some(wc) => {
                let names: Vec<&str> = named.iter().map(|s| s.slug.as_str()).collect();
                (wc, format!("entity match: {}", names.join(", ")))
            }
            None if session.work_context != DEFAULT_WORK_CONTEXT => {
                return Err(format!(
                    "work context {:?} has no continuity data and no entity in the turn matches another",
                    session.work_context
                ));
            }
            None => return Err("no entity in the turn matches a work context".to_owned()),
        }
    };
    let Some(card) = live.card(&work_context) else {
        return Err(format!(
            "work context {work_context:?} has no continuity data"
        ));
    };
    let latest = live.at(card.latest);
    if latest
        .entry
        .provenance
        .as_ref()
        .is_some_and(|p| p.session == session.id)
    {
        return Err(format!(
            "the latest continuity record of {work_context:?} came from this session"
        ));
    }
    let gap = now - latest.entry.timestamp;
    if gap < Duration::minutes(i64::from(settings.resume_min_gap_minutes)) {
        return Err(format!(
            "only {} minutes since the latest continuity record of {work_context:?} (needs {})",
            gap.num_minutes().max(0),
            settings.resume_min_gap_minutes
        ));
    }
    let mut lines: Vec<(ResumePart, &EntryView)> = card
        .lines
        .iter()
        .map(|&(part, o)| (part, live.at(o)))
        .collect();
    lines.sort_by_key(|(p, _)| *p);
    Ok(Resume {
        phase: active_phase(live, &work_context).map(str::to_owned),
        work_context,
        matched,
        lines,
    })
}

/// Tier 2: the last days' activity in the other work contexts, newest
/// context first, at most two records per context. Reads an index of the
/// records per context kept with the live list (`derived`): the cost of an
/// assembly grows with the contexts, not with the log.
pub(super) fn recent_activity<'a>(
    live: &'a LiveList,
    derived: &'a LiveDerived,
    exclude: &[&str],
    now: DateTime<Utc>,
    settings: &AssembleSettings,
) -> Vec<&'a EntryView> {
    let index = &AssemblyIndex::of(live, derived).activity;
    let since = now - Duration::days(i64::from(settings.recent_activity_max_age_days));
    // Per context, its newest two within the window (the lists are oldest
    // first, so they end them); contexts ordered by their newest record.
    let mut per: Vec<Vec<usize>> = index
        .iter()
        .filter(|(wc, _)| !exclude.contains(&wc.as_str()))
        .map(|(_, ords)| {
            ords.iter()
                .rev()
                .take(2)
                .take_while(|&o| nth_oldest(live, o).entry.timestamp >= since)
                .collect::<Vec<usize>>()
        })
        .filter(|ords| !ords.is_empty())
        .collect();
    per.sort_unstable_by_key(|ords| std::cmp::Reverse(ords[0]));
    per.into_iter()
        .flatten()
        .map(|o| nth_oldest(live, o))
        .collect()
}

/// A tail longer than this is folded into the shared run
/// ([`Ords::moved`]). Small under test, so the property tests fold.
#[cfg(not(test))]
const ORDS_FOLD_AT: usize = 256;
#[cfg(test)]
const ORDS_FOLD_AT: usize = 4;

/// Places in a live list counted from its oldest end ([`nth_oldest`]),
/// ascending: a run shared between the indexes of successive lists, then
/// a short tail of this list's own.
///
/// A patch that adds newer entries leaves the older places where they
/// are, so the next list's index shares the run and copies only the tail
/// (the whole list was copied per patch before: a linear cost per write
/// to the log, which grew with the log). The tail is folded into a new run
/// past [`ORDS_FOLD_AT`] places, a copy of the list every so many
/// additions.
#[derive(Debug, Default, Clone)]
struct Ords {
    run: Arc<[usize]>,
    tail: Vec<usize>,
}

impl PartialEq for Ords {
    fn eq(&self, other: &Ords) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Ords {
    fn len(&self) -> usize {
        self.run.len() + self.tail.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Oldest first (reversed: newest first).
    fn iter(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        self.run.iter().chain(&self.tail).copied()
    }

    /// Adds `o`, newer than every place held (a build, oldest first).
    fn push(&mut self, o: usize) {
        self.tail.push(o);
    }

    /// Adds `o` at its place (a patch: usually past the others).
    fn insert(&mut self, o: usize) {
        if self.run.last().is_some_and(|&last| o < last) {
            // Older than the run's newest: made again in one piece.
            let mut all: Vec<usize> = self.iter().collect();
            all.insert(all.partition_point(|&p| p < o), o);
            *self = Ords {
                run: all.into(),
                tail: Vec::new(),
            };
            return;
        }
        let at = self.tail.partition_point(|&p| p < o);
        self.tail.insert(at, o);
    }

    /// These places in the list `moves` patched this one's into: those
    /// under `stable` stay, the others move (or go, with their entries).
    /// The run is shared when it lies under `stable`.
    fn moved(&self, stable: usize, moves: &Moves) -> Ords {
        let kept = self.run.partition_point(|&o| o < stable);
        if kept < self.run.len() {
            let mut all = Vec::with_capacity(self.len() + moves.added.len());
            all.extend_from_slice(&self.run[..kept]);
            all.extend(
                self.run[kept..]
                    .iter()
                    .chain(&self.tail)
                    .filter_map(|&o| moves.ord_to(o)),
            );
            return Ords {
                run: all.into(),
                tail: Vec::new(),
            };
        }
        let kept = self.tail.partition_point(|&o| o < stable);
        // Room for the additions: a tail grown by one is not copied again.
        let mut tail = Vec::with_capacity(self.tail.len() + moves.added.len());
        tail.extend_from_slice(&self.tail[..kept]);
        tail.extend(self.tail[kept..].iter().filter_map(|&o| moves.ord_to(o)));
        if tail.len() <= ORDS_FOLD_AT {
            return Ords {
                run: self.run.clone(),
                tail,
            };
        }
        let mut all = Vec::with_capacity(self.run.len() + tail.len());
        all.extend_from_slice(&self.run);
        all.extend(tail);
        Ords {
            run: all.into(),
            tail: Vec::new(),
        }
    }
}

/// Where in a live list the records assembly reads are, kept with the
/// list ([`LiveDerived`]): made in one pass over it on first use, or, for a
/// list patched from one whose index was made, from that index and the
/// patch ([`AssemblyIndex::patched`]). Records are named by their places
/// counted from the list's oldest end ([`nth_oldest`]), so a patch that adds
/// newer entries leaves them where they are, and each list is oldest
/// first (a new record goes at its end).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct AssemblyIndex {
    /// Per work context, its continuity records.
    continuity: HashMap<String, Ords>,
    /// Per work context with continuity records, its resume card, phase and
    /// newest handoff.
    cards: HashMap<String, Card>,
    /// Per subject, how many continuity records about it each named work
    /// context has (the resume card's entity match; made on first use, as
    /// only sessions outside a context with continuity data ask).
    continuity_by_subject: OnceLock<HashMap<String, BTreeMap<String, usize>>>,
    /// Per work context, the records tier 2 (recent activity) shows.
    activity: HashMap<String, Ords>,
    /// Facts of the default (workspace-wide) work context (tier 3).
    workspace_facts: Ords,
    /// Facts of other contexts, per subject (tier 3: those about people).
    facts_by_subject: HashMap<String, Ords>,
    /// Facts capture learned about a person in any other context (tier 3:
    /// they hold wherever the person works).
    person_facts: Ords,
}

impl AssemblyIndex {
    /// The index of `live`, kept in `derived` (made on first use).
    pub(crate) fn of<'d>(live: &LiveList, derived: &'d LiveDerived) -> &'d AssemblyIndex {
        derived.assembly.get_or_init(|| AssemblyIndex::build(live))
    }

    /// One pass over `live`.
    pub(crate) fn build(live: &LiveList) -> AssemblyIndex {
        let mut index = AssemblyIndex::default();
        let views: Vec<&EntryView> = live.iter().collect();
        for (o, v) in views.iter().rev().enumerate() {
            index.add(v, o, false);
        }
        index.cards = index
            .continuity
            .iter()
            .map(|(wc, ords)| (wc.clone(), Card::of(ords.iter().rev(), live)))
            .collect();
        index
    }

    /// Puts `v`, `o` places from the list's oldest end, in the lists it
    /// belongs in: at its place when `sorted` (a patch), else at the end
    /// (a build, oldest first). True when it is a continuity record.
    fn add(&mut self, v: &EntryView, o: usize, sorted: bool) -> bool {
        let put = |list: &mut Ords| {
            if sorted {
                list.insert(o);
            } else {
                list.push(o);
            }
        };
        let (kind, wc) = (v.entry.kind, v.entry.work_context.as_str());
        let continuity = is_continuity(kind);
        if continuity {
            with_list(&mut self.continuity, wc, put);
        }
        if matches!(
            kind,
            EntryKind::SessionSummaryRef
                | EntryKind::Handoff
                | EntryKind::KeyDecision
                | EntryKind::Decision
                | EntryKind::Directive
                | EntryKind::WorkPhaseChange
        ) {
            with_list(&mut self.activity, wc, put);
        }
        if kind == EntryKind::Fact {
            if wc == DEFAULT_WORK_CONTEXT {
                put(&mut self.workspace_facts);
            } else if v
                .entry
                .detail
                .as_deref()
                .and_then(crate::facts::fact_of_detail)
                .is_some()
            {
                put(&mut self.person_facts);
            } else if let Some(s) = &v.subject {
                with_list(&mut self.facts_by_subject, s, put);
            }
        }
        continuity
    }

    /// The index of `live`, a list patched from the one this index is of,
    /// with `moves` saying where that list's entries went and where the
    /// added ones are. The records older than every change keep their
    /// places (counted from the oldest end), so each list keeps them (its
    /// run shared when all of it lies there, [`Ords`]) and only its newer
    /// records are moved; then, per work context, its card and the records
    /// added to it ([`Card::patched`]), or one pass over its continuity
    /// records when a patch replaced one the card shows: not a pass over
    /// the list.
    pub(crate) fn patched(&self, moves: &Moves, live: &LiveList) -> AssemblyIndex {
        let stable = moves.stable();
        let moved = |ords: &Ords| ords.moved(stable, moves);
        let moved_all = |map: &HashMap<String, Ords>| -> HashMap<String, Ords> {
            map.iter()
                .map(|(key, ords)| (key.clone(), moved(ords)))
                .filter(|(_, ords)| !ords.is_empty())
                .collect()
        };
        let mut index = AssemblyIndex {
            continuity: HashMap::with_capacity(self.continuity.len()),
            activity: moved_all(&self.activity),
            workspace_facts: moved(&self.workspace_facts),
            facts_by_subject: moved_all(&self.facts_by_subject),
            person_facts: moved(&self.person_facts),
            ..AssemblyIndex::default()
        };
        // Contexts a record of which was replaced: their cards are made
        // again from all their records when it was one the card shows.
        let mut replaced: HashSet<&str> = HashSet::new();
        for (wc, ords) in &self.continuity {
            let kept = moved(ords);
            if kept.len() != ords.len() {
                replaced.insert(wc);
            }
            if !kept.is_empty() {
                index.continuity.insert(wc.clone(), kept);
            }
        }
        // Per context, the continuity records the patches added (newest
        // first: `added` holds places in list order).
        let mut added_to: HashMap<&str, Vec<usize>> = HashMap::new();
        for &j in &moves.added {
            let Some(v) = live.get(j) else { continue };
            let o = live.len() - 1 - j;
            if index.add(v, o, true) {
                added_to
                    .entry(v.entry.work_context.as_str())
                    .or_default()
                    .push(o);
            }
        }
        index.cards = index
            .continuity
            .iter()
            .map(|(wc, ords)| {
                let new = added_to.get(wc.as_str()).map_or(&[][..], Vec::as_slice);
                // A replaced record the card does not show changes nothing
                // it shows (the card is the first records of each part).
                let card = match self.cards.get(wc) {
                    Some(card) if !replaced.contains(wc.as_str()) || !card.lost_one(moves) => {
                        card.patched(moves, new, live)
                    }
                    Some(card) => card.rescanned(moves, new, ords.iter().rev(), live),
                    None => Card::of(ords.iter().rev(), live),
                };
                (wc.clone(), card)
            })
            .collect();
        index
    }

    /// Per subject, how many continuity records about it each named work
    /// context of `live` (the list this index is of) has.
    fn continuity_by_subject(&self, live: &LiveList) -> &HashMap<String, BTreeMap<String, usize>> {
        self.continuity_by_subject.get_or_init(|| {
            let mut counts: HashMap<String, BTreeMap<String, usize>> = HashMap::new();
            for v in live {
                let wc = v.entry.work_context.as_str();
                if let Some(subject) = &v.subject
                    && wc != DEFAULT_WORK_CONTEXT
                    && is_continuity(v.entry.kind)
                {
                    *counts
                        .entry(subject.to_string())
                        .or_default()
                        .entry(wc.to_owned())
                        .or_default() += 1;
                }
            }
            counts
        })
    }

    /// The newest handoff of `work_context` in `live` (the list this
    /// index is of).
    pub(crate) fn latest_handoff<'l>(
        &self,
        live: &'l LiveList,
        work_context: &str,
    ) -> Option<&'l EntryView> {
        let o = self.cards.get(work_context)?.handoff?;
        Some(nth_oldest(live, o))
    }
}

/// Tier 3: stable facts: facts of the default (workspace-wide) context,
/// facts capture learned about a person in a session `readable` lets the
/// asker read (its lineage, for a sub-agent), and facts about people,
/// newest first. Reads an index of the facts kept with the live list
/// (`derived`), not the whole list.
pub(super) fn living_memory<'a>(
    live: &'a LiveList,
    derived: &'a LiveDerived,
    subjects: &[Subject],
    readable: impl Fn(Option<&str>) -> bool,
) -> Vec<&'a EntryView> {
    let index = AssemblyIndex::of(live, derived);
    let mut ords: Vec<usize> = index.workspace_facts.iter().collect();
    ords.extend(index.person_facts.iter().filter(|&o| {
        let v = nth_oldest(live, o);
        readable(v.entry.provenance.as_ref().map(|p| p.session.as_str()))
    }));
    for s in subjects.iter().filter(|s| s.kind == SubjectKind::Person) {
        if let Some(about) = index.facts_by_subject.get(&s.slug) {
            ords.extend(about.iter());
        }
    }
    // Newest first: the highest places from the oldest end.
    ords.sort_unstable_by(|a, b| b.cmp(a));
    ords.dedup();
    ords.into_iter().map(|o| nth_oldest(live, o)).collect()
}

/// Words that say what kind of work a message is.
const ACTIVITY_WORDS: [(&str, &str); 9] = [
    ("research", "research"),
    ("investigate", "research"),
    ("look up", "research"),
    ("draft", "drafting"),
    ("write up", "drafting"),
    ("review", "review"),
    ("proofread", "review"),
    ("revise", "revision"),
    ("rewrite", "revision"),
];

/// Activity-type inheritance (docs/DESIGN.md): the message's own activity
/// when it says one clearly, else the work context's active phase.
pub(super) fn activity(query: &str, phase: Option<&str>, work_context: &str) -> ActivityReport {
    let lower = query.to_lowercase();
    if let Some((word, kind)) = ACTIVITY_WORDS.iter().find(|(w, _)| lower.contains(w)) {
        return ActivityReport {
            activity_type: (*kind).to_owned(),
            inherited: false,
            work_phase: phase.map(str::to_owned),
            reason: format!("the message says so ({word:?})"),
        };
    }
    match phase {
        Some(p) => ActivityReport {
            activity_type: p.to_owned(),
            inherited: true,
            work_phase: Some(p.to_owned()),
            reason: format!("inherited from the active phase of {work_context:?}"),
        },
        None => ActivityReport {
            activity_type: "unknown".to_owned(),
            inherited: false,
            work_phase: None,
            reason: "no activity in the message and no recorded phase".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places added by patches land in the tail, which folds into a new
    /// run past `ORDS_FOLD_AT`; the run is shared until then; a place older
    /// than the run's newest makes the list again in one piece. Each step
    /// holds the places a plain sorted list would.
    #[test]
    fn ords_share_their_run_and_fold_their_tail() {
        let mut ords = Ords::default();
        let mut plain: Vec<usize> = Vec::new();
        for o in 0..3 {
            ords.push(o);
            plain.push(o);
        }
        let mut len = 3;
        let mut folds = 0;
        for step in 0..4 * ORDS_FOLD_AT {
            let moves = Moves::appended(len, 2);
            let before = ords.run.clone();
            ords = ords.moved(moves.stable(), &moves);
            if Arc::ptr_eq(&before, &ords.run) {
                assert!(ords.tail.len() <= ORDS_FOLD_AT);
            } else {
                folds += 1;
                assert!(ords.tail.is_empty(), "a fold leaves no tail");
            }
            // One of the two new entries is in the list.
            ords.insert(len + step % 2);
            plain.push(len + step % 2);
            len += 2;
            assert_eq!(ords.iter().collect::<Vec<_>>(), plain, "step {step}");
            assert_eq!(ords.iter().next_back(), plain.last().copied());
        }
        assert!(folds >= 3, "{folds} folds");
        assert!(!ords.run.is_empty());
        // Older than the run's newest: in its place.
        ords.insert(1);
        plain.insert(2, 1);
        assert_eq!(ords.iter().collect::<Vec<_>>(), plain);
        assert_eq!(ords.len(), plain.len());
    }
}
