//! The subject registry: what entries are about.
//!
//! Subjects have lowercase kebab-case slugs. Renaming leaves the old slug as
//! an alias of the new one and merging leaves the merged slug as an alias of
//! the target, so entries written with an old slug keep resolving: the log is
//! never rewritten. Aliases are kept one hop deep (renaming a subject
//! re-points the aliases that pointed at it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};
use crate::ids::{display_for_slug, validate_slug};
use crate::memory::{Workspace, check_text, decode, encode};
use crate::store::{Collection, WriteBatch};

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

// The registry on a workspace: add, resolve through aliases, rename, merge.
impl Workspace {
    /// Subject aliases, read whole: old slug → canonical slug.
    pub(crate) fn alias_map(&self) -> Result<HashMap<String, String>> {
        self.string_map(Collection::SubjectAliases)
    }

    /// Registers a subject. Fails if the slug (or an alias with it) exists.
    pub fn add_subject(
        &self,
        slug: &str,
        kind: SubjectKind,
        display: Option<&str>,
    ) -> Result<Subject> {
        validate_slug(slug)?;
        if let Some(d) = display {
            check_text("subject display name", d, 256)?;
        }
        let guard = self.lock_entries();
        if self
            .store
            .get(Collection::Subjects, slug.as_bytes())?
            .is_some()
            || self
                .store
                .get(Collection::SubjectAliases, slug.as_bytes())?
                .is_some()
        {
            return Err(MemoryError::SubjectExists {
                slug: slug.to_owned(),
            });
        }
        let subject = Subject {
            slug: slug.to_owned(),
            display: display.map_or_else(|| display_for_slug(slug), str::to_owned),
            kind,
            aliases: Vec::new(),
            created_at: self.now(),
        };
        let mut batch = WriteBatch::default();
        batch.put(
            Collection::Subjects,
            slug.as_bytes().to_vec(),
            encode(&subject)?,
        );
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        Ok(subject)
    }

    fn load_subject(&self, slug: &str) -> Result<Option<Subject>> {
        let aliases = self.alias_map()?;
        let canonical = aliases.get(slug).map_or(slug, String::as_str);
        let Some(raw) = self.store.get(Collection::Subjects, canonical.as_bytes())? else {
            return Ok(None);
        };
        let mut subject: Subject = decode("subject", canonical.as_bytes(), &raw)?;
        subject.aliases = aliases
            .iter()
            .filter(|(_, to)| *to == canonical)
            .map(|(from, _)| from.clone())
            .collect();
        subject.aliases.sort();
        Ok(Some(subject))
    }

    /// A subject by slug; old slugs resolve to the subject they were renamed or merged into.
    pub fn subject(&self, slug: &str) -> Result<Subject> {
        validate_slug(slug)?;
        self.load_subject(slug)?
            .ok_or_else(|| MemoryError::SubjectNotFound {
                slug: slug.to_owned(),
            })
    }

    /// All subjects, sorted by slug, each with its aliases.
    pub fn subjects(&self) -> Result<Vec<Subject>> {
        Ok(self.subject_list()?.as_ref().clone())
    }

    /// [`Self::subjects`], shared: kept with the log snapshot, so the
    /// callers on the hot path (every assembly, every capture) do not scan
    /// the registry each time; a write of a subject or an alias renews it.
    pub(crate) fn subject_list(&self) -> Result<Arc<Vec<Subject>>> {
        let log = self.log_snapshot()?;
        if let Some(list) = log.subjects.get() {
            return Ok(list.clone());
        }
        let list = Arc::new(self.read_subjects(&log.aliases)?);
        Ok(log.subjects.get_or_init(|| list).clone())
    }

    fn read_subjects(&self, aliases: &HashMap<String, String>) -> Result<Vec<Subject>> {
        let mut by_target: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (from, to) in aliases {
            by_target.entry(to.as_str()).or_default().push(from.clone());
        }
        self.store
            .scan_prefix(Collection::Subjects, b"")?
            .into_iter()
            .map(|(k, v)| {
                let mut s: Subject = decode("subject", &k, &v)?;
                s.aliases = by_target.get(s.slug.as_str()).cloned().unwrap_or_default();
                s.aliases.sort();
                Ok(s)
            })
            .collect()
    }

    /// Renames a subject. The old slug keeps resolving to it.
    pub fn rename_subject(&self, old: &str, new: &str) -> Result<Subject> {
        validate_slug(old)?;
        validate_slug(new)?;
        let guard = self.lock_entries();
        let raw = self
            .store
            .get(Collection::Subjects, old.as_bytes())?
            .ok_or_else(|| MemoryError::SubjectNotFound {
                slug: old.to_owned(),
            })?;
        if old == new
            || self
                .store
                .get(Collection::Subjects, new.as_bytes())?
                .is_some()
            || self
                .store
                .get(Collection::SubjectAliases, new.as_bytes())?
                .is_some()
        {
            return Err(MemoryError::SubjectExists {
                slug: new.to_owned(),
            });
        }
        let mut subject: Subject = decode("subject", old.as_bytes(), &raw)?;
        subject.slug = new.to_owned();
        if subject.display == display_for_slug(old) {
            subject.display = display_for_slug(new);
        }
        let mut batch = WriteBatch::default();
        batch.delete(Collection::Subjects, old.as_bytes().to_vec());
        batch.put(
            Collection::Subjects,
            new.as_bytes().to_vec(),
            encode(&subject)?,
        );
        self.repoint_aliases(&mut batch, old, new)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        self.subject(new)
    }

    /// Merges subject `from` into `into`; `from` becomes an alias of `into`.
    pub fn merge_subjects(&self, from: &str, into: &str) -> Result<Subject> {
        validate_slug(from)?;
        validate_slug(into)?;
        let guard = self.lock_entries();
        if self
            .store
            .get(Collection::Subjects, into.as_bytes())?
            .is_none()
        {
            return Err(MemoryError::SubjectNotFound {
                slug: into.to_owned(),
            });
        }
        if self
            .store
            .get(Collection::Subjects, from.as_bytes())?
            .is_none()
        {
            return Err(MemoryError::SubjectNotFound {
                slug: from.to_owned(),
            });
        }
        if from == into {
            return Err(MemoryError::Invalid {
                what: "merge",
                reason: format!("cannot merge subject {from:?} into itself"),
            });
        }
        let mut batch = WriteBatch::default();
        batch.delete(Collection::Subjects, from.as_bytes().to_vec());
        self.repoint_aliases(&mut batch, from, into)?;
        self.apply(batch)?;
        drop(guard);
        self.shared.store.sync()?;
        self.subject(into)
    }

    fn repoint_aliases(&self, batch: &mut WriteBatch, old: &str, new: &str) -> Result<()> {
        for (alias, target) in self.alias_map()? {
            if target == old {
                batch.put(
                    Collection::SubjectAliases,
                    alias.into_bytes(),
                    new.as_bytes().to_vec(),
                );
            }
        }
        batch.put(
            Collection::SubjectAliases,
            old.as_bytes().to_vec(),
            new.as_bytes().to_vec(),
        );
        Ok(())
    }
}
