//! The memory-policy conformance suite: for every value of every decision
//! field the host acts on, a test installs `plugins/test-conformance` (a
//! policy that answers what the object's session id spells: see its docs)
//! and observes what the host does with the answer, through the facade's
//! reads, the assembled block, the audit records, the confirmations and
//! the writes; one test drives the same over HTTP and the CLI. Each test
//! fails if the host ignores the value it is about (wit/README.md has the
//! table these tests hold the host to).

use anyhow::{Context, Result, ensure};
use cairn::worlds::defaults::test_guests;
use cairn::{
    AssembleRequest, AuditQuery, Cairn, CairnConfig, Correction, Destination, EntryInput,
    EntryKind, ReadAs, RetrievalMode, Role, TurnInput, WorldKind,
};
use serde_json::json;

use crate::support::{Server, cairn_bin, storage};

const TEXT: &str = "Mail dana@example.com about the wombat rollout.";

/// A cairn on `dir` with the conformance policy installed.
fn open(dir: &std::path::Path) -> Result<Cairn> {
    let cairn = Cairn::open(CairnConfig {
        data_dir: dir.to_owned(),
        storage: storage(dir),
        ..CairnConfig::default()
    })?;
    let wasm = std::fs::read(test_guests::TEST_CONFORMANCE)
        .with_context(|| format!("reading {}", test_guests::TEST_CONFORMANCE))?;
    cairn.install_plugin(WorldKind::MemoryPolicy, "test-conformance", &wasm)?;
    Ok(cairn)
}

/// One turn of `TEXT` in `session` (its own work context).
fn said(cairn: &Cairn, session: &str) -> Result<()> {
    cairn.ingest(
        "acme",
        &[TurnInput::new(session, Role::User, TEXT).in_context("work")],
    )?;
    Ok(())
}

/// The session's transcript as `reader` reads it: the turns' texts.
fn read(cairn: &Cairn, session: &str, reader: ReadAs<'_>) -> Result<Vec<String>> {
    Ok(cairn
        .read_transcript("acme", session, 0, reader)?
        .turns
        .into_iter()
        .map(|t| t.content)
        .collect())
}

/// The block assembled for `session` itself (its tail), to `destination`.
fn block(
    cairn: &Cairn,
    session: &str,
    destination: Destination,
) -> Result<cairn::AssembledContext> {
    let mut request = AssembleRequest::new(session, 600);
    request.retrieval = RetrievalMode::Off;
    request.destination = destination;
    Ok(cairn.assemble("acme", &request)?)
}

#[test]
fn every_content_fidelity_shapes_the_transcript_and_the_block() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    for fidelity in ["full", "redacted", "reference-only", "none"] {
        let session = format!("f--fid-{fidelity}");
        said(&cairn, &session)?;
        let turns = read(&cairn, &session, ReadAs::user())?;
        let text = block(&cairn, &session, Destination::LocalModel)?.text;
        match fidelity {
            "full" => {
                ensure!(turns == [TEXT], "{fidelity}: {turns:?}");
                ensure!(text.contains(TEXT), "{fidelity}: {text}");
            }
            "redacted" => {
                ensure!(turns.len() == 1, "{fidelity}: {turns:?}");
                ensure!(
                    turns[0].contains("wombat") && !turns[0].contains("dana@example.com"),
                    "{fidelity}: {turns:?}"
                );
                ensure!(
                    text.contains("wombat") && !text.contains("dana@example.com"),
                    "{fidelity}: {text}"
                );
            }
            "reference-only" => {
                ensure!(
                    turns.len() == 1 && turns[0].starts_with("(withheld by policy"),
                    "{fidelity}: {turns:?}"
                );
                ensure!(!text.contains("wombat"), "{fidelity}: {text}");
            }
            _ => {
                ensure!(turns.is_empty(), "{fidelity}: {turns:?}");
                ensure!(!text.contains("wombat"), "{fidelity}: {text}");
            }
        }
    }
    Ok(())
}

