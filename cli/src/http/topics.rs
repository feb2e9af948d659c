//! The topic routes of `cairn serve`: CRUD, proposals, requested
//! collection, the gate log and `why`, each a `Cairn` method run on the
//! blocking pool.

use actix_web::web;
use cairn::topics::{
    AssertionCandidate, CollectReport, FeedReport, GateRecord, Proposal, Topic, TopicDetails,
    TopicSpec, TurnRef,
};
use cairn::{Cairn, Destination, ReadAs};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::route::{Route, Scope};
use super::{ApiError, ApiResult, ErrorBody, blocking};

/// The routes of this area. Their operations keep the tag the description
/// always gave them (`topic_routes`, the name of their first module).
pub(crate) fn routes() -> Vec<Route> {
    use Scope::{Read, Write};
    [
        Route::new(Write, __path_create_topic, create_topic),
        Route::new(Read, __path_topics, topics),
        Route::new(Read, __path_topic, topic),
        Route::new(Write, __path_update_topic, update_topic),
        Route::new(Write, __path_delete_topic, delete_topic),
        Route::new(Write, __path_pause_topic, pause_topic),
        Route::new(Write, __path_resume_topic, resume_topic),
        Route::new(Read, __path_proposals, proposals),
        Route::new(Write, __path_decide_proposal, decide_proposal),
        Route::new(Read, __path_candidates, candidates),
        Route::new(Write, __path_decide_candidate, decide_candidate),
        Route::new(Write, __path_collect, collect),
        Route::new(Write, __path_feed, feed),
        Route::new(Read, __path_gate_log, gate_log),
        // A turn is `session/seq`.
        Route::new(Read, __path_why, why).tail(),
    ]
    .into_iter()
    .map(|route| route.tag("topic_routes"))
    .collect()
}

fn turn_ref(text: &str) -> Result<TurnRef, ApiError> {
    Ok(text.parse::<TurnRef>().map_err(cairn::CairnError::from)?)
}

/// Who reads a topic's collected turns, and where they go: the rules of
/// every read (lineage, the memory policy, masking) apply to them.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(default)]
pub(crate) struct TopicReader {
    /// The asking session: a sub-agent or cron session sees only turns of
    /// its lineage.
    asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[param(value_type = Option<String>)]
    destination: Option<Destination>,
}

/// The reader a topic query names.
macro_rules! reader_of {
    ($($query:ty),*) => {$(
        impl $query {
            fn reader(&self) -> ReadAs<'_> {
                ReadAs {
                    asking: self.asking.as_deref(),
                    destination: self.destination,
                }
            }
        }
    )*};
}

reader_of!(TopicReader, ShowQuery, ProposalsQuery, LogQuery);

/// Query of `GET .../topics/{name}`.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ShowQuery {
    /// At most this many members (default 20).
    limit: Option<usize>,
    /// The asking session: a sub-agent or cron session sees only turns of
    /// its lineage.
    #[serde(default)]
    asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    destination: Option<Destination>,
}

/// Query of `GET .../topics/{name}/proposals`.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ProposalsQuery {
    /// Decided proposals too.
    #[serde(default)]
    all: bool,
    /// The asking session: a sub-agent or cron session sees only turns of
    /// its lineage.
    #[serde(default)]
    asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    destination: Option<Destination>,
}

/// Query of `GET .../topics/{name}/log`.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct LogQuery {
    /// At most this many records (default 50).
    limit: Option<usize>,
    /// The asking session: a sub-agent or cron session sees only turns of
    /// its lineage.
    #[serde(default)]
    asking: Option<String>,
    /// Where the text goes (`local_model` by default, `user_visible_ui`,
    /// `cloud_model`…): the memory policy decides per destination.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    destination: Option<Destination>,
}

/// Body of `POST .../topics/{name}/candidates/decide`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateBody {
    /// The turn, `session/seq`.
    pub turn: String,
    /// Accept (true: a `fact` entry holds it) or dismiss (false).
    pub accept: bool,
}

/// Body of `POST .../topics/{name}/collect`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectBody {
    /// Only turns at or after this time.
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
}

/// Body of `POST .../topics/{name}/webhook`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedBody {
    /// The text fed to the topic (recorded as a low-trust tool turn).
    pub text: String,
}

/// Body of `POST .../topics/{name}/proposals/decide`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// The turn, `session/seq`.
    pub turn: String,
    /// Approve (true) or reject (false).
    pub approve: bool,
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics", request_body = TopicSpec,
    responses((status = 200, body = Topic), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn create_topic(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
    body: web::Json<TopicSpec>,
) -> ApiResult<Topic> {
    blocking(move || Ok(cairn.create_topic(&ws, &body)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/topics",
    responses((status = 200, body = Vec<Topic>)))]
pub(crate) async fn topics(
    cairn: web::Data<Cairn>,
    ws: web::Path<String>,
) -> ApiResult<Vec<Topic>> {
    blocking(move || Ok(cairn.topics(&ws)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/topics/{name}", params(ShowQuery),
    responses((status = 200, body = TopicDetails), (status = 404, body = ErrorBody)))]
pub(crate) async fn topic(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    query: web::Query<ShowQuery>,
) -> ApiResult<TopicDetails> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.topic(&ws, &name, query.limit.unwrap_or(20), query.reader())?)).await
}

