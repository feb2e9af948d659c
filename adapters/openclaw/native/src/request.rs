//! One call of the facade, as JSON in and JSON out: what a JS caller asks
//! (`{"op": "assemble", "workspace": "…", …}`), the [`Cairn`] method that
//! answers it, and the answer in the shape `cairn serve` gives the same
//! call over HTTP, so the plugin's code reads both the same way.
//!
//! Nothing here knows about Node: `lib.rs` runs [`perform`] on a worker
//! thread and hands the value (or the [`Failure`]) to JavaScript. The
//! facade is the only door: no handle on the memory core or the policy host
//! is taken.

use cairn::{
    AssembleRequest, AssembleSettings, Cairn, CairnError, Destination, EntryFilter, ErrorKind,
    ReadAs, RetrievalMode, SearchRequest, SessionSpec, TurnInput,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A call that failed: the HTTP API's error body (`code`, `message`) and the
/// status the same failure has there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) status: u16,
    pub(crate) code: String,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        Failure {
            status,
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

/// The HTTP status of each kind of error, as `cairn serve` answers it: one
/// exhaustive match, so a new kind cannot go unmapped.
fn status_of(kind: ErrorKind) -> u16 {
    match kind {
        ErrorKind::NotFound => 404,
        ErrorKind::Invalid => 400,
        ErrorKind::TooLarge => 413,
        ErrorKind::Conflict => 409,
        ErrorKind::RateLimited => 429,
        ErrorKind::Forbidden => 403,
        ErrorKind::Unavailable => 503,
        ErrorKind::Internal => 500,
    }
}

impl From<CairnError> for Failure {
    fn from(err: CairnError) -> Self {
        Failure::new(status_of(err.kind()), err.code(), err.to_string())
    }
}

/// `POST …/assemble`'s body (the HTTP API's `AssembleBody`, which lives in
/// the server's crate).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AssembleBody {
    session: String,
    #[serde(default)]
    budget_tokens: Option<usize>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    destination: Destination,
    #[serde(default)]
    directives: Vec<String>,
    #[serde(default)]
    retrieval: RetrievalMode,
    #[serde(default)]
    settings: Option<AssembleSettings>,
    /// Whether the answer carries the trace (default true, as over HTTP).
    #[serde(default = "yes")]
    trace: bool,
}

fn yes() -> bool {
    true
}

/// One call, tagged by `op`. Reads name who asks (`asking`) and where the
/// text goes (`destination`), as the HTTP API's query strings do.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Request {
    /// `POST …/sessions`.
    Bootstrap {
        workspace: String,
        spec: SessionSpec,
    },
    /// `POST …/turns`.
    Ingest {
        workspace: String,
        turns: Vec<TurnInput>,
    },
    /// `POST …/sessions/{s}/after_turn`.
    AfterTurn { workspace: String, session: String },
    /// `POST …/assemble`.
    Assemble {
        workspace: String,
        body: AssembleBody,
    },
    /// `POST …/sessions/{s}/compact`: the capture, then the compaction.
    BeforeCompaction { workspace: String, session: String },
    /// `POST …/sessions/{s}/reset`.
    BeforeReset { workspace: String, session: String },
    /// `POST …/sessions/{s}/end`.
    SessionEnd { workspace: String, session: String },
    /// `POST …/search`.
    Search {
        workspace: String,
        request: SearchRequest,
    },
    /// `GET …/items/{id}`.
    Get {
        workspace: String,
        id: String,
        #[serde(default)]
        asking: Option<String>,
        #[serde(default)]
        destination: Option<Destination>,
    },
    /// `GET …/summaries/{id}`.
    Expand {
        workspace: String,
        id: String,
        #[serde(default)]
        asking: Option<String>,
        #[serde(default)]
        destination: Option<Destination>,
    },
    /// `GET …/summaries/{id}/turns`.
    ExpandAll {
        workspace: String,
        id: String,
        #[serde(default)]
        from: u64,
        #[serde(default)]
        asking: Option<String>,
        #[serde(default)]
        destination: Option<Destination>,
    },
    /// `GET …/briefing`.
    Briefing {
        workspace: String,
        #[serde(default)]
        work_context: Option<String>,
        #[serde(default)]
        asking: Option<String>,
        #[serde(default)]
        destination: Option<Destination>,
    },
    /// `POST /v1/gateway_start`.
    GatewayStart,
    /// `GET …/sessions/{s}`.
    Session {
        workspace: String,
        session: String,
        #[serde(default)]
        asking: Option<String>,
    },
    /// `GET …/sessions/{s}/transcript`.
    Transcript {
        workspace: String,
        session: String,
        #[serde(default)]
        from: u64,
        #[serde(default)]
        limit: Option<usize>,
        #[serde(default)]
        asking: Option<String>,
        #[serde(default)]
        destination: Option<Destination>,
    },
    /// `GET …/entries`.
    Entries {
        workspace: String,
        #[serde(default)]
        filter: EntryFilter,
        #[serde(default)]
        asking: Option<String>,
        #[serde(default)]
        destination: Option<Destination>,
    },
    /// `GET …/sessions/{s}/compaction`.
    CompactionView {
        workspace: String,
        session: String,
        #[serde(default)]
        asking: Option<String>,
    },
    /// `GET /v1/stats/index`.
    IndexStats,
}

