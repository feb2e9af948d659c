//! The memory policy on every read surface, not only assembly.
//!
//! `memory_search`, `memory_get`, `read_transcript`, the operator's
//! transcript and entry reads, and the briefing each ask the installed
//! `memory-policy` world about every item they would return: `retrieve`
//! for the caller's destination, asked by the caller (an agent session
//! when `asking` names one, else the user), with the lineage rule and the
//! item's sensitivity (from its raw text, before redaction). The answer
//! shapes what is returned, the same way it shapes an assembled block:
//!
//! | fidelity         | a list (search, transcript, entries) | one item (`memory_get`, `entry`) |
//! |------------------|--------------------------------------|----------------------------------|
//! | `full`           | the text, secrets redacted           | the same                         |
//! | `redacted`       | personal data masked as well         | the same                         |
//! | `reference-only` | `(withheld by policy: <id> exists)`  | the same                         |
//! | blocked / `none` | left out                             | refused (`forbidden`)            |
//!
//! A decision that cannot be had (a host failure, not a plugin fault:
//! faults already give the world's fail-safe) withholds the item: the read
//! fails closed.

use std::collections::HashSet;

use cairn_memory::assemble::{Destination, Fidelity};
use cairn_memory::compact::SummaryNode;
use cairn_memory::redact::{redact, redact_personal};
use cairn_memory::{Entry, Name, Role, SessionKind, Turn, Workspace};
use cairn_policies::{
    Action, ContentFidelity, ContentReference, Decided, MemoryPolicy, MemoryPolicyDecision,
    ObjectKind, PolicyRequest, PolicySlot, PrincipalKind, PrincipalRef,
};

use cairn_memory::assemble::ObligationNote;
use cairn_policies::{LearningScope, Locality, MutationAuthority};

use crate::assembly::{policy_destination, sensitivity_of};
use crate::error::{CairnError, Result};
use crate::host::Cairn;
use crate::obligations::{Ledger, Obligations};

/// Who reads, and where what they read goes: the lineage rule's asking
/// session and the memory policy's principal and destination.
///
/// Every read method takes `impl Into<ReadAs>`, so `None` (the user, to
/// the default destination) and `Some("helper")` (a session's agent) work
/// as they are; name a destination with [`ReadAs::to`].
///
/// ```
/// use cairn::{Destination, ReadAs};
/// let r = ReadAs::from(Some("helper")).to(Destination::CloudModel);
/// assert_eq!(r.asking, Some("helper"));
/// assert_eq!(r.destination, Some(Destination::CloudModel));
/// assert_eq!(ReadAs::default().destination_or_default(), Destination::LocalModel);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadAs<'a> {
    /// The session whose agent reads: a sub-agent or cron session sees its
    /// lineage only. `None`: the user (or the operator) reads.
    pub asking: Option<&'a str>,
    /// Where the text goes; `None` is [`Destination::default`] (a local
    /// model), as for an assembly.
    pub destination: Option<Destination>,
}

impl<'a> ReadAs<'a> {
    /// The user reads, to the default destination.
    pub fn user() -> Self {
        ReadAs::default()
    }

    /// The same reader, with what it reads going to `destination`.
    pub fn to(self, destination: Destination) -> Self {
        ReadAs {
            destination: Some(destination),
            ..self
        }
    }

    /// The destination the policy is asked about.
    pub fn destination_or_default(&self) -> Destination {
        self.destination.unwrap_or_default()
    }
}

impl<'a> From<Option<&'a str>> for ReadAs<'a> {
    fn from(asking: Option<&'a str>) -> Self {
        ReadAs {
            asking,
            destination: None,
        }
    }
}

/// One object as the memory policy sees it.
#[derive(Debug)]
pub(crate) struct Object<'a> {
    pub(crate) kind: ObjectKind,
    pub(crate) id: String,
    pub(crate) session: Option<&'a str>,
    pub(crate) work_context: Option<&'a str>,
    /// The raw text, for its sensitivity.
    pub(crate) text: &'a str,
    pub(crate) low_trust: bool,
}

impl<'a> Object<'a> {
    pub(crate) fn turn(t: &'a Turn) -> Self {
        Object {
            kind: ObjectKind::Turn,
            id: format!("{}:{}", t.session, t.seq),
            session: Some(&t.session),
            work_context: Some(&t.work_context),
            text: &t.content,
            low_trust: t.role == Role::Tool,
        }
    }

    pub(crate) fn entry(e: &'a Entry, text: &'a str) -> Self {
        Object {
            kind: ObjectKind::Entry,
            id: e.id.clone(),
            session: e.provenance.as_ref().map(|p| p.session.as_str()),
            work_context: Some(&e.work_context),
            text,
            low_trust: false,
        }
    }
}

