//! A compact binary form of decision records, for durable logs.
//!
//! [`encode`] writes a list of records (each the decisions of one call or
//! one assembly) as one postcard value in which what the decisions of a
//! list share is written once: a table of *heads* (the world, the plugin
//! and the generation that decided), a table of sessions and a table of
//! distinct outputs (a batched memory-policy call answers the same
//! decision for most candidates), then each decision as its id (a varint:
//! its step from the id before it, one byte within a batch, whose ids are
//! consecutive) and digest (raw bytes), indexes into the three tables, its
//! outcome, its duration in nanoseconds, its fuel and its workspace (an
//! index into a table of workspaces written last). [`decode`] reads it
//! back into the same records; [`decode_without_workspaces`] reads the same
//! form as written before records named their workspace. A memory-policy decision takes about 47
//! bytes, 32 of them its digest: three quarters of the same form with
//! whole ids (16 bytes each), which [`decode_whole_ids`] still reads, and
//! a fifth of the earlier per-record form, which [`decode_unshared`] still
//! reads (logs written before keep them).
//!
//! The encoding has no version byte of its own: a log that stores it puts
//! one in front (the runtime's decision log does). The vocabularies a
//! record carries ([`ReasonCode`], [`FaultKind`](crate::FaultKind), the
//! worlds and the decisions' enums) are stored by name, so a case added
//! anywhere in them leaves old records readable; only this module's own
//! mirror enums (which output, which outcome) are stored by variant index
//! and may gain variants only at their end. Tests pin the bytes of a known
//! record in every form, so any change to a layout fails them.
//!
//! ```
//! use cairn_policies::decision_codec;
//!
//! let bytes = decision_codec::encode(&[], Vec::new())?;
//! assert!(decision_codec::decode(&bytes)?.is_empty());
//! assert!(decision_codec::decode(&[0xff, 0xff]).is_err());
//! # Ok::<(), decision_codec::CodecError>(())
//! ```
//!
//! [`ReasonCode`]: crate::ReasonCode

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::decisions::{DecisionId, DecisionOutput, DecisionRecord, Outcome, PolicyGenerationId};
use crate::digest::InputsDigest;
use crate::fault::Fault;
use crate::memory_policy::MemoryPolicyDecision;
use crate::significance::SignificanceDecision;
use crate::topic::TopicDirectiveDecision;
use crate::world::WorldKind;

/// A record list that did not encode or decode.
#[derive(Debug, thiserror::Error)]
#[error("decision records: {0}")]
pub struct CodecError(String);

/// A list of records on the way out: what its decisions share, once, then
/// the decisions, their ids in the form `I` ([`IdStep`] or [`WholeId`]).
/// `T` is the workspaces table and `W` a decision's index into it: a
/// `Vec` and an `Option<u32>` in the form [`encode`] writes, `()` (no
/// bytes at all) in the forms written before records named their
/// workspace.
#[derive(Serialize)]
struct SharedOut<'a, I, T, W> {
    heads: Vec<(WorldKind, &'a str, &'a str)>,
    sessions: Vec<&'a str>,
    outputs: Vec<OutputOut<'a>>,
    records: Vec<Vec<SlimOut<'a, I, W>>>,
    workspaces: T,
}

/// One decision on the way out: its own fields and indexes into the
/// tables of [`SharedOut`].
#[derive(Serialize)]
struct SlimOut<'a, I, W> {
    id: I,
    head: u32,
    digest: [u8; 32],
    output: u32,
    outcome: OutcomeOut<'a>,
    nanos: u64,
    fuel: Option<u64>,
    session: Option<u32>,
    workspace: W,
}

/// A list of records on the way in (field for field as [`SharedOut`]).
#[derive(Deserialize)]
struct SharedIn<I, T, W> {
    heads: Vec<(WorldKind, String, String)>,
    sessions: Vec<String>,
    outputs: Vec<OutputIn>,
    records: Vec<Vec<SlimIn<I, W>>>,
    workspaces: T,
}

#[derive(Deserialize)]
struct SlimIn<I, W> {
    id: I,
    head: u32,
    digest: [u8; 32],
    output: u32,
    outcome: OutcomeIn,
    nanos: u64,
    fuel: Option<u64>,
    session: Option<u32>,
    workspace: W,
}

