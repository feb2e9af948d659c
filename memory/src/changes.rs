//! Which writes happened, for a watcher that keeps something derived from
//! them (the search worker): per workspace, the sessions whose records were
//! written, the memory-log entries added, and whether something was taken
//! away (an erasure, a deleted entry).
//!
//! Every write goes through [`crate::Workspace::apply`], which tells each
//! watcher what its batch touched, so a watcher's pass can look at what
//! changed instead of listing every session and entry again. What a watcher
//! cannot learn this way (writes by another process on a shared backend, a
//! watch that overflowed) it finds by a whole pass now and then.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::store::{Collection, WriteBatch, WriteOp};

/// The most entry ids a watch keeps for one workspace between two looks;
/// past it the workspace is marked for a whole pass instead.
const MAX_ENTRIES: usize = 100_000;

/// What changed in one workspace since the watcher last looked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct WorkspaceChanges {
    /// Sessions whose turns or session record a write touched.
    pub(crate) sessions: BTreeSet<String>,
    /// Ids of the memory-log entries written (added or overwritten).
    pub(crate) entries: Vec<String>,
    /// A replacement or a maintenance mark (decayed, archived, restored)
    /// was written: what a watcher derives from those (compared as a whole,
    /// cheaply) may have moved.
    pub(crate) marks: bool,
    /// Something was taken away: a tombstone was written (an erasure), an
    /// entry deleted, or a write failed underneath (what it left is
    /// unknown). The watcher reconciles the workspace in full.
    pub(crate) other: bool,
}

impl WorkspaceChanges {
    /// What `batch` touches, given the sessions it touches
    /// ([`crate::record::sessions_touched`]).
    fn of(batch: &WriteBatch, sessions: &BTreeSet<String>) -> WorkspaceChanges {
        let mut out = WorkspaceChanges {
            sessions: sessions.clone(),
            ..WorkspaceChanges::default()
        };
        for op in batch.ops() {
            match op {
                WriteOp::Put {
                    collection: Collection::Entries,
                    key,
                    ..
                } => out.entries.push(String::from_utf8_lossy(key).into_owned()),
                WriteOp::Put { collection, .. } | WriteOp::Delete { collection, .. } => {
                    out.other |= affects_derived(*collection);
                    out.marks |= matches!(
                        collection,
                        Collection::Replacements | Collection::Maintenance
                    );
                }
            }
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.entries.is_empty() && !self.marks && !self.other
    }

    /// Adds `more` to these (past [`MAX_ENTRIES`] entry ids, a whole pass
    /// is asked for instead).
    fn merge(&mut self, more: &WorkspaceChanges) {
        self.sessions.extend(more.sessions.iter().cloned());
        self.marks |= more.marks;
        self.other |= more.other;
        if self.entries.len() + more.entries.len() > MAX_ENTRIES {
            self.other = true;
            self.entries = Vec::new();
        } else {
            self.entries.extend(more.entries.iter().cloned());
        }
    }
}

/// Collections besides turns, sessions and new entries whose writes a
/// watcher reconciles in full: erasures.
fn affects_derived(collection: Collection) -> bool {
    matches!(collection, Collection::Entries | Collection::Tombstones)
}

/// One watcher's pending changes, filled by every write of the memory it
/// watches ([`crate::Memory::watch_changes`]); dropped, it stops receiving.
#[derive(Debug, Default)]
pub(crate) struct ChangeWatch {
    pending: Mutex<HashMap<String, WorkspaceChanges>>,
}

impl ChangeWatch {
    /// What changed since the last call, per workspace (and forgets it).
    pub(crate) fn take(&self) -> HashMap<String, WorkspaceChanges> {
        std::mem::take(&mut *self.pending.lock())
    }

