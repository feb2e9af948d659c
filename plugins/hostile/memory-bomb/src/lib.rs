//! Hostile guest: allocates without bound when its input says `HOSTILE`.

include!("../../guest.rs");

diverging_hostile!();

fn misbehave() -> ! {
    // Reserve 1 MiB at a time without touching it, so the guest hits the
    // memory limit long before it runs out of fuel.
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = Vec::with_capacity(1 << 20);
        block.push(1u8);
        hoard.push(std::hint::black_box(block));
    }
}
