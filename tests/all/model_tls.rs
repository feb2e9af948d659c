//! The model client over HTTPS, against a local TLS stub of a
//! chat-completions endpoint with a self-signed certificate made here: used
//! when `ca_file` trusts it; a 5xx or 429 retried; a slow answer, an
//! untrusted certificate, a wrong answer, exhausted retries and a spent
//! budget each fall back to the heuristic extractor with an error that says
//! which.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use cairn::{
    ActorConfig, Cairn, CairnConfig, CaptureReport, EntryKind, ModelConfig, Role, TurnInput,
};
use serde_json::json;

/// What the stub answers to one request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// 200 with a completion whose content is this.
    Complete(&'static str),
    /// This status, with an error body.
    Status(u16),
    /// A completion, after this long.
    Late(Duration, &'static str),
    /// 200 with this body as it is.
    Body(&'static str),
}

/// A local HTTPS chat-completions endpoint.
struct TlsStub {
    /// `https://localhost:PORT/v1`.
    url: String,
    /// Its certificate, PEM (self-signed: its own CA).
    ca_file: PathBuf,
    /// The requests it read, in order (after the handshake: an untrusted
    /// client sends none).
    requests: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl TlsStub {
    /// Answers the n-th request with `answers[n]` (the last one again after
    /// the end).
    fn start(answers: Vec<Answer>) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let made = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])?;
        let ca_file = dir.path().join("stub-ca.pem");
        std::fs::write(&ca_file, made.cert.pem())?;
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()),
        );
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![made.cert.der().clone()], key)?,
        );
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("https://localhost:{}/v1", listener.local_addr()?.port());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        let served = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { continue };
                let (config, log, served, answers) =
                    (config.clone(), log.clone(), served.clone(), answers.clone());
                std::thread::spawn(move || serve(tcp, config, &log, &served, &answers));
            }
        });
        Ok(TlsStub {
            url,
            ca_file,
            requests,
            _dir: dir,
        })
    }

    fn ca_pem(&self) -> Result<String> {
        Ok(std::fs::read_to_string(&self.ca_file)?)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// A model section for this stub that trusts its certificate.
    fn model(&self) -> ModelConfig {
        ModelConfig {
            enabled: true,
            url: self.url.clone(),
            model: "stub".to_owned(),
            api_key: Some("k".to_owned()),
            timeout_ms: 2_000,
            retry_backoff_ms: 10,
            ca_file: Some(self.ca_file.clone()),
            ..ModelConfig::default()
        }
    }
}

/// One connection: the handshake, one request, the answer its turn says.
fn serve(
    tcp: std::net::TcpStream,
    config: Arc<rustls::ServerConfig>,
    log: &Mutex<Vec<String>>,
    served: &AtomicUsize,
    answers: &[Answer],
) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // A client that does not trust the certificate aborts the
        // handshake: the read fails and nothing is logged.
        let Ok(n) = tls.read(&mut buf) else { return };
        if n == 0 {
            return;
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
    let n = served.fetch_add(1, Ordering::SeqCst);
    let Some(answer) = answers.get(n).or(answers.last()).copied() else {
        return;
    };
    let completion = |content: &str| {
        json!({"choices": [{"message": {"role": "assistant", "content": content}}],
               "usage": {"total_tokens": 120}})
        .to_string()
    };
    let (status, body) = match answer {
        Answer::Complete(content) => (200, completion(content)),
        Answer::Status(status) => (status, json!({"error": {"message": "no"}}).to_string()),
        Answer::Late(delay, content) => {
            std::thread::sleep(delay);
            (200, completion(content))
        }
        Answer::Body(body) => (200, body.to_owned()),
    };
    let _ = write!(
        tls,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

const GOOD: &str = r#"{"entries":[
  {"type":"decision","content":"Launch the Orion beta on April 1 with sync on","subject":"orion-beta","turns":[0,2]},
  {"type":"task","content":"Email Dana about the waitlist","status":"open","turns":[3,3]}
]}"#;

