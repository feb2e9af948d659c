//! Who may call `cairn serve`: the `Host` allow-list (against DNS
//! rebinding of a loopback server), the cross-site checks of every
//! state-changing request (against a web page the operator opens), and
//! bearer tokens, per workspace or admin. Decided before any handler runs;
//! the decision (a [`Principal`]) travels in the request's extensions for
//! handlers that need more (erasing a whole workspace is the admin's).
//!
//! Every check is in memory: stored tokens are verified against the
//! token cache of [`cairn_memory`'s access module](cairn::Cairn::verify_token)
//! (read at start, kept current by this process's changes and by
//! `Cairn::refresh_tokens_every` for changes other processes make to a shared
//! store), so no request waits on the store here, and a peer that keeps
//! failing to authenticate is held off before its tokens are looked at.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cairn::{Cairn, ServerConfig, TokenScope, WebOrigin};
use parking_lot::Mutex;

use super::route::Access;

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
    /// Whether `req` was let in with the admin token (or by a server that
    /// asks for none): what a route that the guard lets a workspace token
    /// reach checks itself for the admin's part of it.
    pub(crate) fn of_admin(req: &actix_web::HttpRequest) -> bool {
        use actix_web::HttpMessage;
        req.extensions()
            .get::<Principal>()
            .is_none_or(Principal::is_admin)
    }

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
    /// 403 `origin_not_allowed`: a state-changing request from a web
    /// origin that is not the server's own nor in `server.allowed_origins`.
    Origin(String),
    /// 403 `json_required`: a state-changing request a plain HTML form
    /// could send (no JSON content type, no `x-cairn-client`).
    NotJson(String),
    /// 401 `unauthorized`: no or an unknown token.
    Unauthorized(&'static str),
    /// 403 `forbidden`: a token that does not open this route.
    Forbidden(String),
    /// 429 `rate_limited`: the caller is over `server.requests_per_minute`.
    RateLimited {
        /// The limit.
        per_minute: u32,
    },
    /// 429 `too_many_failed_authentications`: the peer is over
    /// `server.failed_auth_per_minute`.
    HeldOff {
        /// The limit.
        per_minute: u32,
        /// Seconds until the peer may try again.
        retry_after: u64,
    },
    /// 503 `unavailable`: the token store could not be read (fails closed).
    Unavailable(String),
}

/// The header a client that is not a browser may send, whatever its value,
/// to make a state-changing request without a JSON body (a browser cannot
/// add it to a cross-site request without a CORS preflight, which cairn
/// never grants).
pub(crate) const CLIENT_HEADER: &str = "x-cairn-client";

/// What the guard reads of a request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Asked<'a> {
    /// `Host`.
    pub(crate) host: Option<&'a str>,
    /// `Authorization`.
    pub(crate) authorization: Option<&'a str>,
    /// `Origin`.
    pub(crate) origin: Option<&'a str>,
    /// `Sec-Fetch-Site`.
    pub(crate) fetch_site: Option<&'a str>,
    /// `Content-Type`.
    pub(crate) content_type: Option<&'a str>,
    /// Whether it carries [`CLIENT_HEADER`].
    pub(crate) names_client: bool,
    /// The method.
    pub(crate) method: &'a str,
    /// The path, as sent.
    pub(crate) path: &'a str,
    /// The peer's address (`None` on a Unix socket).
    pub(crate) peer: Option<IpAddr>,
}

