//! What the memory policy's obligations make the host do.
//!
//! A decision of the `memory-policy` world carries obligations beside its
//! fidelity (`wit/memory.wit`). The host acts on each, on every read
//! surface and in every assembled block (wit/README.md has the table):
//!
//! - `audit-log`: a durable audit record of the use ([`AuditRecord`]: the
//!   item, the action, the destination, the surface, who asked, the
//!   decision id), written before the content is handed out and listed by
//!   [`Cairn::audit`] (`cairn audit`, `GET …/audit`);
//! - `disclose-to-user`: the response says what was used, as an
//!   [`ObligationNote`] (an assembled block's and a search's
//!   `obligations`);
//! - `attribute-source`: the source is named beside the content;
//! - `redact-personal-data`: personal data is masked before the content
//!   leaves, whatever the fidelity;
//! - `confirm-with-user`: the content is held (shown by reference only)
//!   with a pending [`Confirmation`] until the user grants it
//!   ([`Cairn::grant_confirmation`], `cairn confirmations --grant`,
//!   `POST …/confirmations/grant`);
//! - `label-low-trust`: the item is marked as data, not instructions;
//! - `expire-with-session` (on the `capture` of a turn): what capture
//!   derived from the turn (the entries whose source turns include it) is
//!   erased when the session ends, with a tombstone
//!   ([`Cairn::expire_with_session`]).

use std::sync::Mutex;

use cairn_memory::assemble::ObligationNote;
use cairn_memory::store::{StateFamily, StateKey};
use cairn_memory::{EntryInput, Workspace};
use cairn_policies::{Action, PolicyObligation};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use cairn_memory::MemoryError;

use crate::error::Result;
use crate::host::Cairn;
use cairn_memory::assemble::Fidelity;

use crate::reads::{Asker, Verdict};

/// The obligations of one decision, as flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Obligations {
    pub(crate) audit: bool,
    pub(crate) disclose: bool,
    pub(crate) attribute: bool,
    pub(crate) redact_personal: bool,
    pub(crate) confirm: bool,
    pub(crate) expire: bool,
    pub(crate) label_low_trust: bool,
}

impl Obligations {
    pub(crate) fn of(list: &[PolicyObligation]) -> Self {
        let mut o = Obligations::default();
        for obligation in list {
            match obligation {
                PolicyObligation::AuditLog => o.audit = true,
                PolicyObligation::DiscloseToUser => o.disclose = true,
                PolicyObligation::AttributeSource => o.attribute = true,
                PolicyObligation::RedactPersonalData => o.redact_personal = true,
                PolicyObligation::ConfirmWithUser => o.confirm = true,
                PolicyObligation::ExpireWithSession => o.expire = true,
                PolicyObligation::LabelLowTrust => o.label_low_trust = true,
                // An obligation this build does not know: nothing it can do.
                _ => {}
            }
        }
        o
    }

    /// Whether the use must be noted after the read (audited, disclosed,
    /// or held for a confirmation).
    fn noted(&self) -> bool {
        self.audit || self.disclose || self.confirm
    }
}

/// A durable record of one use of an item the memory policy asked to
/// audit (its `audit-log` obligation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditRecord {
    /// The record's id (a ULID: records sort by time).
    pub id: String,
    /// When the item was used.
    pub at: DateTime<Utc>,
    /// The item (`entry e1`, `turn s1:4`, `summary sum-…`).
    pub item: String,
    /// The item's session, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// What was done with it (`retrieve`, `render-inline`, `export`).
    pub action: String,
    /// Where it went (`local-model`, `cloud-model`, ...), if anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The surface that used it (`assemble`, `memory_search`, ...).
    pub surface: String,
    /// Who asked (`agent:s1`, `user:user`).
    pub principal: String,
    /// The decision that asked for the record (in the decision log).
    pub decision_id: String,
    /// The policy generation that decided.
    pub generation: String,
    /// How much of it was shown (`full`, `redacted`, `reference-only`).
    pub fidelity: String,
}

