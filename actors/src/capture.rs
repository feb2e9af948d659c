//! Captures: turning a work context's new turns into log entries, exactly once.
//!
//! A capture runs on the blocking pool (it reads and fsyncs). It is
//! serialised per work context by a striped lock and driven by a durable
//! per-context record (`actors/context/<work context>` in the workspace's
//! state collection) that holds the **high-water mark** of every session:
//! the first turn no capture has processed yet. The steps:
//!
//! 1. lock the context; read its record;
//! 2. read each extractable session's turns from its high-water mark on;
//! 3. extract ([`cairn_memory::extract`]) and build entries with
//!    deterministic ids (a hash of context, session, turn range and item);
//! 4. keep memory current ([`cairn_memory::settle`]): an item that restates
//!    a live entry of the context is not written again (or, when it says
//!    more, replaces it); an open question or task that a later user
//!    sentence settles is closed by a `replaces` entry with provenance to
//!    that sentence's turn (a `fact` answering a question, a `done` task);
//! 5. add `cross_conversation_update` entries for other contexts that track
//!    a subject this material mentions and hold no recent update about it
//!    (docs/DESIGN.md, *Cross-conversation updates*);
//! 6. append the entries whose ids are not stored yet (one durable batch per
//!    `max_batch`);
//! 7. write the record with the new high-water marks (durable); unlock.
//!
//! A crash between 6 and 7 repeats steps 2–6 on the next capture; the
//! deterministic ids (a closing entry's id is derived from the loop it
//! closes) make step 6 write nothing twice. The high-water mark makes a
//! later capture skip processed turns.
//!
//! Session-level extraction (`session_end`, `before_reset`, `gateway_start`)
//! is a capture restricted to one session plus a handoff entry, recorded in
//! `actors/extraction/<session>` so that each session is extracted once, with
//! one retry after a failure (docs/DESIGN.md, *Session extraction*).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use cairn_memory::extract::{Depth, Extraction, extract_with};
use cairn_memory::extractor::{ExtractionRequest, ModelExtractor, ModelItem, dedup};
use cairn_memory::reconstruct::{DerivedStore, Findings};
use cairn_memory::settle::{Prepared, Restatement, Statement};
use cairn_memory::store::StateKey;
use cairn_memory::{
    EntryFilter, EntryInput, EntryKind, EntryView, Name, Provenance, Role, Session, Subject,
    TaskStatus, Turn, Workspace,
};
use chrono::{DateTime, Utc};
use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use crate::context::Verdicts;
use crate::error::{ActorError, Result};
use crate::fault::{Fault, Faults};
use crate::gate::{CaptureGate, GateInput, Significance};

/// Why a capture ran (docs/DESIGN.md, *Triggers* and *Session extraction*).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// Named apart from the topics' `Trigger` in the OpenAPI description, where
// one name is one schema.
#[cfg_attr(feature = "openapi", schema(as = CaptureTrigger))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The focused, dirty context saw no turn for the idle time.
    IdleTimeout,
    /// The user moved away from a dirty context and the debounce elapsed.
    DebouncedDefocus,
    /// The host is about to compact the session (mandatory).
    PreCompaction,
    /// The nightly sweep.
    NightlySweep,
    /// Asked for by the API or `cairn capture`.
    ManualRequest,
    /// Hook `session_end`.
    SessionEnd,
    /// Hook `before_reset`.
    BeforeReset,
    /// Hook `gateway_start` (sweep of sessions not extracted yet).
    GatewayStart,
}

impl Trigger {
    /// The `snake_case` name.
    ///
    /// ```
    /// assert_eq!(cairn_actors::Trigger::IdleTimeout.as_str(), "idle_timeout");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::IdleTimeout => "idle_timeout",
            Trigger::DebouncedDefocus => "debounced_defocus",
            Trigger::PreCompaction => "pre_compaction",
            Trigger::NightlySweep => "nightly_sweep",
            Trigger::ManualRequest => "manual_request",
            Trigger::SessionEnd => "session_end",
            Trigger::BeforeReset => "before_reset",
            Trigger::GatewayStart => "gateway_start",
        }
    }

    /// Mandatory triggers run (and report) even when nothing is new.
    pub fn is_mandatory(self) -> bool {
        !matches!(
            self,
            Trigger::IdleTimeout | Trigger::DebouncedDefocus | Trigger::NightlySweep
        )
    }

    fn is_session_hook(self) -> bool {
        matches!(
            self,
            Trigger::SessionEnd | Trigger::BeforeReset | Trigger::GatewayStart
        )
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry a capture wrote.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedEntry {
    /// Entry id (deterministic).
    pub id: String,
    /// Kind.
    pub kind: EntryKind,
    /// Content.
    pub content: String,
    /// The work context it was written to (another one for cross-conversation updates).
    pub work_context: String,
    /// Source session and turns.
    pub provenance: Option<Provenance>,
}

/// What one capture did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureReport {
    /// The work context captured.
    pub work_context: String,
    /// Why.
    pub trigger: Trigger,
    /// When (by the clock).
    pub at: DateTime<Utc>,
    /// The turn ranges processed, one per session.
    pub spans: Vec<Provenance>,
    /// Entries written (already-stored ones from an interrupted attempt are not repeated).
    pub entries: Vec<CapturedEntry>,
    /// Items not written because a live entry already says them.
    #[serde(default)]
    pub merged: Vec<MergedItem>,
    /// Open questions and tasks this capture closed.
    #[serde(default)]
    pub settled: Vec<SettledLoop>,
    /// Who extracted: `heuristic`, or the model (`model <name>`) when one
    /// is configured and answered.
    #[serde(default)]
    pub extractor: String,
    /// Why the configured model's answer was not used (the heuristic
    /// extractor's items were written instead), per span.
    #[serde(default)]
    pub extractor_error: Option<String>,
}

/// An extracted item a capture did not write: it restates a live entry.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedItem {
    /// Its kind.
    pub kind: EntryKind,
    /// Its text.
    pub content: String,
    /// The turn it came from.
    pub provenance: Provenance,
    /// The entry that already says it.
    pub into: String,
}

