//! Memory stays current (issue 16, item 6): capture closes what later turns
//! settle and merges restatements, so a resume card or a briefing never
//! shows an answered question, a done task, or the same thing twice.
//! Scripted conversations through the real facade on a virtual clock.

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use cairn::testing::Fault;
use cairn::{
    ActorConfig, AssembleRequest, Cairn, CairnConfig, EntryFilter, EntryKind, EntryView,
    ManualClock, RetrievalMode, Role, TaskStatus, TurnInput,
};
use chrono::{DateTime, Duration, TimeZone, Utc};

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0)
        .single()
        .unwrap_or_default()
}

fn open(dir: &std::path::Path) -> Result<(Cairn, ManualClock)> {
    let clock = ManualClock::new(start());
    let config = CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        actors: ActorConfig {
            tick_interval_secs: 0,
            ..ActorConfig::default()
        },
        ..CairnConfig::default()
    };
    Ok((
        Cairn::open_with_clock(config, Arc::new(clock.clone()))?,
        clock,
    ))
}

/// Ingests the user's lines (each followed by a short assistant reply) as
/// one session, a minute apart on the clock.
fn say(cairn: &Cairn, clock: &ManualClock, session: &str, lines: &[&str]) -> Result<()> {
    for line in lines {
        let at = cairn::Clock::now(clock);
        cairn.ingest(
            "w",
            &[
                TurnInput::new(session, Role::User, line)
                    .in_context("launch")
                    .at(at),
                TurnInput::new(session, Role::Assistant, "Noted.")
                    .in_context("launch")
                    .at(at),
            ],
        )?;
        clock.advance(Duration::minutes(1));
    }
    Ok(())
}

fn live(cairn: &Cairn) -> Result<Vec<EntryView>> {
    Ok(cairn.entries(
        "w",
        &EntryFilter {
            work_context: Some("launch".into()),
            ..EntryFilter::default()
        },
        None,
    )?)
}

fn open_loops(views: &[EntryView]) -> Vec<String> {
    let mut open: Vec<String> = views
        .iter()
        .filter(|v| match v.entry.kind {
            EntryKind::OpenQuestion | EntryKind::Question => true,
            EntryKind::Task => v.entry.status == Some(TaskStatus::Open),
            _ => false,
        })
        .map(|v| v.entry.content.clone())
        .collect();
    open.sort();
    open
}

