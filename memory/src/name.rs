//! [`Name`]: an immutable string shared by reference count.
//!
//! The work context, subject, session, gate generation and detail of an
//! entry repeat over thousands of entries; the memory log held in memory
//! keeps one allocation for each (see [`Names`]) instead of one per entry
//! (`docs/BENCHMARKS.md`, thirty-fifth and thirty-sixth passes).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An immutable string, cheap to clone: it shares one allocation.
///
/// It reads as a `&str` (`Deref`, `AsRef`, `Borrow`), compares with
/// `str`, `&str` and `String`, and is written as a plain JSON string.
///
/// ```
/// use cairn_memory::log::Name;
///
/// let context: Name = "billing".into();
/// let again = context.clone(); // no copy of the text
/// assert_eq!(again, "billing");
/// assert_eq!(context.as_str().len(), 7);
/// assert_eq!(serde_json::to_string(&context).unwrap(), "\"billing\"");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

impl Name {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether two names share one allocation (not only equal text).
    pub fn ptr_eq(a: &Name, b: &Name) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Default for Name {
    fn default() -> Self {
        Name(Arc::from(""))
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Name(Arc::from(s))
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Self {
        Name(Arc::from(s.as_str()))
    }
}

impl From<Arc<str>> for Name {
    fn from(s: Arc<str>) -> Self {
        Name(s)
    }
}

impl From<Name> for Arc<str> {
    fn from(name: Name) -> Self {
        name.0
    }
}

impl From<Name> for String {
    fn from(name: Name) -> Self {
        name.0.as_ref().to_owned()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name, E> {
                Ok(Name::from(v))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Name, E> {
                Ok(Name::from(v))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// A bounded set of shared [`Name`]s: [`Names::get`] answers the one
/// allocation held for a text, so the entries, views and indexes that name
/// it share it.
///
/// Free texts an entry carries (its detail: captures write a handful of
/// them, "heuristic rule Decision, trigger session_end", over and over) are
/// shared through a set of their own ([`Names::share_text`]), so the unique
/// ones, which churn it, never push the names out.
///
/// Bounded: past [`Names::MAX`] names (or texts) it starts again (what was
/// handed out before keeps its allocation; later ones share new ones).
#[derive(Debug, Default)]
pub(crate) struct Names {
    names: parking_lot::Mutex<HashSet<Name>>,
    texts: parking_lot::Mutex<HashSet<Name>>,
}

impl Names {
    /// The most names (and, apart, texts) held at once.
    pub(crate) const MAX: usize = 1 << 16;

    /// The shared name of `text`.
    pub(crate) fn get(&self, text: &str) -> Name {
        shared(&mut self.names.lock(), text)
    }

    /// Replaces `name` by the shared one with its text.
    pub(crate) fn share(&self, name: &mut Name) {
        *name = self.get(name);
    }

    /// Replaces the free text `text` by the shared one with its content.
    pub(crate) fn share_text(&self, text: &mut Name) {
        *text = shared(&mut self.texts.lock(), text);
    }

    /// Lets go of every name and text: after an erasure (a name can be
    /// personal), nothing of what was erased stays here.
    pub(crate) fn clear(&self) {
        self.names.lock().clear();
        self.texts.lock().clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.lock().len() + self.texts.lock().len()
    }
}

/// The one allocation `set` holds for `text`, made (and the set emptied
/// first when full) if it holds none.
fn shared(set: &mut HashSet<Name>, text: &str) -> Name {
    if let Some(name) = set.get(text) {
        return name.clone();
    }
    if set.len() >= Names::MAX {
        set.clear();
    }
    let name = Name::from(text);
    set.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_a_plain_json_string_both_ways() {
        let name: Name = serde_json::from_str("\"ctx \\\"a\\\"\"").unwrap();
        assert_eq!(name, "ctx \"a\"");
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"ctx \\\"a\\\"\"");
        assert!(serde_json::from_str::<Name>("3").is_err());
    }

    #[test]
    fn names_share_one_allocation_per_text_and_stay_bounded() {
        let names = Names::default();
        let mut a = Name::from("billing");
        let b = Name::from("billing");
        assert!(!Name::ptr_eq(&a, &b));
        names.share(&mut a);
        assert!(Name::ptr_eq(&a, &names.get("billing")));
        for i in 0..Names::MAX {
            names.get(&format!("n{i}"));
        }
        assert!(names.len() <= Names::MAX);
        // It started again: the text is named anew, equal but not shared.
        let again = names.get("billing");
        assert_eq!(again, a);
        assert!(!Name::ptr_eq(&again, &a));
        names.clear();
        assert_eq!(names.len(), 0);
    }

    #[test]
    fn texts_are_shared_apart_and_their_churn_keeps_the_names() {
        let names = Names::default();
        let billing = names.get("billing");
        let mut detail = Name::from("heuristic rule Decision, trigger session_end");
        let mut again = Name::from("heuristic rule Decision, trigger session_end");
        names.share_text(&mut detail);
        names.share_text(&mut again);
        assert!(Name::ptr_eq(&detail, &again));
        // A text is not a name: the same words asked as a name are another
        // allocation.
        assert!(!Name::ptr_eq(&detail, &names.get(&detail)));
        // Unique texts fill and empty the texts' set, never the names'.
        for i in 0..=Names::MAX {
            names.share_text(&mut Name::from(format!("restates and extends {i}")));
        }
        assert!(Name::ptr_eq(&billing, &names.get("billing")));
        names.clear();
        assert_eq!(names.len(), 0);
    }

    #[test]
    fn an_entry_fits_the_allocators_224_byte_class_under_its_arc() {
        // An `Arc<Entry>` is the entry and two counters: at 208 bytes or
        // less it takes jemalloc's 224-byte class (the shared names took it
        // from 240 bytes and the 256 class).
        let size = std::mem::size_of::<crate::log::Entry>();
        assert!(size <= 208, "an entry is {size} bytes");
    }
}
