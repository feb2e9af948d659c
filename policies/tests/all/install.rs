//! Installing plugins: what is refused, and that a refused install never
//! replaces a working generation.

use cairn_policies::*;

use crate::support::{generation_number, host, turn};

#[test]
fn a_component_for_another_world_is_refused() {
    let (host, _) = host(HostConfig::default());
    let err = host
        .prepare::<SignificanceGate>("topic-default", defaults::TOPIC.wasm)
        .unwrap_err();
    assert!(
        matches!(
            err,
            PolicyError::WrongWorld {
                world: WorldKind::SignificanceGate,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.code(), "plugin-wrong-world");
    assert!(err.to_string().contains("topic-default"), "{err}");
    assert!(err.to_string().contains("`gate`"), "{err}");
    // Refused from its exports, before anything was compiled or cached.
    let stats = host.cache_stats();
    assert_eq!((stats.compiled, stats.disk_hits), (0, 0), "{stats:?}");
}

#[test]
fn bytes_that_are_not_a_component_are_refused() {
    let (host, _) = host(HostConfig::default());
    let err = host
        .prepare::<MemoryPolicy>("garbage", b"\0asm not really")
        .unwrap_err();
    assert!(matches!(err, PolicyError::WrongWorld { .. }), "{err}");
    assert!(
        err.to_string().contains("not a WebAssembly component"),
        "{err}"
    );
    // A core module is not a component.
    let err = host
        .prepare::<MemoryPolicy>("core", b"\0asm\x01\0\0\0")
        .unwrap_err();
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    assert_eq!(host.cache_stats().compiled, 0);
    let err = host
        .prepare::<MemoryPolicy>("Bad Name", defaults::MEMORY_POLICY.wasm)
        .unwrap_err();
    assert!(matches!(err, PolicyError::InvalidName { .. }), "{err}");
    let err = host
        .prepare_file::<MemoryPolicy>("missing", std::path::Path::new("/nonexistent/plugin.wasm"))
        .unwrap_err();
    assert!(matches!(err, PolicyError::ReadPlugin { .. }), "{err}");
}

#[test]
fn a_plugin_that_cannot_start_never_replaces_the_current_one() {
    let (host, _) = host(HostConfig::default());
    let good = host
        .prepare_file::<SignificanceGate>(
            "significance-default",
            defaults::SIGNIFICANCE.path.as_ref(),
        )
        .unwrap();
    let slot = host.slot(&good).unwrap();
    let before = slot.generation();

    // Its initial memory is larger than this limit: instantiation fails.
    let starved = good
        .clone()
        .with_limits(Limits::default().memory_bytes(64 << 10));
    let err = slot.swap(&starved).unwrap_err();
    assert!(matches!(err, PolicyError::Instantiate { .. }), "{err}");
    assert_eq!(slot.generation(), before);
    assert!(
        slot.decide(&turn("We decided."))
            .unwrap()
            .outcome
            .is_plugin()
    );
}

#[test]
fn a_plugin_that_faults_on_its_canary_is_refused() {
    let (host, _) = host(HostConfig::default());
    let good = host
        .prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)
        .unwrap();
    let slot = host.slot(&good).unwrap();
    let before = slot.generation();
    let starved = good.with_limits(Limits::default().fuel(1_000));
    let err = slot.swap(&starved).unwrap_err();
    match &err {
        PolicyError::Canary { fault, .. } => assert_eq!(fault.kind, FaultKind::OutOfFuel),
        other => panic!("expected a canary fault, got {other}"),
    }
    assert_eq!(err.code(), "plugin-canary");
    assert_eq!(slot.generation(), before);
}

#[test]
fn generations_are_numbered_from_the_configured_start() {
    let (host, _) = host(HostConfig::default().first_generation(41));
    let plugin = host
        .prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)
        .unwrap();
    let slot = host.slot(&plugin).unwrap();
    assert_eq!(generation_number(&slot.generation()), 41);
    let hash = &plugin.content_hash()[..12];
    let next = slot.swap(&plugin).unwrap();
    assert_eq!(next.as_str(), format!("significance-default@{hash}#42"));
}
