//! The optional model endpoint: an OpenAI-compatible chat-completions API,
//! shared by compaction's summariser (`[compaction.model]`) and the
//! extraction pass (`[extraction.model]`). Off by default; the runtime makes
//! no network call unless one is enabled.
//!
//! [`ChatClient`] sends one request per call through `ureq` (a blocking
//! HTTP/1.1 client) with rustls and the ring provider for `https://`: the
//! server's certificate is checked against Mozilla's roots bundled in the
//! binary (`webpki-roots`), or against the certificates of the section's
//! `ca_file` instead (a self-hosted endpoint with its own CA). No OpenSSL.
//! Plain `http://` carries the API key and the transcripts in clear, so an
//! `http://` URL that is not on this machine (a loopback address or
//! `localhost`) is refused unless the configuration says
//! `allow_insecure_http = true`.
//!
//! A call is bounded three ways: each attempt by `connect_timeout_ms` and
//! `timeout_ms` (the whole attempt, answer included); the attempts by
//! `retries` (a refused or failed connection, HTTP 429 and 5xx are tried
//! again after a doubling backoff that honours `Retry-After`, capped; a slow
//! answer, a TLS failure, another status and a bad answer are not: trying
//! again would only multiply the wait or repeat the refusal); and the
//! workspace's [`Budget`] of calls and tokens per period. Every failure is a
//! [`ModelError`] that says what went wrong, and callers fall back to their
//! deterministic path on any of them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use ureq::Agent;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};

/// An OpenAI-compatible chat-completions endpoint, `[compaction.model]` or
/// `[extraction.model]`. Off by default.
///
/// ```
/// let hosted = cairn::ModelConfig {
///     enabled: true,
///     url: "https://api.openai.com/v1".into(),
///     model: "gpt-4o-mini".into(),
///     ..cairn::ModelConfig::default()
/// };
/// assert!(cairn::OpenAiExtractor::new(&hosted, 1000).is_ok());
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Ask the model first.
    pub enabled: bool,
    /// Base URL, `https://host/v1` or `http://127.0.0.1:port/v1`
    /// (`/chat/completions` is appended).
    pub url: String,
    /// Model name.
    pub model: String,
    /// Bearer key, if the endpoint wants one.
    pub api_key: Option<String>,
    /// Most time one attempt may take, connection and answer included, in
    /// milliseconds.
    pub timeout_ms: u64,
    /// Most time to open the connection (TCP and TLS handshake), in
    /// milliseconds.
    pub connect_timeout_ms: u64,
    /// Attempts after the first when the connection fails or the endpoint
    /// answers 429 or 5xx (at most 10).
    pub retries: u32,
    /// The wait before the first retry, in milliseconds; doubled for each
    /// next one, at most 10 s (a longer `Retry-After` is capped too).
    pub retry_backoff_ms: u64,
    /// PEM file of the certificates to trust for `https://` instead of the
    /// bundled Mozilla roots (a self-hosted endpoint with its own CA).
    pub ca_file: Option<PathBuf>,
    /// Calls (attempts) each workspace may make per period; 0 = no limit.
    pub budget_calls: u64,
    /// Tokens each workspace may spend per period (the endpoint's
    /// `usage.total_tokens`, or a 4-bytes-per-token estimate); 0 = no limit.
    pub budget_tokens: u64,
    /// The budget's period, in seconds.
    pub budget_period_secs: u64,
    /// Allow an `http://` URL that is not on this machine: the key and
    /// every prompt (transcript text) then cross the network in clear.
    /// Off by default: only a loopback address or `localhost` is used.
    pub allow_insecure_http: bool,
    /// Where the memory policy is told the prompts go: `local_model` for
    /// an endpoint on this machine and `external_llm` for any other when
    /// unset. Set `external_llm` (or `cloud_model`) for a local proxy that
    /// forwards to a hosted model: content the policy keeps `local-only`
    /// then stays out of the prompts.
    pub destination: Option<cairn_memory::assemble::Destination>,
}

impl std::fmt::Debug for ModelConfig {
    /// The key is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelConfig")
            .field("enabled", &self.enabled)
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("retries", &self.retries)
            .field("retry_backoff_ms", &self.retry_backoff_ms)
            .field("ca_file", &self.ca_file)
            .field("budget_calls", &self.budget_calls)
            .field("budget_tokens", &self.budget_tokens)
            .field("budget_period_secs", &self.budget_period_secs)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("destination", &self.destination)
            .finish()
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            enabled: false,
            url: "http://127.0.0.1:8080/v1".to_owned(),
            model: "local".to_owned(),
            api_key: None,
            timeout_ms: 10_000,
            connect_timeout_ms: 3_000,
            retries: 2,
            retry_backoff_ms: 250,
            ca_file: None,
            budget_calls: 1_000,
            budget_tokens: 2_000_000,
            budget_period_secs: 3_600,
            allow_insecure_http: false,
            destination: None,
        }
    }
}

