//! `cairn eval locomo`: retrieval quality on LoCoMo conversations.
//!
//! This measures the retrieval library itself ([`cairn::search`]): each
//! conversation file becomes a fresh in-memory search index, each of its
//! sessions its own session; every turn is indexed with its session's date,
//! speaker and image caption. Each question is then searched in every mode
//! and scored against its evidence turns (`dia_id`s): turn-level recall,
//! MRR and nDCG over categories 1–4, and **session-level recall** (a
//! question counts when one of its evidence sessions is among the first k
//! distinct sessions retrieved) over categories 1–5, adversarial included —
//! the unit retrieval-only systems publish LoCoMo in.
//!
//! With `--entries` the memory log takes part too: each conversation is
//! ingested into a throwaway cairn (one cairn session per LoCoMo session,
//! every turn `speaker: text`) and captured after each session, so the
//! configured extraction (the heuristic extractor, and the model of
//! `[extraction.model]` when it is enabled, behind the default significance
//! gate or the one `--significance` names) writes entries with provenance.
//! The live entries are indexed beside the turns, as the search service
//! indexes them, and a hit on an entry counts as the turns it cites: it takes one
//! place of the ranking for each of them, so an entry that cites a whole
//! session cannot buy recall with one slot.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn::search::{
    DocAttrs, DocSource, Embedder, Fusion, RecipeParams, SearchDoc, SearchError, SearchIndex,
    SearchMode, SearchOptions, entry_text,
};
use cairn::{Cairn, CairnConfig, EntryFilter, Role, StorageConfig, TurnInput, WorldKind};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;
use serde_json::Value;

mod facts;
pub use facts::{FactScores, FactsReport, SAME_FACT, run_facts, run_facts_passes};

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// Reading the data folder or a file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Writing the `--ranks` file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not LoCoMo JSON.
    #[error("{path} is not a LoCoMo conversation: {reason}")]
    Format {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No conversation files in the folder.
    #[error("no *.json conversation files in {0}")]
    Empty(PathBuf),
    /// Search failed.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// Deriving a conversation's memory-log entries (`--entries`) failed.
    #[error("deriving the entries of {conversation}: {reason}")]
    Entries {
        /// The conversation (file stem).
        conversation: String,
        /// What failed.
        reason: String,
    },
}

/// One mode's numbers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeReport {
    /// Mean recall@1.
    #[serde(rename = "recall@1")]
    pub recall_1: f64,
    /// Mean recall@5.
    #[serde(rename = "recall@5")]
    pub recall_5: f64,
    /// Mean recall@10.
    #[serde(rename = "recall@10")]
    pub recall_10: f64,
    /// Mean recall@20.
    #[serde(rename = "recall@20")]
    pub recall_20: f64,
    /// Mean recall@k for the requested k.
    #[serde(rename = "recall@k")]
    pub recall_k: f64,
    /// Share of questions with any evidence in the top 10.
    #[serde(rename = "hit@10")]
    pub hit_10: f64,
    /// Mean reciprocal rank of the first evidence turn (top 100).
    pub mrr: f64,
    /// Mean nDCG@10 (binary relevance).
    #[serde(rename = "ndcg@10")]
    pub ndcg_10: f64,
    /// recall@10 per category ("1" multi-hop … "4" single-hop).
    pub recall_10_by_category: BTreeMap<String, f64>,
    /// Session-level recall@5: the share of questions (categories 1–5)
    /// with an evidence session among the first 5 distinct sessions
    /// retrieved.
    #[serde(rename = "session_recall@5")]
    pub session_recall_5: f64,
    /// Session-level recall@10, the same over the first 10 sessions.
    #[serde(rename = "session_recall@10")]
    pub session_recall_10: f64,
    /// Questions the session-level numbers count (categories 1–5).
    pub session_questions: usize,
    /// Search latency p50, milliseconds (query embedding included).
    pub latency_p50_ms: f64,
    /// Search latency p99, milliseconds.
    pub latency_p99_ms: f64,
    /// Whether results were a lexical fallback.
    pub lexical_fallback: bool,
}

/// The whole evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// Questions scored.
    pub questions: usize,
    /// Turns indexed.
    pub turns: usize,
    /// Indexing throughput (embedding + both indexes), turns per second.
    pub index_turns_per_sec: f64,
    /// k used for `recall@k`.
    pub k: usize,
    /// Per mode: `bm25`, `dense`, `hybrid` (default fusion) and `hybrid_rrf`.
    pub modes: BTreeMap<String, ModeReport>,
    /// The same per conversation (file stem).
    pub conversations: BTreeMap<String, ConversationReport>,
    /// Leave-one-conversation-out, when asked for (`--loo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loo: Option<LooReport>,
    /// The memory-log entries indexed beside the turns (`--entries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<EntriesReport>,
}

