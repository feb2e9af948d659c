//! The assembly's runtime adapters: `SearchRetriever` puts the
//! search service behind the memory core's `Retriever` seam (hybrid, or
//! lexical only), and [`WasmPolicyCheck`] puts the WebAssembly memory
//! policy behind its `PolicyCheck` seam. [`Cairn::assemble`] wires them.
//!
//! The check decides with the runtime's installed memory-policy plugin
//! (`Cairn::policies`), so a hot swap applies to the next assembly and every
//! decision lands in the durable decision log with its generation.

use std::cell::RefCell;
use std::collections::HashSet;

use cairn_memory::assemble::{
    AssembleRequest, AssembledContext, Destination, Fidelity, ItemSource, PolicyCheck,
    PolicyContext, PolicyItem, PolicyVerdict, RetrievalQuery, Retrieved, Retriever, SeamError,
    Section,
};
use cairn_memory::redact::{Exposure, exposure};
use cairn_memory::search::{SearchService, search_options};
use cairn_memory::{SessionKind, Workspace};
use cairn_policies::{
    Action, DecisionRecord, MemoryPolicy, ObjectKind, PolicySlot, PrincipalKind, PrincipalRef,
    Sensitivity,
};

use crate::error::Result;
use crate::host::Cairn;
use crate::obligations::Ledger;
use crate::reads::{Asker, Object, Verdict, request_for, verdict_of};

/// The `Retriever` seam over the search service: turn hits by `session:seq`,
/// entry hits by entry id. Sub-agent sessions see only their lineage.
#[derive(Debug)]
pub(crate) struct SearchRetriever<'a> {
    service: &'a SearchService,
    workspace: &'a str,
    lineage: Option<HashSet<String>>,
}

impl<'a> SearchRetriever<'a> {
    /// A retriever over `workspace`; `lineage` restricts the sessions
    /// searched (`None`: all).
    pub(crate) fn new(
        service: &'a SearchService,
        workspace: &'a str,
        lineage: Option<HashSet<String>>,
    ) -> Self {
        SearchRetriever {
            service,
            workspace,
            lineage,
        }
    }
}

impl Retriever for SearchRetriever<'_> {
    fn retrieve(&self, query: &RetrievalQuery<'_>) -> std::result::Result<Retrieved, SeamError> {
        let mut options = search_options(query);
        if let Some(lineage) = &self.lineage {
            options = options.sessions(lineage.iter().cloned());
        }
        let result = self
            .service
            .search(self.workspace, query.text, &options)
            .map_err(|e| SeamError(e.to_string()))?;
        Ok(Retrieved::from_search(&result))
    }
}

/// Maps the assembly's destination to the policy world's.
pub fn policy_destination(destination: Destination) -> cairn_policies::Destination {
    use cairn_policies::Destination as P;
    match destination {
        Destination::LocalModel => P::LocalModel,
        Destination::CloudModel => P::CloudModel,
        Destination::ExternalLlm => P::ExternalLlm,
        Destination::Subagent => P::Subagent,
        Destination::ShareLink => P::ShareLink,
        Destination::TaskRuntime => P::TaskRuntime,
        Destination::UserVisibleUi => P::UserVisibleUi,
    }
}

/// How sensitive a text looks: a credential makes it secret, an e-mail
/// address or phone number personal.
///
/// The scan runs once per text: the answer is remembered under the text's
/// BLAKE3 hash (texts up to 8 KiB, the last 65,536 of them), so a turn or
/// entry judged by every assembly is scanned when first read, not per call.
///
/// ```
/// use cairn::assembly::sensitivity_of;
/// use cairn_policies::Sensitivity;
/// assert_eq!(sensitivity_of("the key is sk-live-0123456789abcdef0123"), Sensitivity::Secret);
/// assert_eq!(sensitivity_of("lunch at noon"), Sensitivity::Normal);
/// ```
pub fn sensitivity_of(text: &str) -> Sensitivity {
    static MEMO: std::sync::OnceLock<cairn_memory::memo::TextMemo<Sensitivity>> =
        std::sync::OnceLock::new();
    MEMO.get_or_init(|| cairn_memory::memo::TextMemo::new(65_536))
        .get_or_make(b"", text, || match exposure(text) {
            Exposure::Secret => Sensitivity::Secret,
            Exposure::Personal => Sensitivity::Personal,
            Exposure::Clean => Sensitivity::Normal,
        })
}

