//! The model section's checks and the budget's windows. The client against
//! a TLS endpoint is tried end to end in `tests/all/model_tls.rs`.

use super::*;

fn client(url: &str, allow_insecure_http: bool) -> Result<ChatClient, ModelError> {
    ChatClient::new(&ModelConfig {
        url: url.to_owned(),
        allow_insecure_http,
        ..ModelConfig::default()
    })
}

/// Issue 78: the key and the transcripts went in clear to any hosted
/// endpoint. Plain HTTP to another machine is refused unless allowed,
/// and the refusal names the key that allows it; `https://` goes anywhere.
#[test]
fn plain_http_to_another_machine_needs_allow_insecure_http() {
    for local in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434/v1",
        "http://LOCALHOST/v1",
        "http://[::1]:8080/v1",
        "http://127.0.0.2:9/v1",
    ] {
        assert!(client(local, false).is_ok(), "{local}");
    }
    for remote in [
        "http://api.example.com/v1",
        "http://10.0.0.5:8080/v1",
        "http://[2001:db8::1]:80/v1",
        "http://localhost.example.com/v1",
        "http://127.0.0.1.nip.io/v1",
    ] {
        let error = client(remote, false).expect_err(remote).to_string();
        assert!(error.contains("allow_insecure_http"), "{remote}: {error}");
        assert!(client(remote, true).is_ok(), "{remote} allowed");
    }
    for hosted in [
        "https://api.openai.com/v1",
        "https://10.0.0.5:8443/v1/",
        "https://[2001:db8::1]/v1",
    ] {
        assert!(client(hosted, false).is_ok(), "{hosted}");
    }
    for bad in [
        "http:///v1",
        "https:///v1",
        "ftp://example.com/v1",
        "https://user:key@example.com/v1",
        "https://example.com/v1?key=1",
    ] {
        assert!(client(bad, true).is_err(), "{bad}");
    }
}

/// The URL called, the port filled in for messages.
#[test]
fn the_url_gets_chat_completions_and_the_host_a_port() -> Result<(), ModelError> {
    let c = client("https://api.example.com/v1/", false)?;
    assert_eq!(c.url, "https://api.example.com/v1/chat/completions");
    assert_eq!(c.host, "api.example.com:443");
    let c = client("http://[::1]/v1", false)?;
    assert_eq!(c.host, "[::1]:80");
    let c = client("http://127.0.0.1:8080", false)?;
    assert_eq!(c.url, "http://127.0.0.1:8080/chat/completions");
    Ok(())
}

#[test]
fn the_section_is_checked_with_the_setting_to_change_named() {
    let check = |f: &dyn Fn(&mut ModelConfig)| {
        let mut c = ModelConfig::default();
        f(&mut c);
        c.check().err().unwrap_or_default()
    };
    assert!(check(&|c| c.timeout_ms = 0).contains("timeout_ms"));
    assert!(check(&|c| c.connect_timeout_ms = 0).contains("connect_timeout_ms"));
    assert!(check(&|c| c.retries = 11).contains("retries"));
    assert!(check(&|c| c.budget_period_secs = 0).contains("budget_period_secs"));
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.pem");
    assert!(check(&|c| c.ca_file = Some(missing.clone())).contains("cannot be read"));
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate").expect("write");
    assert!(check(&|c| c.ca_file = Some(empty.clone())).contains("no PEM certificate"));
    assert!(check(&|_| {}).is_empty());
}

/// Calls and tokens are counted per workspace, in windows of one period.
#[test]
fn the_budget_counts_calls_and_tokens_per_workspace_and_period() {
    let budget = Budget::new(&ModelConfig {
        budget_calls: 2,
        budget_tokens: 100,
        budget_period_secs: 60,
        ..ModelConfig::default()
    });
    let t0 = Instant::now();
    assert!(budget.take_call("acme", t0).is_ok());
    assert!(budget.take_call("acme", t0).is_ok());
    let spent = budget
        .take_call("acme", t0 + Duration::from_secs(10))
        .expect_err("third call");
    let message = spent.to_string();
    assert!(
        message.contains("\"acme\"") && message.contains("2 calls per 60 s"),
        "{message}"
    );
    assert!(message.contains("resets in 50 s"), "{message}");
    // Another workspace has its own allowance.
    assert!(budget.take_call("globex", t0).is_ok());
    // The next window starts afresh; tokens count too.
    let t1 = t0 + Duration::from_secs(60);
    assert!(budget.take_call("acme", t1).is_ok());
    budget.spend_tokens("acme", 150);
    let spent = budget.take_call("acme", t1).expect_err("tokens spent");
    assert!(spent.to_string().contains("100 tokens"), "{spent}");
    // Zero is no limit.
    let open = Budget::new(&ModelConfig {
        budget_calls: 0,
        budget_tokens: 0,
        ..ModelConfig::default()
    });
    for _ in 0..10_000 {
        assert!(open.take_call("acme", t0).is_ok());
    }
}

/// The wait doubles from `retry_backoff_ms`, honours a longer
/// `Retry-After`, and never passes the cap.
#[test]
fn the_backoff_doubles_and_is_capped() -> Result<(), ModelError> {
    let c = ChatClient::new(&ModelConfig {
        retry_backoff_ms: 100,
        ..ModelConfig::default()
    })?;
    let refused = |retry_after| ModelError::Status {
        host: String::new(),
        status: 503,
        retry_after,
    };
    let ms = |d: Duration| d.as_millis();
    assert_eq!(ms(c.wait_before(1, &refused(None))), 100);
    assert_eq!(ms(c.wait_before(2, &refused(None))), 200);
    assert_eq!(ms(c.wait_before(3, &refused(None))), 400);
    assert_eq!(ms(c.wait_before(1, &refused(Some(2)))), 2_000);
    assert_eq!(ms(c.wait_before(1, &refused(Some(3_600)))), 10_000);
    assert_eq!(ms(c.wait_before(40, &refused(None))), 10_000);
    Ok(())
}

#[test]
fn transient_failures_are_the_ones_retried() {
    let status = |status| ModelError::Status {
        host: String::new(),
        status,
        retry_after: None,
    };
    assert!(status(429).is_transient());
    assert!(status(503).is_transient());
    assert!(!status(401).is_transient());
    assert!(!status(404).is_transient());
    let tls = ModelError::Tls {
        host: String::new(),
        reason: String::new(),
    };
    assert!(!tls.is_transient());
    let slow = ModelError::Timeout {
        host: String::new(),
        what: "answer",
        millis: 1,
    };
    assert!(!slow.is_transient());
}