/// What `--entries` derived and indexed, over every conversation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EntriesReport {
    /// Entries indexed (those whose provenance names LoCoMo turns).
    pub indexed: usize,
    /// Of those, per kind.
    pub by_kind: BTreeMap<String, usize>,
    /// Turns the indexed entries cite, in all (a turn cited by two
    /// entries counts twice).
    pub cited_turns: usize,
    /// The extractors the captures used (`heuristic`, `model <name>`).
    pub extractors: Vec<String>,
    /// Captures whose model pass failed (they kept the heuristic items),
    /// with the reason.
    pub extractor_errors: Vec<String>,
}

struct Question {
    text: String,
    category: u64,
    evidence: HashSet<String>,
}

impl Question {
    /// Whether turn-level numbers count it (categories 1–4; the
    /// adversarial category 5 counts at session level only).
    fn turn_level(&self) -> bool {
        (1..=4).contains(&self.category)
    }
}

/// The session a LoCoMo turn id belongs to: `D3:7` → `D3`.
fn session_of(id: &str) -> &str {
    id.split_once(':').map_or(id, |(s, _)| s)
}

struct Conversation {
    docs: Vec<SearchDoc>,
    questions: Vec<Question>,
}

/// A conversation's derived entries: their documents, and the turn ids
/// (`dia_id`s) each cites, by document id.
#[derive(Default)]
struct Derived {
    docs: Vec<SearchDoc>,
    cites: HashMap<String, Vec<String>>,
    /// Each entry's kind, content and detail, by document id.
    entries: HashMap<String, EntryFacts>,
}

/// An entry's kind, content and detail (what `--facts` compares).
type EntryFacts = (cairn::EntryKind, String, Option<String>);

/// How `--entries` derives a conversation's entries.
#[derive(Debug, Clone)]
pub struct EntrySource {
    /// The configuration of the throwaway cairn (its extraction settings
    /// and limits; its data directory and storage are replaced).
    pub config: CairnConfig,
    /// A significance gate to install in it instead of the default, as
    /// (plugin name, component bytes).
    pub significance: Option<(String, Vec<u8>)>,
}

/// The workspace and work context every LoCoMo session is ingested into
/// (each conversation gets a cairn of its own).
const EVAL_CONTEXT: &str = "locomo";

/// Ingests `conv` into a throwaway cairn configured like `source` (its
/// extraction settings and gate; storage always a fresh sled directory),
/// captures after each session, and returns the live entries whose
/// provenance names turns of the conversation, each searched by the text
/// the search service gives it ([`entry_text`]) and dated like the first
/// turn it cites.
fn derive_entries(
    name: &str,
    conv: &Conversation,
    source: &EntrySource,
    report: &mut EntriesReport,
) -> Result<Derived, EvalError> {
    let failed = |reason: String| EvalError::Entries {
        conversation: name.to_owned(),
        reason,
    };
    let dir = tempfile::Builder::new()
        .prefix("cairn-eval-")
        .tempdir()
        .map_err(|e| failed(format!("temporary data dir: {e}")))?;
    let mut config = source.config.clone();
    config.data_dir = dir.path().to_owned();
    config.storage = StorageConfig::default();
    config.actors.tick_interval_secs = 0;
    let cairn = Cairn::open(config).map_err(|e| failed(e.to_string()))?;
    if let Some((plugin, wasm)) = &source.significance {
        cairn
            .install_plugin(WorldKind::SignificanceGate, plugin, wasm)
            .map_err(|e| failed(format!("installing the significance gate {plugin}: {e}")))?;
    }
    // (session, position) -> its turn, and each session's turns in order.
    let mut by_place: HashMap<(&str, u64), &SearchDoc> = HashMap::new();
    let mut sessions: Vec<(&str, Vec<&SearchDoc>)> = Vec::new();
    for doc in &conv.docs {
        by_place.insert((doc.session.as_str(), doc.pos), doc);
        match sessions.last_mut() {
            Some((s, turns)) if *s == doc.session => turns.push(doc),
            _ => sessions.push((doc.session.as_str(), vec![doc])),
        }
    }
    for (session, turns) in &sessions {
        let inputs: Vec<TurnInput> = turns
            .iter()
            .map(|d| {
                let turn =
                    TurnInput::new(session, Role::User, &d.spoken_text()).in_context(EVAL_CONTEXT);
                match d.attrs.timestamp {
                    Some(t) => turn.at(t),
                    None => turn,
                }
            })
            .collect();
        for chunk in inputs.chunks(64) {
            cairn
                .ingest(EVAL_CONTEXT, chunk)
                .map_err(|e| failed(format!("{session}: {e}")))?;
        }
        let captures = cairn
            .capture(EVAL_CONTEXT, Some(EVAL_CONTEXT))
            .map_err(|e| failed(format!("{session}: {e}")))?;
        for capture in captures {
            if !report.extractors.contains(&capture.extractor) {
                report.extractors.push(capture.extractor);
            }
            if let Some(error) = capture.extractor_error {
                report.extractor_errors.push(format!("{name}: {error}"));
            }
        }
    }
    let live = cairn
        .entries(EVAL_CONTEXT, &EntryFilter::default(), None)
        .map_err(|e| failed(format!("listing the entries: {e}")))?;
    let mut derived = Derived::default();
    let mut cited = 0usize;
    for view in live {
        let entry = &view.entry;
        let Some(p) = &entry.provenance else { continue };
        let turns: Vec<&SearchDoc> = (p.from_seq..=p.to_seq)
            .filter_map(|seq| by_place.get(&(p.session.as_str(), seq)).copied())
            .collect();
        let Some(first) = turns.first() else { continue };
        let id = format!("entry:{}", entry.id);
        let mut doc = SearchDoc::new(
            &id,
            &id,
            0,
            &entry_text(&entry.content, entry.detail.as_deref()),
        )
        .with_attrs(DocAttrs {
            source: DocSource::Entry,
            kind: Some(entry.kind),
            subject: entry.subject.as_deref().map(str::to_owned),
            work_context: Some(entry.work_context.to_string()),
            provenance: Some(p.clone()),
            timestamp: first.attrs.timestamp,
            ..DocAttrs::default()
        });
        if let Some(date) = &first.date {
            doc = doc.with_date(date);
        }
        derived.docs.push(doc);
        *report
            .by_kind
            .entry(entry.kind.as_str().to_owned())
            .or_default() += 1;
        cited += turns.len();
        derived.entries.insert(
            id.clone(),
            (
                entry.kind,
                entry.content.clone(),
                entry.detail.as_deref().map(str::to_owned),
            ),
        );
        derived
            .cites
            .insert(id, turns.iter().map(|t| t.id.clone()).collect());
    }
    report.indexed += derived.docs.len();
    report.cited_turns += cited;
    Ok(derived)
}

