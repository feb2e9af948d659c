//! Agents correct memory: the tools `memory_correct` (a new version that
//! `replaces` an entry, with the reason in its detail), `memory_retract`
//! (the audited `forget` of one entry, its reason in the tombstone) and
//! `memory_pin` (pin or unpin an entry), on the facade, for MCP and HTTP
//! alike.
//!
//! Each first reads the entry as its caller would ([`Cairn::entry`]): an
//! asking sub-agent or cron session acts only on entries from its lineage
//! (`lineage_denied`), and an entry the memory policy withholds from the
//! reader's destination is refused (`forbidden`), so no caller changes what
//! it may not see. The write is then the facade's own
//! ([`Cairn::append_entry`], [`Cairn::forget`], [`Cairn::pin`]): validated
//! whole, indexed, durable when it returns. Who may write at all (a
//! read-scoped token may not) is the surface's check, as for `memory_note`.

use cairn_memory::assemble::Fidelity;
use cairn_memory::{Entry, EntryInput, EntryKind, MemoryError, TaskStatus, Tombstone, Workspace};
use cairn_policies::{Action, MutationAuthority};

use crate::error::{CairnError, Result};
use crate::host::Cairn;
use crate::obligations::{Ledger, ProposedChange};
use crate::reads::{Object, ReadAs, item_of};

/// What the memory policy lets a caller do with a change it asks for.
pub(crate) enum Authority {
    /// Write it.
    Durable,
    /// Record it as a proposal for the user (the refusal to return).
    Propose(CairnError),
}

/// A `memory_correct` call: what the entry should say instead, and why.
///
/// ```
/// let c = cairn::Correction::new("The beta launches on April 8", "the date moved");
/// assert!(c.session.is_none() && c.subject.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Correction {
    /// The corrected content.
    pub content: String,
    /// Why the entry was wrong (recorded in the new version's detail).
    pub reason: String,
    /// More: on a decision, why; on a fact, background.
    pub detail: Option<String>,
    /// Subject slug; the corrected entry's when absent.
    pub subject: Option<String>,
    /// For a task: its status; the corrected task's when absent.
    pub status: Option<TaskStatus>,
    /// The session the correction comes from (its provenance); the asking
    /// session when absent, and none when neither is known.
    pub session: Option<String>,
    /// The turns it rests on, `[from, to]`; the session's last turn when
    /// absent.
    pub turns: Option<[u64; 2]>,
}

impl Correction {
    /// A correction with only its content and reason.
    pub fn new(content: &str, reason: &str) -> Self {
        Correction {
            content: content.to_owned(),
            reason: reason.to_owned(),
            detail: None,
            subject: None,
            status: None,
            session: None,
            turns: None,
        }
    }
}

fn invalid(what: &'static str, reason: &str) -> CairnError {
    MemoryError::Invalid {
        what,
        reason: reason.to_owned(),
    }
    .into()
}

/// A reason, trimmed, or `invalid` naming the field.
fn reason_of<'a>(reason: &'a str, what: &str) -> Result<&'a str> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(invalid(
            "reason",
            &format!("a {what} says why (an empty reason is refused)"),
        ));
    }
    Ok(reason)
}