/// Whether a confirmation is still waiting for the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmationState {
    /// Asked for; the item is held.
    Pending,
    /// Granted by the user: the item is used as the policy decided.
    Granted,
}

/// A confirmation the memory policy asked for before an item is used (its
/// `confirm-with-user` obligation): until it is granted, the item is shown
/// by reference only, on every surface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Confirmation {
    /// The item held (`entry e1`, `turn s1:4`).
    pub item: String,
    /// The item's session, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Pending or granted.
    pub state: ConfirmationState,
    /// When it was first asked for.
    pub requested_at: DateTime<Utc>,
    /// The surface that first wanted the item.
    pub surface: String,
    /// The decision that asked for it.
    pub decision_id: String,
    /// When the user granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_at: Option<DateTime<Utc>>,
    /// For a change a caller could only propose (the memory policy's
    /// `candidate-only` mutation authority, or `confirm-with-user` on a
    /// `mutate`): the change, made when the user grants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<ProposedChange>,
    /// What granting the proposal made (the new entry's id, the
    /// tombstone's id, the pinned entry's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
}

/// A change a caller proposed and the user may grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ProposedChange {
    /// Write this entry (a note, or a correction that `replaces` one).
    Append {
        /// The entry to write.
        #[schema(value_type = Object)]
        entry: Box<EntryInput>,
    },
    /// Erase this entry (with the versions it replaced).
    Retract {
        /// The entry.
        entry: String,
        /// Why (the tombstone's reason).
        reason: String,
    },
    /// Pin (or unpin) this entry.
    Pin {
        /// The entry.
        entry: String,
        /// Pin (`true`) or unpin.
        pinned: bool,
    },
}

/// One use of an item whose decision carried obligations to note.
#[derive(Debug, Clone)]
struct Use {
    item: String,
    /// What was done with it, when not the asker's action (a block's
    /// delegated and carried-over items).
    action: Option<Action>,
    session: Option<String>,
    obligations: Obligations,
    decision_id: String,
    generation: String,
    fidelity: &'static str,
    /// Held for a confirmation not granted yet.
    held: bool,
}

/// The uses of one read or assembly, noted as they are judged and settled
/// (audit records and confirmations written, notes made) before the
/// response is handed out.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    uses: Mutex<Vec<Use>>,
}

impl Ledger {
    /// `verdict` on `item` as it is handed out: held (shown by reference)
    /// when the policy wants the user to confirm it first and the user has
    /// not; its use noted for [`Ledger::settle`]. A blocked item is not
    /// used, so nothing is noted.
    pub(crate) fn admit(
        &self,
        ws: &Workspace,
        item: String,
        session: Option<&str>,
        verdict: Verdict,
    ) -> Verdict {
        self.admit_as(ws, item, session, None, verdict)
    }

    /// [`Ledger::admit`] for an item used by `action` (`None`: the
    /// asker's).
    pub(crate) fn admit_as(
        &self,
        ws: &Workspace,
        item: String,
        session: Option<&str>,
        action: Option<Action>,
        mut verdict: Verdict,
    ) -> Verdict {
        if verdict.fidelity == Fidelity::Blocked {
            return verdict;
        }
        let held = verdict.obligations.confirm
            && !granted(ws, &item).unwrap_or_else(|error| {
                tracing::warn!(%error, %item, "a confirmation could not be read: the item is held");
                false
            });
        if held {
            verdict.fidelity = Fidelity::ReferenceOnly;
            verdict
                .reason_codes
                .push("host-awaiting-confirmation".to_owned());
        }
        self.note(Use {
            item,
            action,
            session: session.map(str::to_owned),
            obligations: verdict.obligations,
            decision_id: verdict.decision_id.clone(),
            generation: verdict.generation.clone(),
            fidelity: verdict.fidelity.as_str(),
            held,
        });
        verdict
    }