/// An open loop a capture closed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettledLoop {
    /// The question or task closed.
    pub entry: String,
    /// The entry that closes it (it `replaces` the loop).
    pub by: String,
    /// The rule (`answer.report`, `answer.decision`, `task.done`).
    pub rule: String,
    /// The turn that settled it.
    pub provenance: Provenance,
}

/// A past capture, as kept in the context's durable record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureSummary {
    /// Why.
    pub trigger: Trigger,
    /// When.
    pub at: DateTime<Utc>,
    /// Turn ranges processed.
    pub spans: Vec<Provenance>,
    /// Entries written.
    pub entries: usize,
    /// Why the configured model's answer was not used, if it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extractor_error: Option<String>,
}

/// How many past captures a context record keeps.
const KEPT_CAPTURES: usize = 64;

/// The durable per-context record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ContextRecord {
    /// Per session: the first turn not captured yet, for the sessions the
    /// latest capture took (a refresh raises what its actor has seen to
    /// them). Each session's mark is kept in a record of its own
    /// ([`StateKey::SessionMark`], see [`session_mark`]): a context
    /// record that held every session's mark grew with each session the
    /// context ever had and was read and written whole by every capture. A
    /// record written before those still holds every mark here, and is
    /// read as their fallback until its next capture moves them out.
    pub(crate) high_water: BTreeMap<String, u64>,
    pub(crate) last_capture_at: Option<DateTime<Utc>>,
    pub(crate) phase: Option<String>,
    pub(crate) captures: Vec<CaptureSummary>,
}

fn context_key(work_context: &str) -> StateKey {
    StateKey::CaptureMark {
        work_context: work_context.to_owned(),
    }
}

fn mark_key(work_context: &str, session: &str) -> StateKey {
    StateKey::SessionMark {
        work_context: work_context.to_owned(),
        session: session.to_owned(),
    }
}

/// A mark as stored: eight bytes, big-endian.
fn encode_mark(mark: u64) -> Vec<u8> {
    mark.to_be_bytes().to_vec()
}

fn decode_mark(work_context: &str, session: &str, bytes: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| {
        invalid_state(format!(
            "capture mark of {session:?} in {work_context:?}: {} bytes, not 8",
            bytes.len()
        ))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// The first turn of `session` not captured yet in `work_context`: its own
/// mark record, else the one in the context's `record` (a record written
/// before marks had records of their own holds every session's), else 0.
pub(crate) fn session_mark(
    ws: &Workspace,
    work_context: &str,
    record: &ContextRecord,
    session: &str,
) -> Result<u64> {
    match ws.state_get(&mark_key(work_context, session))? {
        Some(bytes) => decode_mark(work_context, session, &bytes),
        None => Ok(record.high_water.get(session).copied().unwrap_or(0)),
    }
}

/// Writes `record` with `marks` as the latest capture's (each also in its
/// own mark record), in one batch. The marks `record` held before that
/// `marks` does not name get their own records first when they have none:
/// a record of the earlier layout, which held every session's mark, is
/// moved out this way at its first capture.
fn put_record(
    ws: &Workspace,
    work_context: &str,
    record: &mut ContextRecord,
    marks: BTreeMap<String, u64>,
) -> Result<()> {
    let mut puts = Vec::with_capacity(marks.len() + 1);
    for (session, mark) in std::mem::take(&mut record.high_water) {
        let key = mark_key(work_context, &session);
        if !marks.contains_key(&session) && ws.state_get(&key)?.is_none() {
            puts.push((key, encode_mark(mark)));
        }
    }
    for (session, &mark) in &marks {
        puts.push((mark_key(work_context, session), encode_mark(mark)));
    }
    record.high_water = marks;
    puts.push((context_key(work_context), to_json(record)?));
    Ok(ws.state_apply(&puts, &[])?)
}

fn extraction_key(session: &str) -> StateKey {
    StateKey::Extraction {
        session: session.to_owned(),
    }
}

pub(crate) fn load_record(ws: &Workspace, work_context: &str) -> Result<ContextRecord> {
    match ws.state_get(&context_key(work_context))? {
        None => Ok(ContextRecord::default()),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| invalid_state(format!("context record of {work_context:?}: {e}"))),
    }
}

fn put_json<T: Serialize>(ws: &Workspace, key: &StateKey, value: &T) -> Result<()> {
    Ok(ws.state_put(key, &to_json(value)?)?)
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| invalid_state(e.to_string()))
}

/// A stored actor record that does not read (or a value that does not
/// encode), and why.
fn invalid_state(reason: String) -> ActorError {
    ActorError::Memory(cairn_memory::MemoryError::Invalid {
        what: "actor state",
        reason,
    })
}

/// Takes an erased session out of its work context's capture record: its
/// high-water mark (so a new session with the same id is captured from its
/// first turn) and the spans past captures name it by.
pub(crate) fn forget_session<T>(
    ws: &Workspace,
    locks: &CaptureLocks,
    work_context: &str,
    session: &str,
    erase: impl FnOnce() -> std::result::Result<T, cairn_memory::MemoryError>,
) -> Result<T> {
    // Under the capture lock: a capture of this work context that read the
    // session's turns cannot write what it made from them after the erase.
    let _guard = locks.lock(ws.id(), work_context);
    let erased = erase()?;
    let mut record = load_record(ws, work_context)?;
    let before = record.clone();
    record.high_water.remove(session);
    for summary in &mut record.captures {
        summary.spans.retain(|p| p.session != session);
    }
    record.captures.retain(|s| !s.spans.is_empty());
    if record != before {
        put_json(ws, &context_key(work_context), &record)?;
    }
    Ok(erased)
}

/// Striped locks serialising captures per (workspace, work context).
///
/// A `parking_lot` mutex, not an async one: it is only ever taken on the
/// blocking pool, inside one synchronous capture, and never held across an
/// `.await`.
#[derive(Debug)]
pub(crate) struct CaptureLocks {
    stripes: Vec<Mutex<()>>,
}

