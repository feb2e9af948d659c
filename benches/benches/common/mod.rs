//! Helpers the benches share: a fixed vocabulary and a tiny deterministic
//! generator (xorshift), so runs are comparable across benches and machines.
#![allow(dead_code)] // each bench binary uses its own subset.

pub(crate) const WORDS: &[&str] = &[
    "deploy",
    "retry",
    "queue",
    "payment",
    "puppy",
    "violin",
    "budget",
    "invoice",
    "token",
    "migration",
    "schema",
    "dinner",
    "holiday",
    "garden",
    "painting",
    "concert",
    "meeting",
    "release",
    "bug",
    "customer",
    "travel",
    "museum",
    "recipe",
    "soccer",
    "camera",
    "novel",
];

/// A tiny deterministic generator (xorshift), so runs are comparable.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn unit(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim)
            .map(|_| (self.next() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
    pub(crate) fn words(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| WORDS[(self.next() % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}