    /// Notes `used` if its obligations ask for anything after the read.
    fn note(&self, used: Use) {
        if used.obligations.noted() || used.held {
            self.uses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(used);
        }
    }

    /// Keeps only the uses of the items `kept` says were handed out.
    pub(crate) fn retain(&self, kept: impl Fn(&str) -> bool) {
        self.uses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|u| kept(&u.item));
    }

    /// Writes the audit records and pending confirmations the noted uses
    /// ask for (one durable batch) and returns what the response says.
    pub(crate) fn settle(&self, ws: &Workspace, asker: &Asker) -> Result<Vec<ObligationNote>> {
        let uses = std::mem::take(
            &mut *self
                .uses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if uses.is_empty() {
            return Ok(Vec::new());
        }
        let now = ws.clock().now();
        let mut puts = Vec::new();
        let mut notes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for u in uses {
            // An item used twice in one response is noted once.
            if !seen.insert(u.item.clone()) {
                continue;
            }
            if u.obligations.audit {
                let record = AuditRecord {
                    id: ulid::Ulid::new().to_string(),
                    at: now,
                    item: u.item.clone(),
                    session: u.session.clone(),
                    action: u.action.unwrap_or(asker.action).as_str().to_owned(),
                    destination: asker.destination.map(|d| d.as_str().to_owned()),
                    surface: asker.surface.to_owned(),
                    principal: format!("{}:{}", asker.principal.kind.as_str(), asker.principal.id),
                    decision_id: u.decision_id.clone(),
                    generation: u.generation.clone(),
                    fidelity: u.fidelity.to_owned(),
                };
                puts.push((
                    StateKey::Audit {
                        id: record.id.clone(),
                    },
                    encode("audit record", &record)?,
                ));
                notes.push(ObligationNote {
                    item: u.item.clone(),
                    obligation: "audit-log".to_owned(),
                    decision_id: u.decision_id.clone(),
                    record: Some(record.id),
                });
            }
            if u.held {
                let key = StateKey::Confirmation {
                    item: u.item.clone(),
                };
                if ws.state_get(&key)?.is_none() {
                    let pending = Confirmation {
                        item: u.item.clone(),
                        session: u.session.clone(),
                        state: ConfirmationState::Pending,
                        requested_at: now,
                        surface: asker.surface.to_owned(),
                        decision_id: u.decision_id.clone(),
                        granted_at: None,
                        proposal: None,
                        applied: None,
                    };
                    puts.push((key, encode("confirmation", &pending)?));
                }
                notes.push(ObligationNote {
                    item: u.item.clone(),
                    obligation: "confirm-with-user".to_owned(),
                    decision_id: u.decision_id.clone(),
                    record: Some(u.item.clone()),
                });
            }
            if u.obligations.disclose {
                notes.push(ObligationNote {
                    item: u.item,
                    obligation: "disclose-to-user".to_owned(),
                    decision_id: u.decision_id,
                    record: None,
                });
            }
        }
        if !puts.is_empty() {
            ws.state_apply(&puts, &[])?;
        }
        Ok(notes)
    }
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| {
        MemoryError::Corrupt {
            what,
            key: String::new(),
            reason: e.to_string(),
        }
        .into()
    })
}

fn decode<T: for<'de> Deserialize<'de>>(what: &'static str, raw: &[u8]) -> Result<T> {
    serde_json::from_slice(raw).map_err(|e| {
        MemoryError::Corrupt {
            what,
            key: String::new(),
            reason: e.to_string(),
        }
        .into()
    })
}

/// Longest item name a query or a grant may name (`entry <ulid>`,
/// `turn <session>:<seq>`, `proposal <ulid>`: a session id is at most 128
/// bytes).
const MAX_ITEM_BYTES: usize = 300;