impl Cairn {
    /// Asks the memory policy whether `reader` may make `change` to
    /// `object` through `surface` (`mutate`): `durable-allowed` writes it,
    /// `candidate-only` (or the `confirm-with-user` obligation) records it
    /// as a proposal the user may grant, `none` or a blocked object refuse
    /// it (`forbidden`). An `audit-log` obligation leaves an audit record.
    pub(crate) fn authorize(
        &self,
        ws: &Workspace,
        reader: ReadAs<'_>,
        surface: &'static str,
        object: &Object<'_>,
        change: ProposedChange,
    ) -> Result<Authority> {
        let lineage = self.allowed_sessions(ws, reader.asking, false)?;
        let judge = self.read_judge(ws, reader, surface, lineage)?;
        let verdict = judge.decide_as(Action::Mutate, object);
        let item = item_of(object);
        if verdict.fidelity == Fidelity::Blocked || verdict.mutation == MutationAuthority::None {
            return Err(CairnError::Denied(format!(
                "the memory policy gives {} no authority to change {item} ({})",
                reader
                    .asking
                    .map_or("the user".to_owned(), |s| format!("session {s:?}")),
                verdict.reason_codes.join(", ")
            )));
        }
        let mut asker = judge.asker.clone();
        asker.action = Action::Mutate;
        asker.destination = None;
        if verdict.obligations.audit {
            let mut audited = verdict.clone();
            audited.obligations.confirm = false;
            let ledger = Ledger::default();
            ledger.admit(ws, item.clone(), object.session, audited);
            ledger.settle(ws, &asker)?;
        }
        if verdict.mutation == MutationAuthority::CandidateOnly || verdict.obligations.confirm {
            return Ok(Authority::Propose(self.propose(
                ws,
                &asker,
                &verdict,
                object.session,
                change,
            )));
        }
        Ok(Authority::Durable)
    }
}

// The correction tools on the facade.
impl Cairn {
    /// Tool `memory_correct`: writes a new version of entry `id` (same
    /// kind and work context) that `replaces` it, so the old one leaves
    /// the live memory and stays in its history. The reason is recorded in
    /// the new version's detail; its provenance is the correction's
    /// session and turns (see [`Correction`]). Refused when the entry was
    /// already replaced (`already_replaced`), is a session summary pointer
    /// (`invalid`: correct what it summarises), or is outside what the
    /// reader may see.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Correction, EntryInput, EntryKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let old = cairn.append_entry("acme", &EntryInput::new(EntryKind::Fact, "Dana lives in Porto"))?;
    /// let new = cairn.memory_correct("acme", &old.id, &Correction::new("Dana lives in Lisbon", "she moved"), None)?;
    /// assert_eq!(new.replaces.as_deref(), Some(old.id.as_str()));
    /// assert_eq!(cairn.history("acme", &new.id, None)?.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_correct<'a>(
        &self,
        workspace: &str,
        id: &str,
        correction: &Correction,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Entry> {
        let reader = reader.into();
        let reason = reason_of(&correction.reason, "correction")?;
        let old = self.entry_as(workspace, id, reader, "memory_correct")?;
        let old = &old.entry;
        if old.kind == EntryKind::SessionSummaryRef {
            return Err(invalid(
                "id",
                &format!(
                    "entry {id:?} points to a session summary, which is cairn's own: correct the \
                     entries it summarises"
                ),
            ));
        }
        let ws = self.memory().existing_workspace(workspace)?;
        let provenance = match correction.session.as_deref().or(reader.asking) {
            Some(session) => {
                Some(self.note_provenance(&ws, reader.asking, session, correction.turns)?)
            }
            None if correction.turns.is_some() => {
                return Err(invalid(
                    "turns",
                    "turns need the session they are in: name it, or ask as a session",
                ));
            }
            None => None,
        };
        let because = format!("Corrects {id}: {reason}");
        let mut input = EntryInput::new(old.kind, &correction.content);
        input.detail = Some(match correction.detail.as_deref().map(str::trim) {
            Some(detail) if !detail.is_empty() => format!("{detail}\n{because}"),
            _ => because,
        });
        input.subject = correction
            .subject
            .clone()
            .or_else(|| old.subject.as_deref().map(str::to_owned));
        input.work_context = Some(old.work_context.to_string());
        input.provenance = provenance;
        input.replaces = Some(id.to_owned());
        if old.kind == EntryKind::Task {
            input.status = correction.status.or(old.status);
        } else if correction.status.is_some() {
            return Err(invalid(
                "status",
                &format!("entry {id:?} is a {}, not a task", old.kind),
            ));
        }
        let stored = ws.entry(id)?;
        let object = Object::entry(&stored.entry, &stored.entry.content);
        let change = ProposedChange::Append {
            entry: Box::new(input.clone()),
        };
        if let Authority::Propose(proposed) =
            self.authorize(&ws, reader, "memory_correct", &object, change)?
        {
            return Err(proposed);
        }
        let entry = self.append_entry(workspace, &input)?;
        tracing::info!(workspace, corrected = id, by = %entry.id, asking = reader.asking, "entry corrected");
        Ok(entry)
    }