impl EntriesReport {
    /// Mean turns an indexed entry cites (0 when none was indexed).
    pub fn mean_cited_turns(&self) -> f64 {
        if self.indexed == 0 {
            0.0
        } else {
            self.cited_turns as f64 / self.indexed as f64
        }
    }
}

/// A ranking of turns and entries as turn ids: an entry stands for the
/// turns it cites, in order, each taking a place; a turn already placed
/// (cited by an earlier entry, or itself) is not placed again.
fn as_turns(ranked: Vec<String>, cites: &HashMap<String, Vec<String>>) -> Vec<String> {
    if cites.is_empty() {
        return ranked;
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(ranked.len());
    for id in ranked {
        match cites.get(&id) {
            Some(turns) => {
                for t in turns {
                    if seen.insert(t.clone()) {
                        out.push(t.clone());
                    }
                }
            }
            None => {
                if seen.insert(id.clone()) {
                    out.push(id);
                }
            }
        }
    }
    out
}

/// The LoCoMo files (`*.json`) in `dir`, sorted; at least one.
fn conversation_files(dir: &Path) -> Result<Vec<PathBuf>, EvalError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| EvalError::Io {
            path: dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(EvalError::Empty(dir.to_owned()));
    }
    Ok(files)
}

fn format_err(path: &Path, reason: &str) -> EvalError {
    EvalError::Format {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A LoCoMo session header ("1:56 pm on 8 May, 2023") as a time, read as
/// UTC (the data names no zone).
fn session_time(header: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(header.trim(), "%I:%M %P on %d %B, %Y")
        .or_else(|_| NaiveDateTime::parse_from_str(header.trim(), "%I:%M %p on %d %B, %Y"))
        .ok()
        .map(|t| t.and_utc())
}

/// What an evaluation may change from the shipped defaults (`--set`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tuning {
    /// The recipe hybrid search uses (and the leave-one-out grid varies).
    pub recipe: RecipeParams,
    /// Whether resolved dates are added to the lexical text (off, as in
    /// [`SearchIndex`] by default).
    pub time_terms: bool,
    /// Whether the index embeds each sentence too (set by `sentence_sim`).
    pub sentence_vectors: bool,
}

impl Tuning {
    /// Applies one `key=value` (`when_boost`, `period_boost`, `follow`,
    /// `follow_seeds`, `follow_terms`, `follow_elsewhere`, `session_cap`,
    /// `session_decay`, `diversity`, `sentence_sim`, `list_cap`,
    /// `list_decay`, `list_smoothing`, `list_session_boost`, `lexical_weight`,
    /// `smoothing`, `session_boost`, `speaker_boost`, `time_terms`).
    pub fn set(&mut self, assignment: &str) -> Result<(), String> {
        let (key, value) = assignment
            .split_once('=')
            .ok_or_else(|| format!("`{assignment}` is not key=value"))?;
        let float = || {
            value
                .trim()
                .parse::<f32>()
                .map_err(|e| format!("{key}: {e}"))
        };
        let count = || {
            value
                .trim()
                .parse::<usize>()
                .map_err(|e| format!("{key}: {e}"))
        };
        // A factor in (0, 1] (the decays); a finite weight ≥ 0.
        let decay = || {
            let d = float()?;
            if d > 0.0 && d <= 1.0 {
                Ok(d)
            } else {
                Err(format!("{key}: {d} is not in (0, 1]"))
            }
        };
        let weight = || {
            let w = float()?;
            if w >= 0.0 && w.is_finite() {
                Ok(w)
            } else {
                Err(format!("{key}: {w} is not a finite number ≥ 0"))
            }
        };
        let r = &mut self.recipe;
        match key.trim() {
            "when_boost" => r.when_boost = float()?,
            "period_boost" => r.period_boost = float()?,
            "follow" => r.follow = float()?,
            "follow_seeds" => r.follow_seeds = count()?,
            "follow_terms" => r.follow_terms = count()?,
            "follow_elsewhere" => r.follow_elsewhere = count()? != 0,
            "session_cap" => r.session_cap = count()?,
            "session_decay" => r.session_decay = decay()?,
            "diversity" => r.diversity = weight()?,
            "sentence_sim" => {
                let a = float()?;
                if !(0.0..=1.0).contains(&a) {
                    return Err(format!("sentence_sim: {a} is not in [0, 1]"));
                }
                r.sentence_sim = a;
                self.sentence_vectors = a > 0.0;
            }
            "list_cap" => r.list_cap = count()?,
            "concept" => r.concept = weight()?,
            "feedback" => r.feedback = weight()?,
            "feedback_seeds" => r.feedback_seeds = count()?,
            "list_feedback" => r.list_feedback = Some(weight()?),
            "list_decay" => r.list_decay = decay()?,
            "list_smoothing" => r.list_smoothing = Some(float()?),
            "list_session_boost" => r.list_session_boost = Some(float()?),
            "lexical_weight" => r.lexical_weight = float()?,
            "smoothing" => r.smoothing = float()?,
            "session_boost" => r.session_boost = float()?,
            "speaker_boost" => r.speaker_boost = float()?,
            "time_terms" => self.time_terms = count()? != 0,
            other => return Err(format!("unknown setting `{other}`")),
        }
        Ok(())
    }
}

fn parse(path: &Path) -> Result<Conversation, EvalError> {
    let bytes = std::fs::read(path).map_err(|source| EvalError::Io {
        path: path.to_owned(),
        source,
    })?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| format_err(path, &e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| format_err(path, "not an object"))?;
    // Conversations are either flat or nested under "conversation".
    let conv = obj
        .get("conversation")
        .and_then(Value::as_object)
        .unwrap_or(obj);
    let mut sessions: Vec<(u64, &Vec<Value>)> = conv
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse::<u64>().ok()?;
            Some((n, v.as_array()?))
        })
        .collect();
    sessions.sort_by_key(|s| s.0);
    let mut docs = Vec::new();
    for (n, list) in sessions {
        let session = format!("session_{n}");
        let date = conv
            .get(&format!("session_{n}_date_time"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let timestamp = date.as_deref().and_then(session_time);
        for (pos, t) in list.iter().enumerate() {
            let (Some(id), Some(speaker), Some(text)) = (
                t.get("dia_id").and_then(Value::as_str),
                t.get("speaker").and_then(Value::as_str),
                t.get("text").and_then(Value::as_str),
            ) else {
                return Err(format_err(
                    path,
                    &format!("{session} turn {pos} lacks dia_id/speaker/text"),
                ));
            };
            let mut doc = SearchDoc::new(id, &session, pos as u64, text)
                .with_speaker(speaker)
                .with_attrs(DocAttrs {
                    timestamp,
                    ..DocAttrs::default()
                });
            if let Some(d) = &date {
                doc = doc.with_date(d);
            }
            if let Some(c) = t.get("blip_caption").and_then(Value::as_str) {
                doc = doc.with_caption(c);
            }
            docs.push(doc);
        }
    }
    let known: HashSet<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    let mut questions = Vec::new();
    for q in obj
        .get("qa")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let category = q.get("category").and_then(Value::as_u64).unwrap_or(0);
        if !(1..=5).contains(&category) {
            continue;
        }
        let Some(text) = q.get("question").and_then(Value::as_str) else {
            continue;
        };
        let evidence: HashSet<String> = q
            .get("evidence")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(|e| e.split([';', ',']))
            .map(str::trim)
            .filter(|e| known.contains(e))
            .map(str::to_owned)
            .collect();
        if evidence.is_empty() {
            continue;
        }
        questions.push(Question {
            text: text.to_owned(),
            category,
            evidence,
        });
    }
    Ok(Conversation { docs, questions })
}