impl Default for CaptureLocks {
    fn default() -> Self {
        CaptureLocks {
            stripes: (0..64).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl CaptureLocks {
    fn lock(&self, workspace: &str, work_context: &str) -> MutexGuard<'_, ()> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (workspace, work_context).hash(&mut hasher);
        let index = (hasher.finish() as usize) % self.stripes.len();
        self.stripes[index].lock()
    }
}

/// What a capture needs besides the workspace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CaptureEnv<'a> {
    pub(crate) locks: &'a CaptureLocks,
    pub(crate) faults: &'a Faults,
    pub(crate) extract_all_sessions: bool,
    /// How long a live cross-conversation update about a subject holds back
    /// another in the same context (`None`: never).
    pub(crate) cross_update_quiet: Option<chrono::Duration>,
    pub(crate) gate: GateView<'a>,
    /// The optional model extraction pass (`None`: heuristic only).
    pub(crate) extractor: Option<&'a dyn ModelExtractor>,
}

/// The significance gate's word on the turns a capture reads: the verdicts
/// the context's actor holds (each turn judged once), the gate itself for
/// a turn not judged yet, the generation that made the context dirty.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateView<'a> {
    pub(crate) gate: &'a dyn CaptureGate,
    /// The workspace captured.
    pub(crate) workspace: &'a str,
    pub(crate) verdicts: &'a Verdicts,
    pub(crate) dirtied_by: Option<&'a str>,
    pub(crate) phase: Option<&'a str>,
}

impl GateView<'_> {
    /// The verdicts on a session's turns, by seq.
    fn judge(
        &self,
        session: &Session,
        turns: &[Turn],
        subjects: &[Subject],
    ) -> HashMap<u64, Significance> {
        turns
            .iter()
            .map(|t| {
                let known = self.verdicts.get(&(session.id.clone(), t.seq)).cloned();
                let verdict = known.unwrap_or_else(|| {
                    self.gate.assess(&GateInput {
                        workspace: self.workspace,
                        session: &session.id,
                        session_kind: session.kind,
                        work_context: &session.work_context,
                        seq: t.seq,
                        role: t.role,
                        content: &t.content,
                        tool_use: t.tool_call_id.is_some() || t.role == Role::Tool,
                        subjects,
                        work_phase: self.phase,
                    })
                });
                (t.seq, verdict)
            })
            .collect()
    }
}

/// The generation an entry records: the one that made its context dirty,
/// else the one that judged its own turn.
fn generation_of(
    env: &CaptureEnv<'_>,
    verdicts: &HashMap<u64, Significance>,
    seq: u64,
) -> Option<String> {
    env.gate
        .dirtied_by
        .map(str::to_owned)
        .or_else(|| verdicts.get(&seq).and_then(|v| v.generation.clone()))
}

pub(crate) fn extractable(session: &Session, extract_all: bool) -> bool {
    extract_all || session.is_main()
}

