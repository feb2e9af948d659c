//! The workspace boundary, tried on every route of the API description.
//!
//! Two workspaces with content (turns, entries, a subject, a topic fed by its
//! webhook, a compaction summary); a token for `acme` only. The routes are
//! not listed here: they are read from `cairn_cli::http::api_doc()`, so a new
//! route is tried as soon as it is described. Each is sent with its
//! documented method, its path parameters filled with `globex`'s name (also
//! encoded, and behind a `..`) and ids that exist there, and a body built from
//! its request schema:
//!
//! - with the `acme` token, and with no token, every answer is 401, 403 or 404
//!   and holds no byte of `globex`'s content;
//! - with the `acme` token on `acme`'s own routes filled with `globex`'s ids,
//!   no answer is a 5xx or holds `globex`'s content (no route reads across);
//! - afterwards `globex` is whole (no write crossed either).
//!
//! A path parameter the test cannot fill fails it, naming the route: teach
//! [`Fixture::values`] the new parameter.

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Map, Value, json};

use crate::support::{Server, admin_and_acme};

const ADMIN: &str = "admin-token-cross-0123456789";
const ACME: &str = "acme-token-cross-0123456789";

/// In every piece of `globex`'s content, and in nothing a request sends.
const MARKER: &str = "ZEBRAFLUX";
/// Only in `acme`'s content (its own answers may show it).
const ACME_MARKER: &str = "QUOKKALINE";

/// Routes open to anyone (liveness and the description itself).
const PUBLIC: &[&str] = &["/healthz", "/openapi.json"];

/// The ids that exist in `globex`, made by [`seed`].
struct Fixture {
    entry: String,
    summary: String,
    run: String,
    /// The id of an access token that opens this workspace.
    token: String,
}

/// One workspace's content through the admin token: a session of turns, an
/// entry on a subject, a topic fed by its webhook, a compaction (summaries),
/// a maintenance pass. Answers the ids made.
fn seed(server: &Server, admin: &[(&str, &str)], ws: &str, marker: &str) -> Result<Fixture> {
    let call = |method: &str, path: &str, body: Value| -> Result<Value> {
        let (s, text) = server.raw_text(
            method,
            &format!("/v1/workspaces/{ws}{path}"),
            admin,
            "application/json",
            body.to_string().as_bytes(),
        )?;
        ensure!(s == 200, "seeding {method} {path}: {text}");
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Ok(serde_json::from_str(body)?)
    };
    let session = format!("{}-main", &ws[..1]);
    call(
        "POST",
        "/sessions",
        json!({"id": session, "work_context": format!("{ws}-launch")}),
    )?;
    let turns: Vec<Value> = (0..60)
        .map(|i| {
            json!({"session": session, "role": if i % 2 == 0 { "user" } else { "assistant" },
                "content": format!("{marker}-{i}: the vault phrase of the launch plan is \
                    {marker} {i}, we decided to keep the {marker} ledger in the north office.")})
        })
        .collect();
    call("POST", "/turns", json!({"turns": turns}))?;
    call(
        "POST",
        "/subjects",
        json!({"slug": "vault", "kind": "project", "display": format!("{marker} vault")}),
    )?;
    let entries = call(
        "POST",
        "/entries",
        json!({"entries": [{"kind": "decision", "subject": "vault",
            "content": format!("We keep the {marker} ledger in the north office."),
            "provenance": {"session": session, "from_seq": 0, "to_seq": 1}}]}),
    )?;
    let entry = entries["entries"][0]["id"]
        .as_str()
        .context("no entry id")?
        .to_owned();
    call(
        "POST",
        "/topics",
        json!({"name": "alerts", "description": format!("{marker} alerts"),
            "activation": "auto", "priority": "critical", "triggers": [{"kind": "webhook"}]}),
    )?;
    call(
        "POST",
        "/topics/alerts/webhook",
        json!({"text": format!("{marker} alarm in the north office")}),
    )?;
    call("POST", "/capture", json!({}))?;
    let report = call(
        "POST",
        &format!("/sessions/{session}/compaction"),
        json!({"budget": 600}),
    )?;
    let summary = report["view"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|item| item["type"] == "summary")
        .and_then(|item| item["id"].as_str())
        .context("compaction made no summary")?
        .to_owned();
    let maintained = call("POST", "/maintain", json!({}))?;
    let run = maintained["run"].as_str().unwrap_or("run-1").to_owned();
    let (s, text) = server.raw_text(
        "POST",
        "/v1/tokens",
        admin,
        "application/json",
        json!({"workspace": ws, "scope": "read", "label": format!("{marker} reader")})
            .to_string()
            .as_bytes(),
    )?;
    ensure!(s == 200, "seeding a token: {text}");
    let made: Value = serde_json::from_str(text.split_once("\r\n\r\n").map_or("", |(_, b)| b))?;
    let token = made["id"].as_str().context("no token id")?.to_owned();
    Ok(Fixture {
        entry,
        summary,
        run,
        token,
    })
}