/// Over three days and three captures: an answered question and a task to
/// find something out are closed by the answer's turn; a choice task by the
/// decision; a "remind me" task by "I booked it"; a restated decision is
/// merged; an unrelated question stays open. The next morning's resume
/// card and the briefing show none of what was settled.
#[test]
fn later_turns_settle_earlier_loops() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path())?;
    say(
        &cairn,
        &clock,
        "s1",
        &[
            "We need to choose a database for the job queue.",
            "Open question: do we invite the beta testers in the first wave or a week later?",
            "I need to ask Ana from sales how many seats the pilot needs.",
            "Remind me to book the venue for the kickoff.",
            "I still need to figure out the catering budget?",
        ],
    )?;
    let first = cairn.capture("w", Some("launch"))?;
    ensure!(first[0].settled.is_empty(), "{first:?}");
    ensure!(open_loops(&live(&cairn)?).len() == 5, "{:?}", live(&cairn)?);

    clock.advance(Duration::days(1));
    say(
        &cairn,
        &clock,
        "s2",
        &[
            "Ana confirmed the pilot needs 40 seats.",
            "Ben says the beta testers go in the first wave.",
            "We decided to use Postgres for the job queue.",
            "Let's go with Postgres for the job queue.",
            "The weather is nice today.",
        ],
    )?;
    let second = cairn.capture("w", Some("launch"))?;
    let report = &second[0];
    let rules: Vec<(&str, &str)> = report
        .settled
        .iter()
        .map(|s| (s.rule.as_str(), s.provenance.session.as_str()))
        .collect();
    // In the order of the settling turns: Ana's answer, Ben's, the decision.
    ensure!(
        rules
            == [
                ("answer.report", "s2"),
                ("answer.report", "s2"),
                ("answer.decision", "s2")
            ],
        "{report:#?}"
    );
    ensure!(report.merged.len() == 1, "{report:#?}");
    ensure!(
        report.merged[0].content == "Let's go with Postgres for the job queue.",
        "{report:#?}"
    );
    // The closing entries replace the loops, with provenance to the turn.
    let views = live(&cairn)?;
    let answer = views
        .iter()
        .find(|v| v.entry.content == "Ben says the beta testers go in the first wave.")
        .context("no answer entry")?;
    ensure!(answer.entry.kind == EntryKind::Fact && answer.entry.replaces.is_some());
    let provenance = answer.entry.provenance.as_ref().context("no provenance")?;
    ensure!(
        provenance.session == "s2" && provenance.from_seq == 2,
        "{answer:?}"
    );
    ensure!(
        open_loops(&views)
            == [
                "I still need to figure out the catering budget?",
                "Remind me to book the venue for the kickoff."
            ],
        "{:?}",
        open_loops(&views)
    );

    clock.advance(Duration::hours(3));
    say(&cairn, &clock, "s2", &["I booked the venue for Friday."])?;
    let third = cairn.capture("w", Some("launch"))?;
    ensure!(
        third[0].settled.len() == 1 && third[0].settled[0].rule == "task.done",
        "{third:#?}"
    );
    let views = live(&cairn)?;
    ensure!(
        open_loops(&views) == ["I still need to figure out the catering budget?"],
        "{:?}",
        open_loops(&views)
    );
    // No two live entries say the same.
    let mut texts: Vec<&str> = views
        .iter()
        .filter(|v| v.entry.kind != EntryKind::SessionSummaryRef)
        .map(|v| v.entry.content.as_str())
        .collect();
    texts.sort_unstable();
    let before = texts.len();
    texts.dedup();
    ensure!(texts.len() == before, "{texts:?}");
    ensure!(
        !texts.contains(&"Let's go with Postgres for the job queue."),
        "{texts:?}"
    );

    // The next morning: the resume card shows the one open question left.
    clock.advance(Duration::hours(18));
    say(&cairn, &clock, "s3", &["Morning! Where were we?"])?;
    let mut request = AssembleRequest::new("s3", 1_000);
    request.retrieval = RetrievalMode::Off;
    let block = cairn.assemble("w", &request)?;
    let card: Vec<&str> = block
        .text
        .lines()
        .skip_while(|l| !l.starts_with("<card tier=\"1\""))
        .take_while(|l| *l != "</card>")
        .collect();
    ensure!(
        card.contains(&"Open: I still need to figure out the catering budget?"),
        "{}",
        block.text
    );
    for settled in [
        "beta testers",
        "how many seats",
        "choose a database",
        "book the venue",
    ] {
        ensure!(
            !card
                .iter()
                .any(|l| l.starts_with("Open:") && l.contains(settled)),
            "{settled} still open on the card:\n{}",
            block.text
        );
    }
    let briefing = cairn.briefing("w", Some("launch"), None)?;
    let pending = &briefing
        .sections
        .iter()
        .find(|s| s.kind == cairn::BriefSectionKind::Pending)
        .context("no pending")?
        .items;
    ensure!(pending.is_empty(), "{}", briefing.text);
    let questions = &briefing
        .sections
        .iter()
        .find(|s| s.kind == cairn::BriefSectionKind::OpenQuestions)
        .context("no questions")?
        .items;
    ensure!(questions.len() == 1, "{}", briefing.text);
    Ok(())
}

/// A capture that crashes after writing its entries (closing entries
/// included) is finished by the next one without a duplicate and without
/// replacing anything twice.
#[test]
fn an_interrupted_capture_settles_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (cairn, clock) = open(dir.path())?;
    say(
        &cairn,
        &clock,
        "s1",
        &[
            "Open question: do we ship the beta on Monday or Tuesday?",
            "Dana says the beta ships on Tuesday, not Monday.",
            "We decided to ship the beta on Tuesday.",
            "We decided to ship the beta on Tuesday.",
        ],
    )?;
    cairn.actors().inject(Fault::PanicCaptureAfterEntries {
        workspace: "w".into(),
        work_context: "launch".into(),
    });
    ensure!(cairn.capture("w", Some("launch")).is_err());
    let retried = cairn.capture("w", Some("launch"))?;
    ensure!(retried[0].entries.is_empty(), "{retried:#?}");
    let views = live(&cairn)?;
    ensure!(open_loops(&views).is_empty(), "{views:#?}");
    let decisions = views
        .iter()
        .filter(|v| v.entry.kind == EntryKind::KeyDecision)
        .count();
    ensure!(decisions == 1, "{views:#?}");
    let all = cairn.entries(
        "w",
        &EntryFilter {
            all: true,
            ..EntryFilter::default()
        },
        None,
    )?;
    ensure!(all.len() == views.len() + 1, "{all:#?}");
    Ok(())
}