/// How the workspaces of a shared form are written: a table and an index
/// per decision ([`Named`]), or nothing ([`Unnamed`], the forms before).
trait WorkspaceForm {
    type Table<'a>: Serialize;
    type Index: Serialize;
    type TableIn: for<'de> Deserialize<'de>;
    type IndexIn: for<'de> Deserialize<'de>;
    fn table(names: Vec<&str>) -> Self::Table<'_>;
    fn index(at: Option<u32>) -> Self::Index;
    fn names(table: Self::TableIn) -> Vec<String>;
    fn at(index: Self::IndexIn) -> Option<u32>;
}

/// The form [`encode`] writes: every decision's workspace, by index.
struct Named;

impl WorkspaceForm for Named {
    type Table<'a> = Vec<&'a str>;
    type Index = Option<u32>;
    type TableIn = Vec<String>;
    type IndexIn = Option<u32>;
    fn table(names: Vec<&str>) -> Vec<&str> {
        names
    }
    fn index(at: Option<u32>) -> Option<u32> {
        at
    }
    fn names(table: Vec<String>) -> Vec<String> {
        table
    }
    fn at(index: Option<u32>) -> Option<u32> {
        index
    }
}

/// The forms written before records named their workspace: nothing.
struct Unnamed;

impl WorkspaceForm for Unnamed {
    type Table<'a> = ();
    type Index = ();
    type TableIn = ();
    type IndexIn = ();
    fn table(_: Vec<&str>) {}
    fn index(_: Option<u32>) {}
    fn names((): ()) -> Vec<String> {
        Vec::new()
    }
    fn at((): ()) -> Option<u32> {
        None
    }
}

/// How a decision's id is written in the shared form: given the id of the
/// decision before it in the list (0 for the first), and back.
trait IdForm: Sized {
    fn write(previous: u128, id: u128) -> Self;
    fn read(self, previous: u128) -> u128;
}

/// An id as its step from the id before it, a varint. The decisions of one
/// batched call take consecutive ids ([`DecisionId::run`]), so each after
/// the first costs one byte instead of sixteen; the first of a record costs
/// about as many as the milliseconds since the record before it need.
#[derive(Serialize, Deserialize)]
struct IdStep(u128);

impl IdForm for IdStep {
    fn write(previous: u128, id: u128) -> Self {
        IdStep(id.wrapping_sub(previous))
    }
    fn read(self, previous: u128) -> u128 {
        previous.wrapping_add(self.0)
    }
}

/// An id as its sixteen big-endian bytes: the shared form before
/// [`IdStep`], read by [`decode_whole_ids`].
#[derive(Serialize, Deserialize)]
struct WholeId([u8; 16]);

impl IdForm for WholeId {
    fn write(_: u128, id: u128) -> Self {
        WholeId(id.to_be_bytes())
    }
    fn read(self, _: u128) -> u128 {
        u128::from_be_bytes(self.0)
    }
}

/// A decision of the earlier form, every field its own (read by
/// [`decode_unshared`]).
#[derive(Deserialize)]
struct In {
    id: u128,
    world: WorldKind,
    plugin: String,
    generation: String,
    digest: [u8; 32],
    output: OutputIn,
    outcome: OutcomeIn,
    nanos: u64,
    fuel: Option<u64>,
    session: Option<String>,
}