/// Most retries a section may ask for.
const MAX_RETRIES: u32 = 10;

/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Largest answer read from the endpoint.
const MAX_RESPONSE_BYTES: u64 = 1 << 20;

/// The parts of a model URL.
struct Endpoint {
    https: bool,
    /// `host[:port]` as written.
    authority: String,
    /// The path before `/chat/completions`, without a trailing `/`.
    base: String,
}

impl ModelConfig {
    /// Checks the section: an `https://` URL with a host (or `http://` on
    /// this machine unless `allow_insecure_http` is set), timeouts above
    /// zero, bounded retries, a readable `ca_file`. The error names what to
    /// change.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.endpoint()?;
        if self.timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err("timeout_ms and connect_timeout_ms must be greater than zero".to_owned());
        }
        if self.retries > MAX_RETRIES {
            return Err(format!(
                "retries {} is out of range; use 0 to {MAX_RETRIES}",
                self.retries
            ));
        }
        if self.budget_period_secs == 0 {
            return Err("budget_period_secs must be greater than zero".to_owned());
        }
        self.trusted_roots()?;
        Ok(())
    }

    fn endpoint(&self) -> Result<Endpoint, String> {
        let (https, rest) = if let Some(rest) = self.url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = self.url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!(
                "url {:?}: use an https:// endpoint (or http:// on this machine)",
                self.url
            ));
        };
        let (authority, base) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(format!("url {:?} has no host", self.url));
        }
        if authority.contains('@') {
            return Err(format!(
                "url {:?} carries credentials: put the key in api_key",
                self.url
            ));
        }
        if base.contains(['?', '#']) {
            return Err(format!(
                "url {:?}: a base URL has no query or fragment",
                self.url
            ));
        }
        if !https && !self.allow_insecure_http && !is_local(authority) {
            return Err(format!(
                "url {:?} is plain http:// to another machine: the API key and the transcripts \
                 would cross the network in clear. Use an https:// endpoint or one on this \
                 machine (a loopback address or localhost), or set allow_insecure_http = true \
                 in this section if the network is trusted",
                self.url
            ));
        }
        Ok(Endpoint {
            https,
            authority: authority.to_owned(),
            base: base.to_owned(),
        })
    }

    /// The certificates of `ca_file`, if set.
    fn trusted_roots(&self) -> Result<Option<Vec<Certificate<'static>>>, String> {
        let Some(path) = &self.ca_file else {
            return Ok(None);
        };
        let pem = std::fs::read(path)
            .map_err(|e| format!("ca_file {}: cannot be read: {e}", path.display()))?;
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(&pem) {
            match item {
                Ok(PemItem::Certificate(cert)) => certs.push(cert),
                Ok(_) => {}
                Err(e) => return Err(format!("ca_file {}: {e}", path.display())),
            }
        }
        if certs.is_empty() {
            return Err(format!(
                "ca_file {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                path.display()
            ));
        }
        Ok(Some(certs))
    }
}

