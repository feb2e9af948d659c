//! `cairn serve`: the host API as JSON over HTTP (actix-web).
//!
//! Errors come back as `{"code": "...", "message": "..."}` with a 4xx status
//! for the caller's mistakes (404 for what does not exist, 413 for bodies over
//! the limit) and 5xx for the machine's. Every storage call runs on actix's
//! blocking thread pool (`web::block`), never on an arbiter thread, because it
//! may fsync. The OpenAPI description is served at `/openapi.json`. The MCP
//! tools are served at `/v1/workspaces/{workspace}/mcp` (streamable HTTP,
//! [`crate::mcp::McpHttp`]) behind the same guard.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::{Next, from_fn};
use actix_web::{App, HttpMessage, HttpRequest, HttpResponse, HttpServer, ResponseError, web};
use cairn::{Cairn, CairnError, ErrorKind};
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

use guard::{Guard, Refusal, is_loopback};

mod admin;
mod assemble;
mod compaction;
mod describe;
mod entries;
mod export;
pub mod forward;
pub(crate) mod guard;
mod maintenance;
mod mcp;
mod obligations;
mod plugins;
pub(crate) mod route;
mod search;
mod sessions;
mod tokens;
mod topics;
mod turns;
mod ui;
pub use assemble::{AssembleBody, BriefingQuery};
pub use compaction::CompactionRequest;
pub use entries::{
    CorrectBody, EntriesBody, EntriesQuery, EntriesReply, ForgetBody, MergeBody, PinReply,
    RenameBody, RetractBody, SubjectBody,
};
pub use export::ExportQuery;
pub use maintenance::MaintainBody;
pub use mcp::McpQuery;
pub use plugins::InstallQuery;
pub use search::ToolQuery;
pub use sessions::{AskingQuery, SessionsQuery, TranscriptQuery};
pub use tokens::{CreateTokenBody, CreatedToken};
pub use topics::{CandidateBody, CollectBody, DecideBody, FeedBody};
pub use turns::{IngestBody, IngestReply};
pub use ui::AccessView;

/// Every route of the server, area by area, in table order (the router
/// tries the hot ones first: see [`route::register`]).
pub(crate) fn routes() -> Vec<route::Route> {
    [
        admin::routes(),
        plugins::routes(),
        tokens::routes(),
        turns::routes(),
        assemble::routes(),
        topics::routes(),
        maintenance::routes(),
        sessions::routes(),
        compaction::routes(),
        entries::routes(),
        export::routes(),
        obligations::routes(),
        search::routes(),
        mcp::routes(),
        ui::routes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The error body of every failed request.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code.
    pub code: String,
    /// What was wrong, naming the offending value.
    pub message: String,
}

#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    /// Seconds for a `Retry-After` header.
    retry_after: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.body.code, self.body.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            response.insert_header((actix_web::http::header::WWW_AUTHENTICATE, "Bearer"));
        }
        if let Some(seconds) = self.retry_after {
            response.insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()));
        }
        response.json(&self.body)
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Host(host) => ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                format!(
                    "host {host:?} is not allowed (server.allowed_hosts; a loopback server \
                     answers only to localhost, 127.0.0.1 and ::1)"
                ),
            ),
            Refusal::Origin(what) => ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                format!(
                    "{what} may not change anything here: only the server's own origin and \
                     server.allowed_origins may (a web page must not act for the operator)"
                ),
            ),
            Refusal::NotJson(what) => ApiError::new(
                StatusCode::FORBIDDEN,
                "json_required",
                format!(
                    "{what}: a request that changes state must send a JSON body \
                     (Content-Type: application/json) or name its client with the \
                     `{}` header, so a plain HTML form cannot send it",
                    guard::CLIENT_HEADER
                ),
            ),
            Refusal::Unauthorized(why) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why)
            }
            Refusal::Forbidden(why) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", why),
            Refusal::RateLimited { per_minute } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("over {per_minute} requests a minute (server.requests_per_minute)"),
            ),
            Refusal::HeldOff {
                per_minute,
                retry_after,
            } => ApiError {
                retry_after: Some(retry_after),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_failed_authentications",
                    format!(
                        "this address failed to authenticate more than {per_minute} times a \
                         minute (server.failed_auth_per_minute); try again in {retry_after} s"
                    ),
                )
            },
            Refusal::Unavailable(why) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why)
            }
        }
    }
}