/// `item`, or `invalid` naming the field when it cannot name an item.
fn item_name(item: &str) -> Result<&str> {
    if item.trim().is_empty() || item.len() > MAX_ITEM_BYTES {
        return Err(MemoryError::Invalid {
            what: "item",
            reason: format!(
                "an item is `<kind> <id>` of 1 to {MAX_ITEM_BYTES} bytes (this one has {})",
                item.len()
            ),
        }
        .into());
    }
    Ok(item)
}

/// Whether the user granted the confirmation of `item` in `ws`.
pub(crate) fn granted(ws: &Workspace, item: &str) -> Result<bool> {
    let key = StateKey::Confirmation {
        item: item.to_owned(),
    };
    Ok(match ws.state_get(&key)? {
        Some(raw) => {
            decode::<Confirmation>("confirmation", &raw)?.state == ConfirmationState::Granted
        }
        None => false,
    })
}

/// Which audit records [`Cairn::audit`] lists.
///
/// ```
/// let q = cairn::AuditQuery { item: Some("entry e1".into()), limit: 10 };
/// assert_eq!(q.limit, 10);
/// assert_eq!(cairn::AuditQuery::default().limit, 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only the records of this item.
    pub item: Option<String>,
    /// At most this many, newest first (1..=10,000).
    pub limit: usize,
}

impl Default for AuditQuery {
    fn default() -> Self {
        AuditQuery {
            item: None,
            limit: 100,
        }
    }
}