/// The `PolicyCheck` seam over the memory-policy world: every candidate is
/// a `render-inline` request for the block's destination, asked by the
/// agent of the requesting session.
///
/// The candidates an assembly asks about together are judged in one plugin
/// call ([`PolicySlot::judge_many`]), and the decisions of the whole
/// assembly are logged as one decision-log record when it is done
/// ([`WasmPolicyCheck::log`], or when the check is dropped), each still
/// with its own decision id.
#[derive(Debug)]
pub struct WasmPolicyCheck<'a> {
    slot: &'a PolicySlot<MemoryPolicy>,
    /// The workspace assembled from (its decision records name it).
    workspace: Option<String>,
    lineage: Option<HashSet<String>>,
    /// The decisions made so far, not yet logged.
    pending: RefCell<Vec<DecisionRecord>>,
    /// The workspace's store, for the confirmations the policy asks for
    /// (`None`: no item is held; see [`WasmPolicyCheck::holding`]).
    store: Option<Workspace>,
    /// The uses of the candidates whose obligations the host must settle.
    ledger: Ledger,
    /// Who asked (the last `check_many`'s asker).
    asker: RefCell<Option<Asker>>,
}

impl<'a> WasmPolicyCheck<'a> {
    /// A check served by `slot`; `lineage` is the set of sessions the
    /// requesting session may read in full (`None`: a main session, which
    /// may read its whole workspace).
    pub fn new(slot: &'a PolicySlot<MemoryPolicy>, lineage: Option<HashSet<String>>) -> Self {
        WasmPolicyCheck {
            slot,
            workspace: None,
            lineage,
            pending: RefCell::new(Vec::new()),
            store: None,
            ledger: Ledger::default(),
            asker: RefCell::new(None),
        }
    }

    /// The check holds items the policy wants the user to confirm first
    /// (`confirm-with-user`) until `ws` records the confirmation granted.
    pub(crate) fn holding(mut self, ws: Workspace) -> Self {
        self.store = Some(ws);
        self
    }

    /// Settles the obligations of the items `block` holds (audit records
    /// and pending confirmations written) and says them in the block.
    pub(crate) fn settle(&self, block: &mut AssembledContext) -> Result<()> {
        let (Some(ws), Some(asker)) = (&self.store, self.asker.borrow().clone()) else {
            return Ok(());
        };
        let used: HashSet<String> = block
            .items
            .iter()
            .filter_map(|i| item_label(&i.source))
            .collect();
        self.ledger.retain(|item| used.contains(item));
        block.obligations = self.ledger.settle(ws, &asker)?;
        Ok(())
    }

    /// The check of an assembly from `workspace`: its decision records
    /// name the workspace, so that a `forget` scrubs them by it.
    pub fn in_workspace(mut self, workspace: &str) -> Self {
        self.workspace = Some(workspace.to_owned());
        self
    }

    /// Hands the decisions made so far to the decision log, as one record.
    pub fn log(&self) -> Result<()> {
        let records = std::mem::take(&mut *self.pending.borrow_mut());
        Ok(self.slot.log_batch(&records)?)
    }

    /// What putting `item` in the block does with it: a handoff, a resume
    /// or a briefing card line is a carry-over (`carryover-generate`); what a sub-agent
    /// or cron session is given from another session of its lineage is
    /// handed to it (`delegate`); anything else is rendered inline.
    fn action_for(&self, item: &PolicyItem<'_>, context: &PolicyContext<'_>) -> Action {
        match item.section {
            Section::Handoff | Section::Resume | Section::Briefing => Action::CarryoverGenerate,
            _ if self.lineage.is_some() && item.session.is_some_and(|s| s != context.session) => {
                Action::Delegate
            }
            _ => Action::RenderInline,
        }
    }