/// Whether a method may change state: everything but `GET`, `HEAD` and
/// `OPTIONS` is checked for cross-site use.
pub(crate) fn changes_state(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// Whether `content_type` is one a plain HTML form cannot send and the API
/// reads: JSON (`application/json`, `application/…+json`), a plugin's
/// `application/wasm` or an export bundle's `application/x-ndjson`.
fn is_api_content_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence == "application/wasm"
        || essence == "application/x-ndjson"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Requests per caller key, a token bucket per key (`governor`).
type Limiter = governor::DefaultKeyedRateLimiter<String>;

/// Keys the request limiter (and peers the failure limiter) track before
/// they drop idle ones.
const MAX_LIMITER_KEYS: usize = 10_000;

/// Failed authentications per peer address: a token bucket per address,
/// `per_minute` deep, refilled at `per_minute` a minute. Consulted before a
/// token is looked at, charged when one fails.
#[derive(Debug)]
struct FailureLimiter {
    per_minute: u32,
    peers: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl FailureLimiter {
    fn new(per_minute: u32) -> FailureLimiter {
        FailureLimiter {
            per_minute,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The budget left to `peer` now, refilled since its last failure.
    fn left(&self, (tokens, at): (f64, Instant), now: Instant) -> f64 {
        let per_second = f64::from(self.per_minute) / 60.0;
        (tokens + now.duration_since(at).as_secs_f64() * per_second).min(f64::from(self.per_minute))
    }

    /// Seconds until `peer` may try again, when it is held off now.
    fn held_off(&self, peer: IpAddr) -> Option<u64> {
        let now = Instant::now();
        let bucket = *self.peers.lock().get(&peer)?;
        let left = self.left(bucket, now);
        (left < 1.0).then(|| {
            let per_second = f64::from(self.per_minute) / 60.0;
            ((1.0 - left) / per_second).ceil().max(1.0) as u64
        })
    }

    /// Charges one failed authentication to `peer`.
    fn failed(&self, peer: IpAddr) {
        let now = Instant::now();
        let mut peers = self.peers.lock();
        if peers.len() >= MAX_LIMITER_KEYS {
            // Peers whose budget refilled are as good as new: forget them.
            let full = f64::from(self.per_minute);
            peers.retain(|_, bucket| self.left(*bucket, now) < full);
        }
        let full = (f64::from(self.per_minute), now);
        let left = self.left(peers.get(&peer).copied().unwrap_or(full), now);
        peers.insert(peer, ((left - 1.0).max(0.0), now));
    }
}

/// The decision rules of one server, built from its configuration.
pub(crate) struct Guard {
    admin: Option<String>,
    tokens: Vec<(String, Vec<String>)>,
    /// Where tokens made with `cairn tokens create` are verified.
    store: Option<Cairn>,
    /// Requests need a token: some token was configured, or stored when
    /// the server started or since (revoking every token later does not
    /// open it).
    auth: AtomicBool,
    /// `None`: any host.
    hosts: Option<Vec<String>>,
    /// Origins besides the server's own that may change state.
    origins: Vec<WebOrigin>,
    /// The server listens on loopback: an origin naming a loopback host
    /// and the port the request came to is the server's own.
    loopback: bool,
    /// `None`: no request limit.
    limiter: Option<(std::sync::Arc<Limiter>, u32)>,
    /// `None`: failed authentications are not limited.
    failures: Option<FailureLimiter>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("auth", &self.auth)
            .field("hosts", &self.hosts)
            .field("origins", &self.origins)
            .finish_non_exhaustive()
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
    host_and_port(header).0
}

/// The host (lowercased, IPv6 without brackets) and the port, if any, of a
/// `Host` header value.
fn host_and_port(header: &str) -> (String, Option<u16>) {
    let header = header.trim();
    let (name, port) = if let Some(rest) = header.strip_prefix('[') {
        // [::1]:7878
        let (name, after) = rest.split_once(']').unwrap_or((rest, ""));
        (name, after.strip_prefix(':'))
    } else {
        match header.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (header, None),
        }
    };
    (name.to_ascii_lowercase(), port.and_then(|p| p.parse().ok()))
}

/// The names a loopback server answers to.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl Guard {
    /// The rules for a server listening on `listen` with `server`'s
    /// tokens, host list and origin list.
    pub(crate) fn new(server: &ServerConfig, listen: &str) -> Guard {
        let loopback = is_loopback(listen);
        let hosts = if !server.allowed_hosts.is_empty() {
            Some(server.allowed_hosts.iter().map(|h| host_name(h)).collect())
        } else if loopback {
            Some(LOOPBACK_NAMES.iter().map(|n| (*n).to_owned()).collect())
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
            failures: (server.failed_auth_per_minute > 0)
                .then(|| FailureLimiter::new(server.failed_auth_per_minute)),
            auth: AtomicBool::new(server.auth_enabled()),
            store: None,
            admin: server.admin_token.clone(),
            tokens: server
                .tokens
                .iter()
                .map(|t| (t.token.clone(), t.workspaces.clone()))
                .collect(),
            hosts,
            // Checked when the configuration was loaded.
            origins: server
                .allowed_origins
                .iter()
                .filter_map(|o| WebOrigin::parse(o).ok())
                .collect(),
            loopback,
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

    /// Verifies `cairn tokens` tokens against `cairn`'s token cache (read
    /// now, on the caller's thread); when it holds any, or as soon as one
    /// is made, every request needs a token.
    pub(crate) fn with_stored_tokens(mut self, cairn: Cairn) -> cairn::Result<Guard> {
        if cairn.has_tokens()? {
            self.auth.store(true, Ordering::Release);
        }
        self.store = Some(cairn);
        Ok(self)
    }

    /// Whether requests need a token now: some token is configured, or is
    /// or was stored while the server ran (a token made at runtime turns
    /// authentication on from the next request).
    pub(crate) fn auth_enabled(&self) -> Result<bool, Refusal> {
        if self.auth.load(Ordering::Acquire) {
            return Ok(true);
        }
        let Some(cairn) = &self.store else {
            return Ok(false);
        };
        match cairn.has_tokens() {
            Ok(false) => Ok(false),
            Ok(true) => {
                tracing::info!("an access token was made: requests need a token from now on");
                self.auth.store(true, Ordering::Release);
                Ok(true)
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the access tokens");
                Err(Refusal::Unavailable(
                    "the access tokens cannot be read; see the server log".to_owned(),
                ))
            }
        }
    }

    /// A listen address with no `Host` to check (a Unix socket: no browser
    /// reaches it, so there is nothing to rebind).
    pub(crate) fn without_host_check(mut self) -> Guard {
        self.hosts = None;
        self
    }

    /// Whether `origin` may send state-changing requests to a request
    /// that came with `host`: one of `server.allowed_origins`, the
    /// request's own origin (the host and port it was sent to), or, on a
    /// loopback server, a loopback name with that port.
    fn origin_allowed(&self, origin: &WebOrigin, host: Option<&str>) -> bool {
        if self.origins.contains(origin) {
            return true;
        }
        let Some((name, port)) = host.map(host_and_port) else {
            return false;
        };
        let port = port.unwrap_or(if origin.scheme == "https" { 443 } else { 80 });
        if origin.port != port {
            return false;
        }
        origin.host == name
            || (self.loopback
                && LOOPBACK_NAMES.contains(&origin.host.as_str())
                && LOOPBACK_NAMES.contains(&name.as_str()))
    }

    /// The cross-site checks of a state-changing request: its `Origin`
    /// (or, without one, its `Sec-Fetch-Site`) is the server's own or an
    /// allowed one, and it is something a plain HTML form cannot send (a
    /// JSON body, or [`CLIENT_HEADER`]).
    fn check_cross_site(&self, asked: &Asked<'_>) -> Result<(), Refusal> {
        if !changes_state(asked.method) {
            return Ok(());
        }
        match (asked.origin, asked.fetch_site) {
            (Some(origin), _) => {
                let allowed =
                    WebOrigin::parse(origin).is_ok_and(|o| self.origin_allowed(&o, asked.host));
                if !allowed {
                    return Err(Refusal::Origin(format!("origin {origin:?}")));
                }
            }
            (None, Some(site)) if !matches!(site, "same-origin" | "none") => {
                return Err(Refusal::Origin(format!(
                    "a request the browser calls {site} (Sec-Fetch-Site)"
                )));
            }
            (None, _) => {}
        }
        if !asked.names_client && !asked.content_type.is_some_and(is_api_content_type) {
            return Err(Refusal::NotJson(format!(
                "{} {} with {}",
                asked.method,
                asked.path,
                match asked.content_type {
                    Some(t) => format!("Content-Type {t:?}"),
                    None => "no Content-Type".to_owned(),
                }
            )));
        }
        Ok(())
    }

    /// Decides one request from its headers, method, path (as sent, not
    /// decoded: an encoded workspace name matches no token, so it fails
    /// closed) and peer.
    pub(crate) fn check(&self, asked: &Asked<'_>) -> Result<Principal, Refusal> {
        if let Some(allowed) = &self.hosts {
            // HTTP/1.1 requires Host; a request without one is refused too.
            let name = asked.host.map(host_name).unwrap_or_default();
            if !allowed.contains(&name) {
                return Err(Refusal::Host(name));
            }
        }
        self.check_cross_site(asked)?;
        let (method, path) = (asked.method, asked.path);
        if Access::is_open(path) {
            return Ok(Principal::Open);
        }
        if !self.auth_enabled()? {
            return Ok(Principal::Open);
        }
        let Some(authorization) = asked.authorization else {
            return Err(Refusal::Unauthorized(
                "this server needs `Authorization: Bearer <token>`",
            ));
        };
        // A peer that keeps failing is held off before its token is looked
        // at.
        if let (Some(failures), Some(peer)) = (&self.failures, asked.peer)
            && let Some(retry_after) = failures.held_off(peer)
        {
            return Err(Refusal::HeldOff {
                per_minute: failures.per_minute,
                retry_after,
            });
        }
        let principal = self.authenticate(authorization);
        if matches!(principal, Err(Refusal::Unauthorized(_)))
            && let (Some(failures), Some(peer)) = (&self.failures, asked.peer)
        {
            failures.failed(peer);
        }
        let principal = principal?;
        if let Principal::Workspaces {
            scope: TokenScope::Read,
            ..
        } = principal
            && !Access::of(method, path).scope.reads(method)
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

    /// Who the `Authorization` header says the caller is.
    fn authenticate(&self, authorization: &str) -> Result<Principal, Refusal> {
        let token = authorization
            .strip_prefix("Bearer ")
            .or_else(|| authorization.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or(Refusal::Unauthorized(
                "this server needs `Authorization: Bearer <token>`",
            ))?;
        if self.admin.as_deref().is_some_and(|a| same_secret(a, token)) {
            return Ok(Principal::Admin);
        }
        if let Some(found) = self.stored(token)? {
            return Ok(found);
        }
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
        found.ok_or(Refusal::Unauthorized("unknown token"))
    }

    /// The stored token `presented` is, if it is one (from the token
    /// cache: no store read).
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

    /// A request as a client that is not a browser sends it: JSON.
    fn ask<'a>(
        host: Option<&'a str>,
        authorization: Option<&'a str>,
        method: &'a str,
        path: &'a str,
    ) -> Asked<'a> {
        Asked {
            host,
            authorization,
            content_type: Some("application/json"),
            method,
            path,
            ..Asked::default()
        }
    }

    #[test]
    fn loopback_servers_check_the_host() {
        let g = guard("127.0.0.1:7878", false);
        let check = |host, path| g.check(&ask(host, None, "GET", path));
        assert_eq!(
            check(Some("127.0.0.1:7878"), "/v1/plugins"),
            Ok(Principal::Open)
        );
        assert_eq!(check(Some("[::1]:7878"), "/healthz"), Ok(Principal::Open));
        assert_eq!(check(Some("LOCALHOST"), "/healthz"), Ok(Principal::Open));
        assert_eq!(
            check(Some("evil.example:7878"), "/healthz"),
            Err(Refusal::Host("evil.example".to_owned()))
        );
        assert!(check(None, "/healthz").is_err());
    }

    #[test]
    fn tokens_open_their_workspaces_only() {
        let g = guard("127.0.0.1:7878", true);
        let host = Some("127.0.0.1");
        let acme = Some("Bearer acme-token-0123456789");
        let admin = Some("Bearer admin-token-0123456789");
        let check = |auth, method, path| g.check(&ask(host, auth, method, path));
        assert!(matches!(
            check(None, "POST", "/v1/workspaces/acme/turns"),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(matches!(
            check(Some("Bearer nope"), "POST", "/v1/workspaces/acme/turns"),
            Err(Refusal::Unauthorized(_))
        ));
        assert!(matches!(
            check(acme, "POST", "/v1/workspaces/acme/turns"),
            Ok(Principal::Workspaces { ref token, .. }) if token == "config:0"
        ));
        assert!(matches!(
            check(acme, "POST", "/v1/workspaces/globex/turns"),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            check(acme, "POST", "/v1/workspaces/%61cme/turns"),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            check(acme, "GET", "/v1/plugins"),
            Err(Refusal::Forbidden(_))
        ));
        assert_eq!(check(admin, "GET", "/v1/plugins"), Ok(Principal::Admin));
        assert_eq!(
            check(admin, "POST", "/v1/workspaces/globex/turns"),
            Ok(Principal::Admin)
        );
        assert_eq!(check(None, "GET", "/healthz"), Ok(Principal::Open));
    }

    #[test]
    fn a_public_listen_address_is_not_loopback() {
        assert!(is_loopback("127.0.0.1:0"));
        assert!(is_loopback("[::1]:0"));
        assert!(!is_loopback("0.0.0.0:7878"));
        assert!(!is_loopback("not an address"));
    }

    /// Issue 78 (cross-site requests), decided request by request: which
    /// origins, fetch sites and content types a state-changing request may
    /// come with, on a loopback server and with an allow-list.
    #[test]
    fn state_changing_requests_must_not_be_cross_site() {
        let g = guard("127.0.0.1:7878", false);
        let end = "/v1/workspaces/acme/sessions/main/end";
        let with = |origin, fetch_site, content_type, names_client| {
            g.check(&Asked {
                host: Some("127.0.0.1:7878"),
                origin,
                fetch_site,
                content_type,
                names_client,
                method: "POST",
                path: end,
                ..Asked::default()
            })
        };
        let json = Some("application/json; charset=utf-8");
        let origin = |o| with(Some(o), None, json, false);
        for own in [
            "http://127.0.0.1:7878",
            "http://localhost:7878",
            "http://[::1]:7878",
        ] {
            assert_eq!(origin(own), Ok(Principal::Open), "{own}");
        }
        for foreign in [
            "http://evil.example",
            "http://127.0.0.1:7879",
            "http://localhost:80",
            "null",
            "http://127.0.0.1:7878/path",
        ] {
            assert!(
                matches!(origin(foreign), Err(Refusal::Origin(_))),
                "{foreign}"
            );
        }
        // Without Origin, the browser's Sec-Fetch-Site decides.
        for (site, ok) in [
            ("same-origin", true),
            ("none", true),
            ("same-site", false),
            ("cross-site", false),
        ] {
            assert_eq!(with(None, Some(site), json, false).is_ok(), ok, "{site}");
        }
        // What a form sends is refused, unless the client names itself.
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
        ] {
            assert!(
                matches!(
                    with(None, None, content_type, false),
                    Err(Refusal::NotJson(_))
                ),
                "{content_type:?}"
            );
            assert_eq!(with(None, None, content_type, true), Ok(Principal::Open));
        }
        for content_type in [
            "application/json",
            "application/problem+json",
            "application/wasm",
        ] {
            assert!(is_api_content_type(content_type), "{content_type}");
        }
        // Reads are not concerned.
        assert_eq!(
            g.check(&Asked {
                host: Some("127.0.0.1:7878"),
                origin: Some("http://evil.example"),
                method: "GET",
                path: "/v1/workspaces/acme/sessions",
                ..Asked::default()
            }),
            Ok(Principal::Open)
        );
        // An allow-list adds origins, exactly as written.
        let server = ServerConfig {
            allowed_origins: vec!["https://dash.example".to_owned()],
            ..ServerConfig::default()
        };
        let g = Guard::new(&server, "127.0.0.1:7878");
        let from = |o| {
            g.check(&Asked {
                host: Some("127.0.0.1:7878"),
                origin: Some(o),
                fetch_site: Some("cross-site"),
                content_type: json,
                method: "POST",
                path: end,
                ..Asked::default()
            })
        };
        assert_eq!(from("https://DASH.example:443"), Ok(Principal::Open));
        assert!(from("http://dash.example").is_err());
        assert!(from("https://dash.example:8443").is_err());
    }

    /// Issue 78 (failed authentications): a peer over its budget is held
    /// off before its token is looked at; another peer is not; the budget
    /// refills.
    #[test]
    fn failed_authentications_hold_their_peer_off() {
        let server = ServerConfig {
            admin_token: Some("admin-token-0123456789".to_owned()),
            failed_auth_per_minute: 3,
            ..ServerConfig::default()
        };
        let g = Guard::new(&server, "127.0.0.1:7878");
        let (a, b): (IpAddr, IpAddr) = ([127, 0, 0, 2].into(), [127, 0, 0, 3].into());
        let from = |peer, token| {
            g.check(&Asked {
                host: Some("127.0.0.1"),
                authorization: Some(token),
                method: "GET",
                path: "/v1/plugins",
                peer: Some(peer),
                ..Asked::default()
            })
        };
        for _ in 0..3 {
            assert!(matches!(
                from(a, "Bearer wrong-0123456789"),
                Err(Refusal::Unauthorized(_))
            ));
        }
        assert!(matches!(
            from(a, "Bearer admin-token-0123456789"),
            Err(Refusal::HeldOff { per_minute: 3, retry_after }) if (1..=20).contains(&retry_after)
        ));
        assert_eq!(
            from(b, "Bearer admin-token-0123456789"),
            Ok(Principal::Admin)
        );
        // A minute's refill in one go: the budget is whole again.
        let limiter = g.failures.as_ref().expect("limiter");
        if let Some((_, at)) = limiter.peers.lock().get_mut(&a)
            && let Some(earlier) = at.checked_sub(std::time::Duration::from_secs(60))
        {
            *at = earlier;
        }
        assert_eq!(
            from(a, "Bearer admin-token-0123456789"),
            Ok(Principal::Admin)
        );
    }
}
