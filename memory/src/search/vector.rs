//! Approximate nearest neighbours over hnsw_rs (cosine), with every vector
//! also kept for exact re-scoring. hnsw_rs cannot delete a point, so forgotten
//! documents are hidden by a tombstone set and their stored vector dropped.

use std::collections::HashSet;

use hnsw_rs::prelude::{Distance, Hnsw};

/// Graph parameters: M = 16 links per node, 200 candidates while building.
const MAX_CONNECTIONS: usize = 16;
const EF_CONSTRUCTION: usize = 200;
const MAX_LAYER: usize = 16;
/// The graph walk's default `ef`, as a multiple of the neighbours asked
/// for: at 100k clustered vectors and 100 neighbours, 4 finds 0.97 of the
/// exact top 10 where 2 found 0.87, for 3 ms more (docs/BENCHMARKS.md,
/// *Search latency*).
pub(crate) const DEFAULT_BREADTH: usize = 4;
/// Filtered searches that admit at most this many documents score them all
/// exactly.
const EXACT_BELOW: usize = 4096;

/// The vector side of a workspace's search index.
pub(crate) struct VectorIndex {
    hnsw: Hnsw<'static, f32, UnitCosine>,
    /// Stored vectors by internal document number (`None` once forgotten).
    vectors: Vec<Option<Vec<f32>>>,
    deleted: HashSet<usize>,
    points: usize,
}

impl VectorIndex {
    pub(crate) fn new(capacity: usize) -> Self {
        VectorIndex {
            hnsw: Hnsw::new(
                MAX_CONNECTIONS,
                capacity.max(1024),
                MAX_LAYER,
                EF_CONSTRUCTION,
                UnitCosine,
            ),
            vectors: Vec::new(),
            deleted: HashSet::new(),
            points: 0,
        }
    }

    /// Inserts vectors for documents `(doc, vector)`; `doc` numbers are dense.
    pub(crate) fn insert(&mut self, items: &[(usize, Vec<f32>)]) {
        for (doc, v) in items {
            if self.vectors.len() <= *doc {
                self.vectors.resize(doc + 1, None);
            }
            self.vectors[*doc] = Some(v.clone());
        }
        let refs: Vec<(&Vec<f32>, usize)> = items.iter().map(|(d, v)| (v, *d)).collect();
        if refs.len() > 64 {
            self.hnsw.parallel_insert(&refs);
        } else {
            for (v, d) in refs {
                self.hnsw.insert((v.as_slice(), d));
            }
        }
        self.points += items.len();
    }

    /// Hides a document from searches and drops its vector.
    pub(crate) fn delete(&mut self, doc: usize) {
        if let Some(slot) = self.vectors.get_mut(doc)
            && slot.take().is_some()
        {
            self.deleted.insert(doc);
        }
    }

    /// The stored vector of a document.
    pub(crate) fn vector(&self, doc: usize) -> Option<&[f32]> {
        self.vectors.get(doc).and_then(|v| v.as_deref())
    }

    /// Top `n` documents by cosine similarity, best first: `(doc, cosine)`;
    /// with `allowed`, only documents whose number is `true` in it. When few
    /// documents are allowed they are scored exactly instead (a filtered
    /// graph walk finds little when the filter keeps little). `breadth` is
    /// the graph walk's `ef` (default [`DEFAULT_BREADTH`] times what is
    /// asked for, at least 64), capped at the number of points, then raised
    /// to what is asked for if that is more.
    pub(crate) fn search(
        &self,
        query: &[f32],
        n: usize,
        breadth: Option<usize>,
        allowed: Option<&[bool]>,
    ) -> Vec<(usize, f32)> {
        // A walk wider than the graph visits nothing more (and hnsw_rs
        // sizes its heaps by it): at most every point.
        let ef = |want: usize| {
            breadth
                .unwrap_or((want * DEFAULT_BREADTH).max(64))
                .min(self.points)
                .max(want)
        };
        if self.points == 0 || n == 0 {
            return Vec::new();
        }
        if let Some(allowed) = allowed {
            let admitted = |d: usize| allowed.get(d).copied().unwrap_or(false);
            let count = allowed.iter().filter(|a| **a).count();
            if count <= EXACT_BELOW.max(n * 4) {
                let mut scored: Vec<(usize, f32)> = self
                    .vectors
                    .iter()
                    .enumerate()
                    .filter(|(d, _)| admitted(*d))
                    .filter_map(|(d, v)| v.as_deref().map(|v| (d, cosine(query, v))))
                    .collect();
                scored.sort_by(best_first);
                scored.truncate(n);
                return scored;
            }
            let ef = ef(n);
            let filter = |d: &usize| admitted(*d) && !self.deleted.contains(d);
            return self
                .hnsw
                .search_filter(query, n, ef, Some(&filter))
                .into_iter()
                .take(n)
                .map(|nb| (nb.d_id, 1.0 - nb.distance))
                .collect();
        }
        let want = n + self.deleted.len().min(n);
        let ef = ef(want);
        self.hnsw
            .search(query, want, ef)
            .into_iter()
            .filter(|nb| !self.deleted.contains(&nb.d_id))
            .take(n)
            .map(|nb| (nb.d_id, 1.0 - nb.distance))
            .collect()
    }