/// Runs one capture of `work_context` (restricted to `only_session` for the
/// session hooks). `None` when a non-mandatory trigger found nothing new.
pub(crate) fn capture(
    ws: &Workspace,
    work_context: &str,
    trigger: Trigger,
    only_session: Option<&str>,
    env: CaptureEnv<'_>,
) -> Result<Option<CaptureReport>> {
    let _guard = env.locks.lock(ws.id(), work_context);
    let now = ws.clock().now();
    let mut record = load_record(ws, work_context)?;
    let subjects = ws.subjects()?;
    // One session when the trigger names it (a session's end): not a read
    // of every session the context ever had.
    let candidates = match only_session {
        Some(id) => match ws.session(id) {
            Ok(s) if s.work_context == work_context => vec![s],
            Ok(_) => Vec::new(),
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e.into()),
        },
        None => ws.sessions(Some(work_context))?,
    };
    let sessions: Vec<Session> = candidates
        .into_iter()
        .filter(|s| extractable(s, env.extract_all_sessions))
        .collect();

    let mut phase = record.phase.clone();
    let mut inputs: Vec<EntryInput> = Vec::new();
    let mut updates: Vec<EntryInput> = Vec::new();
    let mut statements: Vec<Statement> = Vec::new();
    let mut statement_generations: HashMap<(String, u64), String> = HashMap::new();
    let mut spans = Vec::new();
    let mut new_marks = Vec::new();
    let mut model_errors: Vec<String> = Vec::new();
    let mut model_used = false;
    for session in &sessions {
        let from = session_mark(ws, work_context, &record, &session.id)?;
        if session.next_seq <= from {
            continue;
        }
        let all_turns = ws.transcript(&session.id, from, None)?;
        let Some(last) = all_turns.last() else {
            continue;
        };
        let to = last.seq;
        let span_at = last.timestamp;
        let span = Provenance {
            session: session.id.as_str().into(),
            from_seq: from,
            to_seq: to,
        };
        spans.push(span.clone());
        new_marks.push((session.id.clone(), to + 1));
        // The gate's depth per turn; a do-not-collect turn is not read at all.
        let verdicts = env.gate.judge(session, &all_turns, &subjects);
        let depth = |seq: u64| verdicts.get(&seq).map_or(Depth::Standard, |v| v.depth);
        let turns: Vec<Turn> = all_turns
            .into_iter()
            .filter(|t| depth(t.seq) != Depth::DoNotCollect)
            .filter_map(|t| env.gate.gate.capture_view(env.gate.workspace, session, t))
            .collect();
        if turns.is_empty() {
            continue;
        }
        let mut extraction = extract_with(&turns, &subjects, phase.as_deref(), |t| depth(t.seq));
        phase = extraction.phase.clone();
        statements.extend(extraction.statements.iter().cloned());
        let first = inputs.len();
        // The summary covers what the gate let be extracted (observe-only
        // turns count as activity, nothing more).
        let summarised: Vec<Turn> = turns
            .iter()
            .filter(|t| depth(t.seq) >= Depth::Shallow)
            .cloned()
            .collect();
        // The optional model pass reads what the gate let be extracted.
        let model = ask_model(
            ws,
            env,
            work_context,
            &summarised,
            &subjects,
            &mut extraction,
            &mut model_errors,
        )?;
        model_used |= model.is_some();
        build_entries(
            ws,
            work_context,
            trigger,
            (&span, span_at),
            (&turns, &summarised),
            &extraction,
            model
                .as_ref()
                .zip(env.extractor)
                .map(|(items, m)| (m, items.as_slice())),
            &mut inputs,
        )?;
        for input in &mut inputs[first..] {
            let seq = input.provenance.as_ref().map_or(span.to_seq, |p| p.to_seq);
            input.gate_generation = generation_of(&env, &verdicts, seq);
        }
        for s in &extraction.statements {
            if let Some(g) = generation_of(&env, &verdicts, s.seq) {
                statement_generations.insert((s.session.clone(), s.seq), g);
            }
        }
        cross_updates(
            ws,
            work_context,
            (&span, span_at),
            &extraction,
            (&subjects, env.cross_update_quiet),
            &mut updates,
        )?;
    }
    if spans.is_empty() && !trigger.is_mandatory() {
        return Ok(None);
    }
    let extractor = match env.extractor {
        Some(m) if model_used => m.name(),
        _ => "heuristic".to_owned(),
    };
    let extractor_error = (!model_errors.is_empty()).then(|| model_errors.join("; "));
    // A session that ends with nothing left to capture still hands off
    // (exactly one handoff per session: docs/DESIGN.md, *Session extraction*).
    if trigger.is_session_hook()
        && spans.is_empty()
        && let [session] = sessions.as_slice()
        && let Some(last_user) = ws
            .recent_turns(&session.id, 64)?
            .into_iter()
            .rev()
            .find(|t| t.role == Role::User)
    {
        let mut input = session_handoff(work_context, trigger, &session.id, &last_user);
        input.id = Some(entry_id(
            last_user.timestamp,
            &[ws.id(), work_context, &session.id, "handoff-at-end"],
        ));
        inputs.push(input);
    }
    let (merged, settled) = keep_current(ws, work_context, trigger, &mut inputs, &statements)?;
    for input in &mut inputs {
        if input.gate_generation.is_none()
            && let Some(p) = &input.provenance
        {
            input.gate_generation = statement_generations
                .get(&(p.session.to_string(), p.to_seq))
                .cloned()
                .or_else(|| env.gate.dirtied_by.map(str::to_owned));
        }
    }
    inputs.extend(updates);

    // Step 5: only what an interrupted earlier attempt did not store yet.
    let mut fresh = Vec::with_capacity(inputs.len());
    for input in inputs {
        let Some(id) = input.id.as_deref() else {
            continue;
        };
        match ws.entry(id) {
            Ok(_) => {}
            Err(e) if e.is_not_found() => fresh.push(input),
            Err(e) => return Err(e.into()),
        }
    }
    let mut written = Vec::with_capacity(fresh.len());
    for chunk in fresh.chunks(ws.config().limits.max_batch.max(1)) {
        written.extend(ws.append_entries(chunk)?);
    }
    let entries = written
        .into_iter()
        .map(|e| CapturedEntry {
            id: e.id,
            kind: e.kind,
            content: e.content,
            work_context: e.work_context.to_string(),
            provenance: e.provenance,
        })
        .collect::<Vec<_>>();
    if env
        .faults
        .take(|f| matches!(f, Fault::PanicCaptureAfterEntries { workspace, work_context: wc } if workspace == ws.id() && wc == work_context))
        .is_some()
    {
        panic!("injected fault: capture of {work_context} crashed before its high-water mark");
    }

    // Step 6.
    record.last_capture_at = Some(now);
    record.phase = phase;
    record.captures.push(CaptureSummary {
        trigger,
        at: now,
        spans: spans.clone(),
        entries: entries.len(),
        extractor_error: extractor_error.clone(),
    });
    if record.captures.len() > KEPT_CAPTURES {
        let excess = record.captures.len() - KEPT_CAPTURES;
        record.captures.drain(..excess);
    }
    put_record(
        ws,
        work_context,
        &mut record,
        new_marks.into_iter().collect(),
    )?;
    tracing::info!(
        workspace = %ws.id(), work_context, %trigger, spans = spans.len(), entries = entries.len(),
        "captured"
    );
    Ok(Some(CaptureReport {
        work_context: work_context.to_owned(),
        trigger,
        at: now,
        spans,
        entries,
        merged,
        settled,
        extractor,
        extractor_error,
    }))
}
/// The optional model pass over one span: the model's items (checked
/// whole, then deduplicated against the context's live entries), which
/// replace the heuristic ones but for the work-phase changes; or, when no
/// model is configured, `None`; or, when it fails (unreachable, too slow,
/// a refusal, a reply that is not exactly the JSON asked for), `None` with
/// the error logged and noted, so the heuristic items are written instead.
fn ask_model(
    ws: &Workspace,
    env: CaptureEnv<'_>,
    work_context: &str,
    turns: &[Turn],
    subjects: &[Subject],
    extraction: &mut Extraction,
    errors: &mut Vec<String>,
) -> Result<Option<Vec<ModelItem>>> {
    let Some(model) = env.extractor else {
        return Ok(None);
    };
    let request = ExtractionRequest {
        work_context,
        turns,
        subjects,
    };
    match model.extract(&request) {
        Ok(items) => {
            let live = ws.live_entries()?;
            let (kept, dropped) = dedup(items, live.iter(), work_context);
            if dropped > 0 {
                tracing::debug!(workspace = %ws.id(), work_context, dropped, "model items already in the log");
            }
            extraction
                .items
                .retain(|i| i.kind == EntryKind::WorkPhaseChange);
            Ok(Some(kept))
        }
        Err(error) => {
            let session = turns
                .first()
                .map(|t| t.session.as_str())
                .unwrap_or_default();
            tracing::warn!(
                workspace = %ws.id(), work_context, session, extractor = %model.name(), %error,
                "model extraction failed; the heuristic extraction is used"
            );
            errors.push(format!("{} (session {session}): {error}", model.name()));
            Ok(None)
        }
    }
}

/// An open loop a capture may close, and where it was said.
struct OpenLoop {
    id: String,
    kind: EntryKind,
    content: String,
    subject: Option<String>,
    read: Arc<Prepared>,
    /// The turn it came from (session, seq), if known.
    turn: Option<(cairn_memory::Name, u64)>,
    /// When that turn was said (or the entry captured).
    at: chrono::DateTime<Utc>,
}

impl OpenLoop {
    /// Whether `s` was said after the loop: later in the loop's session,
    /// or later in time in another one.
    fn precedes(&self, s: &Statement) -> Option<Option<u64>> {
        match &self.turn {
            Some((session, seq)) if *session == s.session => {
                (s.seq > *seq).then(|| Some(s.seq - seq))
            }
            _ => (s.at > self.at).then_some(None),
        }
    }
}