    /// Marks `workspace` for a whole pass (what was taken of it could not
    /// be handled).
    pub(crate) fn ask_whole(&self, workspace: &str) {
        self.pending
            .lock()
            .entry(workspace.to_owned())
            .or_default()
            .other = true;
    }
}

/// The watches of one memory (kept in its shared state).
#[derive(Debug, Default)]
pub(crate) struct Watchers(RwLock<Vec<Weak<ChangeWatch>>>);

impl Watchers {
    /// A new watch, told of every write from now on.
    pub(crate) fn watch(&self) -> Arc<ChangeWatch> {
        let watch = Arc::new(ChangeWatch::default());
        let mut list = self.0.write();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&watch));
        watch
    }

    /// What `batch` (which touches `sessions`) changes that a watcher
    /// derives from, when anyone watches (`None` otherwise: a memory
    /// nobody indexes pays one uncontended read lock a write).
    pub(crate) fn changes_of(
        &self,
        batch: &WriteBatch,
        sessions: &BTreeSet<String>,
    ) -> Option<WorkspaceChanges> {
        if self.0.read().is_empty() {
            return None;
        }
        Some(WorkspaceChanges::of(batch, sessions))
    }

    /// Tells every watch of `changes` in `workspace`, made by a write that
    /// is applied now (`failed`: it failed, so what it left is unknown).
    /// Nothing a watcher derives from (the watcher's own state, say) is
    /// not delivered.
    pub(crate) fn deliver(&self, workspace: &str, mut changes: WorkspaceChanges, failed: bool) {
        changes.other |= failed;
        if changes.is_empty() {
            return;
        }
        let list = self.0.read();
        for watch in list.iter().filter_map(Weak::upgrade) {
            let mut pending = watch.pending.lock();
            match pending.get_mut(workspace) {
                Some(seen) => seen.merge(&changes),
                None => {
                    pending.insert(workspace.to_owned(), changes.clone());
                }
            }
        }
    }

    /// [`changes_of`](Self::changes_of) and [`deliver`](Self::deliver) in one.
    #[cfg(test)]
    fn record(&self, workspace: &str, batch: &WriteBatch, failed: bool) {
        let sessions = crate::record::sessions_touched(batch);
        if let Some(changes) = self.changes_of(batch, &sessions.heads) {
            self.deliver(workspace, changes, failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ops: &[(Collection, &str, bool)]) -> WriteBatch {
        let mut b = WriteBatch::default();
        for &(collection, key, put) in ops {
            if put {
                b.put(collection, key.as_bytes().to_vec(), b"v".to_vec());
            } else {
                b.delete(collection, key.as_bytes().to_vec());
            }
        }
        b
    }

    #[test]
    fn a_watch_sees_sessions_and_new_entries_and_flags_the_rest() {
        let watchers = Watchers::default();
        let watch = watchers.watch();
        watchers.record(
            "acme",
            &batch(&[
                (Collection::Sessions, "s1", true),
                (Collection::Entries, "01E", true),
            ]),
            false,
        );
        let seen = watch.take();
        let acme = &seen["acme"];
        assert_eq!(acme.sessions.iter().collect::<Vec<_>>(), ["s1"]);
        assert_eq!(acme.entries, ["01E"]);
        assert!(!acme.other);
        assert!(watch.take().is_empty(), "taken once");

        for flagged in [
            batch(&[(Collection::Entries, "01E", false)]),
            batch(&[(Collection::Tombstones, "t", true)]),
        ] {
            watchers.record("acme", &flagged, false);
            assert!(watch.take()["acme"].other, "{:?}", flagged.ops());
        }
        watchers.record("acme", &batch(&[]), true);
        assert!(watch.take()["acme"].other, "a failed write is unknown");
        for marks in [Collection::Replacements, Collection::Maintenance] {
            watchers.record("acme", &batch(&[(marks, "k", true)]), false);
            let seen = &watch.take()["acme"];
            assert!(seen.marks && !seen.other, "{marks:?}");
        }
        watchers.record("acme", &batch(&[(Collection::State, "k", true)]), false);
        assert!(watch.take().is_empty(), "nothing a watcher derives from");
    }

    #[test]
    fn too_many_entries_between_looks_ask_for_a_whole_pass() {
        let watchers = Watchers::default();
        let watch = watchers.watch();
        let ids: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("{i:08}")).collect();
        for chunk in ids.chunks(1_000) {
            let ops: Vec<(Collection, &str, bool)> = chunk
                .iter()
                .map(|id| (Collection::Entries, id.as_str(), true))
                .collect();
            watchers.record("acme", &batch(&ops), false);
        }
        let seen = &watch.take()["acme"];
        assert!(seen.other);
        assert!(seen.entries.len() < 1_000, "{}", seen.entries.len());
    }

    #[test]
    fn a_dropped_watch_stops_receiving_and_others_keep_theirs() {
        let watchers = Watchers::default();
        let (a, b) = (watchers.watch(), watchers.watch());
        drop(b);
        watchers.record("acme", &batch(&[(Collection::Sessions, "s1", true)]), false);
        assert_eq!(a.take().len(), 1);
        let c = watchers.watch();
        assert_eq!(watchers.0.read().len(), 2, "the dropped one is pruned");
        watchers.record("w2", &batch(&[(Collection::Sessions, "s1", true)]), false);
        assert_eq!(a.take().len(), 1);
        assert_eq!(c.take().len(), 1);
    }
}