#[test]
fn locality_decides_per_destination() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let external = [
        Destination::CloudModel,
        Destination::ExternalLlm,
        Destination::ShareLink,
    ];
    let local = [
        Destination::LocalModel,
        Destination::Subagent,
        Destination::TaskRuntime,
        Destination::UserVisibleUi,
    ];
    for locality in ["local-only", "approved-external", "blocked"] {
        let session = format!("l--loc-{locality}");
        said(&cairn, &session)?;
        for destination in external.iter().chain(&local) {
            let shown = !read(&cairn, &session, ReadAs::user().to(*destination))?.is_empty();
            let in_block = block(&cairn, &session, *destination)?
                .text
                .contains("wombat");
            let expected = match locality {
                "approved-external" => true,
                "local-only" => local.contains(destination),
                _ => false,
            };
            ensure!(
                shown == expected && in_block == expected,
                "{locality} to {destination:?}: read {shown}, block {in_block}, expected {expected}"
            );
        }
    }
    Ok(())
}

#[test]
fn audit_log_leaves_a_queryable_record_of_each_use() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let session = "a--obl-audit-log";
    said(&cairn, session)?;
    said(&cairn, "plain")?;
    let transcript = cairn.read_transcript("acme", session, 0, ReadAs::user())?;
    ensure!(
        transcript
            .obligations
            .iter()
            .any(|n| n.obligation == "audit-log" && n.record.is_some()),
        "{:?}",
        transcript.obligations
    );
    block(&cairn, session, Destination::CloudModel)?;
    read(&cairn, "plain", ReadAs::user())?;
    let records = cairn.audit("acme", &AuditQuery::default())?;
    let item = format!("turn {session}:0");
    ensure!(records.len() == 2, "{records:#?}");
    ensure!(records.iter().all(|r| r.item == item), "{records:#?}");
    // Newest first: the block, then the read.
    ensure!(
        records[0].surface == "assemble"
            && records[0].action == "render-inline"
            && records[0].destination.as_deref() == Some("cloud_model"),
        "{records:#?}"
    );
    ensure!(
        records[1].surface == "read_transcript" && records[1].action == "retrieve",
        "{records:#?}"
    );
    // Each names a decision the decision log holds.
    cairn.flush()?;
    let logged: Vec<String> = cairn
        .decisions(&cairn::DecisionQuery {
            world: Some(WorldKind::MemoryPolicy),
            limit: 10_000,
            ..cairn::DecisionQuery::default()
        })?
        .iter()
        .map(|d| d.decision_id.to_string())
        .collect();
    for r in &records {
        ensure!(
            logged.contains(&r.decision_id),
            "decision {} not in the log",
            r.decision_id
        );
    }
    let one = cairn.audit(
        "acme",
        &AuditQuery {
            item: Some(item),
            limit: 1,
        },
    )?;
    ensure!(one.len() == 1, "{one:#?}");
    Ok(())
}

#[test]
fn disclose_attribute_redact_and_label_change_what_is_handed_out() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;

    let session = "d--obl-disclose-to-user";
    said(&cairn, session)?;
    let made = block(&cairn, session, Destination::LocalModel)?;
    ensure!(
        made.obligations
            .iter()
            .any(|n| n.obligation == "disclose-to-user" && n.item == format!("turn {session}:0")),
        "{:?}",
        made.obligations
    );
    let t = cairn.read_transcript("acme", session, 0, ReadAs::user())?;
    ensure!(
        t.obligations
            .iter()
            .any(|n| n.obligation == "disclose-to-user"),
        "{:?}",
        t.obligations
    );
    said(&cairn, "quiet")?;
    ensure!(
        block(&cairn, "quiet", Destination::LocalModel)?
            .obligations
            .is_empty()
    );

    let session = "s--obl-attribute-source";
    said(&cairn, session)?;
    let turns = read(&cairn, session, ReadAs::user())?;
    ensure!(
        turns == [format!("[source: {session}:0] {TEXT}")],
        "{turns:?}"
    );
    let text = block(&cairn, session, Destination::LocalModel)?.text;
    ensure!(text.contains(&format!("[source: {session}:0]")), "{text}");
    ensure!(!read(&cairn, "quiet", ReadAs::user())?[0].contains("[source:"));

    let session = "r--fid-full--obl-redact-personal-data";
    said(&cairn, session)?;
    let turns = read(&cairn, session, ReadAs::user())?;
    ensure!(
        turns.len() == 1 && turns[0].contains("wombat") && !turns[0].contains("dana@example.com"),
        "{turns:?}"
    );
    let text = block(&cairn, session, Destination::LocalModel)?.text;
    ensure!(!text.contains("dana@example.com"), "{text}");

    let session = "t--obl-label-low-trust";
    said(&cairn, session)?;
    let made = block(&cairn, session, Destination::LocalModel)?;
    ensure!(
        made.items
            .iter()
            .any(|i| i.warrant == cairn::Warrant::LowTrust),
        "{:#?}",
        made.items
    );
    ensure!(
        !block(&cairn, "quiet", Destination::LocalModel)?
            .items
            .iter()
            .any(|i| i.warrant == cairn::Warrant::LowTrust)
    );
    Ok(())
}

