//! Helpers the benches share: a fixed vocabulary and a tiny deterministic
//! generator (xorshift), so runs are comparable across benches and machines.
#![allow(dead_code)] // each bench binary uses its own subset.

use cairn_memory::search::Embedder;

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

/// Up to `n` real sentences: `sentences.txt`, 1,024 lines cut from this
/// repository's documentation once (frozen, so that editing the docs does
/// not change the bench's vectors), whose embeddings have the model's real
/// statistics.
pub(crate) fn real_sentences(n: usize) -> Vec<String> {
    include_str!("sentences.txt")
        .lines()
        .take(n)
        .map(str::to_owned)
        .collect()
}

/// A standard normal deviate (Box–Muller).
pub(crate) fn gaussian(rng: &mut Rng) -> f32 {
    let u = |rng: &mut Rng| ((rng.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (a, b) = (u(rng), u(rng));
    ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
}

/// Made document vectors (embedding 100k texts takes minutes): by default
/// clustered like real embeddings, the 1,024 [`real_sentences`] embedded
/// by the real model and each vector one of them plus Gaussian noise
/// (cosine 0.7–0.93 to it); with
/// `CAIRN_BENCH_VECTORS=uniform`, uniformly random unit vectors (the worst
/// case for HNSW).
pub(crate) struct Vectors {
    bases: Vec<Vec<f32>>,
}

impl Vectors {
    pub(crate) fn from_env(embedder: &dyn Embedder) -> Vectors {
        let kind = std::env::var("CAIRN_BENCH_VECTORS").unwrap_or_else(|_| "clustered".into());
        let bases = match kind.as_str() {
            "uniform" => Vec::new(),
            "clustered" => {
                let sentences = real_sentences(1_024);
                let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
                let bases = embedder.embed(&refs).unwrap_or_else(|e| panic!("{e}"));
                eprintln!("{} real sentences embedded as cluster centres", bases.len());
                bases
            }
            other => panic!("CAIRN_BENCH_VECTORS={other}: expected clustered or uniform"),
        };
        Vectors { bases }
    }

    pub(crate) fn next(&self, rng: &mut Rng) -> Vec<f32> {
        if self.bases.is_empty() {
            return rng.unit(384);
        }
        let base = &self.bases[(rng.next() % self.bases.len() as u64) as usize];
        // σ per dimension in [0.02, 0.05]: cosine to the centre 0.93–0.71.
        let sigma = 0.02 + 0.03 * (rng.next() % 1000) as f32 / 1000.0;
        let mut v: Vec<f32> = base.iter().map(|x| x + sigma * gaussian(rng)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }
}
