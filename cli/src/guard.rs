//! Who may call `cairn serve`: the `Host` allow-list (against DNS
//! rebinding of a loopback server) and bearer tokens, per workspace or
//! admin. Decided before any handler runs; the decision (a [`Principal`])
//! travels in the request's extensions for handlers that need more (erasing
//! a whole workspace is the admin's).

use std::net::ToSocketAddrs;

use cairn::{Cairn, ServerConfig, TokenScope};

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// No token is configured: local development, everything open.
    Open,
    /// The admin token: everything.
    Admin,
    /// A workspace token, from `server.tokens` or made with `cairn tokens
    /// create`: these workspaces' routes only.
    Workspaces {
        /// Which token: `config:<index>` or `token:<id>`.
        token: String,
        /// What it opens.
        workspaces: Vec<String>,
        /// Read (`GET`, search, assemble) only, or read and write.
        scope: TokenScope,
    },
}

impl Principal {
    /// May erase workspaces, manage plugins, list and sweep workspaces.
    pub(crate) fn is_admin(&self) -> bool {
        matches!(self, Principal::Open | Principal::Admin)
    }

    fn may_use(&self, workspace: &str) -> bool {
        match self {
            Principal::Open | Principal::Admin => true,
            Principal::Workspaces { workspaces, .. } => workspaces.iter().any(|w| w == workspace),
        }
    }

    /// A read-scoped token: the MCP endpoint refuses its writing tool.
    pub(crate) fn reads_only(&self) -> bool {
        matches!(
            self,
            Principal::Workspaces {
                scope: TokenScope::Read,
                ..
            }
        )
    }

    /// The key rate limits count this caller's requests under: its token,
    /// never a name the client picks (`None` on a server without tokens).
    pub(crate) fn rate_key(&self) -> Option<String> {
        match self {
            Principal::Open => None,
            Principal::Admin => Some("token:admin".to_owned()),
            Principal::Workspaces { token, .. } => Some(token.clone()),
        }
    }
}

/// Why a request was turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 403 `host_not_allowed`.
    Host(String),
    /// 401 `unauthorized`: no or an unknown token.
    Unauthorized(&'static str),
    /// 403 `forbidden`: a token that does not open this route.
    Forbidden(String),
    /// 429 `rate_limited`: the caller is over `server.requests_per_minute`.
    RateLimited {
        /// The limit.
        per_minute: u32,
    },
    /// 503 `unavailable`: the token store could not be read (fails closed).
    Unavailable(String),
}

/// Whether a request only reads: `GET`/`HEAD`, and the `POST`s whose
/// body is a question (search, assemble) or an MCP message (whose one
/// writing tool, `memory_note`, refuses a read-scoped token itself). A
/// read-scoped token may make these only.
pub(crate) fn is_read(method: &str, path: &str) -> bool {
    matches!(method, "GET" | "HEAD")
        || (method == "POST"
            && (path.ends_with("/search") || path.ends_with("/assemble") || path.ends_with("/mcp")))
}

/// Requests per caller key, a token bucket per key (`governor`).
type Limiter = governor::DefaultKeyedRateLimiter<String>;

/// Keys the request limiter tracks before it drops idle ones.
const MAX_LIMITER_KEYS: usize = 10_000;

