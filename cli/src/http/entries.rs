//! The memory-log routes: append and read entries and their history,
//! correct, retract and pin one, subjects, and erasure (forget and its
//! tombstones).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use cairn::{
    Cairn, Correction, Destination, Entry, EntryFilter, EntryInput, EntryKind, EntryView,
    ForgetTarget, ReadAs, Subject, SubjectKind, TaskStatus, Tombstone,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::guard::Principal;
use super::route::{Route, Scope};
use super::sessions::AskingQuery;
use super::{ApiError, ApiResult, ErrorBody, blocking};

/// The routes of this area.
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    vec![
        Route::new(Write, __path_append_entries, append_entries),
        Route::new(Read, __path_entries, entries),
        Route::new(Read, __path_entry, entry),
        Route::new(Read, __path_history, history),
        Route::new(Write, __path_correct, correct),
        Route::new(Write, __path_retract, retract),
        Route::new(Write, __path_pin, pin),
        Route::new(Write, __path_unpin, unpin),
        Route::new(Read, __path_pins, pins),
        Route::new(Read, __path_subjects, subjects),
        Route::new(Write, __path_add_subject, add_subject),
        Route::new(Write, __path_rename_subject, rename_subject),
        Route::new(Write, __path_merge_subjects, merge_subjects),
        Route::new(Write, __path_forget, forget),
        Route::new(Read, __path_tombstones, tombstones),
    ]
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

/// Body of `POST .../entries/{id}/correct`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectBody {
    /// What the entry should say instead.
    pub content: String,
    /// Why it was wrong (recorded in the new version's detail).
    pub reason: String,
    /// More: on a decision, why; on a fact, background.
    #[serde(default)]
    pub detail: Option<String>,
    /// Subject slug; the corrected entry's when absent.
    #[serde(default)]
    pub subject: Option<String>,
    /// For a task: its status; the corrected task's when absent.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub status: Option<TaskStatus>,
    /// The session the correction comes from (its provenance); the asking
    /// session when absent, none when neither is given.
    #[serde(default)]
    pub session: Option<String>,
    /// The turns it rests on, `[from, to]` inclusive; the session's last
    /// turn when absent.
    #[serde(default)]
    pub turns: Option<[u64; 2]>,
}

/// Body of `POST .../entries/{id}/retract`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetractBody {
    /// Why (recorded in the tombstone).
    pub reason: String,
}

/// Answer of `PUT` and `DELETE .../entries/{id}/pin`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct PinReply {
    /// The entry.
    pub entry: String,
    /// Whether it is pinned now.
    pub pinned: bool,
    /// Every pinned entry id of the workspace, in id order.
    pub pins: Vec<String>,
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
    /// Skip this many of the newest first (a page's start; default 0).
    pub offset: usize,
    /// The asking session: a sub-agent or cron session sees only entries
    /// from its lineage.
    pub asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[param(value_type = Option<String>)]
    pub destination: Option<Destination>,
}

impl EntriesQuery {
    fn into_filter(self) -> EntryFilter {
        EntryFilter {
            kind: self.kind,
            subject: self.subject,
            work_context: self.work_context,
            session: self.session,
            all: self.all,
            // The page's entries and the ones before it, newest first.
            limit: self.limit.map(|limit| limit.saturating_add(self.offset)),
        }
    }
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
        let (asking, destination, offset) = (q.asking.clone(), q.destination, q.offset);
        let reader = ReadAs {
            asking: asking.as_deref(),
            destination,
        };
        let mut views = cairn.entries(&ws, &q.into_filter(), reader)?;
        views.drain(..offset.min(views.len()));
        Ok(views)
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

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/entries/{id}/correct", params(AskingQuery),
    request_body = CorrectBody,
    responses((status = 200, body = Entry, description = "The new version, which replaces the entry"),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`already_replaced`")))]
async fn correct(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
    body: web::Json<CorrectBody>,
) -> ApiResult<Entry> {
    let (ws, id) = path.into_inner();
    blocking(move || {
        let body = body.into_inner();
        let mut correction = Correction::new(&body.content, &body.reason);
        correction.detail = body.detail;
        correction.subject = body.subject;
        correction.status = body.status;
        correction.session = body.session;
        correction.turns = body.turns;
        Ok(cairn.memory_correct(&ws, &id, &correction, q.reader())?)
    })
    .await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/entries/{id}/retract", params(AskingQuery),
    request_body = RetractBody,
    responses((status = 200, body = Tombstone), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn retract(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
    body: web::Json<RetractBody>,
) -> ApiResult<Tombstone> {
    let (ws, id) = path.into_inner();
    blocking(move || Ok(cairn.memory_retract(&ws, &id, &body.reason, q.reader())?)).await
}

/// Pins (`pinned`) or unpins the entry of `path` for the caller: what
/// `pin` and `unpin` both do.
async fn set_pin(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
    pinned: bool,
) -> ApiResult<PinReply> {
    let (ws, id) = path.into_inner();
    blocking(move || {
        let pins = cairn.memory_pin(&ws, &id, pinned, q.reader())?;
        Ok(PinReply {
            entry: id,
            pinned,
            pins,
        })
    })
    .await
}

#[utoipa::path(put, path = "/v1/workspaces/{workspace}/entries/{id}/pin", params(AskingQuery),
    responses((status = 200, body = PinReply), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn pin(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
) -> ApiResult<PinReply> {
    set_pin(cairn, path, q, true).await
}

#[utoipa::path(delete, path = "/v1/workspaces/{workspace}/entries/{id}/pin", params(AskingQuery),
    responses((status = 200, body = PinReply), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn unpin(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    q: web::Query<AskingQuery>,
) -> ApiResult<PinReply> {
    set_pin(cairn, path, q, false).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/pins",
    responses((status = 200, body = Vec<String>, description = "The pinned entry ids, in id order"),
        (status = 404, body = ErrorBody)))]
async fn pins(cairn: web::Data<Cairn>, ws: web::Path<String>) -> ApiResult<Vec<String>> {
    blocking(move || Ok(cairn.pinned(&ws)?)).await
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

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/forget", request_body = ForgetBody,
    responses((status = 200, body = Tombstone), (status = 404, body = ErrorBody)))]
async fn forget(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<ForgetBody>,
    req: HttpRequest,
) -> ApiResult<Tombstone> {
    let admin = Principal::of_admin(&req);
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
