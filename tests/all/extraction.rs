//! The optional model extraction pass against local stub endpoints: a good
//! reply is used (typed, deduplicated against the log, provenance to the
//! source turns); garbage, a reply that breaks the format anywhere, a
//! timeout, a server error, a refusal and a closed port each fall back to
//! the heuristic extractor with a clear error, never a partial write.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use cairn::{
    ActorConfig, Cairn, CairnConfig, CaptureReport, EntryFilter, EntryInput, EntryKind,
    ModelConfig, Role, TaskStatus, TurnInput,
};
use serde_json::json;

/// A stub chat-completions endpoint: answers every request with `status`
/// and, for 200, a completion whose content is `content` (after `delay`).
/// Returns its URL and the request bodies it received.
pub(crate) fn stub(
    status: u16,
    content: &'static str,
    delay: Duration,
) -> Result<(String, Arc<Mutex<Vec<String>>>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = vec![0u8; 1 << 16];
                let mut got = Vec::new();
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                if let Ok(mut l) = log.lock() {
                    l.push(String::from_utf8_lossy(&got).into_owned());
                }
                std::thread::sleep(delay);
                let body = if status == 200 {
                    json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
                        .to_string()
                } else {
                    json!({"error": {"message": content}}).to_string()
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Ok((format!("http://{addr}/v1"), seen))
}

/// A workspace with one known fact, four turns in `launch`, then a manual
/// capture with the model at `url` (or none).
fn capture_with(url: Option<String>) -> Result<(CaptureReport, Cairn, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut config = CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: crate::support::storage(dir.path()),
        actors: ActorConfig {
            tick_interval_secs: 0,
            ..ActorConfig::default()
        },
        ..CairnConfig::default()
    };
    if let Some(url) = url {
        config.extraction.model = ModelConfig {
            enabled: true,
            url,
            model: "stub".to_owned(),
            api_key: Some("k".to_owned()),
            timeout_ms: 300,
            ..ModelConfig::default()
        };
    }
    let cairn = Cairn::open(config)?;
    cairn.append_entry(
        "acme",
        &EntryInput::new(EntryKind::Fact, "The beta has 1,284 sign-ups").in_context("launch"),
    )?;
    let turns = [
        (
            Role::User,
            "We need to pick a launch date for the Orion beta.",
        ),
        (
            Role::Assistant,
            "March 18 with sync off, or April 1 with sync on.",
        ),
        (Role::User, "Let's go with April 1 and sync on."),
        (Role::User, "I need to email Dana about the waitlist."),
    ]
    .map(|(role, text)| TurnInput::new("s1", role, text).in_context("launch"));
    cairn.ingest("acme", &turns)?;
    let mut reports = cairn.capture("acme", Some("launch"))?;
    let report = reports.pop().context("one capture")?;
    Ok((report, cairn, dir))
}

/// The captured items (not the summary reference), as `kind: content`.
fn items(report: &CaptureReport) -> Vec<String> {
    report
        .entries
        .iter()
        .filter(|e| e.kind != EntryKind::SessionSummaryRef)
        .map(|e| format!("{}: {}", e.kind, e.content))
        .collect()
}

const GOOD: &str = r#"{"entries":[
  {"type":"decision","content":"Launch the Orion beta on April 1 with sync on","detail":"Sync needs two more weeks","subject":"orion-beta","turns":[0,2]},
  {"type":"task","content":"Email Dana about the waitlist","status":"open","turns":[3,3]},
  {"type":"fact","content":"The beta has 1,284 sign-ups.","turns":[1,1]}
]}"#;

#[test]
fn a_good_reply_is_used_deduplicated_with_provenance() -> Result<()> {
    let (url, seen) = stub(200, GOOD, Duration::ZERO)?;
    let (report, cairn, _dir) = capture_with(Some(url))?;
    ensure!(report.extractor == "model stub", "{report:?}");
    ensure!(report.extractor_error.is_none(), "{report:?}");
    ensure!(
        items(&report)
            == [
                "key_decision: Launch the Orion beta on April 1 with sync on",
                "task: Email Dana about the waitlist",
            ],
        "{:?}",
        items(&report)
    );
    let decision = report
        .entries
        .iter()
        .find(|e| e.kind == EntryKind::KeyDecision)
        .context("decision")?;
    let p = decision.provenance.as_ref().context("provenance")?;
    ensure!(
        (p.session.as_str(), p.from_seq, p.to_seq) == ("s1", 0, 2),
        "{p:?}"
    );
    let view = cairn.entry("acme", &decision.id, None)?;
    ensure!(view.subject.as_deref() == Some("orion-beta"));
    let detail = view.entry.detail.clone().unwrap_or_default();
    ensure!(
        detail.contains("Sync needs two more weeks") && detail.contains("model stub extraction"),
        "{detail}"
    );
    ensure!(
        cairn
            .subjects("acme")?
            .iter()
            .any(|s| s.slug == "orion-beta")
    );
    let tasks = cairn.entries(
        "acme",
        &EntryFilter {
            kind: Some(EntryKind::Task),
            ..EntryFilter::default()
        },
        None,
    )?;
    ensure!(tasks.len() == 1 && tasks[0].entry.status == Some(TaskStatus::Open));
    // The known fact was not written again.
    let facts = cairn.entries(
        "acme",
        &EntryFilter {
            kind: Some(EntryKind::Fact),
            ..EntryFilter::default()
        },
        None,
    )?;
    ensure!(facts.len() == 1, "{facts:?}");
    // The prompt: the seed's instructions, the transcript with turn numbers.
    let requests = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    ensure!(requests.len() == 1, "{}", requests.len());
    let request = &requests[0];
    ensure!(
        request.to_lowercase().contains("authorization: bearer k"),
        "{request}"
    );
    ensure!(request.contains("memory extraction agent"), "{request}");
    ensure!(
        request.contains("[t2] user: Let's go with April 1 and sync on."),
        "{request}"
    );
    Ok(())
}