#[test]
fn confirm_with_user_holds_the_item_until_the_user_grants_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let session = "c--obl-confirm-with-user";
    said(&cairn, session)?;
    let item = format!("turn {session}:0");
    let turns = read(&cairn, session, ReadAs::user())?;
    ensure!(
        turns.len() == 1 && turns[0].starts_with("(withheld by policy"),
        "{turns:?}"
    );
    let made = block(&cairn, session, Destination::LocalModel)?;
    ensure!(!made.text.contains("wombat"), "{}", made.text);
    ensure!(
        made.obligations
            .iter()
            .any(|n| n.obligation == "confirm-with-user" && n.item == item),
        "{:?}",
        made.obligations
    );
    let pending = cairn.confirmations("acme")?;
    ensure!(
        pending.len() == 1
            && pending[0].item == item
            && pending[0].state == cairn::ConfirmationState::Pending,
        "{pending:#?}"
    );
    let missing = cairn.grant_confirmation("acme", "turn nothing:0");
    ensure!(
        missing
            .as_ref()
            .is_err_and(|e| e.code() == "confirmation_not_found"),
        "{missing:?}"
    );
    for bad in [String::new(), "x".repeat(1_000)] {
        let refused = cairn.grant_confirmation("acme", &bad);
        ensure!(
            refused
                .as_ref()
                .is_err_and(|e| e.kind() == cairn::ErrorKind::Invalid),
            "{refused:?}"
        );
    }
    let granted = cairn.grant_confirmation("acme", &item)?;
    ensure!(granted.state == cairn::ConfirmationState::Granted);
    ensure!(read(&cairn, session, ReadAs::user())? == [TEXT]);
    ensure!(
        block(&cairn, session, Destination::LocalModel)?
            .text
            .contains(TEXT)
    );
    Ok(())
}

/// The entry that replaced entry `id`, if one did.
fn replaced_by(cairn: &Cairn, id: &str) -> Result<Option<String>> {
    Ok(match cairn.entry("acme", id, None)?.status {
        cairn::EntryStatus::Replaced { by } => Some(by),
        _ => None,
    })
}

/// An entry about a turn of `session`.
fn entry_of(cairn: &Cairn, session: &str) -> Result<cairn::Entry> {
    said(cairn, session)?;
    Ok(cairn.append_entry(
        "acme",
        &EntryInput::new(EntryKind::Fact, "The wombat rollout is on Friday")
            .from_turns(session, 0, 0)
            .in_context("work"),
    )?)
}

#[test]
fn mutation_authority_decides_whether_a_change_is_made_proposed_or_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let correction = Correction::new("The wombat rollout is on Monday", "it moved");

    let durable = entry_of(&cairn, "m--on-mutate--mut-durable-allowed")?;
    let new = cairn.memory_correct("acme", &durable.id, &correction, None)?;
    ensure!(new.replaces.as_deref() == Some(durable.id.as_str()));

    let refused = entry_of(&cairn, "m--on-mutate--mut-none")?;
    let err = cairn
        .memory_correct("acme", &refused.id, &correction, None)
        .err()
        .context("a correction under `none` was made")?;
    ensure!(err.kind() == cairn::ErrorKind::Forbidden, "{err}");
    let err = cairn
        .memory_pin("acme", &refused.id, true, None)
        .err()
        .context("a pin under `none` was made")?;
    ensure!(err.kind() == cairn::ErrorKind::Forbidden, "{err}");
    ensure!(cairn.pinned("acme")?.is_empty());
    ensure!(replaced_by(&cairn, &refused.id)?.is_none());

    let proposed = entry_of(&cairn, "m--on-mutate--mut-candidate-only")?;
    let err = cairn
        .memory_correct("acme", &proposed.id, &correction, None)
        .err()
        .context("a correction under `candidate-only` was made at once")?;
    ensure!(err.code() == "proposed", "{err}");
    ensure!(replaced_by(&cairn, &proposed.id)?.is_none());
    let err = cairn
        .memory_retract("acme", &proposed.id, "wrong", None)
        .err()
        .context("a retraction under `candidate-only` was made at once")?;
    ensure!(err.code() == "proposed", "{err}");
    ensure!(cairn.entry("acme", &proposed.id, None).is_ok());
    let pending = cairn.confirmations("acme")?;
    ensure!(pending.len() == 2, "{pending:#?}");
    let correct = pending
        .iter()
        .find(|c| matches!(c.proposal, Some(cairn::ProposedChange::Append { .. })))
        .context("the correction's proposal")?;
    let granted = cairn.grant_confirmation("acme", &correct.item)?;
    let made = granted.applied.context("the grant made nothing")?;
    ensure!(replaced_by(&cairn, &proposed.id)?.as_deref() == Some(made.as_str()));

    // `confirm-with-user` on a change also makes it a proposal.
    let confirm = entry_of(&cairn, "m--on-mutate--obl-confirm-with-user")?;
    let err = cairn
        .memory_pin("acme", &confirm.id, true, None)
        .err()
        .context("a pin awaiting the user's confirmation was made")?;
    ensure!(err.code() == "proposed", "{err}");
    ensure!(cairn.pinned("acme")?.is_empty());
    Ok(())
}