impl Fixture {
    /// The values to try for the path parameter `name` that follows the
    /// literal segment `after`, pointing at `globex`'s things.
    fn values(&self, after: &str, name: &str, workspaces: &[&str]) -> Result<Vec<String>> {
        let one = |v: &str| vec![v.to_owned()];
        Ok(match (after, name) {
            ("workspaces", "workspace") => workspaces.iter().map(|w| (*w).to_owned()).collect(),
            ("sessions", "session") => one("g-main"),
            ("entries", "id") => one(&self.entry),
            ("summaries", "id") => one(&self.summary),
            ("items", "id") => vec![
                self.entry.clone(),
                self.summary.clone(),
                "session:g-main:0-59".to_owned(),
            ],
            ("subjects", "slug") => one("vault"),
            ("topics", "name") => one("alerts"),
            ("runs", "run") => one(&self.run),
            ("why", "turn") => one("g-main/0"),
            ("plugins", "world") => one("memory-policy"),
            ("generations", "generation") => one("default@0#1"),
            ("tokens", "id") => one(&self.token),
            _ => bail!(
                "no value for path parameter {{{name}}} after /{after}/: teach \
                 cross_workspace::Fixture::values which of globex's ids it takes"
            ),
        })
    }

    /// A value for a body or query field of this name, when it names a thing
    /// of `globex`.
    fn field(&self, name: &str) -> Option<Value> {
        Some(match name {
            "session" | "asking" | "parent" => json!("g-main"),
            "workspace" => json!("globex"),
            "work_context" => json!("globex-launch"),
            "subject" | "slug" | "into" => json!("vault"),
            "id" | "entry" | "replaces" => json!(self.entry),
            "turn" => json!("g-main/0"),
            "query" | "text" => json!("north office ledger"),
            _ => return None,
        })
    }
}

/// One request to make: the method, the described route it comes from, the
/// path as sent (with its query), the body and its content type.
struct Probe {
    method: String,
    route: String,
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// Every route of the description, filled in every way [`Fixture::values`]
/// offers (the product of each parameter's values).
fn probes(api: &Value, fixture: &Fixture, workspaces: &[&str]) -> Result<Vec<Probe>> {
    let paths = api["paths"].as_object().context("no paths")?;
    ensure!(paths.len() > 40, "only {} paths described", paths.len());
    let mut out = Vec::new();
    for (route, item) in paths {
        // Fill the path, segment by segment.
        let mut filled = vec![String::new()];
        let mut after = "";
        for segment in route.split('/').skip(1) {
            let values = match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => fixture.values(after, name, workspaces)?,
                None => {
                    after = segment;
                    vec![segment.to_owned()]
                }
            };
            filled = filled
                .iter()
                .flat_map(|prefix| values.iter().map(move |v| format!("{prefix}/{v}")))
                .collect();
        }
        for (method, op) in item.as_object().context("path item")? {
            if !matches!(method.as_str(), "get" | "post" | "put" | "delete" | "patch") {
                continue;
            }
            let query = query_string(op, fixture);
            let (content_type, body) = body_of(api, op, fixture)?;
            for path in &filled {
                out.push(Probe {
                    method: method.to_uppercase(),
                    route: route.clone(),
                    path: format!("{path}{query}"),
                    content_type: content_type.clone(),
                    body: body.clone(),
                });
            }
        }
    }
    // Erasing last, so the reads and writes before find what they name.
    out.sort_by_key(|probe| probe.method == "DELETE");
    Ok(out)
}

