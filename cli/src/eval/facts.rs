//! `cairn eval locomo --facts`: what capture remembers about the people in a
//! conversation, scored against LoCoMo's annotated observations.
//!
//! Each conversation is ingested as `--entries` ingests it (one cairn
//! session per LoCoMo session at its date, every turn `speaker: text`, a
//! capture after each session). The live entries other than session
//! summaries are then compared with the conversation's observations
//! (`session_N_observation`: facts about each speaker, each with the turn
//! it came from):
//!
//! - an observation is **recalled** when a live entry cites its evidence
//!   turn and says the same thing: the cosine of the two texts under the
//!   local embedding model is at least the threshold;
//! - **precision** is the share of those entries that recall some
//!   observation; the second reading also counts work state (tasks,
//!   decisions, open questions, handoffs, phase changes), which the
//!   annotation does not cover;
//! - a **duplicate** is an observation two live entries recall;
//! - a **stale** entry is a live fact of a single-valued attribute (where
//!   someone lives, their job) that recalls an observation about a person
//!   when a later observation about the same person and attribute says
//!   something else.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use cairn::EntryKind;
use cairn::facts::{Attribute, ENGLISH, attribute_of_text, fact_of_detail};
use cairn::search::Embedder;
use serde::Serialize;
use serde_json::Value;

use super::{
    EntriesReport, EntrySource, EvalError, conversation_files, derive_entries, format_err, parse,
};

/// The cosine at or above which an entry and an observation say the same
/// thing. Read by hand on the pairs `--ranks` writes (docs/BENCHMARKS.md,
/// *Fact capture*): pairs that state the same fact in other words scored
/// .62–.92, pairs from the same turn that say something else or only part
/// of it .43–.57.
pub const SAME_FACT: f32 = 0.6;

/// `--facts` over every conversation.
#[derive(Debug, Clone, Serialize)]
pub struct FactsReport {
    /// The cosine threshold used.
    pub threshold: f32,
    /// The extractors that wrote entries (`heuristic`, a model's name).
    pub extractors: Vec<String>,
    /// Per conversation (file stem).
    pub conversations: BTreeMap<String, FactScores>,
    /// All conversations pooled.
    pub overall: FactScores,
}

/// Fact capture scored on one conversation (or pooled).
#[derive(Debug, Clone, Default, Serialize)]
pub struct FactScores {
    /// Annotated observations.
    pub observations: usize,
    /// Observations a live entry recalls.
    pub recalled: usize,
    /// `recalled / observations`.
    pub recall: f64,
    /// Live entries other than session summaries.
    pub entries: usize,
    /// Of them, `fact` entries.
    pub facts: usize,
    /// Entries that recall some observation.
    pub matching: usize,
    /// `matching / entries`.
    pub precision: f64,
    /// Entries that recall some observation or are work state.
    pub matching_or_work_state: usize,
    /// `matching_or_work_state / entries`.
    pub precision_with_work_state: f64,
    /// Observations two or more live entries recall.
    pub duplicates: usize,
    /// Live single-valued facts a later observation contradicts.
    pub stale: usize,
    /// Live entries by kind.
    pub by_kind: BTreeMap<String, usize>,
}

impl FactScores {
    fn add(&mut self, other: &FactScores) {
        self.observations += other.observations;
        self.recalled += other.recalled;
        self.entries += other.entries;
        self.facts += other.facts;
        self.matching += other.matching;
        self.matching_or_work_state += other.matching_or_work_state;
        self.duplicates += other.duplicates;
        self.stale += other.stale;
        for (k, n) in &other.by_kind {
            *self.by_kind.entry(k.clone()).or_default() += n;
        }
        self.finish();
    }

    fn finish(&mut self) {
        let share = |n: usize, d: usize| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        self.recall = share(self.recalled, self.observations);
        self.precision = share(self.matching, self.entries);
        self.precision_with_work_state = share(self.matching_or_work_state, self.entries);
    }
}

/// One annotated observation.
struct Observation {
    speaker: String,
    session: u64,
    text: String,
    evidence: HashSet<String>,
}