#[test]
fn bad_slow_or_refused_replies_fall_back_to_the_heuristic_extractor() -> Result<()> {
    let (heuristic, _, _dir) = capture_with(None)?;
    ensure!(heuristic.extractor == "heuristic" && heuristic.extractor_error.is_none());
    let expected = items(&heuristic);
    ensure!(!expected.is_empty(), "{heuristic:?}");
    // The first item is fine, the second breaks the format: nothing of the
    // reply is written.
    let half = r#"{"entries":[{"type":"task","content":"Written from a half-good reply","turns":[3,3]},{"type":"opinion","content":"x","turns":[0,0]}]}"#;
    let cases: Vec<(u16, &'static str, Duration, &str)> = vec![
        (
            200,
            "Sure! Here are the entries you asked for.",
            Duration::ZERO,
            "not the JSON asked for",
        ),
        (200, half, Duration::ZERO, "unknown variant `opinion`"),
        (
            200,
            GOOD,
            Duration::from_millis(1500),
            "no answer within 300 ms",
        ),
        (500, "overloaded", Duration::ZERO, "HTTP status 500"),
        (401, "bad key", Duration::ZERO, "HTTP status 401"),
    ];
    for (status, content, delay, error) in cases {
        let (url, _) = stub(status, content, delay)?;
        let (report, cairn, _dir) = capture_with(Some(url))?;
        ensure!(report.extractor == "heuristic", "{status}: {report:?}");
        let got = report.extractor_error.clone().unwrap_or_default();
        ensure!(
            got.contains(error) && got.contains("model stub"),
            "{status}: {got}"
        );
        ensure!(items(&report) == expected, "{status}: {:?}", items(&report));
        let all = cairn.entries(
            "acme",
            &EntryFilter {
                all: true,
                ..EntryFilter::default()
            },
            None,
        )?;
        ensure!(
            !all.iter().any(|v| v.entry.content.contains("half-good")),
            "a partial write"
        );
    }
    // Nobody listening: the same.
    let closed = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let (report, _, _dir) = capture_with(Some(format!("http://{closed}/v1")))?;
    ensure!(report.extractor == "heuristic" && report.extractor_error.is_some());
    ensure!(items(&report) == expected);
    Ok(())
}

/// A LoCoMo-format conversation: one session, a question whose evidence
/// turn shares only the speaker's name with it, and a turn that shares more.
/// The evidence turn states a habit ("always"), which the default
/// significance gate lets capture read; the chit-chat it only observes.
const CONVERSATION: &str = r#"{
  "conversation": {
    "speaker_a": "Mel", "speaker_b": "Caroline",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
      {"speaker": "Caroline", "dia_id": "D1:1", "text": "How was your weekend?"},
      {"speaker": "Mel", "dia_id": "D1:2", "text": "Quiet. Do you want to play a board game on Friday?"},
      {"speaker": "Mel", "dia_id": "D1:3", "text": "I always practise the clarinet for an hour before work."},
      {"speaker": "Caroline", "dia_id": "D1:4", "text": "Friday works for me."}
    ]
  },
  "qa": [{"question": "Which instruments does Mel play?", "category": 1, "evidence": ["D1:3"]}]
}"#;

/// What the stub model extracts: a fact citing the clarinet turn (cairn's
/// turn 2 of the session).
const FACT: &str = r#"{"entries":[{"type":"fact","content":"Mel plays instruments: the clarinet","turns":[2,2]}]}"#;

