//! Hostile guest: panics (a wasm trap) when its input says `HOSTILE`.

include!("../../guest.rs");

diverging_hostile!();

fn misbehave() -> ! {
    panic!("hostile guest: trapping on purpose")
}
