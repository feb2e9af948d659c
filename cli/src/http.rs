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
use cairn::search::IndexStats;
use cairn::{
    Ack, AssembleRequest, AssembleSettings, AssembledContext, Briefing, Cairn, CairnError,
    CaptureReport, CompactReport, CompactionHookReport, CompactionView, DecisionQuery, Destination,
    Entry, EntryFilter, EntryInput, EntryKind, EntryView, ErrorKind, Expansion, ForgetTarget,
    GatewayStartReport, GenerationCounts, Health, InstallReport, MemoryItem, PluginsReport, ReadAs,
    RetrievalMode, SearchRequest, SearchResponse, Session, SessionSpec, Subject, SubjectKind,
    Tombstone, Transcript, Turn, TurnInput, parse_world,
};
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

use crate::guard::{Guard, Principal, Refusal, is_loopback};

mod describe;
pub mod forward;
mod maintain_routes;
mod token_routes;
mod topic_routes;
pub use maintain_routes::MaintainBody;
pub use token_routes::{CreateTokenBody, CreatedToken};
pub use topic_routes::{CollectBody, DecideBody, FeedBody};

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
                    crate::guard::CLIENT_HEADER
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
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if let Some(guard) = req.app_data::<web::Data<Guard>>() {
        use actix_web::http::header;
        let value = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        let decided = guard.check(&crate::guard::Asked {
            host: value(header::HOST),
            authorization: value(header::AUTHORIZATION),
            origin: value(header::ORIGIN),
            fetch_site: value(header::HeaderName::from_static("sec-fetch-site")),
            content_type: value(header::CONTENT_TYPE),
            names_client: req.headers().contains_key(crate::guard::CLIENT_HEADER),
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
            Err(refusal) => return Err(ApiError::from(refusal).into()),
        }
    }
    next.call(req).await
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

/// Body of `POST .../turns`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestBody {
    /// Turns to append atomically.
    pub turns: Vec<TurnInput>,
}

/// Answer of `POST .../turns`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct IngestReply {
    /// One acknowledgement per turn, in order.
    pub acks: Vec<Ack>,
}

/// Body of `POST .../entries`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntriesBody {
    /// Entries to append atomically.
    pub entries: Vec<EntryInput>,
}

/// Answer of `POST .../entries`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct EntriesReply {
    /// The stored entries, in order.
    pub entries: Vec<Entry>,
}

/// Body of `POST .../subjects`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubjectBody {
    /// Kebab-case slug.
    pub slug: String,
    /// What it is.
    #[serde(default)]
    pub kind: SubjectKind,
    /// Display name; Title Case of the slug when absent.
    #[serde(default)]
    pub display: Option<String>,
}

/// Body of `POST .../subjects/{slug}/rename`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    /// The new slug.
    pub to: String,
}

/// Body of `POST .../subjects/{slug}/merge`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeBody {
    /// The subject to merge into.
    pub into: String,
}

/// Body of `POST .../assemble`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssembleBody {
    /// Session the model call is for.
    pub session: String,
    /// Token budget; the configured default when absent.
    #[serde(default)]
    pub budget_tokens: Option<usize>,
    /// The current turn or a query; the session's last user turn when absent.
    #[serde(default)]
    pub query: Option<String>,
    /// Where the block goes (`local_model` by default); the memory policy
    /// decides per destination.
    #[serde(default)]
    pub destination: Destination,
    /// Standing directives: always in the block.
    #[serde(default)]
    pub directives: Vec<String>,
    /// `hybrid` (default), `lexical` or `off`.
    #[serde(default)]
    pub retrieval: RetrievalMode,
    /// Rules for this call; `[assemble.settings]` when absent.
    #[serde(default)]
    pub settings: Option<AssembleSettings>,
    /// Whether the answer carries `trace` (every candidate, included or
    /// not, and why). `false` answers it empty: a gateway on its hot path
    /// reads the block, and every policy decision stays in the decision
    /// log either way. Default `true`.
    #[serde(default = "with_trace")]
    pub trace: bool,
}

fn with_trace() -> bool {
    true
}