/// `?name=value&…` for the query parameters that name one of `globex`'s
/// things (an asking session, a subject…).
fn query_string(op: &Value, fixture: &Fixture) -> String {
    let pairs: Vec<String> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            let value = fixture.field(name)?;
            Some(format!("{name}={}", value.as_str()?.replace(' ', "%20")))
        })
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    }
}

/// The request body of an operation: a JSON value built from its schema,
/// or a few bytes for a binary body, or nothing.
fn body_of(api: &Value, op: &Value, fixture: &Fixture) -> Result<(String, Vec<u8>)> {
    let Some(content) = op["requestBody"]["content"].as_object() else {
        return Ok(("application/json".to_owned(), b"{}".to_vec()));
    };
    if let Some(media) = content.get("application/json") {
        let body = sample(api, &media["schema"], fixture, None, 0);
        return Ok(("application/json".to_owned(), body.to_string().into_bytes()));
    }
    let content_type = content.keys().next().context("empty content")?.clone();
    Ok((content_type, b"\0asm\x01\0\0\0".to_vec()))
}

/// A value that fits `schema`: required properties and the ones naming
/// `globex`'s things, the first variant of a union, the first value of an
/// enum. Depth-bounded (schemas may recurse).
fn sample(api: &Value, schema: &Value, fixture: &Fixture, name: Option<&str>, depth: u32) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(reference) = schema["$ref"].as_str() {
        let target = reference
            .strip_prefix("#/components/schemas/")
            .map(|n| &api["components"]["schemas"][n]);
        return match target {
            Some(target) => sample(api, target, fixture, name, depth + 1),
            None => Value::Null,
        };
    }
    for union in ["oneOf", "anyOf", "allOf"] {
        if let Some(first) = schema[union].as_array().and_then(|variants| {
            variants
                .iter()
                .find(|v| v["type"] != "null")
                .or(variants.first())
        }) {
            return sample(api, first, fixture, name, depth + 1);
        }
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = match &schema["type"] {
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null")
            .to_owned(),
        _ if schema["properties"].is_object() => "object".to_owned(),
        _ => "null".to_owned(),
    };
    match kind.as_str() {
        "object" => {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut out = Map::new();
            for (field, sub) in schema["properties"].as_object().into_iter().flatten() {
                let wanted = fixture.field(field);
                if !required.contains(&field.as_str()) && wanted.is_none() {
                    continue;
                }
                let value = match wanted {
                    Some(v) if sub["type"] == "string" || sub["type"].is_array() => v,
                    _ => sample(api, sub, fixture, Some(field), depth + 1),
                };
                out.insert(field.clone(), value);
            }
            Value::Object(out)
        }
        "array" => json!([sample(api, &schema["items"], fixture, name, depth + 1)]),
        "string" => match (
            schema["format"].as_str(),
            name.and_then(|n| fixture.field(n)),
        ) {
            (Some("date-time"), _) => json!("2026-01-01T00:00:00Z"),
            (_, Some(v)) => v,
            _ => json!("x"),
        },
        "integer" | "number" => json!(1),
        "boolean" => json!(false),
        _ => Value::Null,
    }
}

