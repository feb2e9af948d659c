//! A bounded memo of what is read from a text: token counts, a text's
//! reading for the settle rules, its sensitivity. Each is a pure function
//! of the text (and a salt naming the reading), asked about the same texts
//! over and over on the hot path.

/// Texts longer than this are read every time, never remembered: whole
/// blocks and long documents, each seen once.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

/// Up to `entries` values computed from texts, by a BLAKE3 hash of the salt
/// and the text; the least useful are forgotten first (`quick_cache`).
///
/// ```
/// use cairn_memory::memo::TextMemo;
/// let memo: TextMemo<usize> = TextMemo::new(1024);
/// assert_eq!(memo.get_or_make(b"len", "four", || 4), 4);
/// assert_eq!(memo.get_or_make(b"len", "four", || unreachable!()), 4);
/// ```
pub struct TextMemo<V> {
    cache: quick_cache::sync::Cache<[u8; 32], V>,
}

impl<V: Clone> TextMemo<V> {
    /// A memo of at most `entries` values.
    pub fn new(entries: usize) -> Self {
        TextMemo {
            cache: quick_cache::sync::Cache::new(entries),
        }
    }

    /// The value for `text` read as `salt` says: remembered, or made by
    /// `make` (and remembered when `text` is at most [`MAX_TEXT_BYTES`]).
    pub fn get_or_make(&self, salt: &[u8], text: &str, make: impl FnOnce() -> V) -> V {
        if text.len() > MAX_TEXT_BYTES {
            return make();
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(&(salt.len() as u64).to_le_bytes());
        hasher.update(salt);
        hasher.update(text.as_bytes());
        let key = *hasher.finalize().as_bytes();
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
