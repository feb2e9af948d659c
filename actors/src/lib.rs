//! cairn's supervised actor runtime.
//!
//! This crate is intentionally empty in the foundation release: the host API in
//! `runtime/` calls the memory core directly. The actor runtime (one
//! `SessionActor` per live session, one `WorkContextActor` per work context,
//! one `TopicWatcherActor` per topic, supervised and passivated) is built by the
//! "Supervised actor runtime" issue and routes the same host API through actors.
//! Nothing here pretends to work yet: there are no public items.
