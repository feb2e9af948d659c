#![allow(clippy::expect_used, missing_docs)] // a bench binary: failing loudly is right.
//! The topic gate's tiers 1–2 per turn, as the number of topics grows.
//!
//! - `topics_gate/shared/{10,100,1000,10000}`: cairn's gate: one shared
//!   Aho-Corasick + `RegexSet` scan of the turn (tier 1), then tier-2
//!   cosine similarity against the profile of each candidate topic only.
//! - `topics_gate/naive/{n}`: the baseline in the same group: every topic's
//!   patterns tested one topic after another (each compiled on its own),
//!   then the same tier 2 for the topics that matched.
//!
//! Each topic has two keywords, a phrase and (one topic in ten) a regex,
//! drawn from a vocabulary of 4,000 made-up words; the turns are 40-word
//! sentences from the same vocabulary, so about as many topics match as in
//! a real workspace (a few per turn). Throughput is in turns.
//!
//! Run: `cargo bench -p cairn-benches --bench topics -- --warm-up-time 1 --measurement-time 3`.
//! Results: docs/BENCHMARKS.md.

use std::hint::black_box;

use cairn_memory::topics::lexical::TermVector;
use cairn_memory::topics::matcher::{NaiveMatcher, TopicMatcher};
use cairn_memory::topics::{TopicSpec, Trigger};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// A tiny deterministic generator (no rand dependency needed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn word(i: u64) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ba", "de", "fi", "go", "hu", "ja", "pe",
        "zo",
    ];
    let mut w = String::new();
    let mut n = i;
    for _ in 0..3 {
        w.push_str(SYL[(n % 16) as usize]);
        n /= 16;
    }
    w
}

fn topics(n: usize, rng: &mut Lcg) -> Vec<TopicSpec> {
    (0..n)
        .map(|i| {
            let mut spec = TopicSpec::new(
                &format!("t{i}"),
                &format!(
                    "{} {} {} and {}",
                    word(rng.next() % 4000),
                    word(rng.next() % 4000),
                    word(rng.next() % 4000),
                    word(rng.next() % 4000)
                ),
            );
            spec.triggers
                .push(Trigger::Keyword(word(rng.next() % 4000)));
            spec.triggers
                .push(Trigger::Keyword(word(rng.next() % 4000)));
            spec.triggers.push(Trigger::Phrase(format!(
                "{} {}",
                word(rng.next() % 4000),
                word(rng.next() % 4000)
            )));
            if i % 10 == 0 {
                spec.triggers
                    .push(Trigger::Regex(format!("{}-\\d+", word(rng.next() % 4000))));
            }
            spec
        })
        .collect()
}

fn turns(count: usize, rng: &mut Lcg) -> Vec<String> {
    (0..count)
        .map(|_| {
            (0..40)
                .map(|_| word(rng.next() % 4000))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Tier 1 with `matches`, then tier 2 (cosine against each candidate's
/// profile) for the candidates only: how many (turn, topic) pairs pass.
fn tiers_1_2(
    sample: &[String],
    profiles: &[TermVector],
    matches: impl Fn(&str) -> Vec<usize>,
) -> usize {
    let mut passed = 0usize;
    for turn in sample {
        let candidates = matches(turn);
        if candidates.is_empty() {
            continue;
        }
        let vector = TermVector::new([turn.as_str()]);
        passed += candidates
            .into_iter()
            .filter(|&i| profiles[i].cosine(&vector) >= 0.15)
            .count();
    }
    passed
}

fn bench(c: &mut Criterion) {
    let mut rng = Lcg(7);
    let sample = turns(256, &mut rng);
    let mut group = c.benchmark_group("topics_gate");
    group.throughput(Throughput::Elements(sample.len() as u64));
    // `cargo bench` passes `--bench`; as a test (`cargo test`, nextest) each
    // benchmark runs once in a debug build, where compiling 10,000 topics'
    // patterns alone takes minutes: test the small sizes only.
    let sizes: &[usize] = if std::env::args().any(|a| a == "--bench") {
        &[10, 100, 1_000, 10_000]
    } else {
        &[10, 100]
    };
    for &n in sizes {
        let specs = topics(n, &mut rng);
        let profiles: Vec<TermVector> = specs
            .iter()
            .map(|s| TermVector::new([s.description.as_str()]))
            .collect();
        let shared = TopicMatcher::new(specs.iter());
        group.bench_with_input(BenchmarkId::new("shared", n), &n, |b, _| {
            b.iter(|| black_box(tiers_1_2(&sample, &profiles, |t| shared.matches(t))))
        });
        let naive = NaiveMatcher::new(specs.iter());
        group.bench_with_input(BenchmarkId::new("naive", n), &n, |b, _| {
            b.iter(|| black_box(tiers_1_2(&sample, &profiles, |t| naive.matches(t))))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
