//! A bounded memo of what is read from a text: token counts, a text's
//! reading for the settle rules, its sensitivity. Each is a pure function
//! of the text (and a salt naming the reading), asked about the same texts
//! over and over on the hot path.

use std::hash::{BuildHasher, Hasher};

use siphasher::sip128::Hasher128;

/// Texts longer than this are read every time, never remembered: whole
/// blocks and long documents, each seen once.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

/// Up to `entries` values computed from texts, by a keyed 128-bit hash of
/// the salt and the text; the least useful are forgotten first
/// (`quick_cache`).
///
/// The hash is SipHash-1-3 with 128-bit output under a key drawn when the
/// memo is made and never shown: a pseudorandom function, so whoever
/// writes the texts cannot make two of them share a value (a sensitivity
/// read for one text served for another), and by chance two of them never
/// do. SipHash-1-3 is the variant the standard library keys its hash maps
/// with against the same adversary (one who writes the inputs and never
/// sees a hash); it replaced SipHash-2-4, which cost most of a hit on the
/// hot path's longer lines, and SipHash-2-4 the BLAKE3 hash before it.
///
/// ```
/// use cairn_memory::memo::TextMemo;
/// let memo: TextMemo<usize> = TextMemo::new(1024);
/// assert_eq!(memo.get_or_make(b"len", "four", || 4), 4);
/// assert_eq!(memo.get_or_make(b"len", "four", || unreachable!()), 4);
/// ```
pub struct TextMemo<V> {
    cache: quick_cache::sync::Cache<u128, V>,
    hasher: siphasher::sip128::SipHasher13,
}

impl<V: Clone> TextMemo<V> {
    /// A memo of at most `entries` values.
    pub fn new(entries: usize) -> Self {
        // Keys from the process's random hashing state: two outputs of a
        // freshly keyed SipHash, as unpredictable as its key.
        let seed = std::hash::RandomState::new();
        TextMemo {
            cache: quick_cache::sync::Cache::new(entries),
            hasher: siphasher::sip128::SipHasher13::new_with_keys(
                seed.hash_one(0u8),
                seed.hash_one(1u8),
            ),
        }
    }

    /// The value for `text` read as `salt` says: remembered, or made by
    /// `make` (and remembered when `text` is at most [`MAX_TEXT_BYTES`]).
    pub fn get_or_make(&self, salt: &[u8], text: &str, make: impl FnOnce() -> V) -> V {
        if text.len() > MAX_TEXT_BYTES {
            return make();
        }
        let mut hasher = self.hasher;
        hasher.write(&(salt.len() as u64).to_le_bytes());
        hasher.write(salt);
        hasher.write(text.as_bytes());
        let key = hasher.finish128().as_u128();
        if let Some(known) = self.cache.get(&key) {
            return known;
        }
        let made = make();
        self.cache.insert(key, made.clone());
        made
    }
}

impl<V: Clone> std::fmt::Debug for TextMemo<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextMemo")
            .field("entries", &self.cache.len())
            .finish()
    }
}
