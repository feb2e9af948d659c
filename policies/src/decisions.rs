//! The decision log seam: every decision, the plugin's or the fail-safe, is
//! handed to a [`DecisionSink`] as a [`DecisionRecord`].
//!
//! The durable implementation (sled) lives in the runtime; this crate ships
//! [`MemorySink`], a bounded in-memory log for tests, benches and embedders
//! that do not need durability.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::digest::InputsDigest;
use crate::fault::Fault;
use crate::memory_policy::MemoryPolicyDecision;
use crate::significance::SignificanceDecision;
use crate::topic::TopicDirectiveDecision;
use crate::vocab::ReasonCode;
use crate::world::WorldKind;

/// A decision's unique id (a ULID: sortable by creation time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DecisionId(ulid::Ulid);

impl DecisionId {
    pub(crate) fn new() -> DecisionId {
        DecisionId(ulid::Ulid::new())
    }

    /// `n` ids for the decisions of one call: the first made as
    /// [`DecisionId::new`] does, each next one the previous plus one (a
    /// ULID's random part is incremented within its millisecond, as ULID's
    /// monotonic generation does), so they stay unique and sort in the
    /// call's order without reading the clock and the random source per
    /// decision. Falls back to fresh ids in the ~never case that the random
    /// part would overflow.
    pub(crate) fn run(n: usize) -> impl Iterator<Item = DecisionId> {
        let mut next = Some(ulid::Ulid::new());
        (0..n).map(move |_| {
            // (Not `unwrap_or_default`: a default ULID is nil.)
            let id = match next {
                Some(id) => id,
                None => ulid::Ulid::new(),
            };
            next = id.increment();
            DecisionId(id)
        })
    }

    /// The id as its 128 bits (the binary log form).
    pub(crate) fn as_u128(self) -> u128 {
        self.0.0
    }

    pub(crate) fn from_u128(bits: u128) -> DecisionId {
        DecisionId(ulid::Ulid(bits))
    }
}

impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for DecisionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DecisionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ulid::Ulid::from_string(&text)
            .map(DecisionId)
            .map_err(serde::de::Error::custom)
    }
}

/// Which installed plugin version made a decision: `plugin@hash#number`,
/// where `hash` is the start of the component's BLAKE3 content hash and
/// `number` counts generations on this host (from
/// [`HostConfig::first_generation`](crate::HostConfig::first_generation)).
/// Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyGenerationId(Arc<str>);

impl PolicyGenerationId {
    pub(crate) fn new(plugin: &str, hash: &blake3::Hash, number: u64) -> PolicyGenerationId {
        let hex = hash.to_hex();
        PolicyGenerationId(format!("{plugin}@{}#{number}", &hex[..12]).into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An id read back from a log.
    pub(crate) fn from_text(text: String) -> PolicyGenerationId {
        PolicyGenerationId(text.into())
    }

    /// The generation number (the part after `#`; 0 if the id, read back
    /// from a log, has none).
    pub fn number(&self) -> u64 {
        self.0
            .rsplit_once('#')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }
}

impl fmt::Display for PolicyGenerationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PolicyGenerationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicyGenerationId({})", self.0)
    }
}

impl Serialize for PolicyGenerationId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PolicyGenerationId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(PolicyGenerationId::from_text(String::deserialize(d)?))
    }
}

/// How a decision was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
#[non_exhaustive]
pub enum Outcome {
    /// The plugin decided, and its answer passed the host's checks.
    Plugin,
    /// The plugin faulted; the host applied the world's fail-safe.
    FailSafe {
        /// What went wrong.
        fault: Fault,
    },
    /// The plugin's circuit breaker was open; the host applied the
    /// fail-safe without calling it.
    CircuitOpen,
}

impl Outcome {
    /// Whether the plugin's own answer was used.
    pub fn is_plugin(&self) -> bool {
        matches!(self, Outcome::Plugin)
    }

    /// The fault, if the plugin faulted on this call.
    pub fn fault(&self) -> Option<&Fault> {
        match self {
            Outcome::FailSafe { fault } => Some(fault),
            _ => None,
        }
    }
}

/// A decision of any world, as logged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "world", content = "decision")]
#[non_exhaustive]
pub enum DecisionOutput {
    /// A significance gate's decision.
    Significance(SignificanceDecision),
    /// A topic directive's decision.
    Topic(TopicDirectiveDecision),
    /// A memory policy's decision.
    Memory(MemoryPolicyDecision),
}

impl DecisionOutput {
    /// The decision's reason codes.
    pub fn reason_codes(&self) -> &[ReasonCode] {
        match self {
            DecisionOutput::Significance(d) => &d.reason_codes,
            DecisionOutput::Topic(d) => &d.reason_codes,
            DecisionOutput::Memory(d) => &d.reason_codes,
        }
    }
}