#[test]
fn learning_scope_none_keeps_a_turn_out_of_capture() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    for (session, context) in [
        ("n--on-learn-from--learn-none", "unlearned"),
        ("n--on-learn-from--learn-same-scope-only", "same"),
        ("n--on-learn-from--learn-partitioned", "partitioned"),
        ("n--on-learn-from--learn-global-allowed", "global"),
    ] {
        cairn.ingest(
            "acme",
            &[TurnInput::new(session, Role::User, "We decided to use sled.").in_context(context)],
        )?;
        let reports = cairn.capture("acme", Some(context))?;
        let learned = reports[0]
            .entries
            .iter()
            .any(|e| e.content == "We decided to use sled.");
        ensure!(
            learned == (context != "unlearned"),
            "{session}: learned {learned}: {reports:#?}"
        );
    }
    Ok(())
}

#[test]
fn capture_under_mutation_authority_none_writes_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    for (session, context) in [
        ("w--on-capture--mut-none", "nothing"),
        ("w--on-capture--mut-durable-allowed", "durable"),
    ] {
        cairn.ingest(
            "acme",
            &[TurnInput::new(session, Role::User, "We decided to use sled.").in_context(context)],
        )?;
        let reports = cairn.capture("acme", Some(context))?;
        let written = reports[0]
            .entries
            .iter()
            .any(|e| e.content == "We decided to use sled.");
        ensure!(
            written == (context == "durable"),
            "{session}: written {written}: {reports:#?}"
        );
    }
    Ok(())
}