#[derive(Default)]
struct Acc {
    r1: f64,
    r5: f64,
    r10: f64,
    r20: f64,
    rk: f64,
    hit10: f64,
    mrr: f64,
    ndcg: f64,
    by_cat: BTreeMap<u64, (f64, usize)>,
    latencies: Vec<f64>,
    fallback: bool,
    n: usize,
    s5: f64,
    s10: f64,
    sn: usize,
}

impl Acc {
    fn add(&mut self, q: &Question, ranked: &[String], k: usize, ms: f64) {
        let hit = |n: usize| {
            let wanted: HashSet<&str> = q.evidence.iter().map(|e| session_of(e)).collect();
            let mut seen: Vec<&str> = Vec::new();
            for id in ranked {
                let s = session_of(id);
                if !seen.contains(&s) {
                    if seen.len() == n {
                        break;
                    }
                    seen.push(s);
                }
            }
            f64::from(u8::from(seen.iter().any(|s| wanted.contains(s))))
        };
        self.s5 += hit(5);
        self.s10 += hit(10);
        self.sn += 1;
        if !q.turn_level() {
            // Adversarial questions count at session level only.
            return;
        }
        let e = &q.evidence;
        let recall = |n: usize| {
            ranked.iter().take(n).filter(|id| e.contains(*id)).count() as f64 / e.len() as f64
        };
        self.r1 += recall(1);
        self.r5 += recall(5);
        self.r10 += recall(10);
        self.r20 += recall(20);
        self.rk += recall(k);
        self.hit10 += f64::from(u8::from(ranked.iter().take(10).any(|id| e.contains(id))));
        if let Some(p) = ranked.iter().position(|id| e.contains(id)) {
            self.mrr += 1.0 / (p as f64 + 1.0);
        }
        let dcg: f64 = ranked
            .iter()
            .take(10)
            .enumerate()
            .filter(|(_, id)| e.contains(*id))
            .map(|(i, _)| 1.0 / (i as f64 + 2.0).log2())
            .sum();
        let idcg: f64 = (0..e.len().min(10))
            .map(|i| 1.0 / (i as f64 + 2.0).log2())
            .sum();
        self.ndcg += dcg / idcg;
        let c = self.by_cat.entry(q.category).or_default();
        c.0 += recall(10);
        c.1 += 1;
        self.latencies.push(ms);
        self.n += 1;
    }