    /// The host's own directives are not memory: they pass as they are,
    /// stamped with the generation in force.
    fn directive(&self) -> PolicyVerdict {
        PolicyVerdict {
            fidelity: Fidelity::Full,
            reason_codes: vec!["host-directive".to_owned()],
            generation: self.slot.generation().as_str().to_owned(),
            label_low_trust: false,
            attribute_source: false,
        }
    }
}

impl Drop for WasmPolicyCheck<'_> {
    /// An assembly that failed half-way still logs what was decided.
    fn drop(&mut self) {
        if let Err(error) = self.log() {
            tracing::warn!(%error, "an assembly's policy decisions could not be logged");
        }
    }
}

/// How the obligations name a block item (`turn s1:4`, `entry e1`,
/// `summary sum-…`); `None` for a directive.
fn item_label(source: &ItemSource) -> Option<String> {
    Some(match source {
        ItemSource::Directive { .. } => return None,
        ItemSource::Turn { session, seq } | ItemSource::Topic { session, seq, .. } => {
            format!("turn {session}:{seq}")
        }
        ItemSource::Entry { id, .. } | ItemSource::Missing { id } => format!("entry {id}"),
        ItemSource::Summary { id } => format!("summary {id}"),
    })
}

/// The policy's view of an assembly candidate; `None` for a directive.
fn object_of<'i>(item: &PolicyItem<'i>) -> Option<Object<'i>> {
    let (kind, id) = match item.source {
        ItemSource::Directive { .. } => return None,
        ItemSource::Turn { session, seq } => (ObjectKind::Turn, format!("{session}:{seq}")),
        ItemSource::Entry { id, .. } | ItemSource::Missing { id } => {
            (ObjectKind::Entry, id.clone())
        }
        // A summary is made of the session's turns: judged as one.
        ItemSource::Summary { id } => (ObjectKind::Turn, id.clone()),
        // A topic's collection is a turn, judged as that turn.
        ItemSource::Topic { session, seq, .. } => (ObjectKind::Turn, format!("{session}:{seq}")),
    };
    Some(Object {
        kind,
        id,
        session: item.session,
        work_context: item.work_context,
        text: item.text,
        low_trust: item.low_trust,
    })
}

fn asker_of(context: &PolicyContext<'_>) -> Asker {
    Asker {
        action: Action::RenderInline,
        destination: Some(context.destination),
        principal: PrincipalRef {
            kind: PrincipalKind::Agent,
            id: context.session.to_owned(),
        },
        surface: "assemble",
        work_context: Some(context.work_context.to_owned()),
    }
}