/// Over HTTP and the CLI: an item held for a confirmation is listed, the
/// grant needs the admin token (a workspace token, even write-scoped, is
/// refused), and the audit records are listed.
#[test]
fn confirmations_and_audit_records_over_http_and_the_cli() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let cli = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new(cairn_bin())
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .envs(crate::support::backend_env(&data))
            .output()?;
        ensure!(
            out.status.success(),
            "cairn {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    };
    cli(&[
        "plugins",
        "install",
        "memory-policy",
        test_guests::TEST_CONFORMANCE,
        "--name",
        "test-conformance",
    ])?;
    let session = "h--obl-confirm-with-user--obl-audit-log";
    let server = Server::start(&data)?;
    let (status, _) = server.post(
        "/v1/workspaces/acme/turns",
        &json!({"turns": [{"session": session, "work_context": "work", "role": "user", "content": TEXT}]}),
    )?;
    ensure!(status == 200, "{status}");
    let transcript = format!("/v1/workspaces/acme/sessions/{session}/transcript");
    let (_, t) = server.get(&transcript)?;
    ensure!(!t.to_string().contains("wombat"), "{t}");
    let (status, pending) = server.get("/v1/workspaces/acme/confirmations")?;
    let item = format!("turn {session}:0");
    ensure!(
        status == 200 && pending[0]["item"] == item.as_str() && pending[0]["state"] == "pending",
        "{status} {pending}"
    );
    let (status, granted) = server.post(
        "/v1/workspaces/acme/confirmations/grant",
        &json!({"item": item}),
    )?;
    ensure!(
        status == 200 && granted["state"] == "granted",
        "{status} {granted}"
    );
    let (_, t) = server.get(&transcript)?;
    ensure!(t.to_string().contains("wombat"), "{t}");
    let (status, records) = server.get("/v1/workspaces/acme/audit?limit=10")?;
    ensure!(
        status == 200 && records.as_array().is_some_and(|r| !r.is_empty()),
        "{status} {records}"
    );
    let (status, bad) = server.get("/v1/workspaces/acme/audit?limit=0")?;
    ensure!(status == 400, "{status} {bad}");
    drop(server);

    let listed = cli(&["--workspace", "acme", "confirmations"])?;
    ensure!(
        listed.contains(&item) && listed.contains("granted"),
        "{listed}"
    );
    let audit = cli(&["--workspace", "acme", "audit", "--item", &item, "--json"])?;
    let records: serde_json::Value = serde_json::from_str(&audit)?;
    ensure!(
        records
            .as_array()
            .is_some_and(|r| !r.is_empty() && r.iter().all(|x| x["item"] == item.as_str())),
        "{audit}"
    );

    // With tokens, a workspace token may read the confirmations but not
    // grant one: that is the user's answer, through the admin token.
    const ADMIN: &str = "admin-token-0123456789abcdef";
    let server = Server::start_admin(dir.path(), &data, ADMIN)?;
    let call = |method: &str, path: &str, token: &str, body: &str| {
        server.as_bearer(method, path, token, body)
    };
    let acme = server.create_token(ADMIN, "acme", "write")?;
    let (s, listed) = call("GET", "/v1/workspaces/acme/confirmations", &acme, "")?;
    ensure!(s == 200, "{s} {listed}");
    let grant = json!({"item": item}).to_string();
    let (s, refused) = call(
        "POST",
        "/v1/workspaces/acme/confirmations/grant",
        &acme,
        &grant,
    )?;
    ensure!(
        s == 403,
        "a workspace token granted a confirmation: {s} {refused}"
    );
    let (s, granted) = call(
        "POST",
        "/v1/workspaces/acme/confirmations/grant",
        ADMIN,
        &grant,
    )?;
    ensure!(s == 200 && granted["state"] == "granted", "{s} {granted}");
    Ok(())
}

#[test]
fn a_reference_is_shown_only_if_render_reference_allows_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let shown = "v--on-render-inline--fid-reference-only";
    let refused = "v--on-render-inline--fid-reference-only--ref-none";
    for session in [shown, refused] {
        said(&cairn, session)?;
    }
    let made = block(&cairn, shown, Destination::LocalModel)?;
    ensure!(
        made.items
            .iter()
            .any(|i| i.fidelity == cairn::Fidelity::ReferenceOnly),
        "{:#?}",
        made.items
    );
    let made = block(&cairn, refused, Destination::LocalModel)?;
    ensure!(
        !made.items.iter().any(|i| matches!(
            &i.source,
            cairn::ItemSource::Turn { session, .. } if session == refused
        )),
        "{:#?}",
        made.items
    );
    Ok(())
}

#[test]
fn a_sub_agent_is_handed_its_parent_s_memory_only_as_delegate_allows() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    for (parent, helper, handed) in [
        ("g--on-delegate--fid-none", "helper-refused", false),
        ("g--on-render-inline--fid-none", "helper-handed", true),
    ] {
        said(&cairn, parent)?;
        cairn.bootstrap(
            "acme",
            &cairn::SessionSpec {
                id: helper.into(),
                kind: cairn::SessionKind::Subagent,
                parent: Some(parent.into()),
                work_context: Some("work".into()),
            },
        )?;
        cairn.ingest(
            "acme",
            &[
                TurnInput::new(helper, Role::User, "What about the wombat rollout?")
                    .in_context("work"),
            ],
        )?;
        crate::support::wait_indexed(&cairn)?;
        let mut request = AssembleRequest::new(helper, 800);
        request.retrieval = RetrievalMode::Lexical;
        request.query = Some("wombat rollout dana".into());
        let made = cairn.assemble("acme", &request)?;
        let from_parent = made.items.iter().any(
            |i| matches!(&i.source, cairn::ItemSource::Turn { session, .. } if session == parent),
        );
        ensure!(
            from_parent == handed,
            "{parent} -> {helper}: handed {from_parent}: {}",
            made.text
        );
    }
    Ok(())
}