    fn report(mut self) -> ModeReport {
        let n = self.n.max(1) as f64;
        let sn = self.sn.max(1) as f64;
        self.latencies.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            if self.latencies.is_empty() {
                0.0
            } else {
                let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
                self.latencies[i]
            }
        };
        ModeReport {
            recall_1: self.r1 / n,
            recall_5: self.r5 / n,
            recall_10: self.r10 / n,
            recall_20: self.r20 / n,
            recall_k: self.rk / n,
            hit_10: self.hit10 / n,
            mrr: self.mrr / n,
            ndcg_10: self.ndcg / n,
            recall_10_by_category: self
                .by_cat
                .iter()
                .map(|(c, (s, m))| (c.to_string(), s / *m as f64))
                .collect(),
            session_recall_5: self.s5 / sn,
            session_recall_10: self.s10 / sn,
            session_questions: self.sn,
            latency_p50_ms: pct(0.5),
            latency_p99_ms: pct(0.99),
            lexical_fallback: self.fallback,
        }
    }
}

/// One conversation's numbers, per mode.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationReport {
    /// Questions scored.
    pub questions: usize,
    /// Turns indexed.
    pub turns: usize,
    /// Entries indexed beside them (`--entries`).
    pub entries: usize,
    /// Per mode, as in [`EvalReport::modes`].
    pub modes: BTreeMap<String, ModeReport>,
}

/// The fusion parameters a fold may choose among (a copy of
/// [`RecipeParams`] that serialises).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Params {
    /// Weight of the normalised BM25 score.
    pub lexical_weight: f32,
    /// Share of the best neighbour's score added.
    pub smoothing: f32,
    /// Share of the session's best score added.
    pub session_boost: f32,
    /// Share of the best score added to the named speaker's turns.
    pub speaker_boost: f32,
}

impl Params {
    /// `base` with these four parameters.
    fn recipe(self, base: RecipeParams) -> RecipeParams {
        RecipeParams {
            lexical_weight: self.lexical_weight,
            smoothing: self.smoothing,
            session_boost: self.session_boost,
            speaker_boost: self.speaker_boost,
            ..base
        }
    }

    fn of(r: RecipeParams) -> Params {
        Params {
            lexical_weight: r.lexical_weight,
            smoothing: r.smoothing,
            session_boost: r.session_boost,
            speaker_boost: r.speaker_boost,
        }
    }
}

/// The grid a leave-one-out fold searches (the shipped recipe is in it).
fn grid() -> Vec<Params> {
    let mut all = Vec::new();
    for lexical_weight in [0.3, 0.5, 0.7] {
        for smoothing in [0.25, 0.5, 0.75] {
            for session_boost in [0.0, 0.2, 0.4] {
                for speaker_boost in [0.0, 0.1] {
                    all.push(Params {
                        lexical_weight,
                        smoothing,
                        session_boost,
                        speaker_boost,
                    });
                }
            }
        }
    }
    all
}

/// One question's numbers at one grid point.
#[derive(Debug, Clone, Copy)]
struct Row {
    recall_10: f64,
    mrr: f64,
    ndcg_10: f64,
    category: u64,
}

/// One conversation's name and, per grid point, each question's row.
type Scored = (String, Vec<Vec<Row>>);

/// One leave-one-conversation-out fold: parameters chosen on the other
/// conversations, then scored on the held-out one.
#[derive(Debug, Clone, Serialize)]
pub struct Fold {
    /// The conversation scored (never seen by the choice).
    pub held_out: String,
    /// What the other conversations chose (best mean recall@10 there).
    pub chosen: Params,
    /// Recall@10 of the chosen parameters on the conversations that chose.
    pub train_recall_10: f64,
    /// Recall@10 of the chosen parameters on the held-out conversation.
    pub held_out_recall_10: f64,
    /// The held-out recall@10 per category.
    pub held_out_by_category: BTreeMap<String, f64>,
    /// The held-out mean reciprocal rank of the first evidence turn (top 100).
    pub held_out_mrr: f64,
    /// The held-out nDCG@10.
    #[serde(rename = "held_out_ndcg@10")]
    pub held_out_ndcg_10: f64,
    /// The shipped recipe's recall@10 on the held-out conversation (the
    /// recipe was chosen on all of them: an in-sample number).
    pub shipped_recall_10: f64,
}