/// Checks every request against the server's [`Guard`] before any handler
/// runs, and leaves the [`Principal`] in the request's extensions.
async fn guard_requests(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if let Some(guard) = req.app_data::<web::Data<Guard>>() {
        use actix_web::http::header;
        let value = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        let decided = guard.check(&guard::Asked {
            host: value(header::HOST),
            authorization: value(header::AUTHORIZATION),
            origin: value(header::ORIGIN),
            fetch_site: value(header::HeaderName::from_static("sec-fetch-site")),
            content_type: value(header::CONTENT_TYPE),
            names_client: req.headers().contains_key(guard::CLIENT_HEADER),
            method: req.method().as_str(),
            path: req.path(),
            peer: req.peer_addr().map(|a| a.ip()),
        });
        // Counted under its token; a server without tokens is a local one
        // (it refuses a public address) and is not limited.
        let admitted = decided.and_then(|principal| match principal.rate_key() {
            Some(key) => guard.admit(&key).map(|()| principal),
            None => Ok(principal),
        });
        match admitted {
            Ok(principal) => {
                req.extensions_mut().insert(principal);
            }
            Err(refusal) => {
                use actix_web::ResponseError;
                let mut response = ApiError::from(refusal).error_response();
                // Refused before its body was read: the connection closes
                // after the answer and says so, so that a client does not
                // send its next request down a connection about to close.
                let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
                    || value(header::CONTENT_LENGTH).is_some_and(|n| n.trim() != "0");
                if has_body {
                    response
                        .head_mut()
                        .set_connection_type(actix_web::http::ConnectionType::Close);
                }
                return Ok(req.into_response(response).map_into_right_body());
            }
        }
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code: code.to_owned(),
                message: message.into(),
            },
            retry_after: None,
        }
    }

    /// A blocking-pool task that never answered (it panicked or the pool
    /// shut down).
    fn worker_failed(e: impl std::fmt::Display) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("worker failed: {e}"),
        )
    }
}

/// The HTTP status of each kind of error: one exhaustive match, so a new
/// kind cannot go unmapped.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<CairnError> for ApiError {
    fn from(err: CairnError) -> Self {
        let status = status_of(err.kind());
        if status.is_server_error() {
            // The whole chain of causes goes to the log; the client gets
            // the top-level message.
            let mut causes = String::new();
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                causes.push_str(": ");
                causes.push_str(&cause.to_string());
                source = cause.source();
            }
            tracing::error!(error = %err, causes, code = err.code(), "request failed");
        }
        ApiError::new(status, err.code(), err.to_string())
    }
}

type ApiResult<T> = Result<web::Json<T>, ApiError>;

/// Runs `f` on the blocking pool (it may fsync).
async fn blocking<T, F>(f: F) -> ApiResult<T>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    match web::block(f).await {
        Ok(Ok(value)) => Ok(web::Json(value)),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(ApiError::worker_failed(e)),
    }
}

/// The OpenAPI description's front matter (title, description, version);
/// its paths and schemas come from the route tables (see [`api_doc`]).
#[derive(OpenApi)]
#[openapi(info(
    title = "cairn",
    description = "Memory runtime for AI-agent gateways: the host API over HTTP."
))]
pub struct ApiDoc;

/// The served description: [`ApiDoc`] with every described route of the
/// route tables merged in, completed for every operation by `describe.rs`
/// (path parameters, the bearer token, the refusals of the guard and the
/// extractors).
pub fn api_doc() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let mut schemas = Vec::new();
    let mut open = Vec::new();
    for route in routes() {
        route.describe(&mut doc.paths, &mut schemas);
        if route.is_open() {
            open.extend(route.described_path());
        }
    }
    doc.components
        .get_or_insert_with(Default::default)
        .schemas
        .extend(schemas);
    describe::complete(&mut doc, &open);
    doc
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("no route for {} {}", req.method(), req.path()),
    )
    .error_response()
}

fn body_error(err: impl std::fmt::Display, too_large: bool) -> actix_web::Error {
    if too_large {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            err.to_string(),
        )
        .into()
    } else {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", err.to_string()).into()
    }
}

/// Registers the API's routes on an actix `App` (used by [`serve`] and by tests).
pub fn configure(cairn: Cairn) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        let max_body = cairn.config().server.max_body_bytes;
        let json = web::JsonConfig::default()
            .limit(max_body)
            .error_handler(|err, _req| {
                let too_large = matches!(
                    err,
                    actix_web::error::JsonPayloadError::Overflow { .. }
                        | actix_web::error::JsonPayloadError::OverflowKnownLength { .. }
                );
                body_error(err, too_large)
            });
        let query = web::QueryConfig::default().error_handler(|err, _req| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", err.to_string()).into()
        });
        let path = web::PathConfig::default().error_handler(|err, _req| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", err.to_string()).into()
        });
        let mcp = web::Data::new(crate::mcp::McpHttp::new(cairn.clone(), max_body));
        cfg.app_data(web::Data::new(cairn))
            .app_data(mcp)
            .app_data(json)
            .app_data(query)
            .app_data(path)
            .configure(|cfg| route::register(routes(), cfg))
            .default_service(web::to(not_found));
    }
}

/// Where `cairn serve` listens: `host:port`, or `unix:PATH` for a Unix
/// socket (mode 0600: only this user's processes may connect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address.
    Tcp(String),
    /// A Unix socket path.
    Unix(std::path::PathBuf),
}

impl Listen {
    /// Reads a `--listen` value.
    ///
    /// ```
    /// use cairn_cli::http::Listen;
    /// assert_eq!(Listen::parse("unix:/run/cairn.sock"), Listen::Unix("/run/cairn.sock".into()));
    /// assert_eq!(Listen::parse("127.0.0.1:7878"), Listen::Tcp("127.0.0.1:7878".into()));
    /// ```
    pub fn parse(listen: &str) -> Listen {
        match listen.strip_prefix("unix:") {
            Some(path) => Listen::Unix(path.into()),
            None => Listen::Tcp(listen.to_owned()),
        }
    }
}

