//! The subject registry: what entries are about.
//!
//! Subjects have lowercase kebab-case slugs. Renaming leaves the old slug as
//! an alias of the new one and merging leaves the merged slug as an alias of
//! the target, so entries written with an old slug keep resolving: the log is
//! never rewritten. Aliases are kept one hop deep (renaming a subject
//! re-points the aliases that pointed at it).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a subject is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubjectKind {
    /// A project or piece of work (the default).
    #[default]
    Project,
    /// A person.
    Person,
    /// A system or service.
    System,
    /// A tool.
    Tool,
    /// An organisation.
    Organization,
    /// A topic of interest.
    Topic,
    /// Anything else.
    Other,
}

/// A registered subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Subject {
    /// Canonical slug.
    pub slug: String,
    /// Display name (Title Case of the slug unless given).
    pub display: String,
    /// What it is.
    pub kind: SubjectKind,
    /// Old slugs that resolve to this subject.
    pub aliases: Vec<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}