/// The leave-one-conversation-out estimate of hybrid search with its
/// parameters chosen on the data.
#[derive(Debug, Clone, Serialize)]
pub struct LooReport {
    /// Parameter sets each fold chose among.
    pub grid_size: usize,
    /// One fold per conversation.
    pub folds: Vec<Fold>,
    /// Question-weighted held-out recall@10 over the folds.
    pub held_out_recall_10: f64,
    /// The lowest fold.
    pub worst_fold_recall_10: f64,
}

/// Runs the evaluation over every `*.json` file in `dir`.
///
/// Without an embedder the `dense` and `hybrid` modes fall back to lexical
/// results and say so (`lexical_fallback: true`). With `loo`, hybrid's
/// fusion parameters are also chosen leave-one-conversation-out (see
/// [`LooReport`]); that needs two conversations or more.
pub fn run_locomo(
    dir: &Path,
    k: usize,
    embedder: Option<Arc<dyn Embedder>>,
    loo: bool,
    tuning: &Tuning,
    ranks: Option<&Path>,
    entries: Option<&EntrySource>,
) -> Result<EvalReport, EvalError> {
    let files = conversation_files(dir)?;
    if loo && files.len() < 2 {
        return Err(format_err(
            dir,
            "leave-one-out needs at least two conversation files",
        ));
    }
    // One JSON line per question: where hybrid ranked each evidence turn
    // (made once the data folder is known to hold conversations).
    let mut ranks_out = match ranks {
        Some(path) => Some((
            path,
            std::io::BufWriter::new(std::fs::File::create(path).map_err(|source| {
                EvalError::Write {
                    path: path.to_owned(),
                    source,
                }
            })?),
        )),
        None => None,
    };
    let modes: [(&str, SearchMode, Fusion); 4] = [
        ("bm25", SearchMode::Bm25, Fusion::default()),
        ("dense", SearchMode::Dense, Fusion::default()),
        ("hybrid", SearchMode::Hybrid, Fusion::Recipe(tuning.recipe)),
        ("hybrid_rrf", SearchMode::Hybrid, Fusion::rrf()),
    ];
    let mut accs: Vec<Acc> = modes.iter().map(|_| Acc::default()).collect();
    let mut conversations = BTreeMap::new();
    let depth = k.max(100);
    let grid = if loo { grid() } else { Vec::new() };
    // Per conversation, per grid point: each question's recall@10 and category.
    let mut scored: Vec<Scored> = Vec::new();
    let (mut turns, mut index_secs) = (0usize, 0f64);
    let mut entries_report = entries.map(|_| EntriesReport::default());
    for file in &files {
        let name = file.file_stem().map_or_else(
            || file.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        let conv = parse(file)?;
        let derived = match (entries, entries_report.as_mut()) {
            (Some(source), Some(report)) => derive_entries(&name, &conv, source, report)?,
            _ => Derived::default(),
        };
        let mut index = SearchIndex::new(embedder.clone())?;
        index.set_time_terms(tuning.time_terms);
        index.set_sentence_vectors(tuning.sentence_vectors);
        let t = Instant::now();
        index.add(&conv.docs)?;
        index.add(&derived.docs)?;
        index_secs += t.elapsed().as_secs_f64();
        turns += conv.docs.len();
        let mut own: Vec<Acc> = modes.iter().map(|_| Acc::default()).collect();
        let mut per_point = vec![Vec::new(); grid.len()];
        for q in &conv.questions {
            for (i, (_, mode, fusion)) in modes.iter().enumerate() {
                let opts = SearchOptions::new(depth).mode(*mode).fusion(*fusion);
                let t = Instant::now();
                let r = index.search(&q.text, &opts)?;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                accs[i].fallback |= r.lexical_fallback;
                own[i].fallback |= r.lexical_fallback;
                let ranked = as_turns(r.hits.into_iter().map(|h| h.id).collect(), &derived.cites);
                if let (Some((path, out)), "hybrid") = (ranks_out.as_mut(), modes[i].0) {
                    write_ranks(out, &name, q, &ranked).map_err(|source| EvalError::Write {
                        path: path.to_path_buf(),
                        source,
                    })?;
                }
                accs[i].add(q, &ranked, k, ms);
                own[i].add(q, &ranked, k, ms);
            }
            if grid.is_empty() || !q.turn_level() {
                continue;
            }
            // The question embedded once for the whole grid.
            let vector = match index.embedder() {
                Some(e) => e.embed(&[q.text.as_str()])?.pop(),
                None => None,
            };
            for (point, out) in grid.iter().zip(per_point.iter_mut()) {
                let opts = SearchOptions::new(depth)
                    .mode(SearchMode::Hybrid)
                    .fusion(Fusion::Recipe(point.recipe(tuning.recipe)));
                let r = index.search_with_vector(&q.text, vector.as_deref(), &opts)?;
                let ranked = as_turns(r.hits.into_iter().map(|h| h.id).collect(), &derived.cites);
                let mut one = Acc::default();
                one.add(q, &ranked, k, 0.0);
                out.push(Row {
                    recall_10: one.r10,
                    mrr: one.mrr,
                    ndcg_10: one.ndcg,
                    category: q.category,
                });
            }
        }
        conversations.insert(
            name.clone(),
            ConversationReport {
                questions: conv.questions.iter().filter(|q| q.turn_level()).count(),
                turns: conv.docs.len(),
                entries: derived.docs.len(),
                modes: modes
                    .iter()
                    .map(|m| m.0.to_owned())
                    .zip(own.into_iter().map(Acc::report))
                    .collect(),
            },
        );
        scored.push((name, per_point));
    }
    if let Some((path, mut out)) = ranks_out {
        out.flush().map_err(|source| EvalError::Write {
            path: path.to_owned(),
            source,
        })?;
    }
    let questions = accs.first().map_or(0, |a| a.n);
    Ok(EvalReport {
        questions,
        turns,
        index_turns_per_sec: if index_secs > 0.0 {
            turns as f64 / index_secs
        } else {
            0.0
        },
        k,
        modes: modes
            .iter()
            .map(|m| m.0.to_owned())
            .zip(accs.into_iter().map(Acc::report))
            .collect(),
        conversations,
        loo: loo.then(|| leave_one_out(&grid, &scored, Params::of(tuning.recipe))),
        entries: entries_report,
    })
}

/// One question's line of `--ranks`: its text, category and the 1-based
/// rank of each evidence turn in the hybrid ranking (null: not in it).
fn write_ranks(
    out: &mut impl Write,
    conversation: &str,
    q: &Question,
    ranked: &[String],
) -> std::io::Result<()> {
    let mut evidence: Vec<&String> = q.evidence.iter().collect();
    evidence.sort();
    let evidence: BTreeMap<&str, Option<usize>> = evidence
        .into_iter()
        .map(|id| {
            (
                id.as_str(),
                ranked.iter().position(|r| r == id).map(|p| p + 1),
            )
        })
        .collect();
    let line = serde_json::json!({
        "conversation": conversation,
        "question": q.text,
        "category": q.category,
        "evidence": evidence,
        "top10": ranked.iter().take(10).collect::<Vec<_>>(),
    });
    writeln!(out, "{line}")
}

/// Chooses, for each conversation, the grid point with the best mean
/// recall@10 over the *other* conversations, and scores it on this one.
fn leave_one_out(grid: &[Params], scored: &[Scored], shipped: Params) -> LooReport {
    let mean_of = |rows: &[Row], f: fn(&Row) -> f64| -> f64 {
        if rows.is_empty() {
            0.0
        } else {
            rows.iter().map(f).sum::<f64>() / rows.len() as f64
        }
    };
    let mean = |rows: &[Row]| mean_of(rows, |r| r.recall_10);
    let shipped = grid.iter().position(|p| *p == shipped);
    let mut folds = Vec::new();
    let (mut sum, mut n) = (0.0, 0usize);
    for (held, (name, rows)) in scored.iter().enumerate() {
        let train = |point: usize| -> f64 {
            let all: Vec<Row> = scored
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != held)
                .flat_map(|(_, (_, r))| r[point].iter().copied())
                .collect();
            mean(&all)
        };
        // Ties go to the earlier grid point: the choice is deterministic.
        let mut best = (0usize, f64::MIN);
        for point in 0..grid.len() {
            let r = train(point);
            if r > best.1 {
                best = (point, r);
            }
        }
        let held_rows = &rows[best.0];
        let mut by_cat: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for r in held_rows {
            let e = by_cat.entry(r.category.to_string()).or_default();
            e.0 += r.recall_10;
            e.1 += 1;
        }
        let held_out_recall_10 = mean(held_rows);
        sum += held_rows.iter().map(|r| r.recall_10).sum::<f64>();
        n += held_rows.len();
        folds.push(Fold {
            held_out: name.clone(),
            chosen: grid[best.0],
            train_recall_10: best.1,
            held_out_recall_10,
            held_out_by_category: by_cat
                .into_iter()
                .map(|(c, (s, m))| (c, s / m as f64))
                .collect(),
            held_out_mrr: mean_of(held_rows, |r| r.mrr),
            held_out_ndcg_10: mean_of(held_rows, |r| r.ndcg_10),
            shipped_recall_10: shipped.map_or(f64::NAN, |p| mean(&rows[p])),
        });
    }
    LooReport {
        grid_size: grid.len(),
        worst_fold_recall_10: folds
            .iter()
            .map(|f| f.held_out_recall_10)
            .fold(f64::INFINITY, f64::min),
        held_out_recall_10: if n == 0 { 0.0 } else { sum / n as f64 },
        folds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(w: f32) -> Params {
        Params {
            lexical_weight: w,
            ..Params::of(RecipeParams::default())
        }
    }

    #[test]
    fn each_fold_chooses_on_the_others_and_scores_on_its_own() {
        // Point 0 wins on a and b, point 1 only on c.
        let grid = [point(0.5), point(0.9)];
        let row = |r: f64, category: u64| Row {
            recall_10: r,
            mrr: r / 2.0,
            ndcg_10: r,
            category,
        };
        let conv = |name: &str, p0: f64, p1: f64| {
            (
                name.to_owned(),
                vec![vec![row(p0, 1), row(p0, 2)], vec![row(p1, 1), row(p1, 2)]],
            )
        };
        let scored = [
            conv("a", 0.8, 0.4),
            conv("b", 0.7, 0.5),
            conv("c", 0.2, 0.9),
        ];
        let r = leave_one_out(&grid, &scored, Params::of(RecipeParams::default()));
        let chose: Vec<f32> = r.folds.iter().map(|f| f.chosen.lexical_weight).collect();
        // Holding out a: b+c means are p0 .45, p1 .70 -> p1; and so on.
        assert_eq!(chose, [0.9, 0.9, 0.5]);
        let held: Vec<f64> = r.folds.iter().map(|f| f.held_out_recall_10).collect();
        assert_eq!(held, [0.4, 0.5, 0.2]);
        let mrr: Vec<f64> = r.folds.iter().map(|f| f.held_out_mrr).collect();
        assert_eq!(mrr, [0.2, 0.25, 0.1]);
        assert!((r.held_out_recall_10 - (0.4 + 0.5 + 0.2) / 3.0).abs() < 1e-9);
        assert_eq!(r.worst_fold_recall_10, 0.2);
        // The shipped recipe is grid point 0 here.
        assert_eq!(r.folds[2].shipped_recall_10, 0.2);
        assert!((r.folds[0].train_recall_10 - 0.7).abs() < 1e-9);
    }

    #[test]
    fn ranks_lines_give_each_evidence_turn_its_place() {
        let q = Question {
            text: "Where has Melanie camped?".to_owned(),
            category: 1,
            evidence: ["D2:4".to_owned(), "D7:1".to_owned()].into(),
        };
        let ranked: Vec<String> = ["D1:1", "D7:1", "D3:2"].map(str::to_owned).into();
        let mut out = Vec::new();
        write_ranks(&mut out, "26", &q, &ranked).unwrap();
        let line: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(line["conversation"], "26");
        assert_eq!(line["category"], 1);
        assert_eq!(line["evidence"]["D7:1"], 2);
        assert!(line["evidence"]["D2:4"].is_null());
        assert_eq!(line["top10"].as_array().map(Vec::len), Some(3));
        assert!(out.ends_with(b"\n"));
    }

    #[test]
    fn the_grid_holds_the_shipped_recipe() {
        assert!(grid().contains(&Params::of(RecipeParams::default())));
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn session_headers_are_times() {
        let t = session_time("1:56 pm on 8 May, 2023").map(|t| t.to_rfc3339());
        assert_eq!(t.as_deref(), Some("2023-05-08T13:56:00+00:00"));
        assert_eq!(session_time("yesterday"), None);
    }

    #[test]
    fn settings_are_checked() {
        let mut t = Tuning::default();
        t.set("when_boost=0.5").unwrap();
        t.set("time_terms=1").unwrap();
        assert_eq!(t.recipe.when_boost, 0.5);
        assert!(t.time_terms);
        assert!(t.set("nonsense=1").is_err());
        assert!(t.set("follow").is_err());
        assert!(t.set("follow=x").is_err());
        t.set("session_decay=0.9").unwrap();
        assert_eq!(t.recipe.session_decay, 0.9);
        assert!(t.set("session_decay=0").is_err());
        assert!(t.set("session_decay=1.5").is_err());
        assert!(t.set("session_decay=NaN").is_err());
        t.set("sentence_sim=0.5").unwrap();
        assert!(t.sentence_vectors);
        assert!(t.set("sentence_sim=1.5").is_err());
        assert!(t.set("diversity=-1").is_err());
        assert!(t.set("diversity=inf").is_err());
        t.set("diversity=0.2").unwrap();
        assert_eq!(t.recipe.diversity, 0.2);
        t.set("list_decay=0.8").unwrap();
        assert_eq!(t.recipe.list_decay, 0.8);
        assert!(t.set("list_decay=0").is_err());
        assert!(t.set("concept=-0.5").is_err());
        assert!(t.set("concept=NaN").is_err());
        t.set("concept=1").unwrap();
        assert_eq!(t.recipe.concept, 1.0);
        assert!(t.set("feedback=-0.3").is_err());
        t.set("feedback=0.3").unwrap();
        t.set("feedback_seeds=3").unwrap();
        t.set("list_feedback=1").unwrap();
        assert_eq!(
            (
                t.recipe.feedback,
                t.recipe.feedback_seeds,
                t.recipe.list_feedback
            ),
            (0.3, 3, Some(1.0))
        );
    }
}