/// True when `authority` (`host[:port]`) names this machine: `localhost`
/// or a loopback address, written as such (no name is resolved).
fn is_local(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why a model call gave no usable answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ModelError {
    /// The configured section cannot be used.
    #[error("model endpoint {url:?}: {reason}")]
    Config {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The workspace spent its budget for this period.
    #[error("model budget of workspace {workspace:?} spent: {reason}")]
    Budget {
        /// The workspace.
        workspace: String,
        /// Which limit, and when it resets.
        reason: String,
    },
    /// No connection or no answer in time.
    #[error("model endpoint {host}: no {what} within {millis} ms")]
    Timeout {
        /// `host:port`.
        host: String,
        /// `connection` or `answer`.
        what: &'static str,
        /// The configured timeout.
        millis: u64,
    },
    /// Could not connect, or the connection failed.
    #[error("model endpoint {host}: {reason}")]
    Connect {
        /// `host:port`.
        host: String,
        /// The failure.
        reason: String,
    },
    /// The TLS handshake failed: most often a certificate that is not
    /// trusted (self-signed, another CA than `ca_file`'s) or not for this
    /// host.
    #[error("model endpoint {host}: TLS failed: {reason}")]
    Tls {
        /// `host:port`.
        host: String,
        /// rustls' reason.
        reason: String,
    },
    /// The endpoint refused the request (an HTTP status other than 200).
    #[error("model endpoint {host} refused the request: HTTP status {status}")]
    Status {
        /// `host:port`.
        host: String,
        /// The status code.
        status: u16,
        /// `Retry-After`, in seconds, when the endpoint sent one.
        retry_after: Option<u64>,
    },
    /// The answer is not a chat completion.
    #[error("model endpoint {host}: {reason}")]
    Reply {
        /// `host:port`.
        host: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Every attempt failed; the last one's error.
    #[error("{last} (after {attempts} attempts)")]
    Retried {
        /// How many were made.
        attempts: u32,
        /// The last failure.
        last: Box<ModelError>,
    },
}

impl ModelError {
    /// Worth another attempt: the connection failed, or the endpoint is
    /// overloaded (429) or failing (5xx).
    fn is_transient(&self) -> bool {
        match self {
            ModelError::Connect { .. } => true,
            ModelError::Timeout { what, .. } => *what == "connection",
            ModelError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

/// A per-workspace allowance of model calls and tokens per period, shared
/// by every client of one `[*.model]` section in a process (the facade
/// holds one per section). Fixed windows: a workspace's window opens at its
/// first call and resets `period` later. Kept in memory, so a restart
/// starts a fresh window.
#[derive(Debug)]
pub(crate) struct Budget {
    calls: u64,
    tokens: u64,
    period: Duration,
    windows: Mutex<HashMap<String, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    calls: u64,
    tokens: u64,
}

impl Budget {
    /// The limits of `config`.
    pub(crate) fn new(config: &ModelConfig) -> Self {
        Budget {
            calls: config.budget_calls,
            tokens: config.budget_tokens,
            period: Duration::from_secs(config.budget_period_secs.max(1)),
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one call from `workspace`'s allowance at `now`, or says which
    /// limit is reached.
    fn take_call(&self, workspace: &str, now: Instant) -> Result<(), ModelError> {
        let mut windows = self.windows.lock();
        if windows.len() > 1024 {
            windows.retain(|_, w| now.duration_since(w.start) < self.period);
        }
        let window = windows.entry(workspace.to_owned()).or_insert(Window {
            start: now,
            calls: 0,
            tokens: 0,
        });
        if now.duration_since(window.start) >= self.period {
            *window = Window {
                start: now,
                calls: 0,
                tokens: 0,
            };
        }
        let resets = self
            .period
            .saturating_sub(now.duration_since(window.start))
            .as_secs()
            .max(1);
        let spent = |what: String| ModelError::Budget {
            workspace: workspace.to_owned(),
            reason: format!(
                "{what} per {} s (budget_calls, budget_tokens); it resets in {resets} s",
                self.period.as_secs()
            ),
        };
        if self.calls > 0 && window.calls >= self.calls {
            return Err(spent(format!("{} calls", self.calls)));
        }
        if self.tokens > 0 && window.tokens >= self.tokens {
            return Err(spent(format!("{} tokens", self.tokens)));
        }
        window.calls += 1;
        Ok(())
    }

    /// Counts `tokens` spent by `workspace` in its current window.
    fn spend_tokens(&self, workspace: &str, tokens: u64) {
        if let Some(window) = self.windows.lock().get_mut(workspace) {
            window.tokens = window.tokens.saturating_add(tokens);
        }
    }
}

/// A client of one chat-completions endpoint.
#[derive(Clone)]
pub(crate) struct ChatClient {
    agent: Agent,
    /// `host:port`, for messages.
    host: String,
    url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    retries: u32,
    backoff: Duration,
    budget: Arc<Budget>,
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never in logs.
        f.debug_struct("ChatClient")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

/// Milliseconds of `d`, for messages.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ChatClient {
    /// A client for `config`, with a budget of its own.
    #[cfg(test)]
    pub(crate) fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        Self::with_budget(config, Arc::new(Budget::new(config)))
    }

    /// A client for `config` that spends `budget`.
    pub(crate) fn with_budget(
        config: &ModelConfig,
        budget: Arc<Budget>,
    ) -> Result<Self, ModelError> {
        let refuse = |reason: String| ModelError::Config {
            url: config.url.clone(),
            reason,
        };
        config.check().map_err(refuse)?;
        let endpoint = config.endpoint().map_err(refuse)?;
        let mut tls = TlsConfig::builder().provider(TlsProvider::Rustls);
        if let Some(roots) = config.trusted_roots().map_err(refuse)? {
            tls = tls.root_certs(RootCerts::from(roots));
        }
        // A local endpoint is reached directly; a remote one through the
        // proxy the environment names (HTTPS_PROXY, NO_PROXY), as curl would.
        let proxy = if is_local(&endpoint.authority) {
            None
        } else {
            ureq::Proxy::try_from_env()
        };
        let timeout = Duration::from_millis(config.timeout_ms.max(1));
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms.max(1));
        let agent: Agent = Agent::config_builder()
            .http_status_as_error(false)
            // A redirect would carry the key elsewhere: it is a refusal.
            .max_redirects(0)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(connect_timeout))
            .proxy(proxy)
            .tls_config(tls.build())
            .build()
            .into();
        let scheme = if endpoint.https { "https" } else { "http" };
        let host = if endpoint.authority.contains(':') && !endpoint.authority.ends_with(']') {
            endpoint.authority.clone()
        } else {
            format!(
                "{}:{}",
                endpoint.authority,
                if endpoint.https { 443 } else { 80 }
            )
        };
        Ok(ChatClient {
            agent,
            url: format!(
                "{scheme}://{}{}/chat/completions",
                endpoint.authority, endpoint.base
            ),
            host,
            model: config.model.clone(),
            api_key: config.api_key.clone().filter(|k| !k.is_empty()),
            timeout,
            connect_timeout,
            retries: config.retries.min(MAX_RETRIES),
            backoff: Duration::from_millis(config.retry_backoff_ms),
            budget,
        })
    }

    /// The model name.
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// Asks for one completion of `prompt` (one user message, temperature
    /// 0) on behalf of `workspace` and returns `choices[0].message.content`.
    /// Retries a transient failure; every attempt is charged to the
    /// workspace's budget.
    pub(crate) fn complete(
        &self,
        workspace: &str,
        prompt: &str,
        max_tokens: usize,
    ) -> Result<String, ModelError> {
        let body = serde_json::json!({
            "model": self.model,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        });
        let body = serde_json::to_vec(&body).map_err(|e| self.reply_error(e.to_string()))?;
        let mut attempts = 0;
        loop {
            self.budget.take_call(workspace, Instant::now())?;
            attempts += 1;
            let error = match self.attempt(&body) {
                Ok((content, tokens)) => {
                    self.budget.spend_tokens(workspace, tokens);
                    return Ok(content);
                }
                Err(error) => error,
            };
            if !error.is_transient() || attempts > self.retries {
                return Err(if attempts > 1 {
                    ModelError::Retried {
                        attempts,
                        last: Box::new(error),
                    }
                } else {
                    error
                });
            }
            let wait = self.wait_before(attempts, &error);
            tracing::debug!(host = %self.host, attempts, ?wait, %error, "model call failed; retrying");
            // This thread is the capture's or the compaction's own blocking
            // worker; the wait is bounded by `retries` and MAX_BACKOFF.
            std::thread::sleep(wait);
        }
    }

    /// The wait after `attempts` failed attempts: the backoff doubled for
    /// each, or the endpoint's `Retry-After` when longer, at most
    /// [`MAX_BACKOFF`].
    fn wait_before(&self, attempts: u32, error: &ModelError) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(1 << attempts.saturating_sub(1).min(16));
        let asked = match error {
            ModelError::Status {
                retry_after: Some(secs),
                ..
            } => Duration::from_secs(*secs),
            _ => Duration::ZERO,
        };
        doubled.max(asked).min(MAX_BACKOFF)
    }

    /// One request: the content and the tokens it cost.
    fn attempt(&self, body: &[u8]) -> Result<(String, u64), ModelError> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response = request.send(body).map_err(|e| self.transport_error(e))?;
        let status = response.status().as_u16();
        if status != 200 {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            return Err(ModelError::Status {
                host: self.host.clone(),
                status,
                retry_after,
            });
        }
        let raw = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_error(e))?;
        let value: serde_json::Value = serde_json::from_slice(&raw)
            .map_err(|e| self.reply_error(format!("the answer is not JSON: {e}")))?;
        let content = value
            .pointer("/choices/0/message/content")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                self.reply_error("the answer has no choices[0].message.content".to_owned())
            })?;
        let tokens = value
            .pointer("/usage/total_tokens")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| u64::try_from((body.len() + content.len()) / 4).unwrap_or(0));
        Ok((content, tokens))
    }

    fn reply_error(&self, reason: String) -> ModelError {
        ModelError::Reply {
            host: self.host.clone(),
            reason,
        }
    }

    /// What a failed exchange means for the caller.
    fn transport_error(&self, error: ureq::Error) -> ModelError {
        let host = self.host.clone();
        match error {
            ureq::Error::Timeout(which) => {
                let connecting = matches!(which, ureq::Timeout::Connect | ureq::Timeout::Resolve);
                ModelError::Timeout {
                    host,
                    what: if connecting { "connection" } else { "answer" },
                    millis: millis(if connecting {
                        self.connect_timeout
                    } else {
                        self.timeout
                    }),
                }
            }
            ureq::Error::Io(io) => {
                if let Some(tls) = io
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                {
                    return ModelError::Tls {
                        host,
                        reason: tls.to_string(),
                    };
                }
                match io.kind() {
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                        ModelError::Timeout {
                            host,
                            what: "answer",
                            millis: millis(self.timeout),
                        }
                    }
                    _ => ModelError::Connect {
                        host,
                        reason: io.to_string(),
                    },
                }
            }
            ureq::Error::Rustls(tls) => ModelError::Tls {
                host,
                reason: tls.to_string(),
            },
            ureq::Error::Tls(reason) => ModelError::Tls {
                host,
                reason: reason.to_owned(),
            },
            ureq::Error::HostNotFound => ModelError::Connect {
                host,
                reason: "host not found".to_owned(),
            },
            ureq::Error::ConnectionFailed => ModelError::Connect {
                host,
                reason: "connection failed".to_owned(),
            },
            ureq::Error::BodyExceedsLimit(limit) => ModelError::Reply {
                host,
                reason: format!("the answer is larger than {limit} bytes"),
            },
            other => ModelError::Reply {
                host,
                reason: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests;

/// The memory policy between stored content and a model endpoint: before a
/// turn or a summary goes into a model pass's prompt (extraction,
/// compaction summaries), the policy is asked `learn-from` about it for
/// the endpoint's destination (`local-model` for an endpoint on this
/// machine, else `external-llm`). `local-only` content, a reference or a
/// block never reaches an external endpoint; `redacted` content (or the
/// `redact-personal-data` obligation) goes masked.
#[derive(Clone, Debug)]
pub(crate) struct ModelGuard {
    slot: cairn_policies::PolicySlot<cairn_policies::MemoryPolicy>,
    destination: cairn_memory::assemble::Destination,
    surface: &'static str,
}

impl ModelGuard {
    /// The guard of a pass (`surface`) calling `config`'s endpoint.
    pub(crate) fn new(
        policies: &cairn_policies::Policies,
        config: &ModelConfig,
        surface: &'static str,
    ) -> ModelGuard {
        let authority = config
            .url
            .split_once("://")
            .map_or("", |(_, rest)| rest.split('/').next().unwrap_or_default());
        ModelGuard {
            slot: policies.memory_policy().clone(),
            destination: config.destination.unwrap_or(if is_local(authority) {
                cairn_memory::assemble::Destination::LocalModel
            } else {
                cairn_memory::assemble::Destination::ExternalLlm
            }),
            surface,
        }
    }

    /// `object`'s text as it may go to the endpoint; `None` when it may
    /// not (a decision that cannot be had keeps it here).
    pub(crate) fn admit(
        &self,
        workspace: &str,
        object: &crate::reads::Object<'_>,
    ) -> Option<String> {
        use cairn_memory::assemble::Fidelity;
        let asker = crate::reads::Asker {
            action: cairn_policies::Action::LearnFrom,
            destination: Some(self.destination),
            principal: cairn_policies::PrincipalRef {
                kind: cairn_policies::PrincipalKind::Operator,
                id: "cairn".to_owned(),
            },
            surface: self.surface,
            work_context: object.work_context.map(str::to_owned),
        };
        match crate::reads::decide(&self.slot, Some(workspace), &asker, None, object) {
            Ok(v) => match v.fidelity {
                Fidelity::Full => Some(object.text.to_owned()),
                Fidelity::Redacted => Some(cairn_memory::redact::redact_personal(object.text)),
                Fidelity::ReferenceOnly | Fidelity::Blocked => None,
            },
            Err(error) => {
                tracing::warn!(%error, surface = self.surface, "memory policy unavailable: the item stays out of the model's prompt");
                None
            }
        }
    }
}
