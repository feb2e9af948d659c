//! A compact binary form of decision records, for durable logs.
//!
//! [`encode`] writes a list of records (each the decisions of one call or
//! one assembly) as the postcard encoding of a mirror of [`DecisionRecord`]
//! whose ids and digests are raw bytes, whose durations are nanoseconds and
//! whose enums are externally tagged (postcard cannot carry serde's internal
//! or adjacent tags, which the JSON form uses). [`decode`] reads it back
//! into the same records. A record takes about a third of its JSON bytes.
//!
//! The encoding has no version byte of its own: a log that stores it puts
//! one in front (the runtime's decision log does). The vocabularies a
//! record carries ([`ReasonCode`], [`FaultKind`](crate::FaultKind), the
//! worlds and the decisions' enums) are stored by name, so a case added
//! anywhere in them leaves old records readable; only this module's own
//! mirror enums (which world decided, which outcome) are stored by variant
//! index and may gain variants only at their end. A test pins the bytes of
//! a known record, so any change to the layout fails it.
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

/// The stored record, borrowing from a [`DecisionRecord`] on the way out.
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

#[derive(Serialize)]
enum OutputOut<'a> {
    Significance(&'a SignificanceDecision),
    Topic(&'a TopicDirectiveDecision),
    Memory(&'a MemoryPolicyDecision),
}

#[derive(Serialize)]
enum OutcomeOut<'a> {
    Plugin,
    FailSafe(&'a Fault),
    CircuitOpen,
}

/// The stored record on the way in (field for field as [`Out`]).
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

#[derive(Deserialize)]
enum OutputIn {
    Significance(SignificanceDecision),
    Topic(TopicDirectiveDecision),
    Memory(MemoryPolicyDecision),
}

#[derive(Deserialize)]
enum OutcomeIn {
    Plugin,
    FailSafe(Fault),
    CircuitOpen,
}

fn out(record: &DecisionRecord) -> Out<'_> {
    Out {
        id: record.decision_id.as_u128(),
        world: record.world,
        plugin: &record.plugin,
        generation: record.generation.as_str(),
        digest: *record.inputs_digest.as_bytes(),
        output: match &record.output {
            DecisionOutput::Significance(d) => OutputOut::Significance(d),
            DecisionOutput::Topic(d) => OutputOut::Topic(d),
            DecisionOutput::Memory(d) => OutputOut::Memory(d),
        },
        outcome: match &record.outcome {
            Outcome::Plugin => OutcomeOut::Plugin,
            Outcome::FailSafe { fault } => OutcomeOut::FailSafe(fault),
            Outcome::CircuitOpen => OutcomeOut::CircuitOpen,
        },
        // A decision that took 584 years is logged as taking 584 years.
        nanos: u64::try_from(record.duration.as_nanos()).unwrap_or(u64::MAX),
        fuel: record.fuel_consumed,
        session: record.session.as_deref(),
    }
}

fn record(stored: In) -> DecisionRecord {
    DecisionRecord {
        decision_id: DecisionId::from_u128(stored.id),
        world: stored.world,
        plugin: stored.plugin.into(),
        generation: PolicyGenerationId::from_text(stored.generation),
        inputs_digest: InputsDigest::from_bytes(stored.digest),
        output: match stored.output {
            OutputIn::Significance(d) => DecisionOutput::Significance(d),
            OutputIn::Topic(d) => DecisionOutput::Topic(d),
            OutputIn::Memory(d) => DecisionOutput::Memory(d),
        },
        outcome: match stored.outcome {
            OutcomeIn::Plugin => Outcome::Plugin,
            OutcomeIn::FailSafe(fault) => Outcome::FailSafe { fault },
            OutcomeIn::CircuitOpen => Outcome::CircuitOpen,
        },
        duration: Duration::from_nanos(stored.nanos),
        fuel_consumed: stored.fuel,
        session: stored.session.map(Arc::from),
    }
}

/// `out` (which may already hold a version byte) followed by the binary
/// form of `records` (each the decisions of one call or one assembly).
///
/// # Errors
///
/// [`CodecError`] if a value does not serialize (postcard refuses nothing
/// these records hold; the error is the serializer's, passed on).
pub fn encode(records: &[Vec<DecisionRecord>], out: Vec<u8>) -> Result<Vec<u8>, CodecError> {
    let stored: Vec<Vec<Out<'_>>> = records
        .iter()
        .map(|decisions| decisions.iter().map(self::out).collect())
        .collect();
    postcard::to_extend(&stored, out).map_err(|e| CodecError(e.to_string()))
}

/// Reads records written by [`encode`].
///
/// # Errors
///
/// [`CodecError`] naming what did not decode if `bytes` are not such
/// records (truncated, damaged, or trailing bytes after them).
pub fn decode(bytes: &[u8]) -> Result<Vec<Vec<DecisionRecord>>, CodecError> {
    let (stored, rest): (Vec<Vec<In>>, &[u8]) =
        postcard::take_from_bytes(bytes).map_err(|e| CodecError(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError(format!(
            "{} bytes after the records",
            rest.len()
        )));
    }
    Ok(stored
        .into_iter()
        .map(|decisions| decisions.into_iter().map(record).collect())
        .collect())
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
        vec![
            vec![significance()],
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
        let bytes = encode(&[vec![significance()]], Vec::new())?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        // Each line: a field's bytes (a string's are its length, then it).
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
        assert_eq!(hex, pinned);
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