/// What the policy said about one object, with what the host makes of its
/// locality (for the destination asked about) and obligations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) fidelity: Fidelity,
    pub(crate) reason_codes: Vec<String>,
    pub(crate) generation: String,
    pub(crate) label_low_trust: bool,
    /// The decision's id (empty when none could be had).
    pub(crate) decision_id: String,
    pub(crate) obligations: Obligations,
    /// What may be written because of the object (acted on for `mutate`).
    pub(crate) mutation: MutationAuthority,
    /// What may be learned from it (acted on for `learn-from`).
    pub(crate) learning: LearningScope,
}

impl Verdict {
    /// The verdict when no decision could be had: withheld.
    fn unavailable() -> Verdict {
        Verdict {
            fidelity: Fidelity::Blocked,
            reason_codes: vec!["policy-unavailable".to_owned()],
            generation: String::new(),
            label_low_trust: false,
            decision_id: String::new(),
            obligations: Obligations::default(),
            mutation: MutationAuthority::None,
            learning: LearningScope::None,
        }
    }
}

/// Whether content sent to `destination` leaves this machine: a `local-only`
/// decision keeps it from there.
pub(crate) fn is_external(destination: Destination) -> bool {
    matches!(
        destination,
        Destination::CloudModel | Destination::ExternalLlm | Destination::ShareLink
    )
}

/// The item an object is, as reads name it (`turn s1:4`, `entry e1`).
pub(crate) fn item_of(object: &Object<'_>) -> String {
    format!("{} {}", object.kind.as_str(), object.id)
}

/// Everything of a request but the object: who asks, for what, from where.
#[derive(Debug, Clone)]
pub(crate) struct Asker {
    pub(crate) action: Action,
    /// `None`: the object stays here (a capture).
    pub(crate) destination: Option<Destination>,
    pub(crate) principal: PrincipalRef,
    pub(crate) surface: &'static str,
    pub(crate) work_context: Option<String>,
}

/// Asks `slot` about `object` for `asker`, who may read the sessions in
/// `lineage` in full (`None`: all).
pub(crate) fn decide(
    slot: &PolicySlot<MemoryPolicy>,
    workspace: Option<&str>,
    asker: &Asker,
    lineage: Option<&HashSet<String>>,
    object: &Object<'_>,
) -> std::result::Result<Verdict, cairn_policies::PolicyError> {
    let decided = slot.decide_in(workspace, &request_for(asker, lineage, object))?;
    Ok(verdict_of(&decided, asker.destination))
}

/// The memory-policy request about `object` for `asker`, who may read the
/// sessions in `lineage` in full (`None`: all): the one place such a
/// request is built, for assembly and for every read.
pub(crate) fn request_for(
    asker: &Asker,
    lineage: Option<&HashSet<String>>,
    object: &Object<'_>,
) -> PolicyRequest {
    let mut request = PolicyRequest::new(
        ContentReference {
            kind: object.kind,
            id: object.id.clone(),
            work_context_id: object.work_context.map(str::to_owned),
            session_id: object.session.map(str::to_owned),
            sensitivity: sensitivity_of(object.text),
            low_trust: object.low_trust,
        },
        asker.action,
        asker.destination.map(policy_destination),
    );
    request.principal_ref = Some(asker.principal.clone());
    request.surface_ref = Some(asker.surface.to_owned());
    request.requesting_work_context_id = asker.work_context.clone();
    request.lineage_permitted = match (lineage, object.session) {
        (None, _) => true,
        (Some(l), Some(s)) => l.contains(s),
        (Some(_), None) => false,
    };
    request
}

/// What a decision lets a reader see when the content goes to
/// `destination` (`None`: it stays here): the fidelity, except that a
/// `local-only` decision blocks an external destination (`cloud-model`,
/// `external-llm`, `share-link`) and the `redact-personal-data`
/// obligation masks personal data even in a full copy.
pub(crate) fn verdict_of(
    decided: &Decided<MemoryPolicyDecision>,
    destination: Option<Destination>,
) -> Verdict {
    let d = &decided.decision;
    let obligations = Obligations::of(&d.obligations);
    let mut reason_codes: Vec<String> = d
        .reason_codes
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    let mut fidelity = if !d.allows_content() {
        Fidelity::Blocked
    } else {
        match d.content_fidelity {
            ContentFidelity::Full => Fidelity::Full,
            ContentFidelity::Redacted => Fidelity::Redacted,
            ContentFidelity::ReferenceOnly => Fidelity::ReferenceOnly,
            // `none`, or a fidelity this build does not know: show nothing.
            _ => Fidelity::Blocked,
        }
    };
    if fidelity != Fidelity::Blocked
        && d.locality != Locality::ApprovedExternal
        && destination.is_some_and(is_external)
    {
        fidelity = Fidelity::Blocked;
        reason_codes.push("host-local-only".to_owned());
    }
    if obligations.redact_personal && fidelity == Fidelity::Full {
        fidelity = Fidelity::Redacted;
    }
    Verdict {
        fidelity,
        reason_codes,
        generation: decided.generation.as_str().to_owned(),
        label_low_trust: obligations.label_low_trust,
        decision_id: decided.decision_id.to_string(),
        obligations,
        mutation: d.mutation_authority,
        learning: d.learning_scope,
    }
}