/// Whether an entry of `kind` and `status` waits to be settled: a
/// question, or a task not done.
fn is_open_loop(kind: EntryKind, status: Option<TaskStatus>) -> bool {
    match kind {
        EntryKind::Question | EntryKind::OpenQuestion => true,
        EntryKind::Task => status != Some(TaskStatus::Done),
        _ => false,
    }
}

fn subjects_agree(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// Step 4: merges restatements and closes settled loops (see the module
/// docs and [`cairn_memory::settle`]). `inputs` are this capture's items
/// in the work context, in turn order; `statements` the user's sentences.
fn keep_current(
    ws: &Workspace,
    work_context: &str,
    trigger: Trigger,
    inputs: &mut Vec<EntryInput>,
    statements: &[Statement],
) -> Result<(Vec<MergedItem>, Vec<SettledLoop>)> {
    let batch_ids: HashSet<String> = inputs.iter().filter_map(|i| i.id.clone()).collect();
    // Live entries of the context, except this capture's own (stored by an
    // interrupted attempt): what new items are compared with.
    let context = ws.live_comparable(work_context)?;
    // Newest first.
    let live: Vec<(&EntryView, &Arc<Prepared>)> = context
        .iter()
        .rev()
        .filter(|c| !batch_ids.contains(&c.view.entry.id))
        .map(|c| (&c.view, &c.read))
        .collect();
    let mut replaced: HashSet<String> = HashSet::new();

    // Restatements.
    let mut merged = Vec::new();
    let mut kept: Vec<(EntryInput, Arc<Prepared>)> = Vec::with_capacity(inputs.len());
    for mut input in inputs.drain(..) {
        let read = Arc::new(Prepared::new(input.kind, &input.content));
        if !cairn_memory::settle::comparable(input.kind) {
            kept.push((input, read));
            continue;
        }
        let subject = input.subject.as_deref();
        let earlier = live
            .iter()
            .map(|&(v, p)| (v.entry.id.as_str(), v.subject.as_deref(), p))
            .chain(
                kept.iter()
                    .filter_map(|(k, p)| Some((k.id.as_deref()?, k.subject.as_deref(), p))),
            );
        let mut covered_by = None;
        let mut extends = None;
        for (id, other_subject, other) in earlier {
            if !subjects_agree(subject, other_subject) || replaced.contains(id) {
                continue;
            }
            match cairn_memory::settle::restatement_prepared(&read, other) {
                Some(Restatement::Covered) => {
                    covered_by = Some(id.to_owned());
                    break;
                }
                Some(Restatement::Extends) if extends.is_none() => {
                    extends = Some(id.to_owned());
                }
                _ => {}
            }
        }
        if let Some(into) = covered_by {
            if let Some(provenance) = input.provenance.clone() {
                merged.push(MergedItem {
                    kind: input.kind,
                    content: input.content.clone(),
                    provenance,
                    into,
                });
            }
            continue;
        }
        if let Some(old) = extends {
            replaced.insert(old.clone());
            let detail = input.detail.take().unwrap_or_default();
            input.detail = Some(format!("{detail}; restates and extends {old}"));
            input.replaces = Some(old);
        }
        kept.push((input, read));
    }

    // Open loops: live ones, then this capture's, oldest first.
    let mut loops: Vec<OpenLoop> = Vec::new();
    for (v, read) in &live {
        if !is_open_loop(v.entry.kind, v.entry.status) || replaced.contains(&v.entry.id) {
            continue;
        }
        let turn = v
            .entry
            .provenance
            .as_ref()
            .map(|p| (p.session.clone(), p.to_seq));
        let said_at = match &turn {
            Some((session, seq)) => ws.turn(session, *seq)?.map(|t| t.timestamp),
            None => None,
        };
        loops.push(OpenLoop {
            id: v.entry.id.clone(),
            kind: v.entry.kind,
            content: v.entry.content.clone(),
            subject: v.subject.as_deref().map(str::to_owned),
            read: Arc::clone(read),
            turn,
            at: said_at.unwrap_or(v.entry.timestamp),
        });
    }
    let said_at: HashMap<(&str, u64), chrono::DateTime<Utc>> = statements
        .iter()
        .map(|s| ((s.session.as_str(), s.seq), s.at))
        .collect();
    for (input, read) in &kept {
        let (Some(id), Some(p)) = (&input.id, &input.provenance) else {
            continue;
        };
        if !is_open_loop(input.kind, input.status) || replaced.contains(id) {
            continue;
        }
        let Some(at) = said_at.get(&(p.session.as_str(), p.to_seq)).copied() else {
            continue;
        };
        loops.push(OpenLoop {
            id: id.clone(),
            kind: input.kind,
            content: input.content.clone(),
            subject: input.subject.clone(),
            read: read.clone(),
            turn: Some((p.session.clone(), p.to_seq)),
            at,
        });
    }
    loops.sort_by(|a, b| (a.at, &a.turn, &a.id).cmp(&(b.at, &b.turn, &b.id)));
    let mut ordered: Vec<&Statement> = statements.iter().collect();
    ordered.sort_by(|a, b| (a.at, &a.session, a.seq).cmp(&(b.at, &b.session, b.seq)));

    let mut settled = Vec::new();
    let mut closing: Vec<EntryInput> = Vec::new();
    for open in &loops {
        let found = ordered.iter().find_map(|s| {
            let gap = open.precedes(s)?;
            cairn_memory::settle::settles_prepared(&open.read, s, gap).map(|rule| (*s, rule))
        });
        let Some((by, rule)) = found else { continue };
        let provenance = Provenance {
            session: by.session.as_str().into(),
            from_seq: by.seq,
            to_seq: by.seq,
        };
        let is_question = matches!(open.kind, EntryKind::Question | EntryKind::OpenQuestion);
        // A decision item from the settling sentence closes the question itself.
        let decision_item = kept.iter_mut().find(|(k, _)| {
            is_question
                && matches!(k.kind, EntryKind::KeyDecision | EntryKind::Decision)
                && k.replaces.is_none()
                && k.content == by.text
                && k.provenance.as_ref() == Some(&provenance)
        });
        let by_id = if let Some((item, _)) = decision_item {
            item.replaces = Some(open.id.clone());
            let detail = item.detail.take().unwrap_or_default();
            item.detail = Some(format!(
                "{detail}; answers {} {} ({rule})",
                open.kind, open.id
            ));
            item.id.clone().unwrap_or_default()
        } else {
            let mut input = if is_question {
                EntryInput::new(EntryKind::Fact, &by.text).with_detail(&format!(
                    "answers {} {}: \"{}\" (rule {rule}, trigger {trigger})",
                    open.kind,
                    open.id,
                    clip(&open.content, 120)
                ))
            } else {
                let content = clip(&format!("Done: {}", open.content), MAX_CONTENT_CHARS);
                let mut done = EntryInput::new(EntryKind::Task, &content).with_detail(&format!(
                    "done: \"{}\" (rule {rule}, trigger {trigger})",
                    clip(&by.text, 160)
                ));
                done.status = Some(TaskStatus::Done);
                done
            };
            input = input
                .in_context(work_context)
                .from_turns(&by.session, by.seq, by.seq)
                .replacing(&open.id);
            input.subject = open.subject.clone();
            let id = entry_id(by.at, &[ws.id(), work_context, "settle", &open.id]);
            input.id = Some(id.clone());
            closing.push(input);
            id
        };
        replaced.insert(open.id.clone());
        settled.push(SettledLoop {
            entry: open.id.clone(),
            by: by_id,
            rule: rule.to_owned(),
            provenance,
        });
    }
    inputs.extend(kept.into_iter().map(|(i, _)| i));
    inputs.extend(closing);
    settled.sort_by(|a, b| {
        (&a.provenance.session, a.provenance.from_seq, &a.entry).cmp(&(
            &b.provenance.session,
            b.provenance.from_seq,
            &b.entry,
        ))
    });
    Ok((merged, settled))
}

/// The longest content a closing entry gets, in characters.
const MAX_CONTENT_CHARS: usize = 320;

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max - 1).collect();
    s.push('…');
    s
}

