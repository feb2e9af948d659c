//! The second security pass's probes (issue 78), each kept as a test: what
//! was seen broken from outside against a real `cairn serve`, tried again.

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::support::Server;

/// Searches `workspace` for `query`, and whether a hit's text holds `needle`.
fn finds(server: &Server, workspace: &str, query: &str, needle: &str) -> Result<bool> {
    let (s, r) = server.post(
        &format!("/v1/workspaces/{workspace}/search"),
        &json!({"query": query, "k": 5}),
    )?;
    ensure!(s == 200, "{r}");
    Ok(r["items"]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i.to_string().contains(needle))))
}

/// A timestamp past the calendar (chrono's limit) on an entry used to be
/// accepted, overflow the decay deadline and panic the search worker, so
/// no workspace was indexed again and the entry reads answered 500. Now
/// it is refused at the edge with a 400 naming the field, for entries,
/// notes and turns, and every workspace goes on indexing.
#[test]
fn timestamps_past_the_calendar_are_refused_and_indexing_goes_on() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let (s, body) = server.post(
        "/v1/workspaces/acme/turns",
        &json!({"turns": [{"session": "s0", "role": "user", "content": "The acme workspace exists."}]}),
    )?;
    ensure!(s == 200, "{body}");
    for at in [
        "+262142-12-31T23:59:59Z",
        "-262143-01-01T00:00:00Z",
        "+10000-01-01T00:00:00Z",
    ] {
        let (s, body) = server.post(
            "/v1/workspaces/acme/entries",
            &json!({"entries": [{"kind": "open_question", "content": "x", "timestamp": at}]}),
        )?;
        ensure!(s == 400, "{at}: {s} {body}");
        ensure!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("entry timestamp")),
            "{body}"
        );
        let (s, body) = server.post(
            "/v1/workspaces/acme/turns",
            &json!({"turns": [{"session": "s1", "role": "user", "content": "x", "timestamp": at}]}),
        )?;
        ensure!(s == 400, "{at}: {s} {body}");
        ensure!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("turn timestamp")),
            "{body}"
        );
        let (s, body) = server.post(
            "/v1/workspaces/acme/search",
            &json!({"query": "x", "since": at}),
        )?;
        ensure!(s == 400, "{at}: {s} {body}");
    }
    // The edges of the accepted range are accepted, and read back.
    let (s, body) = server.post(
        "/v1/workspaces/acme/entries",
        &json!({"entries": [
            {"kind": "open_question", "content": "Who owns the far-future deadline?", "timestamp": "9999-12-31T23:59:59Z"},
            {"kind": "decision", "content": "The oldest decision on record.", "timestamp": "0000-01-01T00:00:00Z"},
        ]}),
    )?;
    ensure!(s == 200, "{body}");
    let (s, body) = server.get("/v1/workspaces/acme/entries?all=true")?;
    ensure!(s == 200, "{body}");
    let (s, body) = server.get("/v1/workspaces/acme/briefing")?;
    ensure!(s == 200, "{body}");
    // Another workspace's turns are indexed and found afterwards.
    let (s, body) = server.post(
        "/v1/workspaces/globex/turns",
        &json!({"turns": [{"session": "s1", "role": "user", "content": "The globex offsite moves to Porto."}]}),
    )?;
    ensure!(s == 200, "{body}");
    server.wait_indexed()?;
    ensure!(finds(&server, "globex", "offsite Porto", "Porto")?);
    ensure!(finds(&server, "acme", "far-future deadline", "far-future")?);
    let (s, health) = server.get("/healthz")?;
    ensure!(s == 200 && health["panics"] == 0, "{health}");
    ensure!(health["status"] == "ok", "{health}");
    ensure!(
        health["workers"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w["name"] == "search-indexer" && w["running"] == true)),
        "{health}"
    );
    Ok(())
}

/// `/healthz` reports the workers and the panics caught in them.
#[test]
fn health_names_the_workers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(dir.path())?;
    let (s, health): (u16, Value) = server.get("/healthz")?;
    ensure!(s == 200, "{health}");
    let names: Vec<&str> = health["workers"]
        .as_array()
        .map(|w| w.iter().filter_map(|w| w["name"].as_str()).collect())
        .unwrap_or_default();
    for expected in ["decision-writer", "ticker", "plugin-ticker", "eraser"] {
        ensure!(names.contains(&expected), "{expected} missing: {health}");
    }
    Ok(())
}