/// A read's judge: one asker, many objects.
#[derive(Debug)]
pub(crate) struct ReadJudge<'a> {
    slot: &'a PolicySlot<MemoryPolicy>,
    /// The workspace read (its decision records name it).
    workspace: String,
    pub(crate) asker: Asker,
    /// The sessions the reader may read in full (`None`: all).
    lineage: Option<HashSet<String>>,
    /// The workspace read (for the keyed digests readers are shown).
    ws: Workspace,
    /// The uses whose obligations the read must settle.
    ledger: Ledger,
}

impl ReadJudge<'_> {
    /// The verdict on `object`; a decision that cannot be had withholds it.
    /// An item the policy wants confirmed by the user first is held (shown
    /// by reference) until the confirmation is granted; its use is noted
    /// for [`ReadJudge::settle`].
    pub(crate) fn judge(&self, object: &Object<'_>) -> Verdict {
        let verdict = decide(
            self.slot,
            Some(&self.workspace),
            &self.asker,
            self.lineage.as_ref(),
            object,
        )
        .unwrap_or_else(|error| {
            tracing::warn!(%error, surface = self.asker.surface, "memory policy unavailable: the item is withheld");
            Verdict::unavailable()
        });
        self.ledger
            .admit(&self.ws, item_of(object), object.session, verdict)
    }

    /// The decision on `object` for `action` by this reader, with nothing
    /// going anywhere (`destination` none): for the changes a reader asks
    /// for (`mutate`). Nothing is noted; a decision that cannot be had
    /// allows nothing.
    pub(crate) fn decide_as(&self, action: Action, object: &Object<'_>) -> Verdict {
        let asker = Asker {
            action,
            destination: None,
            ..self.asker.clone()
        };
        decide(
            self.slot,
            Some(&self.workspace),
            &asker,
            self.lineage.as_ref(),
            object,
        )
        .unwrap_or_else(|error| {
            tracing::warn!(%error, surface = self.asker.surface, "memory policy unavailable: the change is refused");
            Verdict::unavailable()
        })
    }

    /// Writes the audit records and pending confirmations the read's uses
    /// ask for and returns what the response must say (disclosures, audit
    /// records, held items). Call it before handing the response out.
    pub(crate) fn settle(&self) -> Result<Vec<ObligationNote>> {
        self.ledger.settle(&self.ws, &self.asker)
    }

    /// Keeps only the noted uses of the items `returned` says were handed
    /// out (a transcript cut short judged one turn more than it returns).
    pub(crate) fn retain(&self, returned: impl Fn(&str) -> bool) {
        self.ledger.retain(returned);
    }

    /// `text` with its source named in front, when `verdict` says so.
    fn attributed(verdict: &Verdict, source: &str, text: String) -> String {
        if verdict.obligations.attribute && verdict.fidelity != Fidelity::ReferenceOnly {
            format!("[source: {source}] {text}")
        } else {
            text
        }
    }

    /// `text` as `fidelity` lets this reader see it (secrets always
    /// redacted); `None` when it is withheld entirely.
    pub(crate) fn shown(text: &str, fidelity: Fidelity, reference: &str) -> Option<String> {
        match fidelity {
            Fidelity::Full => Some(redact(text)),
            Fidelity::Redacted => Some(redact_personal(&redact(text))),
            Fidelity::ReferenceOnly => Some(format!("(withheld by policy: {reference} exists)")),
            Fidelity::Blocked => None,
        }
    }

    /// Whether this reader may see anything of `session`'s turns by the
    /// lineage rule.
    pub(crate) fn in_lineage(&self, session: &str) -> bool {
        self.lineage.as_ref().is_none_or(|l| l.contains(session))
    }

    /// A turn as this reader may see it; `None` when withheld. When the
    /// text shown is not the stored text (a secret masked, the text
    /// withheld by reference), its `content_hash` is the keyed digest of
    /// the stored text ([`Workspace::reader_hash`]): the plain hash would
    /// let the reader confirm a guess at what was masked. A text shown
    /// whole keeps its plain hash, which a client can check.
    pub(crate) fn turn(&self, mut turn: Turn) -> Option<Turn> {
        let verdict = self.judge(&Object::turn(&turn));
        let reference = format!("turn {}:{}", turn.session, turn.seq);
        let shown = Self::shown(&turn.content, verdict.fidelity, &reference)?;
        let shown = Self::attributed(&verdict, &format!("{}:{}", turn.session, turn.seq), shown);
        if shown != turn.content {
            turn.content_hash = self.ws.reader_hash(&turn.content);
            turn.content = shown;
        }
        Some(turn)
    }

    /// A summary's text as this reader may see it (judged as the session's
    /// turns it stands for); `None` when withheld.
    pub(crate) fn summary(&self, node: &SummaryNode) -> Option<String> {
        let verdict = self.judge(&Object {
            kind: ObjectKind::Summary,
            id: node.id.clone(),
            session: Some(&node.session),
            work_context: Some(&node.work_context),
            text: &node.text,
            low_trust: false,
        });
        let shown = Self::shown(
            &node.text,
            verdict.fidelity,
            &format!("summary {}", node.id),
        )?;
        Some(Self::attributed(
            &verdict,
            &format!("summary {} of {}", node.id, node.session),
            shown,
        ))
    }

    /// An entry (content and detail) as this reader may see it; the
    /// verdict's reasons when withheld.
    pub(crate) fn entry(&self, entry: &mut Entry) -> std::result::Result<(), Verdict> {
        let whole = match &entry.detail {
            Some(d) if !d.is_empty() => format!("{}\n{d}", entry.content),
            _ => entry.content.clone(),
        };
        let verdict = self.judge(&Object::entry(entry, &whole));
        let reference = format!("entry {}", entry.id);
        let Some(content) = Self::shown(&entry.content, verdict.fidelity, &reference) else {
            return Err(verdict);
        };
        let source = match &entry.provenance {
            Some(p) => format!("{}:{}", p.session, p.from_seq),
            None => format!("entry {}", entry.id),
        };
        entry.content = Self::attributed(&verdict, &source, content);
        entry.detail = match verdict.fidelity {
            Fidelity::ReferenceOnly => None,
            f => entry
                .detail
                .as_deref()
                .and_then(|d| Self::shown(d, f, &reference))
                .map(Name::from),
        };
        Ok(())
    }
}