#[test]
fn the_eval_counts_an_extracted_entry_as_the_turns_it_cites() -> Result<()> {
    let data = tempfile::tempdir()?;
    std::fs::write(data.path().join("1.json"), CONVERSATION)?;
    let run = |config: Option<&CairnConfig>, significance: Option<(String, Vec<u8>)>| {
        let source = config.map(|c| cairn_cli::eval::EntrySource {
            config: c.clone(),
            significance,
        });
        cairn_cli::eval::run_locomo(
            data.path(),
            10,
            None,
            false,
            &cairn_cli::eval::Tuning::default(),
            None,
            source.as_ref(),
        )
    };
    let recall_1 =
        |report: &cairn_cli::eval::EvalReport| report.modes.get("hybrid").map(|m| m.recall_1);

    // Turns alone: the board-game turn shares "Mel" and "play" with the
    // question and ranks above the evidence.
    let turns_only = run(None, None)?;
    ensure!(turns_only.entries.is_none());
    ensure!(recall_1(&turns_only) == Some(0.0), "{turns_only:?}");

    // With the model's fact: the entry ranks first and stands for D1:3.
    let (url, seen) = stub(200, FACT, Duration::ZERO)?;
    let mut config = CairnConfig::default();
    config.extraction.model = ModelConfig {
        enabled: true,
        url,
        model: "stub".to_owned(),
        api_key: None,
        timeout_ms: 2_000,
        ..ModelConfig::default()
    };
    let with_model = run(Some(&config), None)?;
    let entries = with_model.entries.clone().context("an entries report")?;
    ensure!(entries.extractors == ["model stub"], "{entries:?}");
    ensure!(entries.extractor_errors.is_empty(), "{entries:?}");
    ensure!(entries.by_kind.get("fact") == Some(&1), "{entries:?}");
    ensure!(recall_1(&with_model) == Some(1.0), "{with_model:?}");
    ensure!(
        with_model.conversations.get("1").map(|c| c.entries) == Some(entries.indexed),
        "{with_model:?}"
    );
    let prompts = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    ensure!(
        prompts
            .iter()
            .any(|p| p.contains("Mel: I always practise the clarinet")),
        "the transcript reached the model: {prompts:?}"
    );
    drop(prompts);

    // A gate that observes everything: capture reads nothing, the model is
    // not asked, no entry is indexed.
    let (url, seen) = stub(200, FACT, Duration::ZERO)?;
    config.extraction.model.url = url;
    let quiet = (
        "example_quiet".to_owned(),
        cairn::worlds::defaults::EXAMPLE_QUIET.wasm.to_vec(),
    );
    let gated = run(Some(&config), Some(quiet))?;
    let entries = gated.entries.clone().context("an entries report")?;
    ensure!(entries.indexed == 0, "{entries:?}");
    ensure!(recall_1(&gated) == Some(0.0), "{gated:?}");
    ensure!(
        seen.lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .is_empty(),
        "the model was asked about turns the gate only observed"
    );

    // A model that fails keeps the heuristic items, and the report says so.
    let (url, _) = stub(500, "overloaded", Duration::ZERO)?;
    config.extraction.model.url = url;
    let failing = run(Some(&config), None)?;
    let entries = failing.entries.clone().context("an entries report")?;
    ensure!(entries.extractors == ["heuristic"], "{entries:?}");
    ensure!(
        entries
            .extractor_errors
            .iter()
            .any(|e| e.contains("HTTP status 500")),
        "{entries:?}"
    );
    ensure!(recall_1(&failing) == Some(0.0), "{failing:?}");
    Ok(())
}

/// `cairn eval locomo --facts` with `[extraction.model]` configured scores
/// the heuristics alone and then with the model pass, side by side: the
/// model's fact recalls the observation the heuristics miss.
#[test]
fn the_fact_eval_reports_the_model_pass_beside_the_heuristics() -> Result<()> {
    let data = tempfile::tempdir()?;
    let mut conversation: serde_json::Value = serde_json::from_str(CONVERSATION)?;
    conversation["session_1_observation"] = json!({
        "Mel": [["Mel plays the clarinet, an hour before work.", "D1:3"]]
    });
    std::fs::write(data.path().join("1.json"), conversation.to_string())?;
    let (url, seen) = stub(200, FACT, Duration::ZERO)?;
    let out = std::process::Command::new(crate::support::cairn_bin())
        .args(["eval", "locomo", "--facts", "--json", "--data"])
        .arg(data.path())
        .env("CAIRN_EXTRACTION__MODEL__ENABLED", "true")
        .env("CAIRN_EXTRACTION__MODEL__URL", &url)
        .env("CAIRN_EXTRACTION__MODEL__MODEL", "stub")
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let (heuristic, with_model) = (&report["heuristic"], &report["with_model"]);
    ensure!(heuristic["extractors"] == json!(["heuristic"]), "{report}");
    ensure!(
        with_model["extractors"] == json!(["model stub"]),
        "{report}"
    );
    ensure!(heuristic["overall"]["observations"] == 1, "{report}");
    ensure!(
        with_model["overall"]["recalled"] == 1,
        "the model's fact recalls the observation: {report}"
    );
    ensure!(
        !seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .is_empty(),
        "the model was asked"
    );
    Ok(())
}
