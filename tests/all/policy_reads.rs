//! The memory policy on every read surface, not only assembly: with a
//! policy that keeps everything on this machine installed, nothing is read
//! out towards a cloud model through search, get, transcripts, entries or
//! history, while a local reader sees it all; and capture asks the policy
//! too (the default policy keeps a secret-bearing turn out of the log).

use anyhow::{Context, Result, ensure};
use cairn::worlds::{WorldKind, defaults};
use cairn::{
    Cairn, CairnConfig, Destination, EntryFilter, EntryInput, EntryKind, ErrorKind, MemoryItem,
    ReadAs, Role, SearchRequest, TurnInput,
};

fn open(dir: &std::path::Path) -> Result<Cairn> {
    Ok(Cairn::open(CairnConfig {
        data_dir: dir.to_owned(),
        storage: crate::support::storage(dir),
        ..CairnConfig::default()
    })?)
}

#[test]
fn every_read_surface_asks_the_memory_policy() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new("main", Role::User, "The quokka launch moves to April 1."),
            TurnInput::new("main", Role::Assistant, "Noted: quokka launch on April 1."),
        ],
    )?;
    let entry = cairn.append_entries(
        "acme",
        &[EntryInput::new(
            EntryKind::Decision,
            "The quokka launch is on April 1.",
        )],
    )?;
    let id = entry.first().context("an entry")?.id.clone();
    cairn.flush()?;
    cairn.install_plugin(
        WorldKind::MemoryPolicy,
        "local-only",
        defaults::EXAMPLE_CUSTOM.wasm,
    )?;

    let cloud = ReadAs::user().to(Destination::CloudModel);
    let local = ReadAs::user().to(Destination::LocalModel);

    // Transcripts: every turn withheld from a cloud model.
    ensure!(cairn.transcript("acme", "main", 0, None, cloud)?.is_empty());
    ensure!(cairn.transcript("acme", "main", 0, None, local)?.len() == 2);
    let t = cairn.read_transcript("acme", "main", 0, cloud)?;
    ensure!(t.turns.is_empty(), "{t:?}");
    match cairn.memory_get("acme", "session:main:0-1", cloud)? {
        MemoryItem::Turns(t) => ensure!(t.turns.is_empty(), "{t:?}"),
        other => anyhow::bail!("expected turns, got {other:?}"),
    }
    match cairn.memory_get("acme", "session:main:0-1", local)? {
        MemoryItem::Turns(t) => ensure!(t.turns.len() == 2, "{t:?}"),
        other => anyhow::bail!("expected turns, got {other:?}"),
    }

    // Entries: left out of lists, refused one by one.
    let all = EntryFilter {
        all: true,
        ..EntryFilter::default()
    };
    ensure!(cairn.entries("acme", &all, cloud)?.is_empty());
    ensure!(!cairn.entries("acme", &all, local)?.is_empty());
    let err = cairn
        .entry("acme", &id, cloud)
        .err()
        .context("a blocked entry read must be refused")?;
    ensure!(err.kind() == ErrorKind::Forbidden, "{err}");
    ensure!(err.to_string().contains("memory policy"), "{err}");
    let err = cairn
        .memory_get("acme", &id, cloud)
        .err()
        .context("memory_get of a blocked entry must be refused")?;
    ensure!(err.kind() == ErrorKind::Forbidden, "{err}");
    ensure!(
        cairn
            .entry("acme", &id, local)?
            .entry
            .content
            .contains("quokka")
    );
    ensure!(cairn.history("acme", &id, cloud)?.is_empty());

    // Search: the hits are withheld, and the answer says so.
    crate::support::wait_indexed(&cairn)?;
    let mut request = SearchRequest::new("quokka launch");
    request.destination = Some(Destination::CloudModel);
    let found = cairn.memory_search("acme", &request)?;
    ensure!(found.items.is_empty(), "{found:?}");
    let notice = found.notice.unwrap_or_default();
    ensure!(notice.contains("withheld"), "{notice}");
    request.destination = Some(Destination::LocalModel);
    let found = cairn.memory_search("acme", &request)?;
    ensure!(
        found.items.iter().any(|i| i.snippet.contains("quokka")),
        "{found:?}"
    );
    Ok(())
}

/// The default memory policy answers `capture` of a secret-bearing turn
/// with a reference only: the capture does not read it, so no entry
/// carries (even a redacted copy of) what was said beside the secret.
#[test]
fn capture_asks_the_memory_policy() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cairn = open(dir.path())?;
    cairn.ingest(
        "acme",
        &[
            TurnInput::new(
                "main",
                Role::User,
                "We decided to use the walrus cluster. password: hunter2",
            ),
            TurnInput::new("main", Role::User, "We decided to ship on Friday."),
            TurnInput::new("main", Role::User, "Let's keep the retro short."),
        ],
    )?;
    cairn.flush()?;
    cairn.capture("acme", None)?;
    let all = EntryFilter {
        all: true,
        ..EntryFilter::default()
    };
    let entries = cairn.entries("acme", &all, ReadAs::user())?;
    let texts: Vec<&str> = entries.iter().map(|v| v.entry.content.as_str()).collect();
    ensure!(
        texts.iter().any(|t| t.contains("Friday")),
        "the clean turn is captured: {texts:?}"
    );
    ensure!(
        !texts.iter().any(|t| t.contains("walrus")),
        "the secret-bearing turn is not: {texts:?}"
    );
    Ok(())
}
