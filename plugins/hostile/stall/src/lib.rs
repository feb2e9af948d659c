//! Hostile guest: spends as much wall-clock time per unit of fuel as it can
//! when its input says `HOSTILE`, so the host's time limit is tried, not its
//! fuel. The word after `HOSTILE-` picks the behaviour (the trigger is the
//! turn's text, the topic subject's text, or the memory request's object
//! id); plain `HOSTILE` is the slowest one found (`GROW`).
//!
//! - `GROW`: `memory.grow 0` in a loop. Each is a call out of compiled code
//!   into the runtime for one unit of fuel.
//! - `GROW-DENIED`: `memory.grow` past the memory limit in a loop: each is
//!   refused by the host's resource limiter, and ignored.
//! - `FILL`: `memory.fill` over a buffer as large as the memory allows, in a
//!   loop (wasmtime charges one unit of fuel per byte filled).
//! - `COPY`: `memory.copy` of half that buffer onto the other half, in a
//!   loop (one unit per byte copied).
//! - `CHASE`: dependent loads at pseudo-random cache lines of that buffer,
//!   each a cache and TLB miss, for a few units of fuel each.
//! - `LIST`: returns a reason-code list of 4 Mi elements it never writes
//!   (whatever the memory holds): the host copies and checks every element
//!   out of the guest's memory, work outside the guest that the deadline
//!   does not interrupt, bounded by the memory limit (the bindings'
//!   conversion also costs the guest fuel per element).

include!("../../guest.rs");

use std::alloc::{Layout, alloc};
use std::hint::black_box;

/// The buffer the memory-bound behaviours work on: most of the 16 MiB the
/// host allows by default, less the stack and the allocator's own pages.
const BUFFER: usize = 13 << 20;

#[derive(Clone, Copy)]
enum Mode {
    Grow,
    GrowDenied,
    Fill,
    Copy,
    Chase,
    List,
}

fn mode(text: &str) -> Mode {
    // Longest names first: `GROW` is a prefix of `GROW-DENIED`.
    let modes = [
        ("HOSTILE-GROW-DENIED", Mode::GrowDenied),
        ("HOSTILE-GROW", Mode::Grow),
        ("HOSTILE-FILL", Mode::Fill),
        ("HOSTILE-COPY", Mode::Copy),
        ("HOSTILE-CHASE", Mode::Chase),
        ("HOSTILE-LIST", Mode::List),
    ];
    modes
        .iter()
        .find(|(word, _)| text.contains(word))
        .map_or(Mode::Grow, |&(_, mode)| mode)
}

/// A buffer of `BUFFER` bytes, never initialised by Rust (only written and
/// copied through raw pointers, never read as values), or a trap.
fn buffer() -> *mut u8 {
    let Ok(layout) = Layout::from_size_align(BUFFER, 4096) else {
        std::process::abort()
    };
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc(layout) };
    if ptr.is_null() {
        std::process::abort();
    }
    ptr
}

/// Runs `mode` until the host stops the call (it never returns).
fn stall(mode: Mode) -> ! {
    match mode {
        Mode::Grow => loop {
            black_box(core::arch::wasm32::memory_grow::<0>(black_box(0)));
        },
        Mode::GrowDenied => loop {
            // 32,768 pages: 2 GiB, far past any limit the host sets.
            black_box(core::arch::wasm32::memory_grow::<0>(black_box(1 << 15)));
        },
        Mode::Fill => {
            let buf = buffer();
            let mut byte = 0u8;
            loop {
                byte = byte.wrapping_add(1);
                // SAFETY: `buf` is valid for `BUFFER` bytes of writes.
                unsafe { core::ptr::write_bytes(black_box(buf), byte, black_box(BUFFER)) };
            }
        }
        Mode::Copy => {
            let buf = buffer();
            let half = BUFFER / 2;
            loop {
                // SAFETY: both halves lie in the buffer and do not overlap.
                unsafe { core::ptr::copy_nonoverlapping(black_box(buf), buf.add(half), half) };
            }
        }
        Mode::Chase => {
            let buf = buffer();
            let pages = BUFFER / 4096;
            // Write one byte per page, so every page is backed by its own
            // frame (untouched pages all read the one zero page, which
            // stays in cache).
            for page in 0..pages {
                // SAFETY: in bounds of the buffer.
                unsafe { buf.add(page * 4096).write_volatile(1) };
            }
            // A power of two of cache lines (8 MiB), for the step below.
            let lines = (BUFFER / 64).next_power_of_two() / 2;
            let mut line = 0usize;
            loop {
                // SAFETY: `line < lines`, so in bounds of the buffer.
                let seen = unsafe { buf.add(line * 64).read_volatile() };
                // A linear congruential step over the lines (odd increment,
                // multiplier ≡ 1 mod 4: a full period), which waits on the
                // load, so no two loads overlap.
                line = line
                    .wrapping_mul(1_103_515_245)
                    .wrapping_add(12_345 + 2 * usize::from(seen))
                    & (lines - 1);
            }
        }
        // Returns normally: handled by the callers.
        Mode::List => std::process::abort(),
    }
}

/// The longest list of reason codes the memory holds, made without
/// writing it.
fn huge_codes() -> Vec<ReasonCode> {
    const CODES: usize = 4 << 20;
    let mut codes: Vec<ReasonCode> = Vec::with_capacity(CODES);
    // SAFETY: not sound: the elements are whatever the memory holds, which
    // may not be valid reason codes. Handing the host garbage is the point
    // of this guest (the host checks every element it copies); a real
    // plugin must never do this.
    unsafe { codes.set_len(CODES) };
    codes
}

mod hostile {
    use super::*;

    pub(crate) fn gate(input: &SignificanceInput) -> SignificanceDecision {
        let mode = mode(&input.turn.text);
        if !matches!(mode, Mode::List) {
            stall(mode);
        }
        SignificanceDecision {
            collection_decision: CollectionDecision::ExtractCandidate,
            extraction_depth: ExtractionDepth::Shallow,
            score: 0.5,
            threshold: 0.5,
            reason_codes: huge_codes(),
            note: None,
        }
    }

    pub(crate) fn direct(input: &TopicInput) -> TopicDirectiveDecision {
        let text = match &input.subject {
            TopicSubject::Turn(t) => &t.text,
            TopicSubject::Entry(e) => &e.text,
        };
        let mode = mode(text);
        if !matches!(mode, Mode::List) {
            stall(mode);
        }
        TopicDirectiveDecision {
            collect: true,
            collection_mode: CollectionMode::WatchFutureSources,
            extraction_depth: ExtractionDepth::Shallow,
            output_targets: vec![OutputTarget::TopicMembership],
            review_required_before_durable_promotion: true,
            reason_codes: huge_codes(),
            note: None,
        }
    }

    pub(crate) fn decide(request: &PolicyRequest) -> MemoryPolicyDecision {
        let mode = mode(&request.object_ref.id);
        if !matches!(mode, Mode::List) {
            stall(mode);
        }
        MemoryPolicyDecision {
            content_fidelity: ContentFidelity::None,
            locality: Locality::Blocked,
            learning_scope: LearningScope::None,
            mutation_authority: MutationAuthority::None,
            obligations: vec![],
            reason_codes: huge_codes(),
            note: None,
        }
    }
}