/// The decision rules of one server, built from its configuration.
#[derive(Clone)]
pub(crate) struct Guard {
    admin: Option<String>,
    tokens: Vec<(String, Vec<String>)>,
    /// Where tokens made with `cairn tokens create` are verified.
    store: Option<Cairn>,
    /// Requests need a token: some token was configured or stored when the
    /// server started (revoking every token later does not open it).
    auth: bool,
    /// `None`: any host.
    hosts: Option<Vec<String>>,
    /// `None`: no request limit.
    limiter: Option<(std::sync::Arc<Limiter>, u32)>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("auth", &self.auth)
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// True when every address `listen` resolves to is a loopback address.
pub(crate) fn is_loopback(listen: &str) -> bool {
    match listen.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// Compares two secrets in time that depends on their lengths only.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The host part of a `Host` header value, lowercased, without the port.
fn host_name(header: &str) -> String {
    let header = header.trim();
    let name = if let Some(rest) = header.strip_prefix('[') {
        // [::1]:7878
        rest.split(']').next().unwrap_or_default()
    } else {
        header.split(':').next().unwrap_or_default()
    };
    name.to_ascii_lowercase()
}

impl Guard {
    /// The rules for a server listening on `listen` with `server`'s
    /// tokens and host list.
    pub(crate) fn new(server: &ServerConfig, listen: &str) -> Guard {
        let hosts = if !server.allowed_hosts.is_empty() {
            Some(server.allowed_hosts.iter().map(|h| host_name(h)).collect())
        } else if is_loopback(listen) {
            Some(vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
                "::1".to_owned(),
            ])
        } else {
            None
        };
        let limiter = std::num::NonZeroU32::new(server.requests_per_minute).map(|n| {
            let quota = governor::Quota::per_minute(n);
            (
                std::sync::Arc::new(Limiter::keyed(quota)),
                server.requests_per_minute,
            )
        });
        Guard {
            limiter,
            auth: server.auth_enabled(),
            store: None,
            admin: server.admin_token.clone(),
            tokens: server
                .tokens
                .iter()
                .map(|t| (t.token.clone(), t.workspaces.clone()))
                .collect(),
            hosts,
        }
    }

    /// Counts one request of `key` (a principal's token) against
    /// `server.requests_per_minute`.
    pub(crate) fn admit(&self, key: &str) -> Result<(), Refusal> {
        let Some((limiter, per_minute)) = &self.limiter else {
            return Ok(());
        };
        if limiter.len() > MAX_LIMITER_KEYS {
            limiter.retain_recent();
        }
        limiter
            .check_key(&key.to_owned())
            .map_err(|_| Refusal::RateLimited {
                per_minute: *per_minute,
            })
    }

    /// Verifies `cairn tokens` tokens against `cairn`'s store; when it holds
    /// any, every request needs a token.
    pub(crate) fn with_stored_tokens(mut self, cairn: Cairn) -> cairn::Result<Guard> {
        self.auth |= cairn.has_tokens()?;
        self.store = Some(cairn);
        Ok(self)
    }

    /// Whether requests need a token.
    pub(crate) fn auth_enabled(&self) -> bool {
        self.auth
    }

    /// A listen address with no `Host` to check (a Unix socket: no browser
    /// reaches it, so there is nothing to rebind).
    pub(crate) fn without_host_check(mut self) -> Guard {
        self.hosts = None;
        self
    }

    /// Decides one request from its `Host` and `Authorization` headers and
    /// its path (as sent, not decoded: an encoded workspace name matches no
    /// token, so it fails closed).
    pub(crate) fn check(
        &self,
        host: Option<&str>,
        authorization: Option<&str>,
        method: &str,
        path: &str,
    ) -> Result<Principal, Refusal> {
        if let Some(allowed) = &self.hosts {
            // HTTP/1.1 requires Host; a request without one is refused too.
            let name = host.map(host_name).unwrap_or_default();
            if !allowed.contains(&name) {
                return Err(Refusal::Host(name));
            }
        }
        if matches!(path, "/healthz" | "/openapi.json") {
            return Ok(Principal::Open);
        }
        if !self.auth {
            return Ok(Principal::Open);
        }
        let token = authorization
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or(Refusal::Unauthorized(
                "this server needs `Authorization: Bearer <token>`",
            ))?;
        let principal = if self.admin.as_deref().is_some_and(|a| same_secret(a, token)) {
            Principal::Admin
        } else if let Some(found) = self.stored(token)? {
            found
        } else {
            // Every token is compared, so the time taken does not say which
            // one matched.
            let mut found = None;
            for (i, (secret, workspaces)) in self.tokens.iter().enumerate() {
                if same_secret(secret, token) && found.is_none() {
                    found = Some(Principal::Workspaces {
                        token: format!("config:{i}"),
                        workspaces: workspaces.clone(),
                        scope: TokenScope::Write,
                    });
                }
            }
            found.ok_or(Refusal::Unauthorized("unknown token"))?
        };
        if let Principal::Workspaces {
            scope: TokenScope::Read,
            ..
        } = principal
            && !is_read(method, path)
        {
            return Err(Refusal::Forbidden(format!(
                "this token may read only; {method} {path} writes"
            )));
        }
        match path.strip_prefix("/v1/workspaces/") {
            Some(rest) => {
                let workspace = rest.split('/').next().unwrap_or_default();
                if !principal.may_use(workspace) {
                    return Err(Refusal::Forbidden(format!(
                        "this token does not open workspace {workspace:?}"
                    )));
                }
            }
            None if !principal.is_admin() => {
                return Err(Refusal::Forbidden(format!("{path} needs the admin token")));
            }
            None => {}
        }
        Ok(principal)
    }
}

impl Guard {
    /// The stored token `presented` is, if it is one.
    fn stored(&self, presented: &str) -> Result<Option<Principal>, Refusal> {
        let Some(cairn) = &self.store else {
            return Ok(None);
        };
        match cairn.verify_token(presented) {
            Ok(found) => Ok(found.map(|t| Principal::Workspaces {
                token: format!("token:{}", t.id),
                workspaces: vec![t.workspace],
                scope: t.scope,
            })),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the access tokens");
                Err(Refusal::Unavailable(
                    "the access tokens cannot be read; see the server log".to_owned(),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::WorkspaceToken;

    fn guard(listen: &str, tokens: bool) -> Guard {
        let mut server = ServerConfig::default();
        if tokens {
            server.admin_token = Some("admin-token-0123456789".to_owned());
            server.tokens = vec![WorkspaceToken {
                token: "acme-token-0123456789".to_owned(),
                workspaces: vec!["acme".to_owned()],
            }];
        }
        Guard::new(&server, listen)
    }

    #[test]
    fn loopback_servers_check_the_host() {
        let g = guard("127.0.0.1:7878", false);
        assert_eq!(
            g.check(Some("127.0.0.1:7878"), None, "GET", "/v1/plugins"),
            Ok(Principal::Open)
        );
        assert_eq!(
            g.check(Some("[::1]:7878"), None, "GET", "/healthz"),
            Ok(Principal::Open)
        );
        assert_eq!(
            g.check(Some("LOCALHOST"), None, "GET", "/healthz"),
            Ok(Principal::Open)
        );
        assert_eq!(
            g.check(Some("evil.example:7878"), None, "GET", "/healthz"),
            Err(Refusal::Host("evil.example".to_owned()))
        );
        assert!(g.check(None, None, "GET", "/healthz").is_err());
    }

    #[test]
    fn tokens_open_their_workspaces_only() {
        let g = guard("127.0.0.1:7878", true);
        let host = Some("127.0.0.1");
        let acme = Some("Bearer acme-token-0123456789");
        let admin = Some("Bearer admin-token-0123456789");
        assert!(matches!(
            g.check(host, None, "POST", "/v1/workspaces/acme/turns"),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(matches!(
            g.check(
                host,
                Some("Bearer nope"),
                "POST",
                "/v1/workspaces/acme/turns"
            ),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(matches!(
            g.check(host, acme, "POST", "/v1/workspaces/acme/turns"),
            Ok(Principal::Workspaces { ref token, .. }) if token == "config:0"
        ));
        assert!(matches!(
            g.check(host, acme, "POST", "/v1/workspaces/globex/turns"),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            g.check(host, acme, "POST", "/v1/workspaces/%61cme/turns"),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            g.check(host, acme, "GET", "/v1/plugins"),
            Err(Refusal::Forbidden(_))
        ));
        assert_eq!(
            g.check(host, admin, "GET", "/v1/plugins"),
            Ok(Principal::Admin)
        );
        assert_eq!(
            g.check(host, admin, "POST", "/v1/workspaces/globex/turns"),
            Ok(Principal::Admin)
        );
        assert_eq!(g.check(host, None, "GET", "/healthz"), Ok(Principal::Open));
    }

    #[test]
    fn reads_are_gets_searches_and_assemblies() {
        assert!(is_read("GET", "/v1/workspaces/acme/entries"));
        assert!(is_read("POST", "/v1/workspaces/acme/search"));
        assert!(is_read("POST", "/v1/workspaces/acme/assemble"));
        assert!(is_read("POST", "/v1/workspaces/acme/mcp"));
        assert!(!is_read("POST", "/v1/workspaces/acme/turns"));
        assert!(!is_read("POST", "/v1/workspaces/acme/forget"));
        assert!(!is_read("DELETE", "/v1/tokens/0123456789ab"));
    }

    #[test]
    fn a_public_listen_address_is_not_loopback() {
        assert!(is_loopback("127.0.0.1:0"));
        assert!(is_loopback("[::1]:0"));
        assert!(!is_loopback("0.0.0.0:7878"));
        assert!(!is_loopback("not an address"));
    }
}