/// A captured entry's id: `cap-`, the time of the turn it comes from (12
/// hex digits of Unix milliseconds), then 14 hex digits of a hash of
/// `parts`, what makes it unique.
///
/// Both halves come from the turns, never from the clock, so a retried
/// capture makes the same ids (and writes nothing twice). The time comes
/// first so that the store keeps new entries together at the end of the
/// log's key range: with a hash alone each one landed on a random page of
/// an ever larger tree, which a long run read back from disk.
fn entry_id(at: DateTime<Utc>, parts: &[&str]) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update(&[0]);
    }
    let hex = hasher.finalize().to_hex();
    // Before 1970 counts as 1970; 48 bits last until the year 10889.
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    format!(
        "cap-{:012x}{}",
        millis.min((1 << 48) - 1),
        &hex.as_str()[..14]
    )
}

/// Cap of a `session_summary_ref`'s text, in tokens (under the resume
/// card's 120).
const SUMMARY_MAX_TOKENS: usize = 100;

#[allow(clippy::too_many_arguments)] // one call site; the capture's inputs, by name
fn build_entries(
    ws: &Workspace,
    work_context: &str,
    trigger: Trigger,
    (span, span_at): (&Provenance, DateTime<Utc>),
    (turns, summarised): (&[Turn], &[Turn]),
    extraction: &Extraction,
    model: Option<(&dyn ModelExtractor, &[ModelItem])>,
    out: &mut Vec<EntryInput>,
) -> Result<()> {
    let range = format!("{}-{}", span.from_seq, span.to_seq);
    let base = [ws.id(), work_context, span.session.as_str(), range.as_str()];
    let first_subject = extraction.mentioned.iter().next().cloned();
    // The session summary reference (docs/DESIGN.md, *Capture*): what this
    // span decided, asked, did and left open, with turn references — the
    // compaction summariser's text for the span, within the resume card's cap.
    if !summarised.is_empty() {
        let mut summary = format!(
            "Session {} {}",
            span.session,
            cairn_memory::compact::summarise_turns(summarised, SUMMARY_MAX_TOKENS, ws.tokens())
        );
        if !extraction.mentioned.is_empty() {
            let names: Vec<&str> = extraction.mentioned.iter().map(String::as_str).collect();
            summary.push_str(&format!("\n- subjects: {}", names.join(", ")));
        }
        let mut input = EntryInput::new(EntryKind::SessionSummaryRef, &summary)
            .in_context(work_context)
            .from_turns(&span.session, span.from_seq, span.to_seq)
            .with_detail(&format!("deterministic capture, trigger {trigger}"));
        input.id = Some(entry_id(span_at, &[&base[..], &["summary"]].concat()));
        input.subject = first_subject;
        out.push(input);
    }

    let mut has_handoff = false;
    for (index, item) in extraction.items.iter().enumerate() {
        has_handoff |= item.kind == EntryKind::Handoff;
        let content = match item.kind {
            EntryKind::WorkPhaseChange => format!("Work phase: {}", item.content),
            _ => item.content.clone(),
        };
        // Read back by maintenance (`facts::fact_of_detail`) to settle facts.
        let about = item.attribute.map_or_else(String::new, |attribute| {
            format!(
                " {}",
                cairn_memory::facts::fact_detail(attribute, item.speaker.as_deref())
            )
        });
        let mut input = EntryInput::new(item.kind, &content)
            .in_context(work_context)
            .from_turns(&span.session, item.seq, item.seq)
            .with_detail(&format!(
                "heuristic rule {:?}{about}, trigger {trigger}",
                item.rule
            ));
        let index = index.to_string();
        input.id = Some(entry_id(span_at, &[&base[..], &["item", &index]].concat()));
        input.subject = item.subject.clone();
        out.push(input);
    }
    if let Some((model, items)) = model {
        let method = format!("{} extraction, trigger {trigger}", model.name());
        for item in items {
            has_handoff |= item.kind == EntryKind::Handoff;
            let mut input = EntryInput::new(item.kind, &item.content)
                .in_context(work_context)
                .from_turns(&span.session, item.from_seq, item.to_seq);
            input.detail = Some(match &item.detail {
                Some(d) => format!("{d}\n({method})"),
                None => method.clone(),
            });
            input.subject = item.subject.clone();
            input.status = item.status;
            // From the item itself: a retried capture that gets the same
            // answer writes nothing twice.
            input.id = Some(entry_id(
                span_at,
                &[&base[..], &["model", item.kind.as_str(), &item.content]].concat(),
            ));
            out.push(input);
        }
    }
    if trigger.is_session_hook()
        && !has_handoff
        && let Some(last_user) = turns.iter().rev().find(|t| t.role == Role::User)
    {
        let mut input = session_handoff(work_context, trigger, &span.session, last_user);
        input.id = Some(entry_id(span_at, &[&base[..], &["handoff"]].concat()));
        input.subject = extraction.mentioned.iter().next().cloned();
        out.push(input);
    }
    Ok(())
}

