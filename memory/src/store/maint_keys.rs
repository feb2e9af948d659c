//! Typed keys of the [`Collection::Maintenance`](super::Collection::Maintenance)
//! collection: maintenance runs and the lifecycle marks they leave.
//!
//! Every key is a [`MaintKey`]; its byte encoding lives here and nowhere
//! else. A run's sequence number is written in 20 zero-padded digits so runs
//! sort in the order they were made (replay walks them in that order).

/// One record of the maintenance collection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MaintKey {
    /// A maintenance run: its changes, each with its rule and reason.
    Run {
        /// The run's number in its workspace (1, 2, …).
        seq: u64,
    },
    /// An entry a run decayed (it left the live set).
    Decayed {
        /// The entry id.
        entry: String,
    },
    /// An entry a run archived (out of the live indexes).
    ArchivedEntry {
        /// The entry id.
        entry: String,
    },
    /// A session whose turns a run archived (up to a turn).
    ArchivedSession {
        /// The session id.
        session: String,
    },
    /// An entry restored from the archive (kept out of archiving for a while).
    RestoredEntry {
        /// The entry id.
        entry: String,
    },
    /// A session restored from the archive.
    RestoredSession {
        /// The session id.
        session: String,
    },
    /// A fact a run settled: a newer fact about the same person and
    /// single-valued attribute replaced it (it left the live set).
    Settled {
        /// The entry id.
        entry: String,
    },
}

/// A kind of [`MaintKey`]: what a prefix scan walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaintFamily {
    /// [`MaintKey::Run`].
    Run,
    /// [`MaintKey::Decayed`].
    Decayed,
    /// [`MaintKey::ArchivedEntry`].
    ArchivedEntry,
    /// [`MaintKey::ArchivedSession`].
    ArchivedSession,
    /// [`MaintKey::RestoredEntry`].
    RestoredEntry,
    /// [`MaintKey::RestoredSession`].
    RestoredSession,
    /// [`MaintKey::Settled`].
    Settled,
}

impl MaintFamily {
    /// Every family.
    pub const ALL: [MaintFamily; 7] = [
        MaintFamily::Run,
        MaintFamily::Decayed,
        MaintFamily::ArchivedEntry,
        MaintFamily::ArchivedSession,
        MaintFamily::RestoredEntry,
        MaintFamily::RestoredSession,
        MaintFamily::Settled,
    ];

    /// The bytes every key of this family starts with (no family's prefix
    /// is a prefix of another's).
    pub fn prefix(self) -> &'static [u8] {
        match self {
            MaintFamily::Run => b"r/",
            MaintFamily::Decayed => b"d/",
            MaintFamily::ArchivedEntry => b"ae/",
            MaintFamily::ArchivedSession => b"as/",
            MaintFamily::RestoredEntry => b"ke/",
            MaintFamily::RestoredSession => b"ks/",
            MaintFamily::Settled => b"se/",
        }
    }
}

impl MaintKey {
    /// The family this key belongs to.
    pub fn family(&self) -> MaintFamily {
        match self {
            MaintKey::Run { .. } => MaintFamily::Run,
            MaintKey::Decayed { .. } => MaintFamily::Decayed,
            MaintKey::ArchivedEntry { .. } => MaintFamily::ArchivedEntry,
            MaintKey::ArchivedSession { .. } => MaintFamily::ArchivedSession,
            MaintKey::RestoredEntry { .. } => MaintFamily::RestoredEntry,
            MaintKey::RestoredSession { .. } => MaintFamily::RestoredSession,
            MaintKey::Settled { .. } => MaintFamily::Settled,
        }
    }

    /// The key as stored.
    ///
    /// ```
    /// use cairn_memory::store::MaintKey;
    /// assert_eq!(MaintKey::Run { seq: 7 }.encode(), b"r/00000000000000000007");
    /// let key = MaintKey::ArchivedSession { session: "s-1".into() };
    /// assert_eq!(key.encode(), b"as/s-1");
    /// assert_eq!(MaintKey::decode(&key.encode()), Some(key));
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.family().prefix().to_vec();
        match self {
            MaintKey::Run { seq } => out.extend_from_slice(format!("{seq:020}").as_bytes()),
            MaintKey::Decayed { entry: id }
            | MaintKey::ArchivedEntry { entry: id }
            | MaintKey::ArchivedSession { session: id }
            | MaintKey::RestoredEntry { entry: id }
            | MaintKey::RestoredSession { session: id }
            | MaintKey::Settled { entry: id } => out.extend_from_slice(id.as_bytes()),
        }
        out
    }

    /// The key a stored key encodes; `None` when it is no [`MaintKey`].
    pub fn decode(raw: &[u8]) -> Option<MaintKey> {
        let (family, rest) = MaintFamily::ALL
            .into_iter()
            .find_map(|f| Some((f, raw.strip_prefix(f.prefix())?)))?;
        let rest = std::str::from_utf8(rest).ok()?.to_owned();
        Some(match family {
            MaintFamily::Run => MaintKey::Run {
                seq: rest.parse().ok()?,
            },
            MaintFamily::Decayed => MaintKey::Decayed { entry: rest },
            MaintFamily::ArchivedEntry => MaintKey::ArchivedEntry { entry: rest },
            MaintFamily::ArchivedSession => MaintKey::ArchivedSession { session: rest },
            MaintFamily::RestoredEntry => MaintKey::RestoredEntry { entry: rest },
            MaintFamily::RestoredSession => MaintKey::RestoredSession { session: rest },
            MaintFamily::Settled => MaintKey::Settled { entry: rest },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encodings data dirs hold: changing one loses that state.
    #[test]
    fn encodings_are_pinned() {
        let cases: [(MaintKey, &[u8]); 7] = [
            (MaintKey::Run { seq: 42 }, b"r/00000000000000000042"),
            (MaintKey::Decayed { entry: "e1".into() }, b"d/e1"),
            (MaintKey::ArchivedEntry { entry: "e1".into() }, b"ae/e1"),
            (
                MaintKey::ArchivedSession {
                    session: "a/b".into(),
                },
                b"as/a/b",
            ),
            (MaintKey::RestoredEntry { entry: "e1".into() }, b"ke/e1"),
            (
                MaintKey::RestoredSession {
                    session: "s".into(),
                },
                b"ks/s",
            ),
            (MaintKey::Settled { entry: "e1".into() }, b"se/e1"),
        ];
        for (key, bytes) in cases {
            assert_eq!(key.encode(), bytes, "{key:?}");
            assert_eq!(MaintKey::decode(bytes), Some(key));
        }
        assert_eq!(MaintKey::decode(b"r/notanumber"), None);
        assert_eq!(MaintKey::decode(b"x/1"), None);
    }
}