impl Drop for ReadJudge<'_> {
    /// A read that settles nothing itself (a list of entries, a history, a
    /// briefing) still writes the audit records its items ask for.
    fn drop(&mut self) {
        if let Err(error) = self.settle() {
            tracing::warn!(%error, surface = self.asker.surface, "the audit records of a read could not be written");
        }
    }
}

/// The refusal of a single-item read the policy blocks.
pub(crate) fn withheld(what: &str, asker: &Asker, verdict: &Verdict) -> CairnError {
    CairnError::Denied(format!(
        "the memory policy withholds {what} from {} ({}): {}",
        asker
            .destination
            .map_or("here".to_owned(), |d| format!("{d:?}")),
        asker.surface,
        verdict.reason_codes.join(", ")
    ))
}

impl Cairn {
    /// A judge for one read of `ws` by `reader` through `surface`; the
    /// asking session must exist (as for the lineage rule).
    pub(crate) fn read_judge(
        &self,
        ws: &Workspace,
        reader: ReadAs<'_>,
        surface: &'static str,
        lineage: Option<HashSet<String>>,
    ) -> Result<ReadJudge<'_>> {
        let (principal, work_context) = match reader.asking {
            None => (
                PrincipalRef {
                    kind: PrincipalKind::User,
                    id: "user".to_owned(),
                },
                None,
            ),
            Some(asking) => {
                let me = ws.session(asking)?;
                let kind = match me.kind {
                    SessionKind::Main => PrincipalKind::Agent,
                    _ => PrincipalKind::Subagent,
                };
                (
                    PrincipalRef {
                        kind,
                        id: asking.to_owned(),
                    },
                    Some(me.work_context),
                )
            }
        };
        Ok(ReadJudge {
            slot: self.policies().memory_policy(),
            workspace: ws.id().to_owned(),
            asker: Asker {
                action: Action::Retrieve,
                destination: Some(reader.destination_or_default()),
                principal,
                surface,
                work_context,
            },
            lineage,
            ws: ws.clone(),
            ledger: Ledger::default(),
        })
    }
}