fn open(dir: &std::path::Path) -> Result<cairn::Cairn> {
    Ok(cairn::Cairn::open(cairn::CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        ..cairn::CairnConfig::default()
    })?)
}

/// A topic's members and proposals used to carry the first 400 raw bytes
/// of each turn (a `password: …` in clear where the transcript masks it)
/// and its gate log a plain BLAKE3 of the turn (a masked secret could be
/// confirmed offline); none of them kept a sub-agent to its lineage. Now
/// each goes through the judge of every read.
#[test]
fn topic_reads_follow_the_rules_of_every_read() -> Result<()> {
    use cairn::topics::{Activation, Priority, TopicSpec, Trigger};
    use cairn::{Role, SessionKind, SessionSpec, TurnInput};
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let secret = "Tr0ub4dor-x9-staging";
    let said = format!("The staging password: {secret} opens the box");
    for (name, activation) in [
        ("creds", Activation::Auto),
        ("creds-review", Activation::Gated),
    ] {
        cairn.create_topic(
            "acme",
            &TopicSpec::new(name, "Credentials mentioned in passing")
                .trigger(Trigger::Keyword("password".into()))
                .activation(activation)
                .priority(Priority::Critical),
        )?;
    }
    cairn.ingest("acme", &[TurnInput::new("main", Role::User, &said)])?;
    cairn.bootstrap(
        "acme",
        &SessionSpec {
            id: "other".into(),
            kind: SessionKind::Subagent,
            ..SessionSpec::default()
        },
    )?;
    cairn.flush()?;

    let details = cairn.topic("acme", "creds", 20, None)?;
    ensure!(details.members.len() == 1, "{details:?}");
    // Masked, or withheld by reference (the default policy's answer for a
    // credential sent to a model): never the secret.
    let snippet = &details.members[0].snippet;
    ensure!(
        !snippet.is_empty() && !snippet.contains(secret),
        "{snippet}"
    );
    let shown = cairn.topic(
        "acme",
        "creds",
        20,
        cairn::ReadAs::user().to(cairn::Destination::UserVisibleUi),
    )?;
    ensure!(
        shown.members[0].snippet.contains("staging password"),
        "{shown:?}"
    );
    ensure!(!shown.members[0].snippet.contains(secret), "{shown:?}");
    let proposals = cairn.topic_proposals("acme", "creds-review", true, None)?;
    ensure!(proposals.len() == 1, "{proposals:?}");
    ensure!(
        !proposals[0].membership.snippet.contains(secret),
        "{proposals:?}"
    );
    let pending = &cairn.topic("acme", "creds-review", 20, None)?.pending;
    ensure!(pending.len() == 1 && !pending[0].membership.snippet.contains(secret));

    // The digest a reader sees of a masked turn is keyed: it is not BLAKE3
    // of the raw text, in the gate log, `why` and the transcript alike.
    let plain = blake3::hash(said.as_bytes()).to_hex().to_string();
    let log = cairn.gate_log("acme", "creds", 50, None)?;
    ensure!(
        !log.is_empty() && log.iter().all(|r| r.content_hash != plain),
        "{log:?}"
    );
    let why = cairn.why("acme", "creds", &details.members[0].turn, None)?;
    ensure!(!why.is_empty() && why.iter().all(|r| r.content_hash != plain));
    let turns = cairn.transcript("acme", "main", 0, None, None)?;
    ensure!(turns[0].content_hash != plain && !turns[0].content.contains(secret));

    // A sub-agent outside the turn's lineage sees none of it.
    ensure!(
        cairn
            .topic("acme", "creds", 20, Some("other"))?
            .members
            .is_empty()
    );
    ensure!(
        cairn
            .topic("acme", "creds-review", 20, Some("other"))?
            .pending
            .is_empty()
    );
    ensure!(
        cairn
            .topic_proposals("acme", "creds-review", true, Some("other"))?
            .is_empty()
    );
    ensure!(
        cairn
            .gate_log("acme", "creds", 50, Some("other"))?
            .is_empty()
    );
    // An asking session that does not exist is refused, as for every read.
    ensure!(cairn.topic("acme", "creds", 20, Some("ghost")).is_err());
    Ok(())
}

