//! Hostile guest: loops forever when its input says `HOSTILE`.

include!("../../guest.rs");

diverging_hostile!();

fn misbehave() -> ! {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}