#[derive(Serialize)]
enum OutputOut<'a> {
    Significance(&'a SignificanceDecision),
    Topic(&'a TopicDirectiveDecision),
    Memory(&'a MemoryPolicyDecision),
}

#[derive(Clone, Deserialize)]
enum OutputIn {
    Significance(SignificanceDecision),
    Topic(TopicDirectiveDecision),
    Memory(MemoryPolicyDecision),
}

#[derive(Serialize)]
enum OutcomeOut<'a> {
    Plugin,
    FailSafe(&'a Fault),
    CircuitOpen,
}

#[derive(Deserialize)]
enum OutcomeIn {
    Plugin,
    FailSafe(Fault),
    CircuitOpen,
}

impl OutputIn {
    fn into_output(self) -> DecisionOutput {
        match self {
            OutputIn::Significance(d) => DecisionOutput::Significance(d),
            OutputIn::Topic(d) => DecisionOutput::Topic(d),
            OutputIn::Memory(d) => DecisionOutput::Memory(d),
        }
    }
}

impl OutcomeIn {
    fn into_outcome(self) -> Outcome {
        match self {
            OutcomeIn::Plugin => Outcome::Plugin,
            OutcomeIn::FailSafe(fault) => Outcome::FailSafe { fault },
            OutcomeIn::CircuitOpen => Outcome::CircuitOpen,
        }
    }
}

fn output_out(output: &DecisionOutput) -> OutputOut<'_> {
    match output {
        DecisionOutput::Significance(d) => OutputOut::Significance(d),
        DecisionOutput::Topic(d) => OutputOut::Topic(d),
        DecisionOutput::Memory(d) => OutputOut::Memory(d),
    }
}

fn outcome_out(outcome: &Outcome) -> OutcomeOut<'_> {
    match outcome {
        Outcome::Plugin => OutcomeOut::Plugin,
        Outcome::FailSafe { fault } => OutcomeOut::FailSafe(fault),
        Outcome::CircuitOpen => OutcomeOut::CircuitOpen,
    }
}

/// A duration in nanoseconds: a decision that took 584 years is logged as
/// taking 584 years.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The position of `value` in `table`, added at its end if it is new.
/// Tables stay short (a list holds at most a few dozen decisions and
/// repeats most of what they share), so a scan beats hashing.
fn index_of<T: PartialEq>(table: &mut Vec<T>, value: T) -> Result<u32, CodecError> {
    let at = match table.iter().position(|known| *known == value) {
        Some(at) => at,
        None => {
            table.push(value);
            table.len() - 1
        }
    };
    u32::try_from(at).map_err(|_| CodecError(format!("more than {} distinct values", u32::MAX)))
}

/// `out` (which may already hold a version byte) followed by the binary
/// form of `records` (each the decisions of one call or one assembly).
///
/// # Errors
///
/// [`CodecError`] if a value does not serialize (postcard refuses nothing
/// these records hold; the error is the serializer's, passed on).
pub fn encode(records: &[Vec<DecisionRecord>], out: Vec<u8>) -> Result<Vec<u8>, CodecError> {
    encode_shared::<IdStep, Named>(records, out)
}

/// `out` followed by `records` in the form [`encode`] wrote before records
/// named their workspace (their workspaces are not written): kept so that
/// a test or a tool can write such a log; read by
/// [`decode_without_workspaces`].
///
/// # Errors
///
/// [`CodecError`] as [`encode`].
pub fn encode_without_workspaces(
    records: &[Vec<DecisionRecord>],
    out: Vec<u8>,
) -> Result<Vec<u8>, CodecError> {
    encode_shared::<IdStep, Unnamed>(records, out)
}

/// `out` followed by `records` in the shared form written before
/// [`encode`]'s (each id whole, sixteen bytes): kept so that a test or a
/// tool can write such a log; read by [`decode_whole_ids`].
///
/// # Errors
///
/// [`CodecError`] as [`encode`].
pub fn encode_whole_ids(
    records: &[Vec<DecisionRecord>],
    out: Vec<u8>,
) -> Result<Vec<u8>, CodecError> {
    encode_shared::<WholeId, Unnamed>(records, out)
}

fn encode_shared<I: IdForm + Serialize, F: WorkspaceForm>(
    records: &[Vec<DecisionRecord>],
    out: Vec<u8>,
) -> Result<Vec<u8>, CodecError> {
    let mut previous = 0;
    let mut shared = SharedOut {
        heads: Vec::new(),
        sessions: Vec::new(),
        outputs: Vec::new(),
        records: Vec::with_capacity(records.len()),
        workspaces: F::table(Vec::new()),
    };
    let mut workspaces: Vec<&str> = Vec::new();
    // Outputs are compared as the records hold them, then lowered.
    let mut outputs: Vec<&DecisionOutput> = Vec::new();
    for decisions in records {
        let mut slim = Vec::with_capacity(decisions.len());
        for record in decisions {
            let head = (record.world, &*record.plugin, record.generation.as_str());
            let id = record.decision_id.as_u128();
            slim.push(SlimOut {
                id: I::write(previous, id),
                head: index_of(&mut shared.heads, head)?,
                digest: *record.inputs_digest.as_bytes(),
                output: index_of(&mut outputs, &record.output)?,
                outcome: outcome_out(&record.outcome),
                nanos: nanos(record.duration),
                fuel: record.fuel_consumed,
                session: match record.session.as_deref() {
                    Some(session) => Some(index_of(&mut shared.sessions, session)?),
                    None => None,
                },
                workspace: F::index(match record.workspace.as_deref() {
                    Some(workspace) => Some(index_of(&mut workspaces, workspace)?),
                    None => None,
                }),
            });
            previous = id;
        }
        shared.records.push(slim);
    }
    shared.outputs = outputs.into_iter().map(output_out).collect();
    shared.workspaces = F::table(workspaces);
    postcard::to_extend(&shared, out).map_err(|e| CodecError(e.to_string()))
}