impl Cairn {
    /// The audit records of `workspace`, newest first: one for every use
    /// of an item whose memory-policy decision carried the `audit-log`
    /// obligation (an item in an assembled block, a search hit, a
    /// transcript turn, an exported object).
    ///
    /// ```
    /// use cairn::{AuditQuery, Cairn, CairnConfig, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Ship it Friday.")])?;
    /// // The default policy audits what goes to an external destination.
    /// assert!(cairn.audit("acme", &AuditQuery::default())?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn audit(&self, workspace: &str, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        if query.limit == 0 || query.limit > 10_000 {
            return Err(MemoryError::Invalid {
                what: "limit",
                reason: format!("{} is out of range (1..=10000)", query.limit),
            }
            .into());
        }
        if let Some(item) = &query.item {
            item_name(item)?;
        }
        let ws = self.memory().existing_workspace(workspace)?;
        let mut out = Vec::new();
        for (_, raw) in ws.state_scan(StateFamily::Audit)?.into_iter().rev() {
            let record: AuditRecord = decode("audit record", &raw)?;
            if query.item.as_ref().is_some_and(|i| *i != record.item) {
                continue;
            }
            out.push(record);
            if out.len() == query.limit {
                break;
            }
        }
        Ok(out)
    }

    /// The confirmations of `workspace` (pending and granted), in item
    /// order: items the memory policy holds until the user confirms them.
    pub fn confirmations(&self, workspace: &str) -> Result<Vec<Confirmation>> {
        let ws = self.memory().existing_workspace(workspace)?;
        ws.state_scan(StateFamily::Confirmation)?
            .into_iter()
            .map(|(_, raw)| decode("confirmation", &raw))
            .collect()
    }

    /// Grants the pending confirmation of `item`: from now on the item is
    /// used as the memory policy decided, on every surface. Fails with
    /// `not_found` when nothing waits for a confirmation of `item`.
    pub fn grant_confirmation(&self, workspace: &str, item: &str) -> Result<Confirmation> {
        let item = item_name(item)?;
        let ws = self.memory().existing_workspace(workspace)?;
        let key = StateKey::Confirmation {
            item: item.to_owned(),
        };
        let Some(raw) = ws.state_get(&key)? else {
            return Err(MemoryError::ConfirmationNotFound {
                item: item.to_owned(),
            }
            .into());
        };
        let mut confirmation: Confirmation = decode("confirmation", &raw)?;
        if confirmation.state == ConfirmationState::Pending {
            // A proposed change is made first (as the user): if it fails
            // (the entry was corrected meanwhile), the proposal stays
            // pending and the error says why.
            confirmation.applied = match &confirmation.proposal {
                None => None,
                Some(ProposedChange::Append { entry }) => {
                    Some(self.append_entry(workspace, entry)?.id)
                }
                Some(ProposedChange::Retract { entry, reason }) => {
                    self.unpin(workspace, entry)?;
                    let target = cairn_memory::ForgetTarget::Entry(entry.clone());
                    Some(self.forget(workspace, &target, reason)?.id)
                }
                Some(ProposedChange::Pin { entry, pinned }) => {
                    if *pinned {
                        self.pin(workspace, entry)?;
                    } else {
                        self.unpin(workspace, entry)?;
                    }
                    Some(entry.clone())
                }
            };
            confirmation.state = ConfirmationState::Granted;
            confirmation.granted_at = Some(ws.clock().now());
            ws.state_put(&key, &encode("confirmation", &confirmation)?)?;
        }
        Ok(confirmation)
    }

    /// `expire-with-session`: erases, through [`Cairn::forget`] (a
    /// tombstone each), the entries captured from the turns of `session`
    /// the memory policy marked to expire with it, then the marks. Run by
    /// [`Cairn::session_end`] after the session's last capture; returns how
    /// many entries were erased.
    pub(crate) fn expire_with_session(&self, workspace: &str, session: &str) -> Result<usize> {
        let ws = self.memory().existing_workspace(workspace)?;
        let marks: Vec<(StateKey, u64)> = ws
            .state_scan(StateFamily::Expiry)?
            .into_iter()
            .filter_map(|(key, _)| match &key {
                StateKey::Expiry { session: s, seq } if s == session => {
                    let seq = *seq;
                    Some((key, seq))
                }
                _ => None,
            })
            .collect();
        if marks.is_empty() {
            return Ok(0);
        }
        let seqs: std::collections::BTreeSet<u64> = marks.iter().map(|(_, seq)| *seq).collect();
        let entries = ws.entries(&cairn_memory::EntryFilter {
            session: Some(session.to_owned()),
            all: true,
            ..cairn_memory::EntryFilter::default()
        })?;
        let mut erased = 0;
        for view in entries {
            let Some(p) = &view.entry.provenance else {
                continue;
            };
            if seqs.range(p.from_seq..=p.to_seq).next().is_none() {
                continue;
            }
            let target = cairn_memory::ForgetTarget::Entry(view.entry.id.clone());
            match self.forget(
                workspace,
                &target,
                "expire-with-session: the memory policy asked for it when the turn was captured",
            ) {
                Ok(_) => erased += 1,
                // Erased already with a version it replaced.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let keys: Vec<StateKey> = marks.into_iter().map(|(key, _)| key).collect();
        ws.state_apply(&[], &keys)?;
        tracing::info!(
            workspace,
            session,
            erased,
            "derived copies expired with the session"
        );
        Ok(erased)
    }

    /// Records `proposal` as a pending confirmation for the user, on
    /// behalf of `asker`, and returns the refusal that tells the caller
    /// its change waits for the user (`proposed`).
    pub(crate) fn propose(
        &self,
        ws: &Workspace,
        asker: &Asker,
        verdict: &Verdict,
        session: Option<&str>,
        proposal: ProposedChange,
    ) -> crate::error::CairnError {
        let item = format!("proposal {}", ulid::Ulid::new());
        let pending = Confirmation {
            item: item.clone(),
            session: session.map(str::to_owned),
            state: ConfirmationState::Pending,
            requested_at: ws.clock().now(),
            surface: asker.surface.to_owned(),
            decision_id: verdict.decision_id.clone(),
            granted_at: None,
            proposal: Some(proposal),
            applied: None,
        };
        let written = encode("confirmation", &pending).and_then(|raw| {
            Ok(ws.state_put(&StateKey::Confirmation { item: item.clone() }, &raw)?)
        });
        match written {
            Ok(()) => crate::error::CairnError::Proposed {
                item,
                reasons: verdict.reason_codes.join(", "),
            },
            Err(e) => e,
        }
    }
}