/// Caps per workspace: sessions, topics, scheduled topics; a topic whose
/// regex triggers would not build into the workspace's one set with the
/// others is refused at creation (it used to be stored, and the failed set
/// silently switched off every regex trigger of the workspace).
#[test]
fn caps_per_workspace_refuse_clearly() -> Result<()> {
    use cairn::topics::{TopicSpec, Trigger};
    use cairn::{Role, SessionSpec, TurnInput};
    let dir = tempfile::tempdir()?;
    let mut config = cairn::CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: crate::support::storage(dir.path()),
        ..cairn::CairnConfig::default()
    };
    config.memory.limits.max_sessions = 3;
    config.memory.limits.max_topics = 2;
    config.memory.limits.max_scheduled_topics = 1;
    let cairn = cairn::Cairn::open(config)?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new("s1", Role::User, "one"),
            TurnInput::new("s2", Role::User, "two"),
        ],
    )?;
    cairn.bootstrap(
        "acme",
        &SessionSpec {
            id: "s3".into(),
            ..SessionSpec::default()
        },
    )?;
    let err = cairn
        .ingest("acme", &[TurnInput::new("s4", Role::User, "four")])
        .unwrap_err();
    ensure!(
        err.code() == "cap_reached" && err.to_string().contains("max_sessions"),
        "{err}"
    );
    let err = cairn
        .bootstrap(
            "acme",
            &SessionSpec {
                id: "s4".into(),
                ..SessionSpec::default()
            },
        )
        .unwrap_err();
    ensure!(err.code() == "cap_reached", "{err}");
    // Existing sessions still take turns; forgetting one makes room.
    cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "again")])?;
    cairn.forget("acme", &cairn::ForgetTarget::Session("s3".into()), "room")?;
    cairn.ingest("acme", &[TurnInput::new("s4", Role::User, "four")])?;

    let scheduled = |name: &str| {
        TopicSpec::new(name, "Daily digest").trigger(Trigger::Schedule("0 9 * * *".into()))
    };
    cairn.create_topic("acme", &scheduled("digest"))?;
    let err = cairn
        .create_topic("acme", &scheduled("digest-2"))
        .unwrap_err();
    ensure!(err.to_string().contains("max_scheduled_topics"), "{err}");
    let keyword =
        |name: &str| TopicSpec::new(name, "Words").trigger(Trigger::Keyword("word".into()));
    cairn.create_topic("acme", &keyword("words"))?;
    let err = cairn.create_topic("acme", &keyword("words-2")).unwrap_err();
    ensure!(
        err.code() == "cap_reached" && err.to_string().contains("max_topics"),
        "{err}"
    );
    // Updating a topic is not adding one.
    cairn.update_topic("acme", "words", &keyword("words"))?;
    Ok(())
}

/// A session its first turn made is a main session; bootstrapped afterwards
/// as the sub-agent it is, it used to stay main (and see everything). Now
/// it becomes the sub-agent, and a lineage that would change or widen is
/// refused with `lineage_mismatch`.
#[test]
fn a_session_narrows_to_the_sub_agent_it_is_bootstrapped_as() -> Result<()> {
    use cairn::{Role, SessionKind, SessionSpec, TurnInput};
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new("main", Role::User, "The launch is on Friday."),
            TurnInput::new("other", Role::User, "The rival's plan is secret."),
            TurnInput::new("child", Role::User, "I am the spawned helper."),
        ],
    )?;
    let spec = SessionSpec {
        id: "child".into(),
        kind: SessionKind::Subagent,
        parent: Some("main".into()),
        ..SessionSpec::default()
    };
    let child = cairn.bootstrap("acme", &spec)?;
    ensure!(child.kind == SessionKind::Subagent && child.parent.as_deref() == Some("main"));
    ensure!(child.next_seq == 1, "{child:?}");
    // Its lineage applies at once, and the host's plain bootstrap changes nothing.
    ensure!(
        cairn
            .transcript("acme", "other", 0, None, Some("child"))
            .is_err()
    );
    let again = cairn.bootstrap(
        "acme",
        &SessionSpec {
            id: "child".into(),
            ..SessionSpec::default()
        },
    )?;
    ensure!(again.kind == SessionKind::Subagent);
    // Another parent, or a main session becoming its own descendant: refused.
    let moved = SessionSpec {
        parent: Some("other".into()),
        ..spec.clone()
    };
    ensure!(cairn.bootstrap("acme", &moved).unwrap_err().code() == "lineage_mismatch");
    let cycle = SessionSpec {
        id: "main".into(),
        kind: SessionKind::Subagent,
        parent: Some("child".into()),
        ..SessionSpec::default()
    };
    ensure!(cairn.bootstrap("acme", &cycle).is_err());
    ensure!(cairn.session("acme", "main", None)?.kind == SessionKind::Main);
    // Listing sessions derives each head (it used to show next_seq 0).
    let listed = cairn.sessions("acme", None, None)?;
    ensure!(
        listed
            .iter()
            .all(|s| s.next_seq == 1 && s.last_turn_at.is_some()),
        "{listed:?}"
    );
    Ok(())
}