#[utoipa::path(put, path = "/v1/workspaces/{workspace}/topics/{name}", request_body = TopicSpec,
    responses((status = 200, body = Topic), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn update_topic(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<TopicSpec>,
) -> ApiResult<Topic> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.update_topic(&ws, &name, &body)?)).await
}

#[utoipa::path(delete, path = "/v1/workspaces/{workspace}/topics/{name}",
    responses((status = 200, body = Topic), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete_topic(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Topic> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.delete_topic(&ws, &name)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics/{name}/pause",
    responses((status = 200, body = Topic), (status = 404, body = ErrorBody)))]
pub(crate) async fn pause_topic(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Topic> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.pause_topic(&ws, &name, true)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics/{name}/resume",
    responses((status = 200, body = Topic), (status = 404, body = ErrorBody)))]
pub(crate) async fn resume_topic(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
) -> ApiResult<Topic> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.pause_topic(&ws, &name, false)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/topics/{name}/proposals", params(ProposalsQuery),
    responses((status = 200, body = Vec<Proposal>), (status = 404, body = ErrorBody)))]
pub(crate) async fn proposals(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    query: web::Query<ProposalsQuery>,
) -> ApiResult<Vec<Proposal>> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.topic_proposals(&ws, &name, query.all, query.reader())?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics/{name}/proposals/decide", request_body = DecideBody,
    responses((status = 200, body = Proposal), (status = 404, body = ErrorBody)))]
pub(crate) async fn decide_proposal(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<DecideBody>,
) -> ApiResult<Proposal> {
    let (ws, name) = path.into_inner();
    blocking(move || {
        let turn = turn_ref(&body.turn)?;
        Ok(cairn.decide_proposal(&ws, &name, &turn, body.approve)?)
    })
    .await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/topics/{name}/candidates", params(ProposalsQuery),
    responses((status = 200, body = Vec<AssertionCandidate>), (status = 404, body = ErrorBody)))]
pub(crate) async fn candidates(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    query: web::Query<ProposalsQuery>,
) -> ApiResult<Vec<AssertionCandidate>> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.topic_candidates(&ws, &name, query.all, query.reader())?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics/{name}/candidates/decide", request_body = CandidateBody,
    responses((status = 200, body = AssertionCandidate), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn decide_candidate(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<CandidateBody>,
) -> ApiResult<AssertionCandidate> {
    let (ws, name) = path.into_inner();
    blocking(move || {
        let turn = turn_ref(&body.turn)?;
        Ok(cairn.decide_candidate(&ws, &name, &turn, body.accept)?)
    })
    .await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics/{name}/collect", request_body = CollectBody,
    responses((status = 200, body = CollectReport), (status = 404, body = ErrorBody)))]
pub(crate) async fn collect(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<CollectBody>,
) -> ApiResult<CollectReport> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.collect_topic(&ws, &name, body.since)?)).await
}

#[utoipa::path(post, path = "/v1/workspaces/{workspace}/topics/{name}/webhook", request_body = FeedBody,
    responses((status = 200, body = FeedReport), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn feed(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    body: web::Json<FeedBody>,
) -> ApiResult<FeedReport> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.feed_topic(&ws, &name, &body.text)?)).await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/topics/{name}/log", params(LogQuery),
    responses((status = 200, body = Vec<GateRecord>), (status = 404, body = ErrorBody)))]
pub(crate) async fn gate_log(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String)>,
    query: web::Query<LogQuery>,
) -> ApiResult<Vec<GateRecord>> {
    let (ws, name) = path.into_inner();
    blocking(move || Ok(cairn.gate_log(&ws, &name, query.limit.unwrap_or(50), query.reader())?))
        .await
}

#[utoipa::path(get, path = "/v1/workspaces/{workspace}/topics/{name}/why/{turn}", params(TopicReader),
    responses((status = 200, body = Vec<GateRecord>), (status = 404, body = ErrorBody)))]
pub(crate) async fn why(
    cairn: web::Data<Cairn>,
    path: web::Path<(String, String, String)>,
    query: web::Query<TopicReader>,
) -> ApiResult<Vec<GateRecord>> {
    let (ws, name, turn) = path.into_inner();
    blocking(move || {
        let turn = turn_ref(&turn)?;
        Ok(cairn.why(&ws, &name, &turn, query.reader())?)
    })
    .await
}
