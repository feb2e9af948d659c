//! Benchmarks for cairn live in `benches/benches/`; this library is empty.
//! Run them with `cargo bench -p cairn-benches`; results go in `docs/BENCHMARKS.md`.