/// Body of `POST .../forget`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetBody {
    /// What to erase.
    #[serde(flatten)]
    pub target: ForgetTarget,
    /// Why (recorded in the tombstone).
    pub reason: String,
}

/// Query of `GET .../transcript`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct TranscriptQuery {
    /// First sequence number (default 0).
    #[serde(default)]
    pub from: u64,
    /// At most this many turns.
    #[serde(default)]
    pub limit: Option<usize>,
    /// The asking session: a sub-agent or cron session may read only its
    /// lineage (403 `lineage_denied` otherwise).
    #[serde(default)]
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// Query of `GET .../sessions`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    /// Only sessions of this work context.
    #[serde(default)]
    pub work_context: Option<String>,
    /// The asking session: a sub-agent or cron session sees only its lineage.
    #[serde(default)]
    pub asking: Option<String>,
}

/// Query of the reads of one session or entry: who asks.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AskingQuery {
    /// The asking session: a sub-agent or cron session may read only its
    /// lineage (403 `lineage_denied` otherwise).
    #[serde(default)]
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// Query of `GET .../entries`: the log filter and who asks.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub struct EntriesQuery {
    /// Only this kind.
    #[param(value_type = Option<String>)]
    pub kind: Option<EntryKind>,
    /// Only this subject (old slugs resolve to their canonical subject).
    pub subject: Option<String>,
    /// Only this work context.
    pub work_context: Option<String>,
    /// Only entries whose provenance is this session.
    pub session: Option<String>,
    /// Include replaced and expired entries (the full history).
    pub all: bool,
    /// At most this many, newest first.
    pub limit: Option<usize>,
    /// The asking session: a sub-agent or cron session sees only entries
    /// from its lineage.
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

impl TranscriptQuery {
    fn reader(&self) -> ReadAs<'_> {
        ReadAs {
            asking: self.asking.as_deref(),
            destination: self.destination,
        }
    }
}

impl AskingQuery {
    fn reader(&self) -> ReadAs<'_> {
        ReadAs {
            asking: self.asking.as_deref(),
            destination: self.destination,
        }
    }
}

impl ToolQuery {
    fn reader(&self) -> ReadAs<'_> {
        ReadAs {
            asking: self.session.as_deref(),
            destination: self.destination,
        }
    }
}

