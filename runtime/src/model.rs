//! The optional model endpoint: an OpenAI-compatible chat-completions API,
//! shared by compaction's summariser (`[compaction.model]`) and the
//! extraction pass (`[extraction.model]`). Off by default; the runtime makes
//! no network call unless one is enabled.
//!
//! [`ChatClient`] is std-only HTTP/1.1 over `TcpStream` (`http://` URLs, one
//! request per connection), so the library pulls in no HTTP client crate.
//! Plain HTTP carries the API key and the transcripts in clear, so a URL
//! that is not on this machine (a loopback address or `localhost`) is
//! refused unless the configuration says `allow_insecure_http = true` (an
//! endpoint on a trusted network, or TLS added by a local proxy).
//! Every call is bounded by the configured timeout (connect, write and
//! read), and every failure is a [`ModelError`] that says what went wrong:
//! a refused or unreachable endpoint, a timeout, an HTTP error status, or an
//! answer that is not a chat completion. Callers fall back to their
//! deterministic path on any of them.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An OpenAI-compatible chat-completions endpoint, `[compaction.model]` or
/// `[extraction.model]`. Off by default.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Ask the model first.
    pub enabled: bool,
    /// Base URL, `http://host:port/v1` (`/chat/completions` is appended).
    pub url: String,
    /// Model name.
    pub model: String,
    /// Bearer key, if the endpoint wants one.
    pub api_key: Option<String>,
    /// Connect, write and read timeout, in milliseconds.
    pub timeout_ms: u64,
    /// Allow an `http://` URL that is not on this machine: the key and
    /// every prompt (transcript text) then cross the network in clear.
    /// Off by default: only a loopback address or `localhost` is used.
    pub allow_insecure_http: bool,
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
            .field("allow_insecure_http", &self.allow_insecure_http)
            .finish()
    }
}

impl ModelConfig {
    /// Checks `url`: an `http://` URL with a host, on this machine unless
    /// `allow_insecure_http` is set. The error names what to change.
    pub(crate) fn check_url(&self) -> Result<(), String> {
        let rest = self.url.strip_prefix("http://").ok_or_else(|| {
            format!(
                "url {:?}: only http:// endpoints are supported (a local proxy can add TLS)",
                self.url
            )
        })?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(format!("url {:?} has no host", self.url));
        }
        if !self.allow_insecure_http && !is_local(authority) {
            return Err(format!(
                "url {:?} is plain http:// to another machine: the API key and the transcripts \
                 would cross the network in clear. Use an endpoint on this machine (a loopback \
                 address or localhost, e.g. a TLS-terminating proxy), or set \
                 allow_insecure_http = true in this section if the network is trusted",
                self.url
            ));
        }
        Ok(())
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

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            enabled: false,
            url: "http://127.0.0.1:8080/v1".to_owned(),
            model: "local".to_owned(),
            api_key: None,
            timeout_ms: 10_000,
            allow_insecure_http: false,
        }
    }
}

