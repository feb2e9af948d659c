//! Typed keys of the [`Collection::State`](super::Collection::State)
//! collection: the durable state other subsystems keep inside a workspace
//! (actors' capture marks, stored search vectors, pins).
//!
//! Every key is a [`StateKey`]; its byte encoding lives here and nowhere
//! else, so no subsystem builds key strings itself. Prefix scans go by
//! [`StateFamily`]. The encodings are the ones written before the keys were
//! typed (`actors/context/<work context>`, `search/v/<session>/<seq>`, …)
//! and must stay byte-identical, or existing data dirs stop reading: the
//! tests below pin them.

use std::fmt;

/// One record of another subsystem's durable state in a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StateKey {
    /// A work context's capture record (past captures, phase, the marks
    /// its latest capture set), kept by the actors.
    CaptureMark {
        /// The work context.
        work_context: String,
    },
    /// One session's capture high-water mark in a work context (the first
    /// turn not captured yet), kept by the actors: one record per session,
    /// so a capture reads and writes the marks of the sessions it takes,
    /// not those of every session the context ever had.
    SessionMark {
        /// The work context.
        work_context: String,
        /// The session.
        session: String,
    },
    /// A session's once-only extraction record, kept by the actors.
    Extraction {
        /// The session.
        session: String,
    },
    /// The stored embedding of a transcript turn, kept by search.
    TurnVector {
        /// The session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
    /// The stored embedding of a memory-log entry, kept by search.
    EntryVector {
        /// The entry id.
        entry: String,
    },
    /// A pinned entry (the value is empty), kept by assembly.
    Pin {
        /// The entry id.
        entry: String,
    },
    /// A session's compaction view (which summaries and raw ranges stand
    /// for its compacted history), kept by compaction.
    CompactionView {
        /// The session.
        session: String,
    },
    /// A durable record of one use the memory policy asked to audit (its
    /// `audit-log` obligation), kept by the runtime; ids are ULIDs, so the
    /// records sort by time.
    Audit {
        /// The audit record's id.
        id: String,
    },
    /// A confirmation the memory policy asked for before an item is used
    /// (its `confirm-with-user` obligation), pending or granted, kept by
    /// the runtime.
    Confirmation {
        /// The item (`entry e1`, `turn s1:4`, ...).
        item: String,
    },
    /// A turn whose derived copies the memory policy asked to erase when
    /// its session ends (its `expire-with-session` obligation on the
    /// capture), kept by the runtime.
    Expiry {
        /// The session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
}

/// A kind of [`StateKey`]: what a prefix scan walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateFamily {
    /// [`StateKey::CaptureMark`].
    CaptureMark,
    /// [`StateKey::SessionMark`].
    SessionMark,
    /// [`StateKey::Extraction`].
    Extraction,
    /// [`StateKey::TurnVector`].
    TurnVector,
    /// [`StateKey::EntryVector`].
    EntryVector,
    /// [`StateKey::Pin`].
    Pin,
    /// [`StateKey::CompactionView`].
    CompactionView,
    /// [`StateKey::Audit`].
    Audit,
    /// [`StateKey::Confirmation`].
    Confirmation,
    /// [`StateKey::Expiry`].
    Expiry,
}

impl StateFamily {
    const ALL: [StateFamily; 10] = [
        StateFamily::CaptureMark,
        StateFamily::SessionMark,
        StateFamily::Extraction,
        StateFamily::TurnVector,
        StateFamily::EntryVector,
        StateFamily::Pin,
        StateFamily::CompactionView,
        StateFamily::Audit,
        StateFamily::Confirmation,
        StateFamily::Expiry,
    ];

    /// The bytes every key of this family starts with (no family's prefix
    /// is a prefix of another's).
    pub fn prefix(self) -> &'static [u8] {
        match self {
            StateFamily::CaptureMark => b"actors/context/",
            StateFamily::SessionMark => b"actors/mark/",
            StateFamily::Extraction => b"actors/extraction/",
            StateFamily::TurnVector => b"search/v/",
            StateFamily::EntryVector => b"search/e/",
            StateFamily::Pin => b"assemble/pin/",
            StateFamily::CompactionView => b"compact/view/",
            StateFamily::Audit => b"policy/audit/",
            StateFamily::Confirmation => b"policy/confirm/",
            StateFamily::Expiry => b"policy/expire/",
        }
    }
}

impl StateKey {
    /// The family this key belongs to.
    pub fn family(&self) -> StateFamily {
        match self {
            StateKey::CaptureMark { .. } => StateFamily::CaptureMark,
            StateKey::SessionMark { .. } => StateFamily::SessionMark,
            StateKey::Extraction { .. } => StateFamily::Extraction,
            StateKey::TurnVector { .. } => StateFamily::TurnVector,
            StateKey::EntryVector { .. } => StateFamily::EntryVector,
            StateKey::Pin { .. } => StateFamily::Pin,
            StateKey::CompactionView { .. } => StateFamily::CompactionView,
            StateKey::Audit { .. } => StateFamily::Audit,
            StateKey::Confirmation { .. } => StateFamily::Confirmation,
            StateKey::Expiry { .. } => StateFamily::Expiry,
        }
    }