    /// Number of live vectors.
    pub(crate) fn len(&self) -> usize {
        self.points - self.deleted.len()
    }
}

/// Orders `(document, score)` pairs best first, ties by document number
/// (so a ranking does not depend on a map's iteration order).
pub(crate) fn best_first(a: &(usize, f32), b: &(usize, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Dot product of two unit vectors (their cosine).
///
/// Summed in eight independent lanes so the compiler vectorises it (a
/// single running sum is one long chain of dependent additions).
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (mut xs, mut ys) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut xs).zip(&mut ys) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f32 = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .map(|(x, y)| x * y)
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// The graph's distance: 1 − cosine, for the unit vectors the embedder
/// produces. hnsw_rs's `DistCosine` recomputes both norms in f64 on every
/// call; its `DistDot` vectorises only with an extra feature and asserts
/// (panics) when rounding takes a dot product past 1.
///
/// ```
/// use cairn_memory::search::UnitCosine;
/// use hnsw_rs::prelude::Distance;
/// let (a, b) = ([0.6f32, 0.8], [1.0f32, 0.0]);
/// assert!((UnitCosine.eval(&a, &b) - 0.4).abs() < 1e-6);
/// assert_eq!(UnitCosine.eval(&a, &a), 0.0);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct UnitCosine;

impl Distance<f32> for UnitCosine {
    fn eval(&self, va: &[f32], vb: &[f32]) -> f32 {
        (1.0 - cosine(va, vb)).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hnsw_rs::prelude::DistCosine;

    /// The graph breadth is honoured: never narrower than what is asked
    /// for, and a walk as wide as the index finds the exact neighbours.
    #[test]
    fn graph_breadth_widens_the_walk() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut unit = move || {
            let v: Vec<f32> = (0..32)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        let items: Vec<(usize, Vec<f32>)> = (0..2_000).map(|d| (d, unit())).collect();
        let mut index = VectorIndex::new(items.len());
        index.insert(&items);
        let query = unit();
        let mut exact: Vec<(usize, f32)> =
            items.iter().map(|(d, v)| (*d, cosine(&query, v))).collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1));
        let exact: HashSet<usize> = exact[..20].iter().map(|e| e.0).collect();

        assert_eq!(index.search(&query, 20, Some(1), None).len(), 20);
        assert_eq!(index.search(&query, 20, Some(usize::MAX), None).len(), 20);
        let wide = index.search(&query, 20, Some(items.len()), None);
        let found = wide.iter().filter(|(d, _)| exact.contains(d)).count();
        assert_eq!(found, 20, "a walk over the whole index is exact");
    }

    #[test]
    fn unit_cosine_matches_the_library_cosine_on_unit_vectors() {
        // Deterministic pseudo-random unit vectors of the model's width and
        // of widths that leave a remainder after the eight lanes.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for dim in [384, 13, 8, 1] {
            let mut unit = || {
                let v: Vec<f32> = (0..dim).map(|_| next()).collect();
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
            };
            for _ in 0..50 {
                let (a, b) = (unit(), unit());
                let ours = UnitCosine.eval(&a, &b);
                let theirs = DistCosine.eval(&a, &b);
                assert!((ours - theirs).abs() < 1e-5, "{dim}: {ours} vs {theirs}");
                assert!(UnitCosine.eval(&a, &a) < 1e-5);
            }
        }
    }
}