impl PolicyCheck for WasmPolicyCheck<'_> {
    fn check(
        &self,
        item: &PolicyItem<'_>,
        context: &PolicyContext<'_>,
    ) -> std::result::Result<PolicyVerdict, SeamError> {
        let mut verdicts = self.check_many(std::slice::from_ref(item), context)?;
        verdicts
            .pop()
            .ok_or_else(|| SeamError("the policy gave no verdict".to_owned()))
    }

    fn check_many(
        &self,
        items: &[PolicyItem<'_>],
        context: &PolicyContext<'_>,
    ) -> std::result::Result<Vec<PolicyVerdict>, SeamError> {
        let asker = asker_of(context);
        let objects: Vec<Option<Object<'_>>> = items.iter().map(object_of).collect();
        let requests: Vec<_> = objects
            .iter()
            .zip(items)
            .filter_map(|(object, item)| {
                let mut request = request_for(&asker, self.lineage.as_ref(), object.as_ref()?);
                request.action = self.action_for(item, context);
                Some(request)
            })
            .collect();
        let (decided, records) = self
            .slot
            .judge_many_in(self.workspace.as_deref(), &requests);
        self.pending.borrow_mut().extend(records);
        let mut verdicts: Vec<Verdict> = decided
            .iter()
            .map(|d| verdict_of(d, Some(context.destination)))
            .collect();
        // What the block would show by reference only is asked again as
        // `render-reference`: whether even the reference may be shown.
        let referenced: Vec<usize> = (0..verdicts.len())
            .filter(|&i| verdicts[i].fidelity == Fidelity::ReferenceOnly)
            .collect();
        if !referenced.is_empty() {
            let again: Vec<_> = referenced
                .iter()
                .map(|&i| {
                    let mut request = requests[i].clone();
                    request.action = Action::RenderReference;
                    request
                })
                .collect();
            let (decided, records) = self.slot.judge_many_in(self.workspace.as_deref(), &again);
            self.pending.borrow_mut().extend(records);
            for (&i, d) in referenced.iter().zip(decided.iter()) {
                let reference = verdict_of(d, Some(context.destination));
                if reference.fidelity == Fidelity::Blocked {
                    verdicts[i] = reference;
                }
            }
        }
        // Each verdict with the action its request asked about.
        let mut decided = verdicts.into_iter().zip(requests.iter().map(|r| r.action));
        let verdicts = objects
            .iter()
            .zip(items)
            .map(|(object, item)| match object {
                None => Ok(self.directive()),
                Some(object) => {
                    let (mut verdict, action) = decided.next().ok_or_else(|| {
                        SeamError("the policy gave fewer verdicts than asked".to_owned())
                    })?;
                    if let (Some(ws), Some(label)) = (&self.store, item_label(item.source)) {
                        verdict =
                            self.ledger
                                .admit_as(ws, label, object.session, Some(action), verdict);
                    }
                    Ok(PolicyVerdict {
                        fidelity: verdict.fidelity,
                        reason_codes: verdict.reason_codes,
                        generation: verdict.generation,
                        label_low_trust: verdict.label_low_trust,
                        attribute_source: verdict.obligations.attribute,
                    })
                }
            })
            .collect();
        *self.asker.borrow_mut() = Some(asker);
        verdicts
    }

    fn in_lineage(&self, session: Option<&str>) -> bool {
        match (&self.lineage, session) {
            (None, _) => true,
            (Some(lineage), Some(s)) => lineage.contains(s),
            (Some(_), None) => false,
        }
    }
}

/// The sessions `session` may read in full: `None` for a main session (its
/// whole workspace), its lineage for a sub-agent or cron session.
pub(crate) fn lineage_of(ws: &Workspace, session: &str) -> Result<Option<HashSet<String>>> {
    let me = ws.session(session)?;
    if me.kind == SessionKind::Main {
        return Ok(None);
    }
    let sessions = ws.sessions(None)?;
    Ok(Some(crate::tools::lineage(&sessions, session)))
}

impl Cairn {
    /// Hook `assemble`: the memory block for the next model call, composed
    /// by the memory core (`cairn_memory::assemble`), retrieved through the
    /// search service (hybrid, or lexical when asked or without a model)
    /// and checked item by item with the memory policy for the request's
    /// destination. Requests without settings use `[assemble.settings]`.
    ///
    /// ```
    /// use cairn::{AssembleRequest, Cairn, CairnConfig, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Ship it Friday.")])?;
    /// let mut request = AssembleRequest::new("s1", 300);
    /// request.retrieval = cairn::RetrievalMode::Off;
    /// let block = cairn.assemble("acme", &request)?;
    /// assert!(block.text.contains("Ship it Friday."));
    /// assert!(block.tokens <= 300);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn assemble(&self, workspace: &str, request: &AssembleRequest) -> Result<AssembledContext> {
        let ws = self.memory().existing_workspace(workspace)?;
        let mut request = request.clone();
        if request.settings.is_none() {
            request.settings = Some(self.config().assemble.settings.clone());
        }
        let lineage = lineage_of(&ws, &request.session)?;
        let policy = WasmPolicyCheck::new(self.policies().memory_policy(), lineage.clone())
            .in_workspace(workspace)
            .holding(ws.clone());
        let mut block = if request.retrieval == cairn_memory::RetrievalMode::Off {
            ws.assemble(&request, &cairn_memory::assemble::NoRetrieval, &policy)?
        } else {
            // The index follows ingest in the background; turns ingested a
            // moment ago may not be searchable yet (they are in the tail).
            let retriever = SearchRetriever::new(self.search(), workspace, lineage);
            ws.assemble(&request, &retriever, &policy)?
        };
        // The decisions are in the log, and the audit records the policy
        // asked for are written, before the block is handed out.
        policy.log()?;
        policy.settle(&mut block)?;
        Ok(block)
    }
}