/// Sends every probe with `headers` and checks each answer with `check`
/// (given the status and the whole answer); answers how many were sent.
fn try_all(
    server: &Server,
    probes: &[Probe],
    headers: &[(&str, &str)],
    check: impl Fn(&Probe, u16, &str) -> Result<()>,
) -> Result<usize> {
    for probe in probes {
        let (status, text) = server.raw_text(
            &probe.method,
            &probe.path,
            headers,
            &probe.content_type,
            &probe.body,
        )?;
        ensure!(
            !text.contains(MARKER),
            "{} {} ({}) answered {status} with globex's content:\n{text}",
            probe.method,
            probe.path,
            probe.route
        );
        check(probe, status, &text).with_context(|| {
            format!(
                "{} {} ({}) answered {status}:\n{text}",
                probe.method, probe.path, probe.route
            )
        })?;
    }
    Ok(probes.len())
}

#[test]
fn no_route_crosses_workspaces() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start_configured(dir.path(), &admin_and_acme(ADMIN, ACME))?;
    let host = server.base.trim_start_matches("http://").to_owned();
    let admin_auth = format!("Bearer {ADMIN}");
    let acme_auth = format!("Bearer {ACME}");
    let admin = [("host", host.as_str()), ("authorization", &admin_auth)];
    let acme = [("host", host.as_str()), ("authorization", &acme_auth)];
    let anonymous = [("host", host.as_str())];

    seed(&server, &admin, "acme", ACME_MARKER)?;
    let globex = seed(&server, &admin, "globex", MARKER)?;
    let api = serde_json::to_value(cairn_cli::http::api_doc())?;

    // 1. Routes naming globex, as the acme token and as nobody: refused.
    // The name is also tried percent-encoded and behind a `..`, plain and
    // encoded (the guard reads the path as sent).
    let other = probes(
        &api,
        &globex,
        &["globex", "%67lobex", "acme/../globex", "acme%2F..%2Fglobex"],
    )?;
    let refused = |probe: &Probe, status: u16, _: &str| -> Result<()> {
        if PUBLIC.contains(&probe.route.as_str()) {
            ensure!(status == 200, "a public route");
        } else {
            ensure!(matches!(status, 401 | 403 | 404), "not refused");
        }
        Ok(())
    };
    let sent = try_all(&server, &other, &acme, refused)?;
    let sent_anonymous = try_all(&server, &other, &anonymous, |probe, status, text| {
        refused(probe, status, text)?;
        ensure!(
            PUBLIC.contains(&probe.route.as_str()) || status == 401,
            "no token, yet not 401"
        );
        Ok(())
    })?;

    // 2. acme's own routes with globex's ids: answered or refused, never a
    // 5xx, never globex's content.
    let own = probes(&api, &globex, &["acme"])?;
    let sent_own = try_all(&server, &own, &acme, |probe, status, _| {
        ensure!(status < 500, "a server error");
        if !probe.route.starts_with("/v1/workspaces/") && !PUBLIC.contains(&probe.route.as_str()) {
            ensure!(status == 403, "an admin route opened to a workspace token");
        }
        Ok(())
    })?;
    // Lower bounds: the enumeration did not collapse.
    ensure!(
        sent >= 200 && sent_anonymous == sent && sent_own >= 50,
        "{sent}, {sent_anonymous} and {sent_own} probes"
    );

    // 3. globex is whole: nothing above wrote or erased across.
    let read = |path: &str| -> Result<String> {
        let (s, text) = server.raw_text(
            "GET",
            &format!("/v1/workspaces/globex{path}"),
            &admin,
            "application/json",
            b"",
        )?;
        ensure!(s == 200, "{path}: {text}");
        Ok(text)
    };
    let transcript = read("/sessions/g-main/transcript?limit=100")?;
    ensure!(
        transcript.matches(&format!("{MARKER}-")).count() == 60,
        "globex's transcript changed: {transcript}"
    );
    ensure!(read(&format!("/entries/{}", globex.entry))?.contains(MARKER));
    ensure!(read("/topics/alerts")?.contains(MARKER));
    ensure!(read("/subjects")?.contains(MARKER));
    ensure!(read(&format!("/summaries/{}", globex.summary))?.contains(MARKER));
    Ok(())
}
