//! Export and import: a workspace, or one session of it, as a portable
//! bundle ([`Cairn::export`], [`Cairn::import`]).
//!
//! **The bundle** is JSON Lines: one self-describing record a line, each an
//! object whose `record` field names its kind.
//!
//! 1. `header`: `format` (`cairn-bundle`), `version` ([`BUNDLE_VERSION`]),
//!    the workspace, the session when only one was exported, the
//!    destination the policy was asked about, the time and the cairn
//!    version that wrote it;
//! 2. `session` records (parents before their sub-agents), then each
//!    session's `turn`s in order, its `summary` nodes (children before the
//!    summaries that stand on them) and its `compaction` view;
//! 3. `entry` records, oldest recorded first (a replaced entry before its
//!    replacement);
//! 4. `end`: how many records came before it, so a cut-off file is refused.
//!
//! **Every object is judged** by the memory policy for the `export` action
//! and the export's destination, asked by the user, all in batched calls
//! whose decisions go to the decision log as the export's record. The
//! verdict shapes the bundle as it shapes a read:
//!
//! | fidelity         | in the bundle                                           |
//! |------------------|---------------------------------------------------------|
//! | `full`           | the text, secrets redacted (as every read surface)      |
//! | `redacted`       | personal data masked as well; `fidelity: "redacted"`     |
//! | `reference-only` | the record without its text; `fidelity: "reference-only"` |
//! | blocked / `none` | left out: counted in the [`ExportReport`], never written |
//!
//! A blocked session leaves out its turns and summaries with it; a session
//! whose summaries are not all exported leaves its compaction out. Links to
//! what was left out are cut, so the bundle names nothing it does not hold:
//! a sub-agent's parent, an entry's provenance (the work context stays) or
//! the entry it replaces. A left-out turn leaves a gap in its session's
//! sequence numbers.
//!
//! **Import** reads the whole bundle and checks it before the first write:
//! the header, every line (a [`CairnError::InvalidBundle`] names the line
//! and what is wrong), the `end` count, and every link (a turn's session,
//! an entry's provenance and replacement, a summary's session and
//! children). It refuses a workspace that already holds a session or an
//! entry ([`CairnError::WorkspaceNotEmpty`]). Then it writes sessions,
//! turns (a gap filled with a placeholder turn, so sequence numbers and
//! provenance stay as exported; a reference-only turn holds the reference),
//! entries with their ids, timestamps and links, and compactions, straight
//! to the store (the significance gate does not run again), and last
//! rebuilds the derived stores (log views, capture marks, the search
//! index: [`Cairn::reconstruct`]) so search works at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::Path;

use cairn_memory::assemble::{Destination, Fidelity};
use cairn_memory::compact::{CompactionView, Cover, SummaryMethod, SummaryNode};
use cairn_memory::redact::{redact, redact_personal};
use cairn_memory::{
    Entry, EntryInput, EntryKind, Provenance, Role, SessionKind, SessionSpec, SessionState,
    TaskStatus, Turn, TurnInput, Workspace,
};
use cairn_policies::{Action, ObjectKind, PrincipalKind, PrincipalRef};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{CairnError, Result};
use crate::host::Cairn;
use crate::obligations::Ledger;
use crate::reads::{Asker, Object, item_of, request_for, verdict_of};

/// The `format` of a bundle's header.
pub const BUNDLE_FORMAT: &str = "cairn-bundle";

/// The bundle version this build writes and reads.
pub const BUNDLE_VERSION: u32 = 1;

/// Objects judged per plugin call.
const JUDGE_CHUNK: usize = 256;

/// What to export.
///
/// ```
/// let r = cairn::ExportRequest::default();
/// assert!(r.session.is_none());
/// assert_eq!(r.destination_or_default(), cairn::Destination::UserVisibleUi);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportRequest {
    /// Only this session (its turns, summaries and the entries whose
    /// provenance is in it); the whole workspace when absent.
    pub session: Option<String>,
    /// Where the bundle goes, as the memory policy is asked about it;
    /// default `user_visible_ui` (the user who asked gets the file). Name
    /// `share_link` when the bundle is to be handed on.
    pub destination: Option<Destination>,
}

impl ExportRequest {
    /// The destination the policy is asked about.
    pub fn destination_or_default(&self) -> Destination {
        self.destination.unwrap_or(Destination::UserVisibleUi)
    }
}

/// Objects of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ObjectCounts {
    /// Sessions.
    pub sessions: usize,
    /// Turns.
    pub turns: usize,
    /// Memory-log entries.
    pub entries: usize,
    /// Summary nodes.
    pub summaries: usize,
}

impl ObjectCounts {
    fn add(&mut self, kind: ObjectKind) {
        match kind {
            ObjectKind::Session => self.sessions += 1,
            ObjectKind::Turn => self.turns += 1,
            ObjectKind::Entry => self.entries += 1,
            _ => self.summaries += 1,
        }
    }

    /// All of them.
    pub fn total(&self) -> usize {
        self.sessions + self.turns + self.entries + self.summaries
    }
}