    /// The key as stored: the family prefix, then the fields (a turn's
    /// sequence number in 20 zero-padded decimal digits, so keys sort by it).
    ///
    /// ```
    /// use cairn_memory::store::StateKey;
    /// let key = StateKey::TurnVector { session: "s1".into(), seq: 7 };
    /// assert_eq!(key.encode(), b"search/v/s1/00000000000000000007");
    /// assert_eq!(StateKey::decode(&key.encode()), Some(key));
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.family().prefix().to_vec();
        match self {
            StateKey::CaptureMark { work_context: id }
            | StateKey::Extraction { session: id }
            | StateKey::EntryVector { entry: id }
            | StateKey::Pin { entry: id }
            | StateKey::CompactionView { session: id }
            | StateKey::Audit { id }
            | StateKey::Confirmation { item: id } => out.extend_from_slice(id.as_bytes()),
            StateKey::TurnVector { session, seq } | StateKey::Expiry { session, seq } => {
                out.extend_from_slice(format!("{session}/{seq:020}").as_bytes());
            }
            // `|` is no id character: it cannot occur in either part.
            StateKey::SessionMark {
                work_context,
                session,
            } => out.extend_from_slice(format!("{work_context}|{session}").as_bytes()),
        }
        out
    }

    /// The key a stored key encodes; `None` when it is no [`StateKey`].
    pub fn decode(raw: &[u8]) -> Option<StateKey> {
        let (family, rest) = StateFamily::ALL
            .into_iter()
            .find_map(|f| Some((f, raw.strip_prefix(f.prefix())?)))?;
        let rest = std::str::from_utf8(rest).ok()?.to_owned();
        Some(match family {
            StateFamily::CaptureMark => StateKey::CaptureMark { work_context: rest },
            StateFamily::Extraction => StateKey::Extraction { session: rest },
            StateFamily::EntryVector => StateKey::EntryVector { entry: rest },
            StateFamily::Pin => StateKey::Pin { entry: rest },
            StateFamily::CompactionView => StateKey::CompactionView { session: rest },
            StateFamily::Audit => StateKey::Audit { id: rest },
            StateFamily::Confirmation => StateKey::Confirmation { item: rest },
            StateFamily::SessionMark => {
                let (work_context, session) = rest.split_once('|')?;
                StateKey::SessionMark {
                    work_context: work_context.to_owned(),
                    session: session.to_owned(),
                }
            }
            StateFamily::TurnVector => {
                let (session, seq) = rest.rsplit_once('/')?;
                StateKey::TurnVector {
                    session: session.to_owned(),
                    seq: seq.parse().ok()?,
                }
            }
            StateFamily::Expiry => {
                let (session, seq) = rest.rsplit_once('/')?;
                StateKey::Expiry {
                    session: session.to_owned(),
                    seq: seq.parse().ok()?,
                }
            }
        })
    }
}

impl fmt::Display for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.encode()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encodings data dirs hold: changing one loses that state.
    #[test]
    fn encodings_are_pinned() {
        let cases: [(StateKey, &[u8]); 6] = [
            (
                StateKey::CaptureMark {
                    work_context: "auth-migration".into(),
                },
                b"actors/context/auth-migration",
            ),
            (
                StateKey::SessionMark {
                    work_context: "a/b".into(),
                    session: "s/1".into(),
                },
                b"actors/mark/a/b|s/1",
            ),
            (
                StateKey::Extraction {
                    session: "s-1".into(),
                },
                b"actors/extraction/s-1",
            ),
            (
                StateKey::TurnVector {
                    session: "s1".into(),
                    seq: 0,
                },
                b"search/v/s1/00000000000000000000",
            ),
            (
                StateKey::TurnVector {
                    session: "a/b".into(),
                    seq: u64::MAX,
                },
                b"search/v/a/b/18446744073709551615",
            ),
            (
                StateKey::EntryVector {
                    entry: "01JABCDEF".into(),
                },
                b"search/e/01JABCDEF",
            ),
        ];
        for (key, bytes) in cases {
            assert_eq!(key.encode(), bytes, "{key:?}");
            assert_eq!(StateKey::decode(bytes), Some(key));
        }
        let pin = StateKey::Pin {
            entry: "01JABCDEF".into(),
        };
        assert_eq!(pin.encode(), b"assemble/pin/01JABCDEF");
        assert_eq!(StateKey::decode(b"assemble/pin/01JABCDEF"), Some(pin));
        let view = StateKey::CompactionView {
            session: "s-1".into(),
        };
        assert_eq!(view.encode(), b"compact/view/s-1");
        assert_eq!(StateKey::decode(b"compact/view/s-1"), Some(view));
    }

    #[test]
    fn keys_start_with_their_family_prefix() {
        let key = StateKey::TurnVector {
            session: "s".into(),
            seq: 3,
        };
        assert!(key.encode().starts_with(StateFamily::TurnVector.prefix()));
        assert_eq!(StateKey::decode(b"search/v/s/notanumber"), None);
        assert_eq!(StateKey::decode(b"other/x"), None);
    }
}