    /// Tool `memory_retract`: erases entry `id` (with the versions it
    /// replaced) through [`forget`](Self::forget), which leaves the audited
    /// tombstone with `reason`; a pin on it goes too. The entry must be one
    /// the reader may see.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let e = cairn.append_entry("acme", &EntryInput::new(EntryKind::Fact, "Dana's number is 555-0100"))?;
    /// let tombstone = cairn.memory_retract("acme", &e.id, "not hers", None)?;
    /// assert_eq!((tombstone.target.kind.as_str(), tombstone.reason.as_str()), ("entry", "not hers"));
    /// assert!(cairn.entry("acme", &e.id, None).is_err());
    /// assert!(cairn.memory_retract("acme", "01J0000000000000000000000X", "  ", None).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_retract<'a>(
        &self,
        workspace: &str,
        id: &str,
        reason: &str,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Tombstone> {
        let reader = reader.into();
        let reason = reason_of(reason, "retraction")?;
        self.entry_as(workspace, id, reader, "memory_retract")?;
        let ws = self.memory().existing_workspace(workspace)?;
        let stored = ws.entry(id)?;
        let object = Object::entry(&stored.entry, &stored.entry.content);
        let change = ProposedChange::Retract {
            entry: id.to_owned(),
            reason: reason.to_owned(),
        };
        if let Authority::Propose(proposed) =
            self.authorize(&ws, reader, "memory_retract", &object, change)?
        {
            return Err(proposed);
        }
        self.unpin(workspace, id)?;
        let tombstone = self.forget(
            workspace,
            &cairn_memory::ForgetTarget::Entry(id.to_owned()),
            reason,
        )?;
        tracing::info!(workspace, tombstone = %tombstone.id, asking = reader.asking, "entry retracted");
        Ok(tombstone)
    }

    /// Tool `memory_pin`: pins entry `id` (a hard invariant of every block
    /// assembled in the workspace, through its corrections), or unpins it
    /// with `pinned = false`. The entry must be one the reader may see.
    /// Returns the workspace's pinned ids.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, EntryInput, EntryKind};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// let e = cairn.append_entry("acme", &EntryInput::new(EntryKind::Decision, "Postgres, not MySQL"))?;
    /// assert_eq!(cairn.memory_pin("acme", &e.id, true, None)?, vec![e.id.clone()]);
    /// assert!(cairn.memory_pin("acme", &e.id, false, None)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_pin<'a>(
        &self,
        workspace: &str,
        id: &str,
        pinned: bool,
        reader: impl Into<ReadAs<'a>>,
    ) -> Result<Vec<String>> {
        let reader = reader.into();
        self.entry_as(workspace, id, reader, "memory_pin")?;
        let ws = self.memory().existing_workspace(workspace)?;
        let stored = ws.entry(id)?;
        let object = Object::entry(&stored.entry, &stored.entry.content);
        let change = ProposedChange::Pin {
            entry: id.to_owned(),
            pinned,
        };
        if let Authority::Propose(proposed) =
            self.authorize(&ws, reader, "memory_pin", &object, change)?
        {
            return Err(proposed);
        }
        if pinned {
            self.pin(workspace, id)?;
        } else {
            self.unpin(workspace, id)?;
        }
        tracing::info!(
            workspace,
            entry = id,
            pinned,
            asking = reader.asking,
            "entry pin set"
        );
        self.pinned(workspace)
    }
}
