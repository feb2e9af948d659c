//! Reconstruct: every derived store rebuilt from the raw record and the log
//! alone, into scratch, and compared with the live one (docs/DESIGN.md,
//! *Reconstruct*).
//!
//! What is primary (never rebuilt): sessions and their turns, the memory
//! log's entries, the subject registry and its aliases, tombstones, pins,
//! topics, compaction summaries, and the maintenance runs. Everything else
//! is derived from those, and each derived store has one checker:
//!
//! | store | rebuilt from | here or |
//! |---|---|---|
//! | [`DerivedStore::LogView`] | the entries, replacement links, aliases and marks, read afresh (the cached snapshot and live list must equal them) | [`Workspace::reconstruct_log`] |
//! | [`DerivedStore::Replacements`] | each entry's `replaces` (a link to an erased entry is kept: `forget` keeps replacement links by design) | [`Workspace::reconstruct_log`] |
//! | [`DerivedStore::WorkContextSessions`] | each session's work context | [`Workspace::reconstruct_log`] |
//! | [`DerivedStore::MaintenanceMarks`] | a replay of the maintenance runs not undone ([`crate::maintain::Lifecycle::replay`]) | [`Workspace::reconstruct_log`] |
//! | [`DerivedStore::SearchIndex`] | a fresh index of every turn and entry, with the archive and replacement sets | `search::SearchService::reconstruct` |
//! | [`DerivedStore::StoredVectors`] | each turn and entry embedded again (with a model), orphans and malformed vectors | `search::SearchService::reconstruct` |
//! | [`DerivedStore::CaptureMarks`] | the captured entries' provenance (a lower bound: a capture that wrote nothing leaves no trace) | the actors |
//!
//! A check reports every [`Difference`]; a rebuild (`repair`) replaces the
//! derived state with the scratch one, each store in one atomic batch, and
//! a second check then finds nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::log::{Entry, EntryFilter};
use crate::maintain::Lifecycle;
use crate::memory::{LogSnapshot, Workspace, decode};
use crate::record::work_context_key;
use crate::store::{Collection, MaintFamily, WriteBatch};

/// A derived store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DerivedStore {
    /// The decoded log and the live list kept in memory.
    LogView,
    /// Replaced entry → the entry that replaced it.
    Replacements,
    /// Sessions per work context.
    WorkContextSessions,
    /// The decayed / archived / restored marks maintenance leaves.
    MaintenanceMarks,
    /// The search index (BM25 and vectors) of turns and entries.
    SearchIndex,
    /// The embeddings stored for turns and entries.
    StoredVectors,
    /// The actors' capture high-water marks per work context and session.
    CaptureMarks,
}

impl DerivedStore {
    /// The `snake_case` name.
    pub fn as_str(self) -> &'static str {
        match self {
            DerivedStore::LogView => "log_view",
            DerivedStore::Replacements => "replacements",
            DerivedStore::WorkContextSessions => "work_context_sessions",
            DerivedStore::MaintenanceMarks => "maintenance_marks",
            DerivedStore::SearchIndex => "search_index",
            DerivedStore::StoredVectors => "stored_vectors",
            DerivedStore::CaptureMarks => "capture_marks",
        }
    }
}

/// One way a live derived record differs from its rebuilt version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Difference {
    /// The store.
    pub store: DerivedStore,
    /// The record (a key, an id).
    pub key: String,
    /// What the live store holds (`absent` when nothing).
    pub live: String,
    /// What the rebuild gives (`absent` when nothing).
    pub rebuilt: String,
}

/// How one store fared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoreCheck {
    /// The store.
    pub store: DerivedStore,
    /// Records compared.
    pub records: usize,
    /// Differences found.
    pub differences: usize,
    /// Records rewritten or removed by a rebuild.
    pub repaired: usize,
}

/// What `reconstruct` found (and, without `verify`, did) in one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReconstructReport {
    /// The workspace.
    pub workspace: String,
    /// True for a check only (nothing written).
    pub verify: bool,
    /// Per store.
    pub stores: Vec<StoreCheck>,
    /// Every difference found (before any repair).
    pub differences: Vec<Difference>,
}