/// The deterministic handoff of a session that ends (or is reset): where
/// the user left it, with the last user turn as provenance.
fn session_handoff(
    work_context: &str,
    trigger: Trigger,
    session: &str,
    last_user: &Turn,
) -> EntryInput {
    let said: String = last_user.content.chars().take(200).collect();
    let ended = if trigger == Trigger::BeforeReset {
        "was reset"
    } else {
        "ended"
    };
    EntryInput::new(
        EntryKind::Handoff,
        &format!("Session {session} {ended}; last user message: \"{said}\""),
    )
    .in_context(work_context)
    .from_turns(session, last_user.seq, last_user.seq)
    .with_detail(&format!("deterministic handoff, trigger {trigger}"))
}

/// Cross-conversation updates: for each subject this span mentions, every *other* work
/// context with live entries about it gets a `cross_conversation_update`, unless it
/// holds one about that subject from the last `quiet` (or this capture already wrote
/// one there): a notice says "go and look", and one per period is enough.
fn cross_updates(
    ws: &Workspace,
    work_context: &str,
    (span, span_at): (&Provenance, DateTime<Utc>),
    extraction: &Extraction,
    (subjects, quiet): (&[Subject], Option<chrono::Duration>),
    out: &mut Vec<EntryInput>,
) -> Result<()> {
    let range = format!("{}-{}", span.from_seq, span.to_seq);
    let now = ws.clock().now();
    for slug in &extraction.mentioned {
        let mut others = ws.work_contexts_about(slug)?;
        others.remove(work_context);
        if let Some(quiet) = quiet {
            let recent = ws.latest_updates_about(slug)?;
            others.retain(|other| {
                let held = recent.get(other).is_some_and(|&at| now - at < quiet);
                let written = out.iter().any(|u| {
                    u.work_context.as_deref() == Some(other.as_str())
                        && u.subject.as_deref() == Some(slug.as_str())
                });
                !held && !written
            });
        }
        let display = subjects
            .iter()
            .find(|s| &s.slug == slug)
            .map_or(slug.as_str(), |s| s.display.as_str());
        for other in others {
            let mut input = EntryInput::new(
                EntryKind::CrossConversationUpdate,
                &format!(
                    "{display} was updated in another conversation ({work_context}, session {}).",
                    span.session
                ),
            )
            .in_context(&other)
            .about(slug)
            // Provenance must name a session of the entry's own work context,
            // so the source span is recorded in the detail instead.
            .with_detail(&format!(
                "source: work context {work_context}, session {}, turns {}-{}",
                span.session, span.from_seq, span.to_seq
            ));
            input.id = Some(entry_id(
                span_at,
                &[
                    ws.id(),
                    work_context,
                    &span.session,
                    &range,
                    "ccu",
                    &other,
                    slug,
                ],
            ));
            out.push(input);
        }
    }
    Ok(())
}

/// Whether a session's extraction already happened, durably.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ExtractionRecord {
    pub(crate) done: bool,
    pub(crate) attempts: u32,
    pub(crate) hook: Trigger,
    pub(crate) at: DateTime<Utc>,
    pub(crate) entries: usize,
    pub(crate) error: Option<String>,
}

/// How many attempts a session's extraction gets (the first and one retry).
pub const EXTRACTION_ATTEMPTS: u32 = 2;

/// What a session-level hook did about extraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ExtractionOutcome {
    /// Extracted now.
    Extracted {
        /// The capture.
        report: CaptureReport,
    },
    /// Already extracted by an earlier hook; nothing done.
    AlreadyExtracted,
    /// Not a main session (and configuration extracts main sessions only).
    NotMain,
    /// Failed now; `attempts` so far. Retried once on the next hook or sweep.
    Failed {
        /// Attempts so far.
        attempts: u32,
        /// Why.
        error: String,
    },
    /// Failed on every allowed attempt earlier; skipped for good.
    GaveUp {
        /// Attempts made.
        attempts: u32,
    },
}

