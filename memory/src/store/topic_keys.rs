//! Typed keys of the [`Collection::Topics`](super::Collection::Topics)
//! collection: topic definitions, memberships, proposals, evidence
//! records, assertion candidates, frame updates and the gate log of one
//! workspace.
//!
//! Every key is a [`TopicKey`]; its byte encoding lives here and nowhere
//! else. Topic names are slugs (no `/`), so a key's topic is the text up to
//! the first `/` after the family prefix; a turn's sequence number is
//! written in 20 zero-padded digits so members sort by it.

/// One record of the topic collection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TopicKey {
    /// A topic's definition.
    Definition {
        /// The topic name (a slug).
        topic: String,
    },
    /// A turn the topic collected.
    Member {
        /// The topic.
        topic: String,
        /// The turn's session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
    /// A turn a gated topic proposes to collect.
    Proposal {
        /// The topic.
        topic: String,
        /// The turn's session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
    /// An evidence record a topic's directive asked for.
    Evidence {
        /// The topic.
        topic: String,
        /// The turn's session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
    /// An assertion candidate a person may accept into memory.
    Candidate {
        /// The topic.
        topic: String,
        /// The turn's session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
    /// A turn that updated the topic's frame (its tier-2 profile).
    Frame {
        /// The topic.
        topic: String,
        /// The turn's session.
        session: String,
        /// The turn's sequence number.
        seq: u64,
    },
    /// One gate decision.
    GateLog {
        /// The topic.
        topic: String,
        /// The decision's id (a ULID: keys sort by time).
        id: String,
    },
    /// When the topic's schedule last ran (`s/<topic>/last`).
    Schedule {
        /// The topic.
        topic: String,
    },
    /// A collection, in time order: the membership again, so the newest
    /// ones are a bounded reverse scan (assembly asks on every call).
    Recent {
        /// The topic.
        topic: String,
        /// A ULID taken when the turn was collected.
        id: String,
    },
}

/// A kind of [`TopicKey`]: what a prefix scan walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicFamily {
    /// [`TopicKey::Definition`].
    Definition,
    /// [`TopicKey::Member`].
    Member,
    /// [`TopicKey::Proposal`].
    Proposal,
    /// [`TopicKey::GateLog`].
    GateLog,
    /// [`TopicKey::Recent`].
    Recent,
    /// [`TopicKey::Schedule`].
    Schedule,
    /// [`TopicKey::Evidence`].
    Evidence,
    /// [`TopicKey::Candidate`].
    Candidate,
    /// [`TopicKey::Frame`].
    Frame,
}

impl TopicFamily {
    /// The bytes every key of this family starts with.
    pub fn prefix(self) -> &'static [u8] {
        match self {
            TopicFamily::Definition => b"d/",
            TopicFamily::Member => b"m/",
            TopicFamily::Proposal => b"p/",
            TopicFamily::GateLog => b"g/",
            TopicFamily::Recent => b"r/",
            TopicFamily::Schedule => b"s/",
            TopicFamily::Evidence => b"e/",
            TopicFamily::Candidate => b"c/",
            TopicFamily::Frame => b"f/",
        }
    }

    /// The prefix of this family's keys for one topic (for
    /// [`TopicFamily::Definition`], the key itself).
    ///
    /// ```
    /// use cairn_memory::store::TopicFamily;
    /// assert_eq!(TopicFamily::Member.topic_prefix("billing"), b"m/billing/");
    /// ```
    pub fn topic_prefix(self, topic: &str) -> Vec<u8> {
        let mut out = self.prefix().to_vec();
        out.extend_from_slice(topic.as_bytes());
        if self != TopicFamily::Definition {
            out.push(b'/');
        }
        out
    }
}

impl TopicKey {
    /// The family this key belongs to.
    pub fn family(&self) -> TopicFamily {
        match self {
            TopicKey::Definition { .. } => TopicFamily::Definition,
            TopicKey::Member { .. } => TopicFamily::Member,
            TopicKey::Proposal { .. } => TopicFamily::Proposal,
            TopicKey::GateLog { .. } => TopicFamily::GateLog,
            TopicKey::Recent { .. } => TopicFamily::Recent,
            TopicKey::Schedule { .. } => TopicFamily::Schedule,
            TopicKey::Evidence { .. } => TopicFamily::Evidence,
            TopicKey::Candidate { .. } => TopicFamily::Candidate,
            TopicKey::Frame { .. } => TopicFamily::Frame,
        }
    }

    /// The key as stored.
    ///
    /// ```
    /// use cairn_memory::store::TopicKey;
    /// let key = TopicKey::Member { topic: "billing".into(), session: "s/1".into(), seq: 3 };
    /// assert_eq!(key.encode(), b"m/billing/s/1/00000000000000000003");
    /// assert_eq!(TopicKey::decode(&key.encode()), Some(key));
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        match self {
            TopicKey::Definition { topic } => TopicFamily::Definition.topic_prefix(topic),
            TopicKey::Member {
                topic,
                session,
                seq,
            }
            | TopicKey::Proposal {
                topic,
                session,
                seq,
            }
            | TopicKey::Evidence {
                topic,
                session,
                seq,
            }
            | TopicKey::Candidate {
                topic,
                session,
                seq,
            }
            | TopicKey::Frame {
                topic,
                session,
                seq,
            } => {
                let mut out = self.family().topic_prefix(topic);
                out.extend_from_slice(format!("{session}/{seq:020}").as_bytes());
                out
            }
            TopicKey::Schedule { topic } => {
                let mut out = TopicFamily::Schedule.topic_prefix(topic);
                out.extend_from_slice(b"last");
                out
            }
            TopicKey::GateLog { topic, id } | TopicKey::Recent { topic, id } => {
                let mut out = self.family().topic_prefix(topic);
                out.extend_from_slice(id.as_bytes());
                out
            }
        }
    }

    /// The key a stored key encodes; `None` when it is no [`TopicKey`].
    pub fn decode(raw: &[u8]) -> Option<TopicKey> {
        let text = std::str::from_utf8(raw).ok()?;
        let (family, rest) = text.split_once('/')?;
        if family == "d" {
            return Some(TopicKey::Definition {
                topic: rest.to_owned(),
            });
        }
        let (topic, rest) = rest.split_once('/')?;
        let topic = topic.to_owned();
        let turn = || -> Option<(String, u64)> {
            let (session, seq) = rest.rsplit_once('/')?;
            Some((session.to_owned(), seq.parse().ok()?))
        };
        match family {
            "m" => turn().map(|(session, seq)| TopicKey::Member {
                topic,
                session,
                seq,
            }),
            "p" => turn().map(|(session, seq)| TopicKey::Proposal {
                topic,
                session,
                seq,
            }),
            "e" => turn().map(|(session, seq)| TopicKey::Evidence {
                topic,
                session,
                seq,
            }),
            "c" => turn().map(|(session, seq)| TopicKey::Candidate {
                topic,
                session,
                seq,
            }),
            "f" => turn().map(|(session, seq)| TopicKey::Frame {
                topic,
                session,
                seq,
            }),
            "g" => Some(TopicKey::GateLog {
                topic,
                id: rest.to_owned(),
            }),
            "s" if rest == "last" => Some(TopicKey::Schedule { topic }),
            "r" => Some(TopicKey::Recent {
                topic,
                id: rest.to_owned(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encodings data dirs hold: changing one loses that state.
    #[test]
    fn encodings_are_pinned() {
        let cases: [(TopicKey, &[u8]); 9] = [
            (
                TopicKey::Evidence {
                    topic: "billing".into(),
                    session: "s1".into(),
                    seq: 2,
                },
                b"e/billing/s1/00000000000000000002",
            ),
            (
                TopicKey::Candidate {
                    topic: "billing".into(),
                    session: "s1".into(),
                    seq: 2,
                },
                b"c/billing/s1/00000000000000000002",
            ),
            (
                TopicKey::Frame {
                    topic: "billing".into(),
                    session: "s1".into(),
                    seq: 2,
                },
                b"f/billing/s1/00000000000000000002",
            ),
            (
                TopicKey::Definition {
                    topic: "billing".into(),
                },
                b"d/billing",
            ),
            (
                TopicKey::Member {
                    topic: "billing".into(),
                    session: "a/b".into(),
                    seq: 0,
                },
                b"m/billing/a/b/00000000000000000000",
            ),
            (
                TopicKey::Proposal {
                    topic: "billing".into(),
                    session: "s1".into(),
                    seq: 12,
                },
                b"p/billing/s1/00000000000000000012",
            ),
            (
                TopicKey::GateLog {
                    topic: "billing".into(),
                    id: "01JABC".into(),
                },
                b"g/billing/01JABC",
            ),
            (
                TopicKey::Recent {
                    topic: "billing".into(),
                    id: "01JABD".into(),
                },
                b"r/billing/01JABD",
            ),
            (
                TopicKey::Schedule {
                    topic: "billing".into(),
                },
                b"s/billing/last",
            ),
        ];
        for (key, bytes) in cases {
            assert_eq!(key.encode(), bytes, "{key:?}");
            assert_eq!(TopicKey::decode(bytes), Some(key));
        }
    }
}
