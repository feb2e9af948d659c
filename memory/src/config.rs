//! Configuration of the memory core.

use serde::{Deserialize, Serialize};

use crate::log::DecayConfig;

pub use cairn_store::config::{
    ClusterConfig, DEFAULT_CACHE_MB, PostgresConfig, StorageBackend, StorageConfig,
};

/// Size limits on what callers hand in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest turn content or entry content/detail, in bytes.
    pub max_content_bytes: usize,
    /// Most turns or entries in one batch.
    pub max_batch: usize,
    /// Longest forget reason, in bytes.
    pub max_reason_bytes: usize,
    /// Most sessions one workspace holds (a new session past it is refused
    /// with `cap_reached`; forgetting sessions makes room). Every lineage
    /// check lists the workspace's sessions, so this bounds its cost.
    pub max_sessions: usize,
    /// Most topics one workspace holds.
    pub max_topics: usize,
    /// Most topics with a `schedule` trigger one workspace holds (each runs
    /// a collection over the turns since its last run when due).
    pub max_scheduled_topics: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_content_bytes: 256 * 1024,
            max_batch: 10_000,
            max_reason_bytes: 2_048,
            max_sessions: 1_000_000,
            max_topics: 1_000,
            max_scheduled_topics: 100,
        }
    }
}

/// Configuration of [`crate::Memory`].
///
/// ```
/// let config = cairn_memory::MemoryConfig::default();
/// assert_eq!(config.tokenizer, "o200k_base");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Input size limits.
    pub limits: Limits,
    /// Time-to-live per entry kind.
    pub decay: DecayConfig,
    /// Token encoding used to count budgets (`o200k_base` or `cl100k_base`).
    pub tokenizer: String,
    /// Page cache of the embedded store, in MiB (sled's own default is
    /// 1 GiB, which a busy process fills: this bounds resident memory; sled's
    /// pages take about 1.8× this in memory).
    pub cache_mb: u64,
    /// The briefing's time windows (`[memory.briefing]`).
    pub briefing: crate::brief::BriefSettings,
    /// Maintenance: promotion, archiving, the nightly run (`[memory.maintenance]`).
    pub maintenance: crate::maintain::MaintainSettings,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            limits: Limits::default(),
            decay: DecayConfig::default(),
            tokenizer: "o200k_base".to_owned(),
            cache_mb: DEFAULT_CACHE_MB,
            briefing: crate::brief::BriefSettings::default(),
            maintenance: crate::maintain::MaintainSettings::default(),
        }
    }
}