/// A cairn with `model` as its extraction endpoint (or none).
fn open(model: Option<ModelConfig>) -> Result<(Cairn, tempfile::TempDir)> {
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
    if let Some(model) = model {
        config.extraction.model = model;
    }
    Ok((Cairn::open(config)?, dir))
}

/// Four turns in `session`, then a manual capture.
fn capture(cairn: &Cairn, session: &str) -> Result<CaptureReport> {
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
    .map(|(role, text)| TurnInput::new(session, role, text).in_context("launch"));
    cairn.ingest("acme", &turns)?;
    cairn
        .capture("acme", Some("launch"))?
        .pop()
        .context("one capture")
}

/// The report came from the heuristics, with an error that holds `what`.
fn fell_back(report: &CaptureReport, what: &str) -> Result<()> {
    ensure!(report.extractor == "heuristic", "{report:?}");
    let error = report.extractor_error.clone().unwrap_or_default();
    ensure!(
        error.contains(what) && error.contains("model stub"),
        "wanted {what:?} in {error:?}"
    );
    ensure!(
        report
            .entries
            .iter()
            .any(|e| e.kind != EntryKind::SessionSummaryRef),
        "the heuristic items are written: {report:?}"
    );
    Ok(())
}

#[test]
fn an_https_endpoint_whose_ca_is_trusted_is_used() -> Result<()> {
    let stub = TlsStub::start(vec![Answer::Complete(GOOD)])?;
    let (cairn, _dir) = open(Some(stub.model()))?;
    let report = capture(&cairn, "s1")?;
    ensure!(report.extractor == "model stub", "{report:?}");
    ensure!(report.extractor_error.is_none(), "{report:?}");
    ensure!(
        report
            .entries
            .iter()
            .any(|e| e.content == "Launch the Orion beta on April 1 with sync on"),
        "{report:?}"
    );
    let requests = stub.requests();
    ensure!(requests.len() == 1, "{requests:?}");
    let request = requests[0].to_lowercase();
    ensure!(
        request.starts_with("post /v1/chat/completions http/1.1"),
        "{request}"
    );
    ensure!(request.contains("authorization: bearer k"), "{request}");
    ensure!(
        requests[0].contains("[t2] user: Let's go with April 1 and sync on."),
        "{request}"
    );
    Ok(())
}

#[test]
fn a_5xx_or_429_is_retried_with_backoff() -> Result<()> {
    let stub = TlsStub::start(vec![
        Answer::Status(503),
        Answer::Status(429),
        Answer::Complete(GOOD),
    ])?;
    let (cairn, _dir) = open(Some(stub.model()))?;
    let report = capture(&cairn, "s1")?;
    ensure!(report.extractor == "model stub", "{report:?}");
    ensure!(stub.requests().len() == 3);
    Ok(())
}

#[test]
fn retries_are_bounded_then_the_heuristics_answer() -> Result<()> {
    let stub = TlsStub::start(vec![Answer::Status(502)])?;
    let (cairn, _dir) = open(Some(ModelConfig {
        retries: 1,
        ..stub.model()
    }))?;
    fell_back(
        &capture(&cairn, "s1")?,
        "HTTP status 502 (after 2 attempts)",
    )?;
    ensure!(stub.requests().len() == 2);
    // A refusal that another attempt would not change is not retried.
    let stub = TlsStub::start(vec![Answer::Status(401)])?;
    let (cairn, _dir) = open(Some(stub.model()))?;
    fell_back(&capture(&cairn, "s1")?, "HTTP status 401")?;
    ensure!(stub.requests().len() == 1);
    Ok(())
}