/// What an export wrote and what the policy kept out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExportReport {
    /// The workspace exported.
    pub workspace: String,
    /// The session, when only one was exported.
    pub session: Option<String>,
    /// The destination the policy was asked about.
    pub destination: Destination,
    /// Lines written, header and end included.
    pub records: usize,
    /// Objects in the bundle with their full text (secrets redacted).
    pub full: ObjectCounts,
    /// Objects in the bundle in their redacted form.
    pub redacted: ObjectCounts,
    /// Objects in the bundle as references without content.
    pub reference_only: ObjectCounts,
    /// Objects left out: the policy blocked them (or their session), or a
    /// session's compaction could not be kept whole.
    pub left_out: ObjectCounts,
    /// Compaction views in the bundle.
    pub compactions: usize,
    /// Policy decisions made (each in the decision log).
    pub decisions: usize,
    /// Audit records written: one per object whose decision carried the
    /// `audit-log` obligation (`cairn audit` lists them).
    #[serde(default)]
    pub audited: usize,
    /// Objects held for the user's confirmation (`confirm-with-user`, not
    /// granted yet): in the bundle as references only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

impl ExportReport {
    /// Counts one object under what the policy let the bundle hold of it.
    fn count(&mut self, kind: ObjectKind, shown: Option<Shown>) {
        match shown {
            Some(Shown::Full) => self.full.add(kind),
            Some(Shown::Redacted) => self.redacted.add(kind),
            Some(Shown::ReferenceOnly) => self.reference_only.add(kind),
            None => self.left_out.add(kind),
        }
    }
}

/// What an import wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImportReport {
    /// The workspace written.
    pub workspace: String,
    /// The workspace the bundle was exported from.
    pub from_workspace: String,
    /// Lines read, header and end included.
    pub records: usize,
    /// Sessions created.
    pub sessions: usize,
    /// Turns written (placeholders included).
    pub turns: usize,
    /// Placeholder turns written where the export left a turn out.
    pub placeholders: usize,
    /// Entries written.
    pub entries: usize,
    /// Summary nodes written.
    pub summaries: usize,
    /// Compaction views written.
    pub compactions: usize,
}

/// How much of an object's text the bundle holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Shown {
    /// The text, secrets redacted.
    #[default]
    Full,
    /// Personal data masked as well.
    Redacted,
    /// No text.
    ReferenceOnly,
}

impl Shown {
    fn of(fidelity: Fidelity) -> Option<Shown> {
        match fidelity {
            Fidelity::Full => Some(Shown::Full),
            Fidelity::Redacted => Some(Shown::Redacted),
            Fidelity::ReferenceOnly => Some(Shown::ReferenceOnly),
            Fidelity::Blocked => None,
        }
    }

    fn text(self, text: &str) -> Option<String> {
        match self {
            Shown::Full => Some(redact(text)),
            Shown::Redacted => Some(redact_personal(&redact(text))),
            Shown::ReferenceOnly => None,
        }
    }

    fn is_full(&self) -> bool {
        *self == Shown::Full
    }
}

