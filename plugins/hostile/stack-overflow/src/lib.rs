//! Hostile guest: recurses without bound when its input says `HOSTILE`,
//! overflowing the wasm call stack.

include!("../../guest.rs");

diverging_hostile!();

fn misbehave() -> ! {
    recurse(0);
    unreachable!("recursion without a base case returned")
}

/// Never returns: each call needs the result of the next. `black_box` keeps
/// the compiler from turning the recursion into a loop.
#[inline(never)]
#[allow(unconditional_recursion, reason = "the point of this guest")]
fn recurse(depth: u64) -> u64 {
    let next = recurse(std::hint::black_box(depth + 1));
    std::hint::black_box(next ^ depth)
}