#[test]
fn a_slow_answer_times_out_once() -> Result<()> {
    let stub = TlsStub::start(vec![Answer::Late(Duration::from_millis(1_500), GOOD)])?;
    let (cairn, _dir) = open(Some(ModelConfig {
        timeout_ms: 300,
        ..stub.model()
    }))?;
    fell_back(&capture(&cairn, "s1")?, "no answer within 300 ms")?;
    ensure!(stub.requests().len() == 1, "a slow answer is not retried");
    Ok(())
}

#[test]
fn an_untrusted_certificate_is_refused_before_anything_is_sent() -> Result<()> {
    let stub = TlsStub::start(vec![Answer::Complete(GOOD)])?;
    // The bundled roots do not know a self-signed certificate.
    let (cairn, _dir) = open(Some(ModelConfig {
        ca_file: None,
        ..stub.model()
    }))?;
    fell_back(&capture(&cairn, "s1")?, "TLS failed")?;
    // Nor does another CA.
    let other = TlsStub::start(vec![Answer::Complete(GOOD)])?;
    let (cairn, _dir) = open(Some(ModelConfig {
        ca_file: Some(other.ca_file.clone()),
        ..stub.model()
    }))?;
    let report = capture(&cairn, "s1")?;
    fell_back(&report, "TLS failed")?;
    let error = report.extractor_error.unwrap_or_default();
    ensure!(error.contains("certificate"), "{error}");
    ensure!(
        stub.requests().is_empty(),
        "no request (key, transcript) crossed an untrusted connection"
    );
    Ok(())
}

#[test]
fn an_answer_that_is_not_a_completion_falls_back() -> Result<()> {
    for (body, error) in [
        ("Sure! Here you are.", "not JSON"),
        (r#"{"choices": []}"#, "no choices[0].message.content"),
        (r#"{"object": "error"}"#, "no choices[0].message.content"),
    ] {
        let stub = TlsStub::start(vec![Answer::Body(body)])?;
        let (cairn, _dir) = open(Some(stub.model()))?;
        fell_back(&capture(&cairn, "s1")?, error)?;
        ensure!(stub.requests().len() == 1, "{body}: not retried");
    }
    // A completion whose content breaks the extraction format.
    let stub = TlsStub::start(vec![Answer::Complete("no entries for you")])?;
    let (cairn, _dir) = open(Some(stub.model()))?;
    fell_back(&capture(&cairn, "s1")?, "not the JSON asked for")?;
    Ok(())
}

#[test]
fn a_spent_budget_falls_back_until_its_period_ends() -> Result<()> {
    let stub = TlsStub::start(vec![Answer::Complete(GOOD)])?;
    let (cairn, _dir) = open(Some(ModelConfig {
        budget_calls: 1,
        ..stub.model()
    }))?;
    let first = capture(&cairn, "s1")?;
    ensure!(first.extractor == "model stub", "{first:?}");
    let second = capture(&cairn, "s2")?;
    fell_back(
        &second,
        "budget of workspace \"acme\" spent: 1 calls per 3600 s",
    )?;
    ensure!(stub.requests().len() == 1, "the spent budget sent nothing");
    Ok(())
}

/// The section is checked when the configuration loads: the error names
/// the section and the file that cannot be read.
#[test]
fn a_ca_file_that_cannot_be_read_is_a_configuration_error() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cairn.toml");
    let missing = dir.path().join("nowhere.pem");
    std::fs::write(
        &file,
        format!(
            "[extraction.model]\nenabled = true\nurl = \"https://models.example.com/v1\"\nca_file = {:?}\n",
            missing.display().to_string()
        ),
    )?;
    let error = CairnConfig::load(Some(&file))
        .err()
        .context("a missing ca_file is refused")?
        .to_string();
    ensure!(
        error.contains("extraction.model") && error.contains("nowhere.pem"),
        "{error}"
    );
    std::fs::write(&missing, TlsStub::start(vec![])?.ca_pem()?)?;
    let config = CairnConfig::load(Some(&file))?;
    ensure!(config.extraction.model.ca_file == Some(missing));
    Ok(())
}