/// One line of a bundle.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Header(Header),
    Session(SessionRecord),
    Turn(TurnRecord),
    Summary(Box<SummaryRecord>),
    Compaction(CompactionRecord),
    Entry(Box<EntryRecord>),
    End(End),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    workspace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    destination: Destination,
    exported_at: DateTime<Utc>,
    cairn_version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionRecord {
    id: String,
    work_context: String,
    kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    state: SessionState,
    created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Shown::is_full")]
    fidelity: Shown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnRecord {
    session: String,
    seq: u64,
    role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
    timestamp: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Shown::is_full")]
    fidelity: Shown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SummaryRecord {
    id: String,
    session: String,
    work_context: String,
    level: u32,
    from_seq: u64,
    to_seq: u64,
    covers: Vec<Cover>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    method: SummaryMethod,
    tokens_before: usize,
    tokens_after: usize,
    source_hash: String,
    earliest: DateTime<Utc>,
    latest: DateTime<Utc>,
    created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Shown::is_full")]
    fidelity: Shown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactionRecord {
    session: String,
    items: Vec<Cover>,
    covered_to: u64,
    passes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryRecord {
    id: String,
    kind: EntryKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject: Option<String>,
    work_context: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    provenance: Option<Provenance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replaces: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<TaskStatus>,
    timestamp: DateTime<Utc>,
    recorded_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gate_generation: Option<String>,
    #[serde(default, skip_serializing_if = "Shown::is_full")]
    fidelity: Shown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct End {
    records: usize,
}

/// What an export read, before the policy judged it.
struct Gathered {
    sessions: Vec<cairn_memory::Session>,
    turns: BTreeMap<String, Vec<Turn>>,
    summaries: BTreeMap<String, (CompactionView, Vec<SummaryNode>)>,
    entries: Vec<Entry>,
}

/// The text the policy's sensitivity is read from, for each object.
fn entry_text(e: &Entry) -> String {
    match &e.detail {
        Some(d) if !d.is_empty() => format!("{}\n{d}", e.content),
        _ => e.content.clone(),
    }
}

impl Cairn {
    /// Writes `workspace` (or one session of it, [`ExportRequest::session`])
    /// to `out` as a bundle (see the [module docs](crate::export)); every
    /// object judged by the memory policy for `export` to the request's
    /// destination, the decisions logged before the first line is written.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, ExportRequest, Role, TurnInput};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "We use sled.")])?;
    /// let mut bundle = Vec::new();
    /// let report = cairn.export("acme", &ExportRequest::default(), &mut bundle)?;
    /// assert_eq!(report.full.turns, 1);
    /// let copy = cairn.import("copy", &mut bundle.as_slice())?;
    /// assert_eq!(copy.turns, 1);
    /// assert_eq!(cairn.transcript("copy", "s1", 0, None, None)?[0].content, "We use sled.");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export(
        &self,
        workspace: &str,
        request: &ExportRequest,
        out: &mut dyn Write,
    ) -> Result<ExportReport> {
        let ws = self.memory().existing_workspace(workspace)?;
        let gathered = gather(&ws, request.session.as_deref())?;
        let destination = request.destination_or_default();
        let (records, report) = self.judge_export(&ws, &gathered, request, destination)?;
        let io = |e: std::io::Error| CairnError::BundleIo {
            path: "(output)".to_owned(),
            source: e,
        };
        for record in &records {
            serde_json::to_writer(&mut *out, record).map_err(|e| CairnError::BundleIo {
                path: "(output)".to_owned(),
                source: e.into(),
            })?;
            out.write_all(b"\n").map_err(io)?;
        }
        out.flush().map_err(io)?;
        tracing::info!(
            workspace,
            records = report.records,
            left_out = report.left_out.total(),
            "export"
        );
        Ok(report)
    }

    /// [`Cairn::export`] to the file `path`, atomically: the bundle is
    /// written to a temporary file beside it, synced, and renamed over
    /// `path`, so `path` holds a whole bundle or what it held before.
    pub fn export_to_file(
        &self,
        workspace: &str,
        request: &ExportRequest,
        path: &Path,
    ) -> Result<ExportReport> {
        let io = |source: std::io::Error| CairnError::BundleIo {
            path: path.display().to_string(),
            source,
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut temp = tempfile::Builder::new()
            .prefix(".cairn-export-")
            .tempfile_in(dir)
            .map_err(io)?;
        let report = {
            let mut writer = std::io::BufWriter::new(temp.as_file_mut());
            let report = self.export(workspace, request, &mut writer)?;
            writer.flush().map_err(io)?;
            report
        };
        temp.as_file().sync_all().map_err(io)?;
        temp.persist(path).map_err(|e| io(e.error))?;
        // The rename is durable once the directory is.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        Ok(report)
    }

    /// Judges every gathered object and makes the bundle's records.
    fn judge_export(
        &self,
        ws: &Workspace,
        g: &Gathered,
        request: &ExportRequest,
        destination: Destination,
    ) -> Result<(Vec<Record>, ExportReport)> {
        let asker = Asker {
            action: Action::Export,
            destination: Some(destination),
            principal: PrincipalRef {
                kind: PrincipalKind::User,
                id: "user".to_owned(),
            },
            surface: "export",
            work_context: None,
        };
        // Every object, in the order the verdicts are read back.
        let mut texts: Vec<String> = Vec::new();
        let mut objects: Vec<Object<'_>> = Vec::new();
        for s in &g.sessions {
            objects.push(Object {
                kind: ObjectKind::Session,
                id: s.id.clone(),
                session: Some(&s.id),
                work_context: Some(&s.work_context),
                text: "",
                low_trust: false,
            });
        }
        for turns in g.turns.values() {
            objects.extend(turns.iter().map(Object::turn));
        }
        for (_, nodes) in g.summaries.values() {
            objects.extend(nodes.iter().map(|n| Object {
                kind: ObjectKind::Summary,
                id: n.id.clone(),
                session: Some(&n.session),
                work_context: Some(&n.work_context),
                text: &n.text,
                low_trust: false,
            }));
        }
        texts.extend(g.entries.iter().map(entry_text));
        objects.extend(
            g.entries
                .iter()
                .zip(&texts)
                .map(|(e, t)| Object::entry(e, t)),
        );

        let slot = self.policies().memory_policy();
        let requests: Vec<_> = objects
            .iter()
            .map(|o| request_for(&asker, None, o))
            .collect();
        let mut verdicts = Vec::with_capacity(requests.len());
        let mut log = Vec::with_capacity(requests.len());
        let ledger = Ledger::default();
        let mut object = objects.iter();
        for chunk in requests.chunks(JUDGE_CHUNK) {
            let (decided, records) = slot.judge_many_in(Some(ws.id()), chunk);
            for (d, o) in decided.iter().zip(object.by_ref()) {
                let verdict =
                    ledger.admit(ws, item_of(o), o.session, verdict_of(d, asker.destination));
                verdicts.push(Shown::of(verdict.fidelity));
            }
            log.extend(records);
        }
        // The export's record: every decision, logged before any line is
        // written; the audit records and held items too.
        slot.log_batch(&log)?;
        let notes = ledger.settle(ws, &asker)?;

        let mut report = ExportReport {
            workspace: ws.id().to_owned(),
            session: request.session.clone(),
            destination,
            decisions: log.len(),
            audited: notes.iter().filter(|n| n.obligation == "audit-log").count(),
            held: notes
                .iter()
                .filter(|n| n.obligation == "confirm-with-user")
                .map(|n| n.item.clone())
                .collect(),
            ..ExportReport::default()
        };
        let mut verdict = verdicts.into_iter();

        // Sessions.
        let mut kept_sessions: HashMap<&str, Shown> = HashMap::new();
        for s in &g.sessions {
            let shown = verdict.next().flatten();
            if let Some(shown) = shown {
                kept_sessions.insert(&s.id, shown);
            }
        }
        let mut records = vec![Record::Header(Header {
            format: BUNDLE_FORMAT.to_owned(),
            version: BUNDLE_VERSION,
            workspace: ws.id().to_owned(),
            session: request.session.clone(),
            destination,
            exported_at: ws.clock().now(),
            cairn_version: env!("CARGO_PKG_VERSION").to_owned(),
        })];
        let mut session_records = Vec::new();
        for s in &g.sessions {
            let shown = kept_sessions.get(s.id.as_str()).copied();
            report.count(ObjectKind::Session, shown);
            if let Some(fidelity) = shown {
                session_records.push(SessionRecord {
                    id: s.id.clone(),
                    work_context: s.work_context.clone(),
                    kind: s.kind,
                    parent: s
                        .parent
                        .clone()
                        .filter(|p| kept_sessions.contains_key(p.as_str())),
                    state: s.state,
                    created_at: s.created_at,
                    fidelity,
                });
            }
        }
        let mut emitted: HashSet<String> = HashSet::new();
        let mut turn_records: BTreeMap<&str, Vec<Record>> = BTreeMap::new();
        for (session, turns) in &g.turns {
            let kept = kept_sessions.contains_key(session.as_str());
            let out = turn_records.entry(session).or_default();
            for t in turns {
                let shown = verdict.next().flatten().filter(|_| kept);
                report.count(ObjectKind::Turn, shown);
                if let Some(fidelity) = shown {
                    out.push(Record::Turn(TurnRecord {
                        session: t.session.clone(),
                        seq: t.seq,
                        role: t.role,
                        content: fidelity.text(&t.content),
                        tool_call_id: t.tool_call_id.clone(),
                        timestamp: t.timestamp,
                        fidelity,
                    }));
                }
            }
        }
        let mut summary_records: BTreeMap<&str, Vec<Record>> = BTreeMap::new();
        for (session, (view, nodes)) in &g.summaries {
            let kept = kept_sessions.contains_key(session.as_str());
            let shown: Vec<Option<Shown>> = nodes
                .iter()
                .map(|_| verdict.next().flatten().filter(|_| kept))
                .collect();
            // A compaction is kept whole or not at all.
            let whole = shown.iter().all(Option::is_some);
            for (node, shown) in nodes.iter().zip(shown) {
                let shown = shown.filter(|_| whole);
                report.count(ObjectKind::Summary, shown);
                if let Some(fidelity) = shown {
                    summary_records
                        .entry(session)
                        .or_default()
                        .push(Record::Summary(Box::new(summary_record(node, fidelity))));
                }
            }
            if kept && whole {
                report.compactions += 1;
                summary_records
                    .entry(session)
                    .or_default()
                    .push(Record::Compaction(CompactionRecord {
                        session: view.session.clone(),
                        items: view.items.clone(),
                        covered_to: view.covered_to,
                        passes: view.passes,
                    }));
            }
        }
        // Sessions in an order where a parent comes before its children.
        let mut pending = session_records;
        while !pending.is_empty() {
            let before = pending.len();
            let mut rest = Vec::new();
            for s in pending {
                if s.parent.as_ref().is_none_or(|p| emitted.contains(p)) {
                    emitted.insert(s.id.clone());
                    let id = s.id.clone();
                    records.push(Record::Session(s));
                    records.extend(turn_records.remove(id.as_str()).unwrap_or_default());
                    records.extend(summary_records.remove(id.as_str()).unwrap_or_default());
                } else {
                    rest.push(s);
                }
            }
            if rest.len() == before {
                // A parent cycle cannot be stored; cut the links left.
                for mut s in rest {
                    s.parent = None;
                    emitted.insert(s.id.clone());
                    let id = s.id.clone();
                    records.push(Record::Session(s));
                    records.extend(turn_records.remove(id.as_str()).unwrap_or_default());
                    records.extend(summary_records.remove(id.as_str()).unwrap_or_default());
                }
                break;
            }
            pending = rest;
        }
        // Entries.
        let mut kept_entries: HashSet<&str> = HashSet::new();
        for e in &g.entries {
            let shown = verdict.next().flatten();
            report.count(ObjectKind::Entry, shown);
            let Some(fidelity) = shown else {
                continue;
            };
            kept_entries.insert(&e.id);
            let detail = e.detail.as_deref().filter(|d| !d.is_empty());
            let text = fidelity.text(&e.content);
            records.push(Record::Entry(Box::new(EntryRecord {
                id: e.id.clone(),
                kind: e.kind,
                detail: text.as_ref().and(detail).and_then(|d| fidelity.text(d)),
                content: text,
                subject: e.subject.as_deref().map(str::to_owned),
                work_context: e.work_context.to_string(),
                provenance: e
                    .provenance
                    .clone()
                    .filter(|p| emitted.contains(p.session.as_str())),
                replaces: e
                    .replaces
                    .clone()
                    .filter(|r| kept_entries.contains(r.as_str())),
                status: e.status,
                timestamp: e.timestamp,
                recorded_at: e.recorded_at,
                gate_generation: e.gate_generation.as_deref().map(str::to_owned),
                fidelity,
            })));
        }
        records.push(Record::End(End {
            records: records.len(),
        }));
        report.records = records.len();
        Ok((records, report))
    }

    /// Reads a bundle (see the [module docs](crate::export)) into
    /// `workspace`, which must hold no session and no entry. The whole
    /// bundle is checked before the first write; afterwards the derived
    /// stores are rebuilt, so search finds what was imported.
    pub fn import(&self, workspace: &str, bundle: &mut dyn BufRead) -> Result<ImportReport> {
        let ws = self.workspace(workspace)?;
        let parsed = parse(bundle, ws.config().limits.max_content_bytes)?;
        let plan = plan(&ws, &parsed)?;
        let sessions = ws.sessions(None)?;
        let entries = ws.entry_ids()?;
        if let Some(s) = sessions.first() {
            return Err(CairnError::WorkspaceNotEmpty {
                workspace: workspace.to_owned(),
                what: format!("session {:?}", s.id),
            });
        }
        if let Some(e) = entries.first() {
            return Err(CairnError::WorkspaceNotEmpty {
                workspace: workspace.to_owned(),
                what: format!("entry {e:?}"),
            });
        }
        let report = self.write_plan(&ws, plan, parsed)?;
        if report.sessions + report.entries > 0 {
            self.reconstruct(workspace, false)?;
            self.nudge_search();
        }
        tracing::info!(workspace, records = report.records, "import");
        Ok(report)
    }

    /// [`Cairn::import`] of the bundle in the file `path`.
    pub fn import_file(&self, workspace: &str, path: &Path) -> Result<ImportReport> {
        let file = std::fs::File::open(path).map_err(|source| CairnError::BundleIo {
            path: path.display().to_string(),
            source,
        })?;
        self.import(workspace, &mut std::io::BufReader::new(file))
    }

    fn write_plan(&self, ws: &Workspace, plan: Plan, parsed: Parsed) -> Result<ImportReport> {
        let mut report = ImportReport {
            workspace: ws.id().to_owned(),
            from_workspace: parsed.header.workspace.clone(),
            records: parsed.lines,
            ..ImportReport::default()
        };
        let max_batch = ws.config().limits.max_batch.max(1);
        for s in &parsed.sessions {
            ws.ensure_session(&SessionSpec {
                id: s.id.clone(),
                work_context: Some(s.work_context.clone()),
                kind: s.kind,
                parent: s.parent.clone(),
            })?;
            report.sessions += 1;
        }
        for chunk in plan.turns.chunks(max_batch) {
            ws.append_turns(chunk)?;
        }
        report.turns = plan.turns.len();
        report.placeholders = plan.placeholders;
        for s in &parsed.sessions {
            if s.state == SessionState::Ended {
                ws.end_session(&s.id)?;
            }
        }
        for chunk in plan.entries.chunks(max_batch) {
            ws.append_entries(chunk)?;
        }
        report.entries = plan.entries.len();
        for (view, nodes) in &plan.compactions {
            ws.restore_compaction(view, nodes)?;
            report.summaries += nodes.len();
            report.compactions += 1;
        }
        Ok(report)
    }
}

fn summary_record(node: &SummaryNode, fidelity: Shown) -> SummaryRecord {
    SummaryRecord {
        id: node.id.clone(),
        session: node.session.clone(),
        work_context: node.work_context.clone(),
        level: node.level,
        from_seq: node.from_seq,
        to_seq: node.to_seq,
        covers: node.covers.clone(),
        text: fidelity.text(&node.text),
        method: node.method,
        tokens_before: node.tokens_before,
        tokens_after: node.tokens_after,
        source_hash: node.source_hash.clone(),
        earliest: node.earliest,
        latest: node.latest,
        created_at: node.created_at,
        fidelity,
    }
}

/// Reads what `session` (or the whole workspace) holds.
fn gather(ws: &Workspace, session: Option<&str>) -> Result<Gathered> {
    let sessions = match session {
        Some(id) => vec![ws.session(id)?],
        None => ws.sessions(None)?,
    };
    let mut turns = BTreeMap::new();
    let mut summaries = BTreeMap::new();
    for s in &sessions {
        turns.insert(s.id.clone(), ws.transcript(&s.id, 0, None)?);
        if let Some(view) = ws.compaction_view(&s.id)? {
            summaries.insert(s.id.clone(), (view.clone(), dag(ws, &view)?));
        }
    }
    let mut entries = Vec::new();
    for id in ws.entry_ids()? {
        let Some(e) = ws.stored_entry(&id)? else {
            continue;
        };
        let in_scope = match session {
            None => true,
            Some(s) => e
                .provenance
                .as_ref()
                .is_some_and(|p| p.session.as_str() == s),
        };
        if in_scope {
            entries.push(e);
        }
    }
    entries.sort_by(|a, b| (a.recorded_at, &a.id).cmp(&(b.recorded_at, &b.id)));
    Ok(Gathered {
        sessions,
        turns,
        summaries,
        entries,
    })
}

/// Every summary node a view stands on, children before parents.
fn dag(ws: &Workspace, view: &CompactionView) -> Result<Vec<SummaryNode>> {
    fn visit(
        ws: &Workspace,
        id: &str,
        seen: &mut HashSet<String>,
        out: &mut Vec<SummaryNode>,
    ) -> Result<()> {
        if !seen.insert(id.to_owned()) {
            return Ok(());
        }
        let node = ws.summary(id)?;
        for cover in &node.covers {
            if let Cover::Summary { id } = cover {
                visit(ws, id, seen, out)?;
            }
        }
        out.push(node);
        Ok(())
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for id in view.summary_ids() {
        visit(ws, id, &mut seen, &mut out)?;
    }
    Ok(out)
}

/// A bundle read and checked line by line.
struct Parsed {
    header: Header,
    lines: usize,
    sessions: Vec<SessionRecord>,
    /// Per session, its turns in order.
    turns: BTreeMap<String, Vec<TurnRecord>>,
    summaries: BTreeMap<String, Vec<SummaryRecord>>,
    compactions: Vec<CompactionRecord>,
    entries: Vec<EntryRecord>,
    /// The line of each entry.
    entry_lines: Vec<usize>,
}

fn invalid(line: usize, reason: impl Into<String>) -> CairnError {
    CairnError::InvalidBundle {
        line,
        reason: reason.into(),
    }
}

/// Checks that a record's text matches its fidelity.
fn check_text(line: usize, what: &str, text: Option<&str>, fidelity: Shown) -> Result<()> {
    match (fidelity, text) {
        (Shown::ReferenceOnly, Some(_)) => Err(invalid(
            line,
            format!("a reference-only {what} carries no text"),
        )),
        (Shown::Full | Shown::Redacted, None) => {
            Err(invalid(line, format!("the {what} has no text")))
        }
        _ => Ok(()),
    }
}

/// Reads every line of `bundle` and checks each on its own and against the
/// lines before it.
fn parse(bundle: &mut dyn BufRead, max_content_bytes: usize) -> Result<Parsed> {
    let mut header: Option<Header> = None;
    let mut ended = false;
    let mut count = 0usize;
    let mut sessions: Vec<SessionRecord> = Vec::new();
    let mut session_ids: HashSet<String> = HashSet::new();
    let mut turns: BTreeMap<String, Vec<TurnRecord>> = BTreeMap::new();
    let mut summaries: BTreeMap<String, Vec<SummaryRecord>> = BTreeMap::new();
    let mut summary_ids: HashSet<String> = HashSet::new();
    let mut compactions: Vec<CompactionRecord> = Vec::new();
    let mut entries: Vec<EntryRecord> = Vec::new();
    let mut entry_ids: HashSet<String> = HashSet::new();
    let mut entry_lines: Vec<usize> = Vec::new();
    let mut buf = String::new();
    let mut line = 0usize;
    loop {
        buf.clear();
        let read = bundle
            .read_line(&mut buf)
            .map_err(|e| invalid(line + 1, format!("cannot be read: {e}")))?;
        if read == 0 {
            break;
        }
        line += 1;
        let text = buf.trim_end_matches(['\n', '\r']);
        if ended {
            return Err(invalid(line, "a line after the end record"));
        }
        if text.len() > max_content_bytes.saturating_mul(4).max(1 << 20) {
            return Err(invalid(
                line,
                format!("a line of {} bytes is too long", text.len()),
            ));
        }
        let record: Record = serde_json::from_str(text)
            .map_err(|e| invalid(line, format!("not a bundle record: {e}")))?;
        if line == 1 {
            let Record::Header(h) = record else {
                return Err(invalid(1, "the first line must be the header record"));
            };
            if h.format != BUNDLE_FORMAT {
                return Err(invalid(
                    1,
                    format!("format {:?} is not {BUNDLE_FORMAT:?}", h.format),
                ));
            }
            if h.version != BUNDLE_VERSION {
                return Err(invalid(
                    1,
                    format!(
                        "bundle version {} is not one this build reads ({BUNDLE_VERSION})",
                        h.version
                    ),
                ));
            }
            header = Some(h);
            count += 1;
            continue;
        }
        match record {
            Record::Header(_) => return Err(invalid(line, "a second header record")),
            Record::End(end) => {
                if end.records != count {
                    return Err(invalid(
                        line,
                        format!(
                            "the end record counts {} records, the bundle has {count}",
                            end.records
                        ),
                    ));
                }
                ended = true;
            }
            Record::Session(s) => {
                cairn_memory::ids::validate_id("session id", &s.id)
                    .and_then(|_| cairn_memory::ids::validate_id("work context", &s.work_context))
                    .map_err(|e| invalid(line, e.to_string()))?;
                if !session_ids.insert(s.id.clone()) {
                    return Err(invalid(line, format!("session {:?} appears twice", s.id)));
                }
                if let Some(p) = &s.parent
                    && (p == &s.id || !session_ids.contains(p))
                {
                    return Err(invalid(
                        line,
                        format!(
                            "session {:?} names parent {p:?}, which no earlier line holds",
                            s.id
                        ),
                    ));
                }
                sessions.push(s);
            }
            Record::Turn(t) => {
                if !session_ids.contains(&t.session) {
                    return Err(invalid(
                        line,
                        format!(
                            "turn of session {:?}, which no earlier line holds",
                            t.session
                        ),
                    ));
                }
                check_text(line, "turn", t.content.as_deref(), t.fidelity)?;
                let input = turn_input(&t, None);
                cairn_memory::record::validate_turn(
                    &input,
                    &cairn_memory::Limits {
                        max_content_bytes,
                        ..cairn_memory::Limits::default()
                    },
                )
                .map_err(|e| invalid(line, e.to_string()))?;
                let list = turns.entry(t.session.clone()).or_default();
                if list.last().is_some_and(|last| last.seq >= t.seq) {
                    return Err(invalid(
                        line,
                        format!(
                            "turn {}:{} is not after the session's turn before it",
                            t.session, t.seq
                        ),
                    ));
                }
                list.push(t);
            }
            Record::Summary(s) => {
                if !session_ids.contains(&s.session) {
                    return Err(invalid(
                        line,
                        format!(
                            "summary of session {:?}, which no earlier line holds",
                            s.session
                        ),
                    ));
                }
                cairn_memory::ids::validate_id("summary id", &s.id)
                    .map_err(|e| invalid(line, e.to_string()))?;
                check_text(line, "summary", s.text.as_deref(), s.fidelity)?;
                for cover in &s.covers {
                    if let Cover::Summary { id } = cover
                        && !summary_ids.contains(id)
                    {
                        return Err(invalid(
                            line,
                            format!(
                                "summary {:?} stands on {id:?}, which no earlier line holds",
                                s.id
                            ),
                        ));
                    }
                }
                if !summary_ids.insert(s.id.clone()) {
                    return Err(invalid(line, format!("summary {:?} appears twice", s.id)));
                }
                summaries.entry(s.session.clone()).or_default().push(*s);
            }
            Record::Compaction(c) => {
                if !session_ids.contains(&c.session) {
                    return Err(invalid(
                        line,
                        format!(
                            "compaction of session {:?}, which no earlier line holds",
                            c.session
                        ),
                    ));
                }
                if compactions.iter().any(|x| x.session == c.session) {
                    return Err(invalid(
                        line,
                        format!("a second compaction of session {:?}", c.session),
                    ));
                }
                for cover in &c.items {
                    if let Cover::Summary { id } = cover
                        && !summaries
                            .get(&c.session)
                            .is_some_and(|l| l.iter().any(|s| &s.id == id))
                    {
                        return Err(invalid(
                            line,
                            format!(
                                "the compaction of session {:?} names summary {id:?}, which no earlier line holds",
                                c.session
                            ),
                        ));
                    }
                }
                compactions.push(c);
            }
            Record::Entry(e) => {
                check_text(line, "entry", e.content.as_deref(), e.fidelity)?;
                if !entry_ids.insert(e.id.clone()) {
                    return Err(invalid(line, format!("entry {:?} appears twice", e.id)));
                }
                if let Some(p) = &e.provenance {
                    let last = turns
                        .get(p.session.as_str())
                        .and_then(|l| l.last())
                        .map(|t| t.seq);
                    if !session_ids.contains(p.session.as_str()) {
                        return Err(invalid(
                            line,
                            format!(
                                "entry {:?} comes from session {:?}, which no earlier line holds",
                                e.id, p.session
                            ),
                        ));
                    }
                    if p.from_seq > p.to_seq || last.is_none_or(|last| p.to_seq > last) {
                        return Err(invalid(
                            line,
                            format!(
                                "entry {:?} comes from turns {}-{} of session {:?}, which the bundle does not hold",
                                e.id, p.from_seq, p.to_seq, p.session
                            ),
                        ));
                    }
                }
                if let Some(r) = &e.replaces
                    && (r == &e.id || !entry_ids.contains(r))
                {
                    return Err(invalid(
                        line,
                        format!(
                            "entry {:?} replaces {r:?}, which no earlier line holds",
                            e.id
                        ),
                    ));
                }
                entries.push(*e);
                entry_lines.push(line);
            }
        }
        count += 1;
    }
    let Some(header) = header else {
        return Err(invalid(1, "the bundle is empty: no header record"));
    };
    if !ended {
        return Err(invalid(
            line + 1,
            "the bundle ends without its end record (cut off?)",
        ));
    }
    Ok(Parsed {
        header,
        lines: line,
        sessions,
        turns,
        summaries,
        compactions,
        entries,
        entry_lines,
    })
}

/// The writes an import makes, made (and checked) before the first.
struct Plan {
    turns: Vec<TurnInput>,
    placeholders: usize,
    entries: Vec<EntryInput>,
    compactions: Vec<(CompactionView, Vec<SummaryNode>)>,
}

fn turn_input(t: &TurnRecord, work_context: Option<&str>) -> TurnInput {
    let content = match &t.content {
        Some(c) => c.clone(),
        None => format!("(withheld by policy: turn {}:{} exists)", t.session, t.seq),
    };
    TurnInput {
        session: t.session.clone(),
        work_context: work_context.map(str::to_owned),
        role: t.role,
        content,
        tool_call_id: t.tool_call_id.clone(),
        idempotency_key: None,
        timestamp: Some(t.timestamp),
    }
}

fn plan(ws: &Workspace, parsed: &Parsed) -> Result<Plan> {
    let mut turns = Vec::new();
    let mut placeholders = 0;
    let contexts: HashMap<&str, &str> = parsed
        .sessions
        .iter()
        .map(|s| (s.id.as_str(), s.work_context.as_str()))
        .collect();
    for s in &parsed.sessions {
        let mut next = 0u64;
        for t in parsed.turns.get(&s.id).into_iter().flatten() {
            while next < t.seq {
                turns.push(TurnInput {
                    session: s.id.clone(),
                    work_context: Some(s.work_context.clone()),
                    role: Role::System,
                    content: format!("(turn {}:{next} was left out of the export)", s.id),
                    tool_call_id: None,
                    idempotency_key: None,
                    timestamp: Some(t.timestamp),
                });
                placeholders += 1;
                next += 1;
            }
            turns.push(turn_input(t, contexts.get(t.session.as_str()).copied()));
            next = t.seq + 1;
        }
    }
    let mut entries = Vec::with_capacity(parsed.entries.len());
    for e in &parsed.entries {
        let content = e
            .content
            .clone()
            .unwrap_or_else(|| format!("(withheld by policy: entry {} exists)", e.id));
        let input = EntryInput {
            id: Some(e.id.clone()),
            kind: e.kind,
            content,
            detail: e.detail.clone(),
            subject: e.subject.clone(),
            work_context: Some(e.work_context.clone()),
            provenance: e.provenance.clone(),
            replaces: e.replaces.clone(),
            status: e.status,
            timestamp: Some(e.timestamp),
            gate_generation: e.gate_generation.clone(),
        };
        ws.check_entry(&input)
            .map_err(|err| invalid_entry(parsed, &e.id, err))?;
        if let Some(p) = &e.provenance
            && contexts.get(p.session.as_str()) != Some(&e.work_context.as_str())
        {
            return Err(invalid_entry(
                parsed,
                &e.id,
                format!(
                    "its work context {:?} is not its session {:?}'s",
                    e.work_context, p.session
                ),
            ));
        }
        entries.push(input);
    }
    let mut compactions = Vec::new();
    for c in &parsed.compactions {
        let nodes = parsed
            .summaries
            .get(&c.session)
            .into_iter()
            .flatten()
            .map(|s| SummaryNode {
                id: s.id.clone(),
                session: s.session.clone(),
                work_context: s.work_context.clone(),
                level: s.level,
                from_seq: s.from_seq,
                to_seq: s.to_seq,
                covers: s.covers.clone(),
                text: s
                    .text
                    .clone()
                    .unwrap_or_else(|| format!("(withheld by policy: summary {} exists)", s.id)),
                method: s.method,
                tokens_before: s.tokens_before,
                tokens_after: s.tokens_after,
                source_hash: s.source_hash.clone(),
                earliest: s.earliest,
                latest: s.latest,
                created_at: s.created_at,
            })
            .collect();
        compactions.push((
            CompactionView {
                session: c.session.clone(),
                items: c.items.clone(),
                covered_to: c.covered_to,
                passes: c.passes,
            },
            nodes,
        ));
    }
    Ok(Plan {
        turns,
        placeholders,
        entries,
        compactions,
    })
}

/// An entry the memory log would refuse, named by its line.
fn invalid_entry(parsed: &Parsed, id: &str, why: impl std::fmt::Display) -> CairnError {
    let line = parsed
        .entries
        .iter()
        .position(|e| e.id == id)
        .and_then(|i| parsed.entry_lines.get(i).copied())
        .unwrap_or(0);
    invalid(line, format!("entry {id:?}: {why}"))
}
