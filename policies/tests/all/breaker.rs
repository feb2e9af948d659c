//! The circuit breaker: a plugin that keeps faulting is tripped out and
//! reported; while it is out, decisions are the fail-safe and the plugin is
//! not called; a reset or a swap brings a plugin back.

use cairn_policies::*;

use crate::support::{host, turn, wasm};

#[test]
fn a_plugin_that_keeps_faulting_is_tripped_out_until_reset() {
    let (host, sink) = host(
        HostConfig::default()
            .breaker_trip_after(3)
            .prewarm_instances(1),
    );
    let bytes = wasm(env!("CAIRN_PLUGIN_HOSTILE_TRAP"));
    let gate = host
        .slot(
            &host
                .prepare::<SignificanceGate>("hostile-trap", &bytes)
                .unwrap(),
        )
        .unwrap();

    // A success between faults resets the count: two faults, a success,
    // two faults do not trip a breaker that needs three in a row.
    for text in ["HOSTILE", "HOSTILE", "fine", "HOSTILE", "HOSTILE"] {
        gate.decide(&turn(text)).unwrap();
    }
    assert!(!gate.status().breaker_open);

    // The third fault in a row trips it.
    let tripping = gate.decide(&turn("HOSTILE")).unwrap();
    assert_eq!(
        tripping.outcome.fault().map(|f| f.kind),
        Some(FaultKind::Trap)
    );
    let status = gate.status();
    assert!(status.breaker_open);
    assert_eq!(status.breaker_trips, 1);
    assert_eq!(status.consecutive_faults, 3);
    assert_eq!(status.last_fault.map(|f| f.kind), Some(FaultKind::Trap));

    // Open: even a harmless input gets the fail-safe, and the plugin is not
    // called (no new call, no new instance).
    let calls = status.calls;
    let created = status.instances_created;
    let d = gate.decide(&turn("fine")).unwrap();
    assert_eq!(d.outcome, Outcome::CircuitOpen);
    assert!(!d.decision.captures());
    assert_eq!(
        d.decision.reason_codes,
        [ReasonCode::FailSafe, ReasonCode::CircuitOpen]
    );
    let status = gate.status();
    assert_eq!(status.calls, calls);
    assert_eq!(status.instances_created, created);
    assert_eq!(status.short_circuited, 1);
    let logged = sink.records().pop().unwrap();
    assert_eq!(logged.outcome, Outcome::CircuitOpen);
    assert_eq!(logged.fuel_consumed, None);

    // Reset: the plugin serves again.
    gate.reset_breaker();
    let d = gate.decide(&turn("fine")).unwrap();
    assert!(d.outcome.is_plugin());
    assert!(!gate.status().breaker_open);
}

#[test]
fn swapping_replaces_a_tripped_plugin() {
    let (host, _) = host(
        HostConfig::default()
            .breaker_trip_after(1)
            .prewarm_instances(1),
    );
    let bytes = wasm(env!("CAIRN_PLUGIN_HOSTILE_STACK_OVERFLOW"));
    let gate = host
        .slot(
            &host
                .prepare::<SignificanceGate>("hostile-stack-overflow", &bytes)
                .unwrap(),
        )
        .unwrap();
    let tripped = gate.generation();
    gate.decide(&turn("HOSTILE")).unwrap();
    assert!(gate.status().breaker_open);

    let fixed = host
        .prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)
        .unwrap();
    let generation = gate.swap(&fixed).unwrap();
    assert_ne!(generation, tripped);
    let status = gate.status();
    assert!(!status.breaker_open);
    assert_eq!(status.plugin, "significance-default");
    let d = gate.decide(&turn("We decided to ship on Friday.")).unwrap();
    assert!(d.outcome.is_plugin());
    assert_eq!(d.generation, generation);
}
