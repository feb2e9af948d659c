//! Which idempotency keys a session's turns were appended with, held in
//! memory so an append stores its key once: inside its turn record.
//!
//! A turn record names the key it was appended with ([`crate::turn_codec`]),
//! so the set of a session's keys can always be read back from its turns.
//! [`SessionKeys`] keeps that set per session after the first keyed append
//! that needs it has read it (one pass over the session's turns, and over
//! the `Idempotency` entries stores written before this design kept one per
//! key). An append then costs one insert instead of two: sled charges
//! ~600 bytes written for every insert, whatever its size (see
//! `docs/BENCHMARKS.md`, twenty-sixth pass).
//!
//! A key is held as a 64-bit fingerprint and the sequence number of the
//! turn it names, 16 bytes: a fingerprint that matches is confirmed by
//! reading that turn's stored key (a retry is rare, and a false match is
//! rarer). Keys that cannot be confirmed that way (the old entries, whose
//! turns may predate keys in records; a second key with a fingerprint
//! already taken) are held whole.
//!
//! The rules that keep the sets right are those of the session heads
//! ([`crate::record`]): every writer of a session's turns holds its stripe
//! lock, takes the session's set out for the length of its write
//! ([`SessionKeys::take`]) and puts it back, with its own keys, only after
//! its batch was applied ([`SessionKeys::put_back`]); any other batch that
//! touches a session's turns forgets its set ([`SessionKeys::invalidate`]).

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};

/// The most keys all sessions of one workspace keep in memory together
/// (~16 bytes each, plus the map's overhead). Past it, other sessions' sets
/// are dropped (they are read again from the store when next needed); the
/// set being put back is always kept.
const MAX_CACHED_KEYS: usize = 1 << 20;

/// A session's idempotency keys: fingerprint to sequence number, and the
/// keys held whole.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    fingerprints: HashMap<u64, u64>,
    exact: HashMap<Box<str>, u64>,
}

/// What a [`KeyIndex`] knows of one key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The key names turn `seq`.
    Found(u64),
    /// A key with the same fingerprint names turn `seq`: the key is this
    /// one only if that turn's record says so.
    Confirm(u64),
    /// No turn of the session was appended with the key.
    Absent,
}

impl KeyIndex {
    /// How many keys the index holds.
    pub(crate) fn len(&self) -> usize {
        self.fingerprints.len() + self.exact.len()
    }

    pub(crate) fn lookup(&self, fingerprint: u64, key: &str) -> Lookup {
        if let Some(seq) = self.exact.get(key) {
            return Lookup::Found(*seq);
        }
        match self.fingerprints.get(&fingerprint) {
            Some(seq) => Lookup::Confirm(*seq),
            None => Lookup::Absent,
        }
    }

    /// Records that turn `seq` was appended with `key`, a key the index
    /// does not hold (it was [`Lookup::Absent`], or a [`Lookup::Confirm`]
    /// that was not confirmed).
    pub(crate) fn insert(&mut self, fingerprint: u64, key: &str, seq: u64) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.fingerprints.entry(fingerprint) {
            e.insert(seq);
        } else {
            self.exact.insert(key.into(), seq);
        }
    }

    /// Holds `key` whole (an entry whose turn may not name it).
    pub(crate) fn insert_exact(&mut self, key: &str, seq: u64) {
        self.exact.insert(key.into(), seq);
    }

    /// True when `key` is held whole.
    pub(crate) fn holds_exactly(&self, key: &str) -> bool {
        self.exact.contains_key(key)
    }
}

/// The key sets of one workspace's sessions (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SessionKeys {
    hasher: RandomState,
    inner: parking_lot::Mutex<KeysInner>,
}

#[derive(Debug, Default)]
struct KeysInner {
    sets: HashMap<String, KeyIndex>,
    /// The keys all `sets` hold together.
    held: usize,
}