impl ReconstructReport {
    /// True when the live derived state equals the rebuilt one.
    pub fn is_consistent(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Differences of one store, collected as they are found.
#[derive(Debug)]
pub struct Findings {
    store: DerivedStore,
    records: usize,
    differences: Vec<Difference>,
    repaired: usize,
}

impl Findings {
    /// An empty account of `store`.
    pub fn new(store: DerivedStore) -> Self {
        Findings {
            store,
            records: 0,
            differences: Vec::new(),
            repaired: 0,
        }
    }

    /// One more record compared.
    pub fn compared(&mut self, n: usize) {
        self.records += n;
    }

    /// A difference.
    pub fn differ(
        &mut self,
        key: impl Into<String>,
        live: impl Into<String>,
        rebuilt: impl Into<String>,
    ) {
        self.differences.push(Difference {
            store: self.store,
            key: key.into(),
            live: live.into(),
            rebuilt: rebuilt.into(),
        });
    }

    /// Records a rebuild rewrote.
    pub fn repaired(&mut self, n: usize) {
        self.repaired += n;
    }

    /// Whether anything differs.
    pub fn is_clean(&self) -> bool {
        self.differences.is_empty()
    }

    /// Adds this store's account to a report.
    pub fn into_report(self, report: &mut ReconstructReport) {
        report.stores.push(StoreCheck {
            store: self.store,
            records: self.records,
            differences: self.differences.len(),
            repaired: self.repaired,
        });
        report.differences.extend(self.differences);
    }
}

pub(crate) const ABSENT: &str = "absent";

fn text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if s.is_empty() {
        "(empty)".to_owned()
    } else {
        s.into_owned()
    }
}

/// The writes that turn a live store into its rebuild: puts, then deletes.
type Writes = (Vec<(Vec<u8>, Vec<u8>)>, Vec<Vec<u8>>);

/// Compares two key → value maps; returns the keys to put and delete to
/// turn `live` into `rebuilt`.
fn compare(
    findings: &mut Findings,
    live: &BTreeMap<Vec<u8>, Vec<u8>>,
    rebuilt: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Writes {
    let keys: BTreeSet<&Vec<u8>> = live.keys().chain(rebuilt.keys()).collect();
    findings.compared(keys.len());
    let (mut puts, mut deletes) = (Vec::new(), Vec::new());
    for key in keys {
        match (live.get(key), rebuilt.get(key)) {
            (Some(a), Some(b)) if a == b => {}
            (a, Some(b)) => {
                findings.differ(text(key), a.map_or(ABSENT.to_owned(), |a| text(a)), text(b));
                puts.push((key.clone(), b.clone()));
            }
            (Some(a), None) => {
                findings.differ(text(key), text(a), ABSENT);
                deletes.push(key.clone());
            }
            (None, None) => {}
        }
    }
    (puts, deletes)
}

// The log's derived stores on a workspace.
impl Workspace {
    /// Checks the derived stores of the log (view, replacement links,
    /// sessions per work context, maintenance marks) against their rebuild
    /// from the primary records; with `repair`, replaces them with the
    /// rebuild in one atomic batch (under the log's write lock).
    pub fn reconstruct_log(&self, repair: bool) -> Result<Vec<Findings>> {
        let guard = self.lock_entries();
        let entries: Vec<Entry> = self
            .store
            .scan_prefix(Collection::Entries, b"")?
            .into_iter()
            .map(|(k, v)| decode("entry", &k, &v))
            .collect::<Result<_>>()?;
        let stored: BTreeSet<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let mut batch = WriteBatch::default();
        let mut out = Vec::new();

        // Replacement links: from each entry's `replaces`; a link whose
        // replacing entry was erased is kept (forget keeps them).
        let mut f = Findings::new(DerivedStore::Replacements);
        let live: BTreeMap<Vec<u8>, Vec<u8>> = self
            .store
            .scan_prefix(Collection::Replacements, b"")?
            .into_iter()
            .collect();
        let mut rebuilt: BTreeMap<Vec<u8>, Vec<u8>> = entries
            .iter()
            .filter_map(|e| {
                let target = e.replaces.as_ref()?;
                Some((target.as_bytes().to_vec(), e.id.as_bytes().to_vec()))
            })
            .collect();
        for (k, v) in &live {
            let by = String::from_utf8_lossy(v);
            if !rebuilt.contains_key(k) && !stored.contains(by.as_ref()) {
                rebuilt.insert(k.clone(), v.clone());
            }
        }
        let (puts, deletes) = compare(&mut f, &live, &rebuilt);
        f.repaired(puts.len() + deletes.len());
        for (k, v) in puts {
            batch.put(Collection::Replacements, k, v);
        }
        for k in deletes {
            batch.delete(Collection::Replacements, k);
        }
        out.push(f);

        // Sessions per work context (scanned before the sessions, so a
        // session created in between is only ever added, never dropped).
        let mut f = Findings::new(DerivedStore::WorkContextSessions);
        let live: BTreeMap<Vec<u8>, Vec<u8>> = self
            .store
            .scan_prefix(Collection::WorkContextSessions, b"")?
            .into_iter()
            .collect();
        let rebuilt: BTreeMap<Vec<u8>, Vec<u8>> = self
            .sessions(None)?
            .into_iter()
            .map(|s| (work_context_key(&s.work_context, &s.id), Vec::new()))
            .collect();
        let (puts, deletes) = compare(&mut f, &live, &rebuilt);
        f.repaired(puts.len() + deletes.len());
        for (k, v) in puts {
            batch.put(Collection::WorkContextSessions, k, v);
        }
        for k in deletes {
            batch.delete(Collection::WorkContextSessions, k);
        }
        out.push(f);

        // Maintenance marks: a replay of the runs.
        let mut f = Findings::new(DerivedStore::MaintenanceMarks);
        let mut live = BTreeMap::new();
        for family in MaintFamily::ALL {
            if family == MaintFamily::Run {
                continue;
            }
            live.extend(
                self.store
                    .scan_prefix(Collection::Maintenance, family.prefix())?,
            );
        }
        let rebuilt = Lifecycle::replay(&self.maintenance_runs()?).records()?;
        let (puts, deletes) = compare(&mut f, &live, &rebuilt);
        f.repaired(puts.len() + deletes.len());
        for (k, v) in puts {
            batch.put(Collection::Maintenance, k, v);
        }
        for k in deletes {
            batch.delete(Collection::Maintenance, k);
        }
        out.push(f);

        // The in-memory view: the cached snapshot and live list against a
        // fresh read of the records (after the repair, if any).
        if repair && !batch.is_empty() {
            self.apply(batch)?;
            self.shared.store.sync()?;
        }
        let mut f = Findings::new(DerivedStore::LogView);
        if let Err(error) = self.compare_view(entries, &mut f) {
            // A derived record that does not decode (a mark) breaks reads:
            // a rebuild replaces it.
            f.differ(
                "snapshot",
                format!("cannot be read: {error}"),
                "a readable log",
            );
        }
        if repair && !f.is_clean() {
            self.shared.log_cache(&self.id).bump();
            f.repaired(1);
        }
        out.push(f);
        drop(guard);
        Ok(out)
    }

    /// The cached log snapshot and live list against a fresh read.
    fn compare_view(&self, entries: Vec<Entry>, f: &mut Findings) -> Result<()> {
        let fresh = LogSnapshot {
            entries: crate::memory::LogEntries::new(entries.into_iter().map(Arc::new).collect()),
            replacements: Arc::new(self.replacement_map()?),
            aliases: Arc::new(self.alias_map()?),
            lifecycle: Arc::new(self.lifecycle()?),
            subjects: std::sync::OnceLock::new(),
            live: parking_lot::Mutex::new(None),
            base: parking_lot::Mutex::new(None),
        };
        let now = self.now();
        let cached = self.log_snapshot()?;
        let ids = |s: &LogSnapshot| -> Vec<String> {
            s.entries.all().iter().map(|e| e.id.clone()).collect()
        };
        f.compared(fresh.entries.all().len());
        if ids(&cached) != ids(&fresh)
            || cached.replacements != fresh.replacements
            || cached.aliases != fresh.aliases
            || cached.lifecycle != fresh.lifecycle
        {
            f.differ("snapshot", "cached log differs", "fresh read");
        }
        let live = self.live_entries()?;
        let rebuilt = self.entries_in(&fresh, &EntryFilter::default(), now)?;
        let status = |v: Vec<&crate::log::EntryView>| -> HashMap<String, String> {
            v.into_iter()
                .map(|v| (v.entry.id.clone(), format!("{:?}", v.status)))
                .collect()
        };
        let (a, b) = (
            status(live.iter().collect()),
            status(rebuilt.iter().collect()),
        );
        for id in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
            if a.get(id) != b.get(id) {
                f.differ(
                    format!("live entry {id}"),
                    a.get(id).cloned().unwrap_or_else(|| ABSENT.to_owned()),
                    b.get(id).cloned().unwrap_or_else(|| ABSENT.to_owned()),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{Duration, TimeZone, Utc};

    use super::*;
    use crate::maintain::MaintainOptions;
    use crate::store::MaintKey;
    use crate::*;

    fn stores(findings: &[Findings]) -> Vec<String> {
        findings
            .iter()
            .flat_map(|f| &f.differences)
            .map(|d| {
                format!(
                    "{} {}: {} -> {}",
                    d.store.as_str(),
                    d.key,
                    d.live,
                    d.rebuilt
                )
            })
            .collect()
    }

    #[test]
    fn corrupted_log_stores_are_found_and_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap());
        let memory =
            crate::testing::memory(dir.path(), MemoryConfig::default(), Arc::new(clock.clone()))
                .unwrap();
        let ws = memory.workspace("acme").unwrap();
        ws.append_turn(&TurnInput::new("s1", Role::User, "hello").in_context("wc"))
            .unwrap();
        let a = ws
            .append_entry(&EntryInput::new(EntryKind::Fact, "The API is v2"))
            .unwrap();
        let b = ws
            .append_entry(&EntryInput::new(EntryKind::Fact, "The API is v3").replacing(&a.id))
            .unwrap();
        ws.append_entry(&EntryInput::new(EntryKind::Fact, "x").replacing(&b.id))
            .unwrap();
        let y = ws
            .append_entry(&EntryInput::new(EntryKind::CrossConversationUpdate, "y"))
            .unwrap();
        clock.advance(Duration::days(8));
        ws.maintain(&MaintainOptions::default()).unwrap();
        // A forget leaves nothing to rebuild (erasing a correction takes the
        // versions it replaced with it: see `forget`).
        ws.forget(&ForgetTarget::Entry(y.id.clone()), "test")
            .unwrap();
        assert!(stores(&ws.reconstruct_log(false).unwrap()).is_empty());

        // Corrupt three derived stores.
        ws.raw_write_for_tests(Collection::Replacements, a.id.as_bytes(), Some(b"nope"))
            .unwrap();
        ws.raw_write_for_tests(Collection::WorkContextSessions, b"wc\0s1", None)
            .unwrap();
        let mark = MaintKey::ArchivedEntry {
            entry: b.id.clone(),
        }
        .encode();
        ws.raw_write_for_tests(
            Collection::Maintenance,
            &mark,
            Some(br#"{"run":"run-9","at":"2026-03-02T09:00:00Z"}"#),
        )
        .unwrap();
        let found = stores(&ws.reconstruct_log(false).unwrap());
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].starts_with("replacements"), "{found:#?}");
        assert!(found[1].contains("work_context_sessions wc"), "{found:#?}");
        assert!(found[2].starts_with("maintenance_marks ae/"), "{found:#?}");
        // The verify wrote nothing; the rebuild repairs; then all is clean.
        assert_eq!(stores(&ws.reconstruct_log(false).unwrap()).len(), 3);
        let repaired = ws.reconstruct_log(true).unwrap();
        assert_eq!(repaired.iter().map(|f| f.repaired).sum::<usize>(), 3);
        assert!(stores(&ws.reconstruct_log(false).unwrap()).is_empty());
        assert_eq!(
            ws.entry(&a.id).unwrap().status,
            EntryStatus::Replaced { by: b.id.clone() }
        );
        assert_eq!(ws.sessions(Some("wc")).unwrap().len(), 1);
        // A mark that does not decode breaks reads; the rebuild fixes it.
        ws.raw_write_for_tests(Collection::Maintenance, &mark, Some(b"{}"))
            .unwrap();
        assert!(ws.entries(&EntryFilter::default()).is_err());
        let found = stores(&ws.reconstruct_log(false).unwrap());
        assert!(
            found.iter().any(|d| d.starts_with("log_view snapshot")),
            "{found:#?}"
        );
        ws.reconstruct_log(true).unwrap();
        assert!(stores(&ws.reconstruct_log(false).unwrap()).is_empty());
        assert!(ws.entries(&EntryFilter::default()).is_ok());
    }
}
