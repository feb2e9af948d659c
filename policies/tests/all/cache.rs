//! The compile cache: the second load of a component is a cache hit (in
//! memory within a host, on disk across hosts), and a damaged cache file is
//! rejected and rewritten, never trusted.

use std::sync::Arc;

use cairn_policies::*;

fn host_at(dir: &std::path::Path) -> PolicyHost {
    PolicyHost::new(
        HostConfig::default().cache_dir(dir),
        Arc::new(MemorySink::default()),
    )
    .unwrap()
}

fn prepare(host: &PolicyHost) -> CacheOutcome {
    host.prepare::<TopicDirective>("topic-default", defaults::TOPIC.wasm)
        .unwrap()
        .cache_outcome()
}

#[test]
fn the_second_load_hits_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let first = host_at(dir.path());
    assert_eq!(prepare(&first), CacheOutcome::Compiled);
    assert_eq!(prepare(&first), CacheOutcome::Memory);

    // A new host (a restarted process) finds it on disk.
    let second = host_at(dir.path());
    assert_eq!(prepare(&second), CacheOutcome::Disk);
    let stats = second.cache_stats();
    assert_eq!((stats.disk_hits, stats.compiled), (1, 0));

    // And the plugin loaded from disk works.
    let slot = second
        .slot(
            &second
                .prepare::<TopicDirective>("topic-default", defaults::TOPIC.wasm)
                .unwrap(),
        )
        .unwrap();
    let input = crate::support::topic_input("we moved the index to sled");
    assert!(slot.decide(&input).unwrap().decision.collect);
}

#[test]
fn a_damaged_cache_file_is_rejected_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(prepare(&host_at(dir.path())), CacheOutcome::Compiled);
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a cache file");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();

    let host = host_at(dir.path());
    assert_eq!(prepare(&host), CacheOutcome::Compiled);
    assert_eq!(host.cache_stats().rejected, 1);
    // Rewritten: the next process hits it again.
    assert_eq!(prepare(&host_at(dir.path())), CacheOutcome::Disk);
}
