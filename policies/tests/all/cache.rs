//! The compile cache: the second load of a component is a cache hit (in
//! memory within a host, on disk across hosts), and a damaged, forged or
//! foreign cache file is rejected and rewritten, never trusted.

use std::sync::Arc;

use cairn_policies::*;

const KEY: [u8; 32] = [42; 32];

fn host_at(dir: &std::path::Path) -> PolicyHost {
    host_keyed(dir, KEY)
}

fn host_keyed(dir: &std::path::Path, key: [u8; 32]) -> PolicyHost {
    PolicyHost::new(
        HostConfig::default().cache_dir(dir, key),
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

fn cache_file(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a cache file")
}

/// Someone who can write the cache directory but does not know the key
/// cannot make the host load their code: a file re-sealed with the old
/// unkeyed checksum, and a file written by another install (another key),
/// are both rejected and recompiled.
#[test]
fn a_forged_or_foreign_cache_file_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(prepare(&host_at(dir.path())), CacheOutcome::Compiled);
    let file = cache_file(dir.path());
    let bytes = std::fs::read(&file).unwrap();
    // A forger edits the payload and recomputes a plain hash over it.
    let (header, payload) = bytes.split_at(40);
    let mut payload = payload.to_vec();
    let last = payload.len() - 1;
    payload[last] ^= 0x01;
    let mut forged = header[..8].to_vec();
    forged.extend_from_slice(blake3::hash(&payload).as_bytes());
    forged.extend_from_slice(&payload);
    std::fs::write(&file, &forged).unwrap();
    let host = host_at(dir.path());
    assert_eq!(prepare(&host), CacheOutcome::Compiled);
    assert_eq!(host.cache_stats().rejected, 1);

    // The file this install rewrote is refused by another install.
    let other = host_keyed(dir.path(), [7; 32]);
    assert_eq!(prepare(&other), CacheOutcome::Compiled);
    assert_eq!(other.cache_stats().rejected, 1);
}

/// The disk cache keeps at most `MAX_ON_DISK` files.
#[test]
fn the_disk_cache_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..(MAX_ON_DISK + 3) {
        std::fs::write(dir.path().join(format!("stale-{i:03}.cwasm")), b"old").unwrap();
    }
    assert_eq!(prepare(&host_at(dir.path())), CacheOutcome::Compiled);
    let files = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "cwasm")
        })
        .count();
    assert_eq!(files, MAX_ON_DISK);
    // The one just written is among those kept.
    assert_eq!(prepare(&host_at(dir.path())), CacheOutcome::Disk);
}