impl KeysInner {
    fn drop_set(&mut self, session: &str) {
        if let Some(set) = self.sets.remove(session) {
            self.held -= set.len();
        }
    }
}

impl SessionKeys {
    /// The fingerprint of `key` (per process: never stored).
    pub(crate) fn fingerprint(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Takes the set of `session` out, if held. The caller holds the
    /// session's stripe lock and hands it back with [`Self::put_back`]
    /// once its write is applied (or drops it if the write failed).
    pub(crate) fn take(&self, session: &str) -> Option<KeyIndex> {
        let mut inner = self.inner.lock();
        let set = inner.sets.remove(session)?;
        inner.held -= set.len();
        Some(set)
    }

    /// Holds the set of `session` again, dropping other sessions' sets if
    /// the workspace would hold more than [`MAX_CACHED_KEYS`].
    pub(crate) fn put_back(&self, session: &str, set: KeyIndex) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let len = set.len();
        while inner.held + len > MAX_CACHED_KEYS {
            let Some(victim) = inner.sets.keys().find(|s| *s != session).cloned() else {
                break;
            };
            if let Some(dropped) = inner.sets.remove(&victim) {
                inner.held -= dropped.len();
            }
        }
        if let Some(old) = inner.sets.insert(session.to_owned(), set) {
            inner.held -= old.len();
        }
        inner.held += len;
    }

    /// Forgets the sets of `sessions` (a batch touched their turns).
    pub(crate) fn invalidate(&self, sessions: &BTreeSet<String>) {
        let mut inner = self.inner.lock();
        for id in sessions {
            inner.drop_set(id);
        }
    }

    /// Forgets the set of `session`, which ended: the keys of sessions
    /// that take no more turns are not held for the life of the process
    /// (a retry that comes after all reads them again from the turns).
    pub(crate) fn forget(&self, session: &str) {
        self.inner.lock().drop_set(session);
    }

    /// Forgets every set.
    pub(crate) fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.sets.clear();
        inner.held = 0;
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.inner.lock().held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_fingerprint_holds_the_second_key_whole() {
        let mut set = KeyIndex::default();
        set.insert(7, "a", 0);
        set.insert(7, "b", 1);
        assert_eq!(set.lookup(7, "a"), Lookup::Confirm(0));
        assert_eq!(set.lookup(7, "b"), Lookup::Found(1));
        assert_eq!(set.lookup(8, "c"), Lookup::Absent);
        set.insert_exact("old", 5);
        assert_eq!(set.lookup(9, "old"), Lookup::Found(5));
        assert!(set.holds_exactly("old") && !set.holds_exactly("a"));
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn sets_are_taken_put_back_forgotten_and_bounded() {
        let keys = SessionKeys::default();
        assert_ne!(keys.fingerprint("k1"), keys.fingerprint("k2"));
        let mut s1 = KeyIndex::default();
        s1.insert(keys.fingerprint("k1"), "k1", 0);
        keys.put_back("s1", s1);
        assert_eq!(keys.held(), 1);
        let s1 = keys.take("s1").unwrap();
        assert!(keys.take("s1").is_none());
        assert_eq!(keys.held(), 0);
        keys.put_back("s1", s1);
        keys.invalidate(&BTreeSet::from(["s1".to_owned()]));
        assert!(keys.take("s1").is_none());
        assert_eq!(keys.held(), 0);

        // Past the bound, other sessions' sets go; the one put back stays.
        let mut big = KeyIndex::default();
        for seq in 0..MAX_CACHED_KEYS as u64 {
            big.fingerprints.insert(seq, seq);
        }
        let mut small = KeyIndex::default();
        small.insert(1, "x", 0);
        keys.put_back("small", small);
        keys.put_back("big", big);
        assert!(keys.take("small").is_none());
        assert_eq!(keys.held(), MAX_CACHED_KEYS);
        keys.clear();
        assert_eq!(keys.held(), 0);
        assert!(keys.take("big").is_none());
    }
}
