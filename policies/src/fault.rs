//! Plugin faults: what went wrong inside a plugin call, as a value.
//!
//! A fault is an expected outcome, not an error: the host contains it (the
//! store is dropped, never reused), records it with a reason code, and
//! returns the world's fail-safe decision in the plugin's place.

use std::fmt;

use serde::{Deserialize, Serialize};

named_enum! {
    /// How a plugin call failed.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum FaultKind {
        /// The guest trapped: a panic, `unreachable`, an out-of-bounds access, a
        /// call to an import it is not given (all WASI imports trap), or a
        /// violation of the canonical ABI.
        Trap = "trap",
        /// The guest used up its fuel (an endless or too-long computation).
        OutOfFuel = "out-of-fuel",
        /// The guest ran past its wall-clock deadline
        /// ([`Limits::deadline`](crate::Limits::deadline)) before its fuel ran
        /// out: work whose time is not proportional to its fuel, or a call
        /// that could not get the CPU.
        TimeLimit = "time-limit",
        /// The guest tried to grow its linear memory past the limit.
        MemoryLimit = "memory-limit",
        /// The guest overflowed the wasm call stack.
        StackOverflow = "stack-overflow",
        /// The guest returned a well-typed but invalid decision (a NaN or
        /// out-of-range score, fields that contradict each other).
        InvalidOutput = "invalid-output",
        /// The guest returned more bytes than the output cap allows.
        OutputTooLarge = "output-too-large",
        /// A fresh instance could not be created (a trap while initialising, or
        /// resources exhausted).
        InstantiationFailed = "instantiation-failed",
    }
    /// The fault's stable reason code, as logged.
    fn code;
}

/// A contained plugin fault: its kind and a human-readable message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// What kind of fault.
    pub kind: FaultKind,
    /// What happened, for people (the trap message, the rule broken).
    pub message: String,
}

impl Fault {
    pub(crate) fn new(kind: FaultKind, message: impl Into<String>) -> Fault {
        Fault {
            kind,
            message: message.into(),
        }
    }

    /// Classifies the error a guest call returned. `memory_denied` says
    /// whether the store's limiter refused a memory growth during the call:
    /// a guest whose allocation fails aborts with a trap, and that trap is
    /// reported as what caused it. A limit the host enforces by trapping
    /// itself (fuel, deadline, stack) is reported as that limit even after
    /// a refused growth: a guest that ignores the refusal and goes on is
    /// stopped by the other limit.
    pub(crate) fn from_call_error(err: &wasmtime::Error, memory_denied: bool) -> Fault {
        let kind = match err.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::OutOfFuel) => FaultKind::OutOfFuel,
            Some(wasmtime::Trap::Interrupt) => FaultKind::TimeLimit,
            Some(wasmtime::Trap::StackOverflow) => FaultKind::StackOverflow,
            _ if memory_denied => FaultKind::MemoryLimit,
            _ => FaultKind::Trap,
        };
        // The root cause is the trap (or the refused import); outer layers
        // only add context about where wasmtime was.
        Fault::new(kind, truncate(err.root_cause().to_string(), 512))
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// Keeps fault messages bounded: a guest controls part of them.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        s.truncate(s.floor_char_boundary(max));
        s.push('…');
    }
    s
}

/// Checks a guest's output against the cap before it is converted.
/// `bytes` is the output's size as the host counts it: one byte per enum
/// list element, the note's length, and a fixed record overhead.
pub(crate) fn check_size(bytes: usize, max_output_bytes: usize) -> Result<(), Fault> {
    if bytes > max_output_bytes {
        return Err(Fault::new(
            FaultKind::OutputTooLarge,
            format!("output of {bytes} bytes exceeds the cap of {max_output_bytes} bytes"),
        ));
    }
    Ok(())
}

/// The fixed part of an output's size: its scalar fields.
pub(crate) const RECORD_OVERHEAD: usize = 16;

/// Checks that a float from a guest is finite and in [0, 1].
pub(crate) fn check_unit(name: &str, value: f32) -> Result<f32, Fault> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(Fault::new(
            FaultKind::InvalidOutput,
            format!("{name} {value} is not a number in [0, 1]"),
        ))
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> Fault {
    Fault::new(FaultKind::InvalidOutput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_truncated_on_a_char_boundary() {
        let s = truncate("é".repeat(600), 513);
        assert!(s.len() <= 513 + '…'.len_utf8());
        assert!(s.ends_with('…'));
    }

    #[test]
    fn unit_check_rejects_nan_and_out_of_range() {
        assert!(check_unit("score", f32::NAN).is_err());
        assert!(check_unit("score", 1.5).is_err());
        assert!(check_unit("score", -0.0).is_ok());
        assert_eq!(check_unit("score", 1.0).unwrap(), 1.0);
    }
}