impl EntriesQuery {
    fn into_filter(self) -> EntryFilter {
        EntryFilter {
            kind: self.kind,
            subject: self.subject,
            work_context: self.work_context,
            session: self.session,
            all: self.all,
            limit: self.limit,
        }
    }
}

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
async fn healthz(cairn: web::Data<Cairn>) -> web::Json<Health> {
    web::Json(cairn.health())
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions", request_body = SessionSpec,
    responses((status = 200, body = Session), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`work_context_mismatch`: the session exists in another work context; `lineage_mismatch`: it exists as another kind or with another parent (a main session without a parent may become a sub-agent; a lineage never widens)")))]
async fn bootstrap(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<SessionSpec>,
) -> ApiResult<Session> {
    blocking(move || Ok(cairn.bootstrap(&ws, &body)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions", params(SessionsQuery),
    responses((status = 200, body = Vec<Session>), (status = 404, body = ErrorBody)))]
async fn sessions(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<SessionsQuery>,
) -> ApiResult<Vec<Session>> {
    blocking(move || Ok(cairn.sessions(&ws, q.work_context.as_deref(), q.asking.as_deref())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}", params(AskingQuery),
    responses((status = 200, body = Session), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn session(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.session(&ws, &sid, q.asking.as_deref())?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/after_turn",
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
async fn after_turn(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.after_turn(&ws, &sid)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/end",
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
async fn session_end(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.session_end(&ws, &sid)?)).await
}

/// What `POST …/capture` takes: a work context, or none for all of them.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
struct CaptureRequest {
    /// Work context to capture; every work context of the workspace when absent.
    work_context: Option<String>,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/capture",
    request_body = CaptureRequest,
    responses((status = 200, body = Vec<CaptureReport>), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn capture(
    cairn: web::Data<Cairn>,
    path: web::Path<String>,
    body: web::Json<CaptureRequest>,
) -> ApiResult<Vec<CaptureReport>> {
    let ws = path.into_inner();
    let request = body.into_inner();
    blocking(move || Ok(cairn.capture(&ws, request.work_context.as_deref())?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/compact",
    responses((status = 200, body = CompactionHookReport), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
async fn before_compaction(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<CompactionHookReport> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.before_compaction(&ws, &sid)?)).await
}

/// Body of a compaction pass without the hook's capture.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactionRequest {
    /// Tokens the session's view should fit in (default: the configuration's).
    #[serde(default)]
    pub budget: Option<usize>,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/compaction",
    request_body = CompactionRequest,
    responses((status = 200, body = CompactReport), (status = 400, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
async fn compact(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<CompactionRequest>,
) -> ApiResult<CompactReport> {
    let (ws, sid) = path.into_inner();
    let budget = body.into_inner().budget;
    blocking(move || Ok(cairn.compact(&ws, &sid, budget)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/sessions/{session}/reset",
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
async fn before_reset(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Session> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.before_reset(&ws, &sid)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}/transcript", params(TranscriptQuery),
    responses((status = 200, body = Vec<Turn>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn transcript(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<TranscriptQuery>,
) -> ApiResult<Vec<Turn>> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.transcript(&ws, &sid, q.from, q.limit, q.reader())?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/turns", request_body = IngestBody,
    responses((status = 200, body = IngestReply), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`work_context_mismatch`: a turn names another work context than its session's")))]
async fn ingest(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<IngestBody>,
) -> ApiResult<IngestReply> {
    // Awaited on this worker: the session actor does the durable write on
    // its own pool, so a blocking-pool hop here would only add two thread
    // hand-offs per call.
    let acks = cairn.ingest_async(&ws, &body.turns).await?;
    Ok(web::Json(IngestReply { acks }))
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/entries", request_body = EntriesBody,
    responses((status = 200, body = EntriesReply), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`duplicate_entry_id` or `already_replaced`")))]
async fn append_entries(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<EntriesBody>,
) -> ApiResult<EntriesReply> {
    blocking(move || {
        let entries = cairn.append_entries(&ws, &body.entries)?;
        Ok(EntriesReply { entries })
    })
    .await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/entries", params(EntriesQuery),
    responses((status = 200, body = Vec<EntryView>), (status = 404, body = ErrorBody)))]
async fn entries(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<EntriesQuery>,
) -> ApiResult<Vec<EntryView>> {
    blocking(move || {
        let q = q.into_inner();
        let (asking, destination) = (q.asking.clone(), q.destination);
        let reader = ReadAs {
            asking: asking.as_deref(),
            destination,
        };
        Ok(cairn.entries(&ws, &q.into_filter(), reader)?)
    })
    .await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/entries/{id}", params(AskingQuery),
    responses((status = 200, body = EntryView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn entry(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
) -> ApiResult<EntryView> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.entry(&ws, &id, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/entries/{id}/history", params(AskingQuery),
    responses((status = 200, body = Vec<EntryView>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn history(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
) -> ApiResult<Vec<EntryView>> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.history(&ws, &id, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/subjects",
    responses((status = 200, body = Vec<Subject>), (status = 404, body = ErrorBody)))]
async fn subjects(cairn: web::Data<Cairn>, ws: web::Path<String>) -> ApiResult<Vec<Subject>> {
    blocking(move || Ok(cairn.subjects(&ws)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/subjects", request_body = SubjectBody,
    responses((status = 200, body = Subject), (status = 409, body = ErrorBody)))]
async fn add_subject(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<SubjectBody>,
) -> ApiResult<Subject> {
    blocking(move || Ok(cairn.add_subject(&ws, &body.slug, body.kind, body.display.as_deref())?))
        .await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/subjects/{slug}/rename", request_body = RenameBody,
    responses((status = 200, body = Subject), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn rename_subject(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<RenameBody>,
) -> ApiResult<Subject> {
    let (ws, slug) = path.into_inner();
    blocking(move || Ok(cairn.rename_subject(&ws, &slug, &body.to)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/subjects/{slug}/merge", request_body = MergeBody,
    responses((status = 200, body = Subject), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn merge_subjects(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<MergeBody>,
) -> ApiResult<Subject> {
    let (ws, slug) = path.into_inner();
    blocking(move || Ok(cairn.merge_subjects(&ws, &slug, &body.into)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/assemble", request_body = AssembleBody,
    responses((status = 200, body = AssembledContext), (status = 404, body = ErrorBody)))]
async fn assemble(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<AssembleBody>,
) -> ApiResult<AssembledContext> {
    blocking(move || {
        let body = body.into_inner();
        let request = AssembleRequest {
            session: body.session,
            budget_tokens: body
                .budget_tokens
                .unwrap_or(cairn.config().assemble.default_budget_tokens),
            query: body.query,
            destination: body.destination,
            directives: body.directives,
            retrieval: body.retrieval,
            settings: body.settings,
        };
        let mut block = cairn.assemble(&ws, &request)?;
        if !body.trace {
            block.trace = Vec::new();
        }
        Ok(block)
    })
    .await
}

/// Query of `GET .../briefing`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub struct BriefingQuery {
    /// Only this work context (default: the whole workspace).
    pub work_context: Option<String>,
    /// The asking session: a sub-agent or cron session sees only entries
    /// from its lineage.
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// The briefing of the workspace (or one work context) at the server's
/// time: the `MEMORY.md` block as text (at most 80 lines) and the same
/// content as sections, each item with its entry references.
#[utoipa::path(get, path = "/v1/workspaces/{workspace}/briefing", params(BriefingQuery),
    responses((status = 200, body = Briefing), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn briefing(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    q: web::Query<BriefingQuery>,
) -> ApiResult<Briefing> {
    blocking(move || {
        let reader = ReadAs {
            asking: q.asking.as_deref(),
            destination: q.destination,
        };
        Ok(cairn.briefing(&ws, q.work_context.as_deref(), reader)?)
    })
    .await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/forget", request_body = ForgetBody,
    responses((status = 200, body = Tombstone), (status = 404, body = ErrorBody)))]
async fn forget(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<ForgetBody>,
    req: HttpRequest,
) -> ApiResult<Tombstone> {
    let admin = req
        .extensions()
        .get::<Principal>()
        .is_none_or(Principal::is_admin);
    if matches!(body.target, ForgetTarget::Workspace(_)) && !admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "erasing a whole workspace needs the admin token",
        ));
    }
    blocking(move || Ok(cairn.forget(&ws, &body.target, &body.reason)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/tombstones",
    responses((status = 200, body = Vec<Tombstone>), (status = 404, body = ErrorBody)))]
async fn tombstones(cairn: web::Data<Cairn>, ws: web::Path<String>) -> ApiResult<Vec<Tombstone>> {
    blocking(move || Ok(cairn.tombstones(&ws)?)).await
}

#[utoipa::path(post, path = "/v1/gateway_start", responses((status = 200, body = GatewayStartReport)))]
async fn gateway_start(cairn: web::Data<Cairn>) -> ApiResult<GatewayStartReport> {
    blocking(move || Ok(cairn.gateway_start()?)).await
}

/// Query of the memory-tool reads (`memory_get`, `read_transcript`).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ToolQuery {
    /// First sequence number (transcripts; default 0).
    #[serde(default)]
    pub from: u64,
    /// The asking session (sub-agent sessions see only their lineage).
    #[serde(default)]
    pub session: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/search", request_body = SearchRequest,
    responses((status = 200, body = SearchResponse), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn memory_search(
    req: HttpRequest,
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<SearchRequest>,
) -> ApiResult<SearchResponse> {
    let mut request = body.into_inner();
    // With tokens, the search rate limit counts the token with the name the
    // client puts in `caller` (each agent of a gateway its own budget); the
    // token as a whole is bounded by `server.requests_per_minute`.
    if let Some(key) = req
        .extensions()
        .get::<Principal>()
        .and_then(Principal::rate_key)
    {
        let caller = request.caller.as_deref().unwrap_or("-");
        request.caller = Some(format!("{key}/{caller}"));
    }
    blocking(move || Ok(cairn.memory_search(&ws, &request)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/items/{id}", params(ToolQuery),
    responses((status = 200, body = MemoryItem), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn memory_get(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<MemoryItem> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.memory_get(&ws, &id, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}/compaction", params(ToolQuery),
    responses((status = 200, body = CompactionView), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn compaction_view(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<CompactionView> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.compaction_view(&ws, &sid, q.session.as_deref())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/summaries/{id}", params(ToolQuery),
    responses((status = 200, body = Expansion), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn memory_expand(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<Expansion> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.memory_expand(&ws, &id, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/summaries/{id}/turns", params(ToolQuery),
    responses((status = 200, body = Transcript), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn expand_all(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<Transcript> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.expand_all(&ws, &id, q.from, q.reader())?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/sessions/{session}/read_transcript", params(ToolQuery),
    responses((status = 200, body = Transcript), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn read_transcript(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<ToolQuery>,
) -> ApiResult<Transcript> {
    let (ws, sid) = path.into_inner();
    blocking(move || Ok(cairn.read_transcript(&ws, &sid, q.from, q.reader())?)).await
}

/// Query of the MCP endpoint: who asks and where the answers go, fixed for
/// the request (tools take neither).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
pub struct McpQuery {
    /// The asking session: a sub-agent or cron session reads (and notes
    /// into) its lineage only.
    pub asking: Option<String>,
    /// Where the answers go (`local_model` by default): the memory policy
    /// decides per destination.
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

/// The MCP endpoint (streamable HTTP, stateless, JSON answers): the tools
/// and resources of `cairn mcp` for this workspace. The rate limit counts
/// the token (the client's name on a server without tokens).
async fn mcp_endpoint(
    req: HttpRequest,
    body: web::Bytes,
    mcp: web::Data<crate::mcp::McpHttp>,
) -> Result<HttpResponse, ApiError> {
    let workspace = req
        .match_info()
        .get("workspace")
        .unwrap_or_default()
        .to_owned();
    let query = web::Query::<McpQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.to_string()))?;
    let (caller, read_only) = match req.extensions().get::<Principal>() {
        Some(p) => (p.rate_key(), p.reads_only()),
        None => (None, false),
    };
    let identity = crate::mcp::Identity {
        workspace,
        caller,
        asking: query.asking.clone(),
        destination: query.destination,
        read_only,
    };
    let mut request = http::Request::builder()
        .method(req.method().as_str())
        .uri(req.uri().to_string());
    for (name, value) in req.headers() {
        request = request.header(name.as_str(), value.as_bytes());
    }
    let mut request = request
        .body(http_body_util::Full::new(body))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string()))?;
    request
        .extensions_mut()
        .insert(std::sync::Arc::new(identity));
    let response = mcp.call(request).await;
    let (parts, body) = response.into_parts();
    let status =
        StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        // actix frames the streamed body itself.
        if name == http::header::CONTENT_LENGTH || name == http::header::TRANSFER_ENCODING {
            continue;
        }
        if let Ok(value) = actix_web::http::header::HeaderValue::from_bytes(value.as_bytes()) {
            out.append_header((name.as_str(), value));
        }
    }
    let frames = futures_util::stream::unfold(body, |mut body| async move {
        use http_body_util::BodyExt;
        loop {
            match body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some((Ok::<_, actix_web::Error>(data), body)),
                    Err(_trailers) => continue,
                },
                Err(never) => match never {},
            }
        }
    });
    Ok(out.streaming(frames))
}

#[utoipa::path(get, path = "/v1/stats/index", responses((status = 200, body = IndexStats)))]
async fn index_stats(cairn: web::Data<Cairn>) -> ApiResult<IndexStats> {
    blocking(move || Ok(cairn.index_stats()?)).await
}

/// `GET /v1/cluster`: `clustered` says whether this node is one of several
/// sharing a PostgreSQL database (`storage.cluster`); when it is, the rest
/// of the object is the cluster as this node sees it (nodes, leases, the
/// workspaces it holds, its take-overs).
#[derive(Debug, Serialize)]
struct ClusterView {
    clustered: bool,
    #[serde(flatten)]
    status: Option<cairn::ClusterStatus>,
}

#[utoipa::path(get, path = "/v1/cluster",
    responses((status = 200, description = "`{\"clustered\": false}` outside a cluster; \
        else the cluster as this node sees it", body = Object)))]
async fn cluster_status(cairn: web::Data<Cairn>) -> ApiResult<ClusterView> {
    blocking(move || {
        let status = cairn.cluster_status()?;
        Ok(ClusterView {
            clustered: status.is_some(),
            status,
        })
    })
    .await
}

#[utoipa::path(get, path = "/v1/plugins",
    responses((status = 200, body = PluginsReport)))]
async fn plugins(cairn: web::Data<Cairn>) -> ApiResult<PluginsReport> {
    blocking(move || Ok(cairn.plugins()?)).await
}

/// Query of `PUT /v1/plugins/{world}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct InstallQuery {
    /// The plugin's name (lowercase letters, digits, `-`, `_`, `.`);
    /// default `custom`.
    #[serde(default)]
    pub name: Option<String>,
}

/// Installs (or swaps in) a plugin: the body is the component's bytes.
/// It is compiled and checked against the world off the decision path,
/// then replaces the current generation atomically and is persisted.
#[utoipa::path(put, path = "/v1/plugins/{world}", params(
        ("world" = String, Path, description = "significance-gate, topic-directive or memory-policy"),
        InstallQuery),
    request_body(content = String, content_type = "application/wasm",
        description = "The component's bytes"),
    responses((status = 200, body = InstallReport), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody)))]
async fn install_plugin(
    cairn: web::Data<Cairn>,
    world: web::Path<String>,
    q: web::Query<InstallQuery>,
    req: HttpRequest,
    mut payload: web::Payload,
) -> ApiResult<InstallReport> {
    use futures_util::StreamExt;
    let world = parse_world(&world).map_err(ApiError::from)?;
    let max = cairn.config().policies.max_plugin_bytes;
    // A declared length over the limit is refused before any of the body
    // is read; a chunked body is counted as it arrives.
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(size) = declared.filter(|&size| size > max) {
        return Err(CairnError::PluginTooLarge { size, max }.into());
    }
    let mut wasm = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?;
        if wasm.len() + chunk.len() > max {
            return Err(CairnError::PluginTooLarge {
                size: wasm.len() + chunk.len(),
                max,
            }
            .into());
        }
        wasm.extend_from_slice(&chunk);
    }
    let name = q.into_inner().name.unwrap_or_else(|| "custom".to_owned());
    blocking(move || Ok(cairn.install_plugin(world, &name, &wasm)?)).await
}

/// Reads the decision log, newest first.
#[utoipa::path(get, path = "/v1/plugins/log", params(DecisionQuery),
    responses((status = 200, description = "Decision records (world, plugin, generation, inputs digest, output, outcome, duration), newest first", content_type = "application/json"),
        (status = 400, body = ErrorBody)))]
async fn plugin_log(cairn: web::Data<Cairn>, q: web::Query<DecisionQuery>) -> HttpResponse {
    let query = q.into_inner();
    match web::block(move || cairn.decisions(&query)).await {
        Ok(Ok(records)) => HttpResponse::Ok().json(records),
        Ok(Err(e)) => ApiError::from(e).error_response(),
        Err(e) => ApiError::worker_failed(e).error_response(),
    }
}

/// Decisions and faults one policy generation made, as the durable
/// decision log counted them (across restarts and after the generation was
/// swapped out). A generation that never decided counts zero.
#[utoipa::path(get, path = "/v1/plugins/generations/{generation}", params(
        ("generation" = String, Path, description = "A generation id (`name@hash#n`), percent-encoded")),
    responses((status = 200, body = GenerationCounts), (status = 400, body = ErrorBody)))]
async fn generation_counts(
    cairn: web::Data<Cairn>,
    generation: web::Path<String>,
) -> ApiResult<GenerationCounts> {
    let generation = generation.into_inner();
    if generation.is_empty() || generation.len() > 256 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_generation",
            format!(
                "a generation id is 1 to 256 bytes, not {}",
                generation.len()
            ),
        ));
    }
    blocking(move || Ok(cairn.generation_counts(&generation)?)).await
}

/// The OpenAPI description of the HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cairn",
        description = "Memory runtime for AI-agent gateways: the host API over HTTP."
    ),
    paths(
        healthz,
        bootstrap,
        sessions,
        session,
        after_turn,
        session_end,
        before_reset,
        before_compaction,
        compact,
        compaction_view,
        memory_expand,
        expand_all,
        capture,
        transcript,
        ingest,
        append_entries,
        entries,
        entry,
        history,
        subjects,
        add_subject,
        rename_subject,
        merge_subjects,
        assemble,
        briefing,
        forget,
        tombstones,
        gateway_start,
        memory_search,
        memory_get,
        read_transcript,
        index_stats,
        cluster_status,
        plugins,
        install_plugin,
        plugin_log,
        generation_counts,
        topic_routes::create_topic,
        topic_routes::topics,
        topic_routes::topic,
        topic_routes::update_topic,
        topic_routes::delete_topic,
        topic_routes::pause_topic,
        topic_routes::resume_topic,
        topic_routes::proposals,
        topic_routes::decide_proposal,
        topic_routes::collect,
        topic_routes::feed,
        topic_routes::gate_log,
        topic_routes::why
    )
)]
pub struct ApiDoc;

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(api_doc())
}

/// The served description: [`ApiDoc`] with the route modules' paths merged
/// in, completed for every operation by `describe.rs` (path parameters, the
/// bearer token, the refusals of the guard and the extractors).
pub fn api_doc() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi()
        .merge_from(maintain_routes::MaintainApi::openapi())
        .merge_from(token_routes::TokenApi::openapi());
    describe::complete(&mut doc);
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
            .route("/healthz", web::get().to(healthz))
            .route("/openapi.json", web::get().to(openapi))
            .route("/v1/gateway_start", web::post().to(gateway_start))
            .route("/v1/stats/index", web::get().to(index_stats))
            .route("/v1/cluster", web::get().to(cluster_status))
            .route("/v1/plugins", web::get().to(plugins))
            .route("/v1/plugins/log", web::get().to(plugin_log))
            .route(
                "/v1/plugins/generations/{generation}",
                web::get().to(generation_counts),
            )
            .route("/v1/plugins/{world}", web::put().to(install_plugin))
            .configure(token_routes::routes)
            .service(
                maintain_routes::routes(topic_routes::routes(
                    web::scope("/v1/workspaces/{workspace}")
                        // The hot pair first: a scope tries its routes in
                        // order, each a pattern match.
                        .route("/turns", web::post().to(ingest))
                        .route("/assemble", web::post().to(assemble)),
                ))
                .route("/sessions", web::post().to(bootstrap))
                .route("/sessions", web::get().to(sessions))
                .route("/sessions/{session}", web::get().to(session))
                .route("/sessions/{session}/after_turn", web::post().to(after_turn))
                .route("/sessions/{session}/end", web::post().to(session_end))
                .route("/sessions/{session}/reset", web::post().to(before_reset))
                .route(
                    "/sessions/{session}/compact",
                    web::post().to(before_compaction),
                )
                .route("/sessions/{session}/compaction", web::post().to(compact))
                .route(
                    "/sessions/{session}/compaction",
                    web::get().to(compaction_view),
                )
                .route("/summaries/{id}", web::get().to(memory_expand))
                .route("/summaries/{id}/turns", web::get().to(expand_all))
                .route("/capture", web::post().to(capture))
                .route("/sessions/{session}/transcript", web::get().to(transcript))
                .route("/entries", web::post().to(append_entries))
                .route("/entries", web::get().to(entries))
                .route("/entries/{id}", web::get().to(entry))
                .route("/entries/{id}/history", web::get().to(history))
                .route("/subjects", web::get().to(subjects))
                .route("/subjects", web::post().to(add_subject))
                .route("/subjects/{slug}/rename", web::post().to(rename_subject))
                .route("/subjects/{slug}/merge", web::post().to(merge_subjects))
                .route("/briefing", web::get().to(briefing))
                .route("/forget", web::post().to(forget))
                .route("/tombstones", web::get().to(tombstones))
                .route("/search", web::post().to(memory_search))
                .route("/items/{id}", web::get().to(memory_get))
                .route(
                    "/sessions/{session}/read_transcript",
                    web::get().to(read_transcript),
                )
                .route("/mcp", web::route().to(mcp_endpoint)),
            )
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