/// `POST …/turns`' answer.
#[derive(Serialize)]
struct IngestReply {
    acks: Vec<cairn::Ack>,
}

fn reader<'a>(asking: &'a Option<String>, destination: Option<Destination>) -> ReadAs<'a> {
    ReadAs {
        asking: asking.as_deref(),
        destination,
    }
}

/// Parses a call (a refusal is `400 invalid_json`, as a malformed body is
/// over HTTP).
pub(crate) fn parse(request: Value) -> Result<Request, Failure> {
    serde_json::from_value(request).map_err(|e| Failure::new(400, "invalid_json", e.to_string()))
}

/// Runs one call on the facade (blocking: it may fsync) and answers it as
/// the HTTP API would.
pub(crate) fn perform(cairn: &Cairn, request: Request) -> Result<Value, Failure> {
    fn json<T: Serialize>(value: T) -> Result<Value, Failure> {
        serde_json::to_value(value).map_err(|e| Failure::new(500, "internal", e.to_string()))
    }
    match request {
        Request::Bootstrap { workspace, spec } => json(cairn.bootstrap(&workspace, &spec)?),
        Request::Ingest { workspace, turns } => json(IngestReply {
            acks: cairn.ingest(&workspace, &turns)?,
        }),
        Request::AfterTurn { workspace, session } => json(cairn.after_turn(&workspace, &session)?),
        Request::Assemble { workspace, body } => {
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
            let mut block = cairn.assemble(&workspace, &request)?;
            if !body.trace {
                block.trace = Vec::new();
            }
            json(block)
        }
        Request::BeforeCompaction { workspace, session } => {
            json(cairn.before_compaction(&workspace, &session)?)
        }
        Request::BeforeReset { workspace, session } => {
            json(cairn.before_reset(&workspace, &session)?)
        }
        Request::SessionEnd { workspace, session } => {
            json(cairn.session_end(&workspace, &session)?)
        }
        Request::Search { workspace, request } => json(cairn.memory_search(&workspace, &request)?),
        Request::Get {
            workspace,
            id,
            asking,
            destination,
        } => json(cairn.memory_get(&workspace, &id, reader(&asking, destination))?),
        Request::Expand {
            workspace,
            id,
            asking,
            destination,
        } => json(cairn.memory_expand(&workspace, &id, reader(&asking, destination))?),
        Request::ExpandAll {
            workspace,
            id,
            from,
            asking,
            destination,
        } => json(cairn.expand_all(&workspace, &id, from, reader(&asking, destination))?),
        Request::Briefing {
            workspace,
            work_context,
            asking,
            destination,
        } => json(cairn.briefing(
            &workspace,
            work_context.as_deref(),
            reader(&asking, destination),
        )?),
        Request::GatewayStart => json(cairn.gateway_start()?),
        Request::Session {
            workspace,
            session,
            asking,
        } => json(cairn.session(&workspace, &session, asking.as_deref())?),
        Request::Transcript {
            workspace,
            session,
            from,
            limit,
            asking,
            destination,
        } => json(cairn.transcript(
            &workspace,
            &session,
            from,
            limit,
            reader(&asking, destination),
        )?),
        Request::Entries {
            workspace,
            filter,
            asking,
            destination,
        } => json(cairn.entries(&workspace, &filter, reader(&asking, destination))?),
        Request::CompactionView {
            workspace,
            session,
            asking,
        } => json(cairn.compaction_view(&workspace, &session, asking.as_deref())?),
        Request::IndexStats => json(cairn.index_stats()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::CairnConfig;
    use serde_json::json;

    fn check(cairn: &Cairn, request: Value) -> Result<Value, Failure> {
        perform(cairn, parse(request)?)
    }

    #[test]
    fn calls_answer_as_the_http_api_does() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let cairn = Cairn::open(CairnConfig {
            data_dir: dir.path().to_owned(),
            ..CairnConfig::default()
        })?;
        let ws = "oc";
        let session = check(
            &cairn,
            json!({"op": "bootstrap", "workspace": ws, "spec": {"id": "agent:main:main", "work_context": "main"}}),
        )
        .map_err(|f| f.message)?;
        assert_eq!(session["id"], "agent:main:main");
        let turn = json!({"session": "agent:main:main", "role": "user", "content": "My cat is called Miso.", "idempotency_key": "k:0"});
        let first = check(
            &cairn,
            json!({"op": "ingest", "workspace": ws, "turns": [turn]}),
        )
        .map_err(|f| f.message)?;
        assert_eq!(first["acks"][0]["duplicate"], false);
        let again = check(
            &cairn,
            json!({"op": "ingest", "workspace": ws, "turns": [turn]}),
        )
        .map_err(|f| f.message)?;
        assert_eq!(
            again["acks"][0]["duplicate"], true,
            "the key answers duplicate"
        );
        let block = check(
            &cairn,
            json!({"op": "assemble", "workspace": ws, "body": {"session": "agent:main:main", "retrieval": "off", "trace": false}}),
        )
        .map_err(|f| f.message)?;
        assert!(block["text"].as_str().is_some_and(|t| t.contains("Miso")));
        assert_eq!(block["trace"], json!([]), "no trace unless asked for");
        let turns = check(
            &cairn,
            json!({"op": "transcript", "workspace": ws, "session": "agent:main:main"}),
        )
        .map_err(|f| f.message)?;
        assert_eq!(turns.as_array().map(Vec::len), Some(1));
        cairn.flush()?;
        Ok(())
    }

    #[test]
    fn failures_carry_the_http_code_and_status() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let cairn = Cairn::open(CairnConfig {
            data_dir: dir.path().to_owned(),
            ..CairnConfig::default()
        })?;
        let missing = check(
            &cairn,
            json!({"op": "session", "workspace": "nowhere", "session": "s"}),
        );
        let failure = missing.err().ok_or("a missing workspace answered")?;
        assert_eq!(
            (failure.status, failure.code.as_str()),
            (404, "workspace_not_found")
        );
        let bad = check(&cairn, json!({"op": "bootstrap", "workspace": "oc"}));
        let failure = bad.err().ok_or("a call without its spec answered")?;
        assert_eq!(
            (failure.status, failure.code.as_str()),
            (400, "invalid_json")
        );
        assert!(failure.message.contains("spec"), "{}", failure.message);
        let unknown = check(&cairn, json!({"op": "drop_everything"}));
        assert_eq!(
            unknown.err().map(|f| f.code),
            Some("invalid_json".to_owned())
        );
        Ok(())
    }
}