/// Reads records written by [`encode`].
///
/// # Errors
///
/// [`CodecError`] naming what did not decode if `bytes` are not such
/// records (truncated, damaged, an index past its table, or trailing bytes
/// after them).
pub fn decode(bytes: &[u8]) -> Result<Vec<Vec<DecisionRecord>>, CodecError> {
    decode_shared::<IdStep, Named>(bytes)
}

/// Reads records written by [`encode_without_workspaces`]: the form logs
/// written before records named their workspace hold (every record's
/// workspace reads as `None`).
///
/// # Errors
///
/// [`CodecError`] naming what did not decode, as [`decode`].
pub fn decode_without_workspaces(bytes: &[u8]) -> Result<Vec<Vec<DecisionRecord>>, CodecError> {
    decode_shared::<IdStep, Unnamed>(bytes)
}

/// Reads records written by [`encode_whole_ids`]: the shared form as logs
/// written before [`encode`]'s stepped ids hold it.
///
/// # Errors
///
/// [`CodecError`] naming what did not decode, as [`decode`].
pub fn decode_whole_ids(bytes: &[u8]) -> Result<Vec<Vec<DecisionRecord>>, CodecError> {
    decode_shared::<WholeId, Unnamed>(bytes)
}

fn decode_shared<'de, I: IdForm + Deserialize<'de>, F: WorkspaceForm>(
    bytes: &'de [u8],
) -> Result<Vec<Vec<DecisionRecord>>, CodecError> {
    let shared: SharedIn<I, F::TableIn, F::IndexIn> = take_all(bytes)?;
    let workspaces: Vec<Arc<str>> = F::names(shared.workspaces)
        .into_iter()
        .map(Arc::from)
        .collect();
    let mut previous = 0;
    let heads: Vec<(WorldKind, Arc<str>, PolicyGenerationId)> = shared
        .heads
        .into_iter()
        .map(|(world, plugin, generation)| {
            (
                world,
                plugin.into(),
                PolicyGenerationId::from_text(generation),
            )
        })
        .collect();
    let sessions: Vec<Arc<str>> = shared.sessions.into_iter().map(Arc::from).collect();
    let outputs = shared.outputs;
    let entry = |table: &str, len: usize, at: u32| {
        usize::try_from(at)
            .ok()
            .filter(|&at| at < len)
            .ok_or_else(|| CodecError(format!("{table} {at} of {len}")))
    };
    shared
        .records
        .into_iter()
        .map(|decisions| {
            decisions
                .into_iter()
                .map(|slim| {
                    let (world, plugin, generation) =
                        &heads[entry("head", heads.len(), slim.head)?];
                    let output = outputs[entry("output", outputs.len(), slim.output)?].clone();
                    let session = match slim.session {
                        Some(at) => {
                            Some(Arc::clone(&sessions[entry("session", sessions.len(), at)?]))
                        }
                        None => None,
                    };
                    let workspace = match F::at(slim.workspace) {
                        Some(at) => Some(Arc::clone(
                            &workspaces[entry("workspace", workspaces.len(), at)?],
                        )),
                        None => None,
                    };
                    let id = slim.id.read(previous);
                    previous = id;
                    Ok(DecisionRecord {
                        decision_id: DecisionId::from_u128(id),
                        world: *world,
                        plugin: Arc::clone(plugin),
                        generation: generation.clone(),
                        inputs_digest: InputsDigest::from_bytes(slim.digest),
                        output: output.into_output(),
                        outcome: slim.outcome.into_outcome(),
                        duration: Duration::from_nanos(slim.nanos),
                        fuel_consumed: slim.fuel,
                        session,
                        workspace,
                    })
                })
                .collect()
        })
        .collect()
}