#[test]
fn expire_with_session_erases_what_capture_derived_when_the_session_ends() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    let mut kept = Vec::new();
    for (session, context) in [
        ("x--on-capture--obl-expire-with-session", "expiring"),
        ("x--plain", "lasting"),
    ] {
        cairn.ingest(
            "acme",
            &[TurnInput::new(session, Role::User, "We decided to use sled.").in_context(context)],
        )?;
        let reports = cairn.capture("acme", Some(context))?;
        let ids: Vec<String> = reports[0].entries.iter().map(|e| e.id.clone()).collect();
        ensure!(!ids.is_empty(), "{session}: nothing captured");
        cairn.session_end("acme", session)?;
        let live = ids
            .iter()
            .filter(|id| cairn.entry("acme", id, None).is_ok())
            .count();
        kept.push(live);
        if context == "expiring" {
            ensure!(
                live == 0,
                "{session}: {live} of {} entries outlived it",
                ids.len()
            );
            ensure!(
                cairn
                    .tombstones("acme")?
                    .iter()
                    .any(|t| t.reason.starts_with("expire-with-session")),
                "no tombstone says why"
            );
        } else {
            ensure!(live == ids.len(), "{session}: {live} of {} kept", ids.len());
        }
    }
    Ok(())
}

#[test]
fn a_carry_over_holds_only_what_carryover_generate_allows() -> Result<()> {
    for (earlier, context, carried) in [
        ("k--on-carryover-generate--fid-none", "refused", false),
        ("k--plain", "carried", true),
    ] {
        let dir = tempfile::tempdir()?;
        let cairn = open(dir.path())?;
        cairn.ingest(
            "acme",
            &[TurnInput::new(earlier, Role::User, TEXT).in_context(context)],
        )?;
        let decision = format!("Ship the {context} wombat build on Friday");
        cairn.append_entry(
            "acme",
            &EntryInput::new(EntryKind::Decision, &decision)
                .from_turns(earlier, 0, 0)
                .in_context(context),
        )?;
        let next = format!("next-{context}");
        cairn.ingest(
            "acme",
            &[TurnInput::new(&next, Role::User, "Where were we?").in_context(context)],
        )?;
        let made = block(&cairn, &next, Destination::LocalModel)?;
        ensure!(
            made.text.contains(&decision) == carried,
            "{earlier}: expected carried {carried}: {}",
            made.text
        );
        let section = made.items.iter().find(|i| {
            matches!(
                i.section,
                cairn::Section::Resume | cairn::Section::Handoff | cairn::Section::Briefing
            )
        });
        ensure!(section.is_some() == carried, "{:#?}", made.items);
    }
    Ok(())
}

/// The model passes are a destination too: a turn the policy keeps
/// `local-only` never reaches an external endpoint's prompt (a local stub
/// declared `external_llm`, as a local proxy to a hosted model is), while
/// other turns do; the capture still extracts it on this machine.
#[test]
fn local_only_content_stays_out_of_an_external_model_s_prompt() -> Result<()> {
    let (url, seen) = crate::extraction::stub(200, r#"{"entries":[]}"#, std::time::Duration::ZERO)?;
    let dir = tempfile::tempdir()?;
    let mut config = CairnConfig {
        data_dir: dir.path().to_owned(),
        storage: storage(dir.path()),
        ..CairnConfig::default()
    };
    config.extraction.model = cairn::ModelConfig {
        enabled: true,
        url,
        model: "stub".to_owned(),
        timeout_ms: 2_000,
        destination: Some(Destination::ExternalLlm),
        ..cairn::ModelConfig::default()
    };
    let cairn = Cairn::open(config)?;
    let wasm = std::fs::read(test_guests::TEST_CONFORMANCE)?;
    cairn.install_plugin(WorldKind::MemoryPolicy, "test-conformance", &wasm)?;
    for (session, context, text) in [
        (
            "p--on-learn-from--loc-local-only",
            "kept",
            "We decided the code word is aardvark.",
        ),
        ("p--plain", "sent", "We decided the code word is bandicoot."),
    ] {
        cairn.ingest(
            "acme",
            &[TurnInput::new(session, Role::User, text).in_context(context)],
        )?;
        let reports = cairn.capture("acme", Some(context))?;
        // The kept turn is extracted by the heuristics, here; the other is
        // the (empty-handed) model's.
        let here = reports[0].entries.iter().any(|e| e.content == text);
        ensure!(
            here == (context == "kept"),
            "{session}: captured here {here}: {reports:#?}"
        );
    }
    let prompts = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("stub log"))?
        .join("\n");
    ensure!(
        prompts.contains("bandicoot"),
        "the open turn never reached the model"
    );
    ensure!(
        !prompts.contains("aardvark"),
        "a local-only turn reached an external model: {prompts}"
    );
    Ok(())
}