/// One entry of the decision log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DecisionRecord {
    /// The decision's id.
    pub decision_id: DecisionId,
    /// The world.
    pub world: WorldKind,
    /// The plugin's installed name (shared by the records of a
    /// generation: a batch of decisions does not copy it per record).
    pub plugin: Arc<str>,
    /// The generation that decided (or whose fail-safe applied).
    pub generation: PolicyGenerationId,
    /// The BLAKE3 digest of the input.
    pub inputs_digest: InputsDigest,
    /// The decision.
    pub output: DecisionOutput,
    /// How it was made; carries the fault, if any.
    pub outcome: Outcome,
    /// How long the decision took, plugin call and checks included.
    pub duration: Duration,
    /// The fuel the plugin used, when it was called.
    pub fuel_consumed: Option<u64>,
    /// The session the decided object belongs to, when it has one: a
    /// `forget` of that session finds the records about it and scrubs them
    /// (this field and the plugin's free-text note, which may quote it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Arc<str>>,
    /// The workspace the decided object belongs to, when the caller said
    /// ([`PolicySlot::decide_in`](crate::PolicySlot::decide_in)): a
    /// `forget` scrubs the records of its own workspace's session, never
    /// those of a session of the same id in another workspace. `None` in
    /// records logged before records named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Arc<str>>,
}

impl DecisionRecord {
    /// The decision's reason codes.
    pub fn reason_codes(&self) -> &[ReasonCode] {
        self.output.reason_codes()
    }

    /// The fault, if the plugin faulted.
    pub fn fault(&self) -> Option<&Fault> {
        self.outcome.fault()
    }

    /// Forgets what the record says about its session (for a `forget` of
    /// that session): the session reference and the plugin's free-text
    /// note, which may quote it. The decision itself stays.
    pub fn scrub(&mut self) {
        self.session = None;
        match &mut self.output {
            DecisionOutput::Significance(d) => d.note = None,
            DecisionOutput::Topic(d) => d.note = None,
            DecisionOutput::Memory(d) => d.note = None,
        }
    }
}

/// The error a [`DecisionSink`] returns when it cannot record.
pub type SinkError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Receives every decision the host makes, in the calling thread, before
/// the decision is returned. A durable sink should make the record durable
/// (or queue it durably) before returning `Ok`.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use cairn_policies::{DecisionRecord, DecisionSink, SinkError};
///
/// /// Counts decisions and keeps nothing.
/// #[derive(Default)]
/// struct Counter(AtomicU64);
///
/// impl DecisionSink for Counter {
///     fn record(&self, _record: &DecisionRecord) -> Result<(), SinkError> {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         Ok(())
///     }
/// }
/// ```
pub trait DecisionSink: Send + Sync + 'static {
    /// Records one decision. An error is returned to the caller of
    /// `decide` as [`PolicyError::DecisionLog`](crate::PolicyError::DecisionLog).
    fn record(&self, record: &DecisionRecord) -> Result<(), SinkError>;

    /// Records the decisions of one batched call (or of one operation, such
    /// as an assembly) together. A durable sink should keep them as one
    /// record that still answers for each decision id; the default records
    /// them one by one.
    fn record_batch(&self, records: &[DecisionRecord]) -> Result<(), SinkError> {
        records.iter().try_for_each(|record| self.record(record))
    }
}

/// An in-memory decision log that keeps the most recent records.
///
/// ```
/// use cairn_policies::MemorySink;
///
/// let sink = MemorySink::with_capacity(1_000);
/// assert!(sink.records().is_empty());
/// assert_eq!(sink.total(), 0);
/// ```
#[derive(Debug)]
pub struct MemorySink {
    inner: Mutex<MemorySinkInner>,
}

#[derive(Debug)]
struct MemorySinkInner {
    records: VecDeque<DecisionRecord>,
    capacity: usize,
    total: u64,
}

impl MemorySink {
    /// A log that keeps the last `capacity` records.
    pub fn with_capacity(capacity: usize) -> MemorySink {
        MemorySink {
            inner: Mutex::new(MemorySinkInner {
                records: VecDeque::with_capacity(capacity.min(4096)),
                capacity,
                total: 0,
            }),
        }
    }

    /// The records kept, oldest first.
    pub fn records(&self) -> Vec<DecisionRecord> {
        self.inner.lock().records.iter().cloned().collect()
    }

    /// How many records were ever received.
    pub fn total(&self) -> u64 {
        self.inner.lock().total
    }

    /// Forgets the records kept (the total stays).
    pub fn clear(&self) {
        self.inner.lock().records.clear();
    }
}

impl Default for MemorySink {
    /// Keeps the last 100,000 records.
    fn default() -> Self {
        MemorySink::with_capacity(100_000)
    }
}

impl DecisionSink for MemorySink {
    fn record(&self, record: &DecisionRecord) -> Result<(), SinkError> {
        let mut inner = self.inner.lock();
        inner.total += 1;
        if inner.capacity == 0 {
            return Ok(());
        }
        if inner.records.len() == inner.capacity {
            inner.records.pop_front();
        }
        inner.records.push_back(record.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_ids_is_unique_and_in_order() {
        let ids: Vec<DecisionId> = DecisionId::run(500).collect();
        assert_eq!(ids.len(), 500);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