/// A decision of the earlier form on the way out (field for field as
/// [`In`]).
#[derive(Serialize)]
struct Out<'a> {
    id: u128,
    world: WorldKind,
    plugin: &'a str,
    generation: &'a str,
    digest: [u8; 32],
    output: OutputOut<'a>,
    outcome: OutcomeOut<'a>,
    nanos: u64,
    fuel: Option<u64>,
    session: Option<&'a str>,
}

/// `out` followed by `records` in the earlier form, every decision with
/// every field of its own, as logs written before the shared form hold
/// them: kept so that a test or a tool can write such a log, and read by
/// [`decode_unshared`].
///
/// # Errors
///
/// [`CodecError`] as [`encode`].
pub fn encode_unshared(
    records: &[Vec<DecisionRecord>],
    out: Vec<u8>,
) -> Result<Vec<u8>, CodecError> {
    let stored: Vec<Vec<Out<'_>>> = records
        .iter()
        .map(|decisions| {
            decisions
                .iter()
                .map(|record| Out {
                    id: record.decision_id.as_u128(),
                    world: record.world,
                    plugin: &record.plugin,
                    generation: record.generation.as_str(),
                    digest: *record.inputs_digest.as_bytes(),
                    output: output_out(&record.output),
                    outcome: outcome_out(&record.outcome),
                    nanos: nanos(record.duration),
                    fuel: record.fuel_consumed,
                    session: record.session.as_deref(),
                })
                .collect()
        })
        .collect();
    postcard::to_extend(&stored, out).map_err(|e| CodecError(e.to_string()))
}

/// Reads records of the earlier form, in which every decision carries
/// every field (plugin, generation and session names, its output), as
/// logs written before the shared form hold them.
///
/// # Errors
///
/// [`CodecError`] naming what did not decode, as [`decode`].
pub fn decode_unshared(bytes: &[u8]) -> Result<Vec<Vec<DecisionRecord>>, CodecError> {
    let stored: Vec<Vec<In>> = take_all(bytes)?;
    Ok(stored
        .into_iter()
        .map(|decisions| {
            decisions
                .into_iter()
                .map(|stored| DecisionRecord {
                    decision_id: DecisionId::from_u128(stored.id),
                    world: stored.world,
                    plugin: stored.plugin.into(),
                    generation: PolicyGenerationId::from_text(stored.generation),
                    inputs_digest: InputsDigest::from_bytes(stored.digest),
                    output: stored.output.into_output(),
                    outcome: stored.outcome.into_outcome(),
                    duration: Duration::from_nanos(stored.nanos),
                    fuel_consumed: stored.fuel,
                    session: stored.session.map(Arc::from),
                    workspace: None,
                })
                .collect()
        })
        .collect())
}