/// A topic whose regex would push the workspace's regex triggers past what
/// one set can hold is refused when it is created (it used to be stored,
/// and the set that failed to build switched every regex trigger off);
/// the topics before it still match.
#[test]
fn a_regex_the_workspace_set_cannot_hold_is_refused_at_creation() -> Result<()> {
    use cairn::topics::{Activation, Priority, TopicSpec, Trigger};
    use cairn::{Role, TurnInput};
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    // Each regex compiles alone within a topic's limit; 40 to a topic.
    let wide = |i: usize| {
        (0..40).fold(
            TopicSpec::new(&format!("wide-{i}"), "Twenty word characters")
                .activation(Activation::Auto)
                .priority(Priority::Critical),
            |spec, n| spec.trigger(Trigger::Regex(format!(r"\w{{20}}{n}"))),
        )
    };
    let mut refused = None;
    for i in 0..10 {
        if let Err(error) = cairn.create_topic("acme", &wide(i)) {
            refused = Some((i, error));
            break;
        }
    }
    let (at, error) = refused.ok_or_else(|| anyhow::anyhow!("400 wide regexes were all stored"))?;
    ensure!(at > 0, "the first topic was refused: {error}");
    ensure!(
        error.code() == "invalid_topic" && error.to_string().contains("triggers"),
        "{error}"
    );
    cairn.ingest(
        "acme",
        &[TurnInput::new(
            "s1",
            Role::User,
            "abcdefghijklmnopqrstuvwxyz0 is the alphabet",
        )],
    )?;
    cairn.flush()?;
    ensure!(cairn.topic("acme", "wide-0", 5, None)?.members.len() == 1);
    Ok(())
}

/// What capture learned about the person in one work context is living
/// memory (tier 3) in another; a sub-agent sees only what was learned in
/// its lineage, even in tier 3 (the OpenClaw sub-agent test's leak).
#[test]
fn personal_facts_are_living_memory_within_the_askers_lineage() -> Result<()> {
    use cairn::{AssembleRequest, RetrievalMode, Role, SessionKind, SessionSpec, TurnInput};
    let dir = tempfile::tempdir()?;
    let cairn = cairn::Cairn::open(cairn::CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: crate::support::storage(dir.path()),
        ..cairn::CairnConfig::default()
    })?;
    // One fact learned in another work context, one in the sub-agent's own
    // (from a session outside its lineage: the default policy would show
    // that one in full, as same-context).
    let said = |session: &str, wc: &str, text: &str| {
        [
            TurnInput::new(session, Role::User, text).in_context(wc),
            TurnInput::new(session, Role::Assistant, "Good to know!").in_context(wc),
        ]
    };
    cairn.ingest(
        "acme",
        &said("home", "life", "I moved to Lisbon last week."),
    )?;
    cairn.ingest(
        "acme",
        &said("desk", "launch", "I play the cello every evening."),
    )?;
    cairn.capture("acme", None)?;
    let work = |id: &str, kind: SessionKind, parent: Option<&str>| SessionSpec {
        id: id.into(),
        work_context: Some("launch".into()),
        kind,
        parent: parent.map(str::to_owned),
    };
    cairn.bootstrap("acme", &work("lead", SessionKind::Main, None))?;
    cairn.ingest(
        "acme",
        &[TurnInput::new("lead", Role::User, "Plan the launch.").in_context("launch")],
    )?;
    cairn.bootstrap("acme", &work("helper", SessionKind::Subagent, Some("lead")))?;
    cairn.ingest(
        "acme",
        &[TurnInput::new("helper", Role::User, "Draft the checklist.").in_context("launch")],
    )?;
    let block = |session: &str| -> Result<String> {
        let mut request = AssembleRequest::new(session, 600);
        request.retrieval = RetrievalMode::Off;
        Ok(cairn.assemble("acme", &request)?.text)
    };
    let lead = block("lead")?;
    ensure!(
        lead.contains("<card tier=\"3\"")
            && lead.contains("moved to Lisbon last week")
            && lead.contains("cello"),
        "a main session, in another work context and in the same: {lead}"
    );
    let helper = block("helper")?;
    ensure!(
        !helper.contains("Lisbon") && !helper.contains("cello"),
        "a sub-agent outside the facts' lineage: {helper}"
    );
    Ok(())
}