/// Scores fact capture on every LoCoMo file in `dir` (see the module docs).
/// Needs the embedding model.
/// With `pairs`, each (observation, entry citing its turn) pair is written
/// there as a JSON line with its cosine, for reading the threshold by hand.
pub fn run_facts(
    dir: &Path,
    embedder: Option<Arc<dyn Embedder>>,
    source: &EntrySource,
    threshold: f32,
    pairs: Option<&Path>,
) -> Result<FactsReport, EvalError> {
    let Some(embedder) = embedder else {
        return Err(format_err(
            dir,
            "--facts compares texts with the embedding model, and none is set up \
             (scripts/setup-embeddings.sh; [embedding] model_dir and ort_dylib)",
        ));
    };
    let files = conversation_files(dir)?;
    let mut report = FactsReport {
        threshold,
        extractors: Vec::new(),
        conversations: BTreeMap::new(),
        overall: FactScores::default(),
    };
    let mut all_pairs = Vec::new();
    for file in &files {
        let name = file.file_stem().map_or_else(
            || file.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        let conv = parse(file)?;
        let observations = observations(file)?;
        let mut entries_report = EntriesReport::default();
        let derived = derive_entries(&name, &conv, source, &mut entries_report)?;
        for e in entries_report.extractors {
            if !report.extractors.contains(&e) {
                report.extractors.push(e);
            }
        }
        let mut lines = pairs.map(|_| Vec::new());
        let scores = score(
            &observations,
            &derived,
            embedder.as_ref(),
            threshold,
            lines.as_mut(),
        )
        .map_err(|e| match e {
            EvalError::Entries { reason, .. } => EvalError::Entries {
                conversation: name.clone(),
                reason,
            },
            other => other,
        })?;
        if let (Some(path), Some(lines)) = (pairs, lines) {
            all_pairs.extend(lines.into_iter().map(|mut l| {
                l["conversation"] = Value::String(name.clone());
                l
            }));
            write_pairs(path, &all_pairs)?;
        }
        report.overall.add(&scores);
        report.conversations.insert(name, scores);
    }
    Ok(report)
}

/// `--facts` with the heuristic extractor alone and, when `source`
/// configures an extraction model (`[extraction.model]`), once more with
/// the model pass: what the model buys, beside what the heuristics do.
/// One report, or two (heuristics first); `pairs` is written by the last.
pub fn run_facts_passes(
    dir: &Path,
    embedder: Option<Arc<dyn Embedder>>,
    source: &EntrySource,
    threshold: f32,
    pairs: Option<&Path>,
) -> Result<Vec<FactsReport>, EvalError> {
    let mut passes = Vec::new();
    if source.config.extraction.model.enabled {
        let mut heuristic = source.clone();
        heuristic.config.extraction.model.enabled = false;
        passes.push(run_facts(
            dir,
            embedder.clone(),
            &heuristic,
            threshold,
            None,
        )?);
    }
    passes.push(run_facts(dir, embedder, source, threshold, pairs)?);
    Ok(passes)
}

/// The `session_N_observation` lists of a LoCoMo file.
fn observations(path: &Path) -> Result<Vec<Observation>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_owned(),
        source,
    })?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format_err(path, &format!("not JSON: {e}")))?;
    let Some(object) = json.as_object() else {
        return Err(format_err(path, "not a JSON object"));
    };
    let mut out = Vec::new();
    for (key, value) in object {
        let Some(session) = key
            .strip_prefix("session_")
            .and_then(|k| k.strip_suffix("_observation"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let Some(by_speaker) = value.as_object() else {
            return Err(format_err(path, &format!("{key} is not an object")));
        };
        for (speaker, list) in by_speaker {
            for item in list.as_array().into_iter().flatten() {
                let (Some(text), Some(evidence)) =
                    (item.get(0).and_then(Value::as_str), item.get(1))
                else {
                    return Err(format_err(
                        path,
                        &format!("{key}: an observation is not [text, evidence]"),
                    ));
                };
                let evidence: HashSet<String> = match evidence {
                    Value::String(s) => s
                        .split([',', ';', ' '])
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    Value::Array(a) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                    _ => HashSet::new(),
                };
                out.push(Observation {
                    speaker: speaker.clone(),
                    session,
                    text: text.to_owned(),
                    evidence,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(format_err(path, "it has no session_N_observation lists"));
    }
    Ok(out)
}

fn is_work_state(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::Task
            | EntryKind::Decision
            | EntryKind::KeyDecision
            | EntryKind::Question
            | EntryKind::OpenQuestion
            | EntryKind::Handoff
            | EntryKind::WorkPhaseChange
            | EntryKind::Obligation
            | EntryKind::Directive
    )
}

/// The attribute a fact entry was captured under (its detail names it).
fn attribute_of_entry(detail: Option<&str>) -> Option<Attribute> {
    fact_of_detail(detail?).map(|(attribute, _)| attribute)
}

/// An observation's attribute: its text with the speaker's name read as
/// "I" ("Ana moved to Porto" as "I moved to Porto").
fn attribute_of_observation(o: &Observation) -> Option<Attribute> {
    let text = o
        .text
        .replace(&format!("{}'s", o.speaker), "my")
        .replace(&o.speaker, "I");
    attribute_of_text(&text, &ENGLISH)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn score(
    observations: &[Observation],
    derived: &super::Derived,
    embedder: &dyn Embedder,
    threshold: f32,
    mut pairs: Option<&mut Vec<Value>>,
) -> Result<FactScores, EvalError> {
    let embed_err = |e: cairn::search::SearchError| EvalError::Entries {
        conversation: String::new(),
        reason: format!("embedding: {e}"),
    };
    let mut scores = FactScores {
        observations: observations.len(),
        ..FactScores::default()
    };
    let entries: Vec<(&String, &super::EntryFacts)> = derived
        .entries
        .iter()
        .filter(|(_, (kind, _, _))| *kind != EntryKind::SessionSummaryRef)
        .collect();
    scores.entries = entries.len();
    for (_, (kind, _, _)) in &entries {
        *scores.by_kind.entry(kind.as_str().to_owned()).or_default() += 1;
        scores.facts += usize::from(*kind == EntryKind::Fact);
    }
    let obs_texts: Vec<&str> = observations.iter().map(|o| o.text.as_str()).collect();
    let entry_texts: Vec<&str> = entries.iter().map(|(_, (_, c, _))| c.as_str()).collect();
    let obs_vecs = embed_all(embedder, &obs_texts).map_err(embed_err)?;
    let entry_vecs = embed_all(embedder, &entry_texts).map_err(embed_err)?;
    // Which observations each entry recalls.
    let mut recalls: Vec<Vec<usize>> = vec![Vec::new(); entries.len()];
    let mut recalled_by: Vec<usize> = vec![0; observations.len()];
    for (e, (id, _)) in entries.iter().enumerate() {
        let cited: HashSet<&str> = derived
            .cites
            .get(*id)
            .map(|c| c.iter().map(String::as_str).collect())
            .unwrap_or_default();
        for (o, obs) in observations.iter().enumerate() {
            if !obs.evidence.iter().any(|t| cited.contains(t.as_str())) {
                continue;
            }
            let similarity = cosine(&entry_vecs[e], &obs_vecs[o]);
            if let Some(pairs) = pairs.as_deref_mut() {
                pairs.push(serde_json::json!({
                    "observation": obs.text,
                    "entry": entries[e].1.1,
                    "kind": entries[e].1.0.as_str(),
                    "cosine": similarity,
                }));
            }
            if similarity >= threshold {
                recalls[e].push(o);
                recalled_by[o] += 1;
            }
        }
    }
    scores.recalled = recalled_by.iter().filter(|n| **n > 0).count();
    scores.duplicates = recalled_by.iter().filter(|n| **n > 1).count();
    for (e, (_, (kind, content, detail))) in entries.iter().enumerate() {
        let matching = !recalls[e].is_empty();
        if let Some(pairs) = pairs.as_deref_mut() {
            pairs.push(serde_json::json!({
                "entry": content,
                "kind": kind.as_str(),
                "detail": detail,
                "recalls": recalls[e].len(),
            }));
        }
        scores.matching += usize::from(matching);
        scores.matching_or_work_state += usize::from(matching || is_work_state(*kind));
        // Stale: a single-valued fact whose observation a later one about
        // the same person and attribute contradicts (says something else).
        let Some(attribute) = attribute_of_entry(detail.as_deref()).filter(|a| a.single()) else {
            continue;
        };
        let stale = recalls[e].iter().any(|&o| {
            let this = &observations[o];
            observations.iter().enumerate().any(|(later, other)| {
                other.speaker == this.speaker
                    && other.session > this.session
                    && attribute_of_observation(other) == Some(attribute)
                    && cosine(&obs_vecs[o], &obs_vecs[later]) < threshold
            })
        });
        scores.stale += usize::from(stale);
    }
    scores.finish();
    Ok(scores)
}

fn embed_all(
    embedder: &dyn Embedder,
    texts: &[&str],
) -> Result<Vec<Vec<f32>>, cairn::search::SearchError> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(64) {
        out.extend(embedder.embed(chunk)?);
    }
    Ok(out)
}

fn write_pairs(path: &Path, pairs: &[Value]) -> Result<(), EvalError> {
    let mut text = String::new();
    for p in pairs {
        text.push_str(&p.to_string());
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|source| EvalError::Write {
        path: path.to_owned(),
        source,
    })
}