/// Serves the API on `listen` (see [`Listen`]) until the process is stopped
/// (SIGINT/SIGTERM shut down gracefully: in-flight requests finish).
/// `on_bound` is called with where it listens: `http://ADDR` (useful with
/// port 0) or `unix:PATH`.
///
/// Every request passes a guard first: the `Host` allow-list, the
/// cross-site checks of a state-changing request (`Origin` /
/// `Sec-Fetch-Site` and a JSON body or `x-cairn-client`), then, when tokens
/// are configured or stored (or made while it runs), a bearer token that
/// opens the route (see [`cairn::ServerConfig`] and `cairn tokens`). Without
/// tokens only a loopback address or a Unix socket is served.
pub async fn serve(cairn: Cairn, listen: &str, on_bound: impl FnOnce(&str)) -> std::io::Result<()> {
    let server_config = &cairn.config().server;
    let listen_at = Listen::parse(listen);
    let tls = server_config.tls.as_ref().map(tls_config).transpose()?;
    let mut guard = Guard::new(server_config, listen)
        .with_stored_tokens(cairn.clone())
        .map_err(std::io::Error::other)?;
    if matches!(listen_at, Listen::Unix(_)) && server_config.allowed_hosts.is_empty() {
        guard = guard.without_host_check();
    }
    if !guard.auth_enabled().unwrap_or(false)
        && matches!(&listen_at, Listen::Tcp(addr) if !is_loopback(addr))
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing to serve on {listen} without authentication: make a token with \
                 `cairn tokens create`, or configure server.admin_token \
                 (CAIRN_SERVER__ADMIN_TOKEN) or server.tokens, or listen on a loopback \
                 address or a Unix socket"
            ),
        ));
    }
    if cairn.config().storage.backend != cairn::StorageBackend::Sled {
        // Other processes may make and revoke tokens in a shared store.
        cairn.refresh_tokens_every(std::time::Duration::from_millis(
            server_config.token_refresh_ms,
        ));
    }
    let guard = web::Data::new(guard);
    // Start search now (model load, then the worker catches the indexes up
    // from the record) on its own thread, off the server's threads.
    let warm = cairn.clone();
    std::thread::spawn(move || warm.start_search());
    let node = cairn.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(guard.clone())
            // The guard first (outermost), then the owner's node.
            .wrap(from_fn(forward::route_requests))
            .wrap(from_fn(guard_requests))
            .configure(configure(cairn.clone()))
    });
    match listen_at {
        Listen::Tcp(addr) => {
            let (server, scheme) = match tls {
                Some(tls) => (server.bind_rustls_0_23(&addr, tls)?, "https"),
                None => (server.bind(&addr)?, "http"),
            };
            let bound = server
                .addrs()
                .first()
                .copied()
                .ok_or_else(|| std::io::Error::other("the server bound no address"))?;
            if node.config().storage.cluster.advertise.is_empty() {
                node.advertise(&format!("{scheme}://{bound}"))
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            }
            on_bound(&format!("{scheme}://{bound}"));
            tracing::info!(addr = %bound, "cairn serving");
            let served = server.run().await;
            // A graceful stop hands this node's workspaces over at once.
            if let Err(error) = node.leave_cluster() {
                tracing::warn!(%error, "cluster: leaving failed; the leases expire instead");
            }
            served
        }
        #[cfg(unix)]
        Listen::Unix(path) => {
            clear_socket(&path)?;
            let server = server.bind_uds(&path)?;
            private_socket(&path)?;
            on_bound(&format!("unix:{}", path.display()));
            tracing::info!(socket = %path.display(), "cairn serving");
            let served = server.run().await;
            let _ = std::fs::remove_file(&path);
            served
        }
        #[cfg(not(unix))]
        Listen::Unix(path) => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("Unix sockets are not available here ({})", path.display()),
        )),
    }
}

/// The TLS settings of `[server.tls]`: its certificate chain and key read
/// and checked now, so a bad file stops `serve` before it listens.
fn tls_config(tls: &cairn::TlsConfig) -> std::io::Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("server.tls.{what} ({}): {e}", path.display()),
        )
    };
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad("cert", &tls.cert, &e))?;
    if certs.is_empty() {
        return Err(bad("cert", &tls.cert, &"no PEM certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| bad("key", &tls.key, &e))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("cert", &tls.cert, &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad("key", &tls.key, &e))
}

/// Clears the way for a Unix socket at `path`: a socket file left by a
/// server that died is removed; a live one, or any other file, is an error.
#[cfg(unix)]
fn clear_socket(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("another server answers on {}", path.display()),
        ));
    }
    std::fs::remove_file(path)
}

/// Only this user's processes may connect to the socket at `path` (the
/// process's umask already kept others out between bind and here).
#[cfg(unix)]
fn private_socket(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}
