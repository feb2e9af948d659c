//! cairn's policy host: WebAssembly components behind the `cairn:policy` WIT
//! interface (significance gates, topic collection directives, memory policy
//! decisions).
//!
//! Empty in the foundation release: the host is built by the "WASM policy
//! plugins behind WIT" issue. There are no public items, so nothing here can be
//! mistaken for a working policy.