/// Why a model call gave no usable answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ModelError {
    /// The configured URL cannot be used.
    #[error("model endpoint {url:?}: {reason}")]
    Config {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// No answer in time.
    #[error("model endpoint {host}: no answer within {millis} ms")]
    Timeout {
        /// `host:port`.
        host: String,
        /// The configured timeout.
        millis: u64,
    },
    /// Could not connect, or the connection failed.
    #[error("model endpoint {host}: {source}")]
    Io {
        /// `host:port`.
        host: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The endpoint refused the request (an HTTP status other than 200).
    #[error("model endpoint {host} refused the request: HTTP status {status}")]
    Status {
        /// `host:port`.
        host: String,
        /// The status line's code.
        status: String,
    },
    /// The answer is not a chat completion.
    #[error("model endpoint {host}: {reason}")]
    Reply {
        /// `host:port`.
        host: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Largest answer read from the endpoint.
const MAX_RESPONSE_BYTES: u64 = 1 << 20;

/// A client of one chat-completions endpoint.
#[derive(Clone)]
pub(crate) struct ChatClient {
    host: String,
    authority: String,
    path: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never in logs.
        f.debug_struct("ChatClient")
            .field("host", &self.host)
            .field("path", &self.path)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ChatClient {
    /// A client for `config.url`; only `http://` URLs are supported, and
    /// only on this machine unless `allow_insecure_http` is set.
    pub(crate) fn new(config: &ModelConfig) -> Result<Self, ModelError> {
        let refuse = |reason: &str| ModelError::Config {
            url: config.url.clone(),
            reason: reason.to_owned(),
        };
        config.check_url().map_err(|why| refuse(&why))?;
        let rest = config
            .url
            .strip_prefix("http://")
            .ok_or_else(|| refuse("only http:// endpoints are supported"))?;
        let (authority, base) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(refuse("no host"));
        }
        let host = if authority.contains(':') {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(ChatClient {
            host,
            authority: authority.to_owned(),
            path: format!("{base}/chat/completions"),
            model: config.model.clone(),
            api_key: config.api_key.clone(),
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
        })
    }

    /// The model name.
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// Asks for one completion of `prompt` (one user message, temperature
    /// 0) and returns `choices[0].message.content`.
    pub(crate) fn complete(&self, prompt: &str, max_tokens: usize) -> Result<String, ModelError> {
        let body = serde_json::json!({
            "model": self.model,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        });
        let body = serde_json::to_vec(&body).map_err(|e| self.reply_error(e.to_string()))?;
        let raw = self.post(&body).map_err(|e| self.io_error(e))?;
        let body = self.response_body(&raw)?;
        let value: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| self.reply_error(format!("the answer is not JSON: {e}")))?;
        value
            .pointer("/choices/0/message/content")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                self.reply_error("the answer has no choices[0].message.content".to_owned())
            })
    }

    fn reply_error(&self, reason: String) -> ModelError {
        ModelError::Reply {
            host: self.host.clone(),
            reason,
        }
    }

    fn io_error(&self, source: std::io::Error) -> ModelError {
        match source.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ModelError::Timeout {
                host: self.host.clone(),
                millis: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            },
            _ => ModelError::Io {
                host: self.host.clone(),
                source,
            },
        }
    }

    fn post(&self, body: &[u8]) -> std::io::Result<Vec<u8>> {
        let addr = self
            .host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let mut stream = TcpStream::connect_timeout(&addr, self.timeout)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        let auth = self
            .api_key
            .as_ref()
            .map(|k| format!("Authorization: Bearer {k}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.path,
            self.authority,
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        stream.flush()?;
        let mut out = Vec::new();
        stream.take(MAX_RESPONSE_BYTES).read_to_end(&mut out)?;
        Ok(out)
    }

    /// The body of an HTTP/1.1 response: status 200 required; chunked or not.
    fn response_body(&self, raw: &[u8]) -> Result<Vec<u8>, ModelError> {
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| self.reply_error("no HTTP header in the answer".to_owned()))?;
        let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
        let body = &raw[split + 4..];
        let status = head.split_whitespace().nth(1).unwrap_or_default();
        if status != "200" {
            return Err(ModelError::Status {
                host: self.host.clone(),
                status: status.to_owned(),
            });
        }
        if !head.contains("transfer-encoding: chunked") {
            return Ok(body.to_vec());
        }
        let bad = |what: &str| self.reply_error(format!("bad chunked body: {what}"));
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let line_end = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or_else(|| bad("no chunk size line"))?;
            let size_text = String::from_utf8_lossy(&rest[..line_end]);
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad("chunk size"))?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                return Ok(out);
            }
            let chunk = rest.get(..size).ok_or_else(|| bad("short chunk"))?;
            out.extend_from_slice(chunk);
            rest = rest.get(size + 2..).unwrap_or_default();
        }
    }
}

#[cfg(test)]
mod tests {
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
    /// and the refusal names the key that allows it.
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
        assert!(client("https://api.example.com/v1", true).is_err());
        assert!(client("http:///v1", true).is_err());
    }
}