pub(crate) fn load_extraction(ws: &Workspace, session: &str) -> Result<Option<ExtractionRecord>> {
    match ws.state_get(&extraction_key(session))? {
        None => Ok(None),
        Some(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
    }
}

/// Session extraction: extract one session once, with one retry, recorded durably.
pub(crate) fn extract_session(
    ws: &Workspace,
    session: &Session,
    hook: Trigger,
    env: CaptureEnv<'_>,
) -> Result<ExtractionOutcome> {
    if !extractable(session, env.extract_all_sessions) {
        return Ok(ExtractionOutcome::NotMain);
    }
    let previous = load_extraction(ws, &session.id)?;
    let attempts = match &previous {
        Some(r) if r.done => return Ok(ExtractionOutcome::AlreadyExtracted),
        Some(r) if r.attempts >= EXTRACTION_ATTEMPTS => {
            return Ok(ExtractionOutcome::GaveUp {
                attempts: r.attempts,
            });
        }
        Some(r) => r.attempts,
        None => 0,
    };
    let injected = env.faults.take(|f| {
        matches!(f, Fault::FailExtraction { workspace, session: s } if workspace == ws.id() && *s == session.id)
    });
    let result = match injected {
        Some(_) => Err(ActorError::Task("injected extraction failure".to_owned())),
        None => capture(ws, &session.work_context, hook, Some(&session.id), env),
    };
    let now = ws.clock().now();
    match result {
        Ok(report) => {
            let report = report.unwrap_or_else(|| CaptureReport {
                work_context: session.work_context.clone(),
                trigger: hook,
                at: now,
                spans: Vec::new(),
                entries: Vec::new(),
                merged: Vec::new(),
                settled: Vec::new(),
                extractor: "heuristic".to_owned(),
                extractor_error: None,
            });
            let record = ExtractionRecord {
                done: true,
                attempts: attempts + 1,
                hook,
                at: now,
                entries: report.entries.len(),
                error: None,
            };
            put_json(ws, &extraction_key(&session.id), &record)?;
            Ok(ExtractionOutcome::Extracted { report })
        }
        Err(error) if error.is_caller_error() => Err(error),
        Err(error) => {
            let record = ExtractionRecord {
                done: false,
                attempts: attempts + 1,
                hook,
                at: now,
                entries: 0,
                error: Some(error.to_string()),
            };
            put_json(ws, &extraction_key(&session.id), &record)?;
            tracing::warn!(workspace = %ws.id(), session = %session.id, %hook, %error, attempts = attempts + 1, "extraction failed");
            Ok(ExtractionOutcome::Failed {
                attempts: attempts + 1,
                error: error.to_string(),
            })
        }
    }
}

/// Reconstruct's check of the capture marks (see `cairn_memory::reconstruct`):
/// each capture span writes a session summary reference (`cap-…`) whose
/// provenance covers the span, so the log gives every session a lower bound
/// for its high-water mark (a capture that wrote nothing leaves no trace, so
/// a mark above the bound is fine). A mark below its bound (those turns
/// would be captured again under new ids), past the end of the session's
/// transcript, or a record that does not decode is a difference; `repair`
/// raises or clamps the marks (a record that does not decode is rebuilt
/// from the bounds), each work context under its capture lock.
pub(crate) fn reconstruct_marks(
    ws: &Workspace,
    locks: &CaptureLocks,
    repair: bool,
) -> Result<Findings> {
    let mut f = Findings::new(DerivedStore::CaptureMarks);
    // Work context → session → the first turn no captured entry covers.
    let mut bounds: HashMap<Name, HashMap<Name, u64>> = HashMap::new();
    let summaries = EntryFilter {
        kind: Some(EntryKind::SessionSummaryRef),
        all: true,
        ..EntryFilter::default()
    };
    for view in ws.entries(&summaries)? {
        let e = Arc::unwrap_or_clone(view.entry);
        let Some(p) = e.provenance.filter(|_| e.id.starts_with("cap-")) else {
            continue;
        };
        let bound = bounds
            .entry(e.work_context)
            .or_default()
            .entry(p.session)
            .or_insert(0);
        *bound = (*bound).max(p.to_seq + 1);
    }
    for wc in ws.work_contexts()? {
        let _guard = locks.lock(ws.id(), &wc);
        let key = context_key(&wc);
        let mut changed = false;
        let mut record = match ws.state_get(&key)? {
            None => ContextRecord::default(),
            Some(raw) => match serde_json::from_slice::<ContextRecord>(&raw) {
                Ok(record) => record,
                Err(error) => {
                    f.differ(
                        format!("{wc} (record)"),
                        format!("does not decode: {error}"),
                        "a capture record",
                    );
                    changed = true;
                    ContextRecord::default()
                }
            },
        };
        let mut marks: Vec<(StateKey, Vec<u8>)> = Vec::new();
        for listed in ws.sessions(Some(&wc))? {
            let s = ws.session(&listed.id)?;
            f.compared(1);
            let bound = bounds
                .get(wc.as_str())
                .and_then(|sessions| sessions.get(s.id.as_str()))
                .copied()
                .unwrap_or(0);
            let name = format!("{wc}/{}", s.id);
            let (stored, shown) = match ws.state_get(&mark_key(&wc, &s.id))? {
                Some(raw) => match decode_mark(&wc, &s.id, &raw) {
                    Ok(mark) => (Some(mark), mark.to_string()),
                    Err(error) => {
                        f.differ(&name, format!("does not decode: {error}"), "a mark");
                        let mark = bound.min(s.next_seq);
                        marks.push((mark_key(&wc, &s.id), encode_mark(mark)));
                        continue;
                    }
                },
                None => {
                    let stored = record.high_water.get(&s.id).copied();
                    (
                        stored,
                        stored.map_or_else(|| "absent".to_owned(), |m| m.to_string()),
                    )
                }
            };
            let mark = stored.unwrap_or(0);
            if mark < bound {
                f.differ(
                    &name,
                    shown,
                    format!("at least {bound} (captured entries cover the turns before)"),
                );
            } else if mark > s.next_seq {
                f.differ(
                    &name,
                    shown,
                    format!("at most {} (the transcript's end)", s.next_seq),
                );
            } else {
                continue;
            }
            let mark = mark.max(bound).min(s.next_seq);
            // The context record names the latest capture's marks: kept
            // equal to the sessions' own.
            if let Some(recent) = record.high_water.get_mut(&s.id) {
                *recent = mark;
                changed = true;
            }
            marks.push((mark_key(&wc, &s.id), encode_mark(mark)));
        }
        if repair && (changed || !marks.is_empty()) {
            if changed {
                marks.push((key, to_json(&record)?));
            }
            ws.state_apply(&marks, &[])?;
            f.repaired(1);
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn entry_ids_repeat_for_the_same_parts_and_sort_by_time() {
        let at = |ms: i64| Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
        let id = entry_id(at(1_700_000_000_000), &["ws", "wc", "s1", "0-3", "summary"]);
        assert_eq!(
            id,
            entry_id(at(1_700_000_000_000), &["ws", "wc", "s1", "0-3", "summary"])
        );
        assert_eq!(id.len(), 30);
        assert!(id.starts_with("cap-018bcfe56800"), "{id}");
        // Other parts: another id at the same time.
        let other = entry_id(at(1_700_000_000_000), &["ws", "wc", "s1", "0-3", "handoff"]);
        assert_ne!(id, other);
        assert_eq!(id[..16], other[..16]);
        // A later turn sorts after, whatever the hash.
        let later = entry_id(at(1_700_000_000_001), &["ws", "wc", "s0", "0-0", "summary"]);
        assert!(later > id && later > other, "{later} after {id}, {other}");
        // Before 1970 counts as 1970.
        assert!(entry_id(at(-5), &["x"]).starts_with("cap-000000000000"));
    }
}