/// One postcard value that is all of `bytes`.
fn take_all<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, CodecError> {
    let (value, rest): (T, &[u8]) =
        postcard::take_from_bytes(bytes).map_err(|e| CodecError(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError(format!(
            "{} bytes after the records",
            rest.len()
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKind;
    use crate::memory_policy::{
        ContentFidelity, LearningScope, Locality, MutationAuthority, PolicyObligation,
    };
    use crate::significance::CollectionDecision;
    use crate::topic::{CollectionMode, OutputTarget};
    use crate::vocab::{ExtractionDepth, ReasonCode};

    fn significance() -> DecisionRecord {
        DecisionRecord {
            decision_id: DecisionId::from_u128(0x0193_5d2c_0000_0000_0000_0000_0000_002a),
            world: WorldKind::SignificanceGate,
            plugin: "significance-core".into(),
            generation: PolicyGenerationId::from_text("significance-core@0123456789ab#1".into()),
            inputs_digest: InputsDigest::from_bytes([7; 32]),
            output: DecisionOutput::Significance(SignificanceDecision {
                collection_decision: CollectionDecision::ObserveOnly,
                extraction_depth: ExtractionDepth::Shallow,
                score: 0.625,
                threshold: 0.5,
                reason_codes: vec![ReasonCode::AboveThreshold, ReasonCode::UserTurn],
                note: Some("a note".to_owned()),
            }),
            outcome: Outcome::Plugin,
            duration: Duration::from_micros(42),
            fuel_consumed: Some(1_234),
            session: Some("s1".into()),
            workspace: None,
        }
    }

    /// One record of each world and outcome.
    fn records() -> Vec<Vec<DecisionRecord>> {
        let mut topic = significance();
        topic.world = WorldKind::TopicDirective;
        topic.output = DecisionOutput::Topic(TopicDirectiveDecision {
            collect: true,
            collection_mode: CollectionMode::BackfillExistingMemory,
            extraction_depth: ExtractionDepth::Shallow,
            output_targets: vec![
                OutputTarget::AssertionCandidate,
                OutputTarget::EvidenceRecord,
            ],
            review_required_before_durable_promotion: true,
            reason_codes: vec![ReasonCode::Custom],
            note: None,
        });
        topic.outcome = Outcome::CircuitOpen;
        topic.fuel_consumed = None;
        topic.session = None;
        let memory = |fidelity, outcome| {
            let mut record = significance();
            record.world = WorldKind::MemoryPolicy;
            record.output = DecisionOutput::Memory(MemoryPolicyDecision {
                content_fidelity: fidelity,
                locality: Locality::LocalOnly,
                learning_scope: LearningScope::SameScopeOnly,
                mutation_authority: MutationAuthority::CandidateOnly,
                obligations: [PolicyObligation::AuditLog, PolicyObligation::LabelLowTrust].into(),
                reason_codes: [ReasonCode::FailSafe, ReasonCode::PluginFault].into(),
                note: Some("ünïcode ✓".to_owned()),
            });
            record.outcome = outcome;
            record.duration = Duration::MAX;
            record
        };
        let fault = Fault::new(FaultKind::OutOfFuel, "fuel ran out after 1000 units");
        let mut elsewhere = significance();
        elsewhere.workspace = Some("globex".into());
        vec![
            vec![significance(), elsewhere],
            vec![topic],
            vec![
                memory(ContentFidelity::Full, Outcome::Plugin),
                memory(ContentFidelity::None, Outcome::FailSafe { fault }),
            ],
            vec![],
        ]
    }

    #[test]
    fn records_read_back_as_written() -> Result<(), CodecError> {
        let mut records = records();
        let bytes = encode(&records, vec![9])?;
        assert_eq!(bytes[0], 9, "appends, keeps what was there");
        let back = decode(&bytes[1..])?;
        // A duration past u64 nanoseconds (584 years) is stored as the most.
        records[2][0].duration = Duration::from_nanos(u64::MAX);
        records[2][1].duration = Duration::from_nanos(u64::MAX);
        assert_eq!(back, records);
        Ok(())
    }

    /// The bytes of a known record, pinned: a change to the layout or to a
    /// vocabulary's names fails here, not in a user's old log.
    #[test]
    fn the_encoding_is_pinned() -> Result<(), CodecError> {
        let mut record = significance();
        record.workspace = Some("acme".into());
        let bytes = encode(&[vec![record.clone()]], Vec::new())?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let pinned = [
            &pinned_shared("aa80808080808080808080808080cbae9303")[..],
            "0100",         // the decision's workspace: 0
            "010461636d65", // one workspace: acme
        ]
        .concat();
        assert_eq!(hex, pinned);
        assert_eq!(decode(&bytes)?, vec![vec![record]]);
        Ok(())
    }

    /// The form written before records named their workspace is pinned
    /// too and still reads (every workspace `None`); a record's workspace
    /// is not written in it.
    #[test]
    fn the_form_without_workspaces_still_reads() -> Result<(), CodecError> {
        let pinned = pinned_shared("aa80808080808080808080808080cbae9303");
        let mut record = significance();
        record.workspace = Some("acme".into());
        let bytes = encode_without_workspaces(&[vec![record]], Vec::new())?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, pinned);
        assert_eq!(
            decode_without_workspaces(&bytes)?,
            vec![vec![significance()]]
        );
        // Told apart by the log's version byte, not by their bytes.
        assert!(decode(&bytes).is_err());
        Ok(())
    }

    /// The shared form with whole ids, as logs written before stepped ids
    /// hold it, is pinned too and still reads.
    #[test]
    fn the_whole_id_form_still_reads() -> Result<(), CodecError> {
        let pinned = pinned_shared("01935d2c00000000000000000000002a");
        let bytes = encode_whole_ids(&[vec![significance()]], Vec::new())?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, pinned);
        assert_eq!(decode_whole_ids(&bytes)?, vec![vec![significance()]]);
        assert!(decode_whole_ids(&bytes[..bytes.len() - 1]).is_err());
        // The two shared forms are told apart by the log's version byte,
        // not by their bytes: each misreads the other.
        assert_ne!(decode(&bytes).ok(), Some(vec![vec![significance()]]));
        Ok(())
    }

    /// [`significance`] in the shared form, its id written as `id` (hex).
    fn pinned_shared(id: &str) -> String {
        // Each line: a field's bytes (a string's are its length, then it).
        [
            "01",                                                                 // one head:
            "117369676e69666963616e63652d67617465",                               // world, by name
            "117369676e69666963616e63652d636f7265",                               // plugin
            "207369676e69666963616e63652d636f7265403031323334353637383961622331", // generation
            "01027331",                                                           // one session
            "01",                                                                 // one output:
            "00",                                                                 // significance
            "0c6f6273657276652d6f6e6c79",                                         // observe-only
            "077368616c6c6f77",                                                   // shallow
            "0000203f0000003f", // score, threshold
            "020f61626f76652d7468726573686f6c6409757365722d7475726e", // two reason codes
            "010661206e6f7465", // the note
            "0101",             // one record of one decision:
            id,                 // its id (a step from 0, or 16 bytes)
            "00",               // head 0
            "0707070707070707070707070707070707070707070707070707070707070707", // digest
            "00",               // output 0
            "00",               // outcome: plugin
            "90c802",           // 42 µs in nanoseconds
            "01d209",           // fuel
            "0100",             // session 0
        ]
        .concat()
    }

    /// The earlier form, as logs written before the shared one hold it,
    /// is pinned too and still reads.
    #[test]
    fn the_unshared_form_still_reads() -> Result<(), CodecError> {
        let pinned = [
            "0101",                                 // one record of one decision
            "aa80808080808080808080808080cbae9303", // id, a u128 varint
            "117369676e69666963616e63652d67617465", // world, by name
            "117369676e69666963616e63652d636f7265", // plugin
            "207369676e69666963616e63652d636f7265403031323334353637383961622331", // generation
            "0707070707070707070707070707070707070707070707070707070707070707", // digest
            "00",                                   // output: significance
            "0c6f6273657276652d6f6e6c79",           // observe-only
            "077368616c6c6f77",                     // shallow
            "0000203f0000003f",                     // score, threshold
            "020f61626f76652d7468726573686f6c6409757365722d7475726e", // two reason codes
            "010661206e6f7465",                     // the note
            "00",                                   // outcome: plugin
            "90c802",                               // 42 µs in nanoseconds
            "01d209",                               // fuel
            "01027331",                             // session
        ]
        .concat();
        let bytes = encode_unshared(&[vec![significance()]], Vec::new())?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, pinned);
        assert_eq!(decode_unshared(&bytes)?, vec![vec![significance()]]);
        assert!(decode_unshared(&bytes[..bytes.len() - 1]).is_err());
        Ok(())
    }

    /// A batched memory-policy record (50 candidates, most answered alike,
    /// one session and workspace, consecutive ids) costs its digests and
    /// little more: under 52 bytes a decision, tables included, where every decision
    /// spelled out its plugin, generation, session and output before (about
    /// 200), and its id took 16 bytes (about 60).
    #[test]
    fn a_batch_shares_what_its_decisions_share() -> Result<(), CodecError> {
        let batch: Vec<DecisionRecord> = (0..50u128)
            .map(|n| {
                let mut record = records()[2][n as usize % 2].clone();
                record.decision_id = DecisionId::from_u128((0x0193_5d2c << 96) + n);
                record.inputs_digest = InputsDigest::from_bytes([n as u8; 32]);
                record.outcome = Outcome::Plugin;
                record.duration = Duration::from_micros(1);
                record.workspace = Some("acme".into());
                record
            })
            .collect();
        let bytes = encode(std::slice::from_ref(&batch), Vec::new())?;
        assert!(bytes.len() < 50 * 52, "{} bytes", bytes.len());
        // The forms before named no workspace.
        let unnamed: Vec<DecisionRecord> = batch
            .iter()
            .cloned()
            .map(|mut record| {
                record.workspace = None;
                record
            })
            .collect();
        let stepped = encode_without_workspaces(std::slice::from_ref(&batch), Vec::new())?;
        assert!(bytes.len() <= stepped.len() + 2 * 50 + 8);
        let whole = encode_whole_ids(std::slice::from_ref(&batch), Vec::new())?;
        assert!(
            stepped.len() + 14 * 50 < whole.len(),
            "{} vs {}",
            stepped.len(),
            whole.len()
        );
        assert_eq!(decode_whole_ids(&whole)?, vec![unnamed]);
        let unshared = encode_unshared(std::slice::from_ref(&batch), Vec::new())?;
        assert!(
            bytes.len() * 3 < unshared.len(),
            "{} vs {}",
            bytes.len(),
            unshared.len()
        );
        let back = decode(&bytes)?;
        assert_eq!(back, vec![batch]);
        // Decoded decisions share their plugin name rather than copy it.
        assert!(Arc::ptr_eq(&back[0][0].plugin, &back[0][49].plugin));
        Ok(())
    }

    /// Ids in any order (the records of a chunk come from many threads)
    /// step by wrapping and read back.
    #[test]
    fn ids_in_any_order_read_back() -> Result<(), CodecError> {
        let ids = [u128::MAX, 0, 5, 3, u128::MAX - 1, 1 << 127, 7];
        let record = |id| {
            let mut record = significance();
            record.decision_id = DecisionId::from_u128(id);
            record
        };
        let records = vec![
            ids[..3].iter().copied().map(record).collect::<Vec<_>>(),
            vec![],
            ids[3..].iter().copied().map(record).collect(),
        ];
        assert_eq!(decode(&encode(&records, Vec::new())?)?, records);
        Ok(())
    }

    /// An index past its table is an error naming the table, not a panic.
    #[test]
    fn an_index_past_its_table_is_an_error() -> Result<(), CodecError> {
        let record = significance();
        let shared = SharedOut {
            heads: vec![(record.world, &*record.plugin, record.generation.as_str())],
            sessions: Vec::new(),
            outputs: vec![output_out(&record.output)],
            records: vec![vec![SlimOut {
                id: IdStep(0),
                head: 0,
                digest: [0; 32],
                output: 0,
                outcome: OutcomeOut::Plugin,
                nanos: 0,
                fuel: None,
                session: Some(3),
                workspace: None::<u32>,
            }]],
            workspaces: Vec::<&str>::new(),
        };
        let bytes =
            postcard::to_extend(&shared, Vec::new()).map_err(|e| CodecError(e.to_string()))?;
        let err = decode(&bytes).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("decision records: session 3 of 0"));
        Ok(())
    }

    /// Much smaller than the JSON form, which is what it replaces.
    #[test]
    fn smaller_than_json() -> Result<(), CodecError> {
        let records = records();
        let bytes = encode(&records, Vec::new())?;
        let json = serde_json::to_vec(&records).map_err(|e| CodecError(e.to_string()))?;
        assert!(
            bytes.len() * 2 < json.len(),
            "{} vs {}",
            bytes.len(),
            json.len()
        );
        Ok(())
    }

    #[test]
    fn damaged_bytes_are_errors() -> Result<(), CodecError> {
        let mut bytes = encode(&records(), Vec::new())?;
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let err = decode(&longer).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("decision records: 1 bytes after the records")
        );
        // A count that claims four billion records, and nothing after it.
        assert!(decode(&[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
        // A reason code's name changed by one byte.
        let Some(at) = bytes.windows(5).position(|w| w == b"above") else {
            panic!("the reason code is stored by name");
        };
        bytes[at] = b'A';
        assert!(decode(&bytes).is_err(), "an unknown reason code");
        Ok(())
    }
}
