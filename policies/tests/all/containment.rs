//! Sandbox discipline: every hostile guest (one per behaviour) is contained
//! in every world. The fault is recorded with its reason code, the world's
//! fail-safe decision is returned (never "allow everything"), the faulted
//! store is dropped and never reused, and the host keeps serving a good
//! plugin on other threads meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use cairn_policies::*;

use crate::support::{HOSTILE, host, policy_request, topic_input, turn, wasm};

fn config() -> HostConfig {
    // One warm instance, so "a fresh instance" is observable through the
    // guests' per-instance call counter; a breaker that never trips here.
    // A deadline no call reaches, even on a starved test machine: the good
    // plugin must never fault, and the guests here are stopped by their
    // other limits (the deadline is tried in `deadline.rs`).
    HostConfig::default()
        .prewarm_instances(1)
        .max_idle_instances(1)
        .breaker_trip_after(1_000)
        .limits(Limits::default().deadline(Duration::from_secs(600)))
}

/// The fail-safe reason codes every contained fault carries.
const FAULT_REASONS: [ReasonCode; 2] = [ReasonCode::FailSafe, ReasonCode::PluginFault];

fn check_gate(host: &PolicyHost, sink: &MemorySink, name: &str, bytes: &[u8], expected: FaultKind) {
    let gate = host
        .slot(&host.prepare::<SignificanceGate>(name, bytes).unwrap())
        .unwrap();
    // The warm instance already made its canary decision: it serves the
    // second and third calls of its life.
    for n in 2..=3 {
        let d = gate.decide(&turn("an ordinary turn")).unwrap();
        assert!(d.outcome.is_plugin(), "{name}: {:?}", d.outcome);
        assert_eq!(
            d.decision.note.as_deref(),
            Some(format!("calls={n}").as_str())
        );
    }

    let d = gate.decide(&turn("HOSTILE")).unwrap();
    let fault = d
        .outcome
        .fault()
        .unwrap_or_else(|| panic!("{name}: {:?}", d.outcome));
    assert_eq!(fault.kind, expected, "{name}: {fault}");
    assert_eq!(
        d.decision.collection_decision,
        CollectionDecision::ObserveOnly
    );
    assert_eq!(d.decision.extraction_depth, ExtractionDepth::None);
    assert!(!d.decision.captures());
    assert_eq!(d.decision.reason_codes, FAULT_REASONS);

    // The faulted store is gone: the next call runs in a fresh instance,
    // whose call counter starts again at 1.
    let after = gate.decide(&turn("an ordinary turn")).unwrap();
    assert!(after.outcome.is_plugin(), "{name}: {:?}", after.outcome);
    assert_eq!(
        after.decision.note.as_deref(),
        Some("calls=1"),
        "{name}: store reused"
    );
    let status = gate.status();
    assert_eq!(status.faults, 1, "{name}");
    assert_eq!(status.instances_discarded, 1, "{name}");
    assert_eq!(status.instances_created, 2, "{name}");
    assert!(!status.breaker_open);

    // The decision log holds the fault with its reason code.
    let record = sink
        .records()
        .into_iter()
        .find(|r| r.decision_id == d.decision_id)
        .expect("fault recorded");
    assert_eq!(record.world, WorldKind::SignificanceGate);
    assert_eq!(&*record.plugin, name);
    assert_eq!(record.fault().map(|f| f.kind.code()), Some(expected.code()));
    assert_eq!(record.reason_codes(), FAULT_REASONS);
}

fn check_topic(host: &PolicyHost, name: &str, bytes: &[u8], expected: FaultKind) {
    let slot = host
        .slot(&host.prepare::<TopicDirective>(name, bytes).unwrap())
        .unwrap();
    assert!(
        slot.decide(&topic_input("sled it is"))
            .unwrap()
            .outcome
            .is_plugin()
    );
    let d = slot.decide(&topic_input("HOSTILE")).unwrap();
    assert_eq!(
        d.outcome.fault().map(|f| f.kind),
        Some(expected),
        "{name}: {:?}",
        d.outcome
    );
    assert!(!d.decision.collect);
    assert_eq!(d.decision.collection_mode, CollectionMode::SuggestOnly);
    assert!(d.decision.output_targets.is_empty());
    assert!(d.decision.review_required_before_durable_promotion);
    assert_eq!(d.decision.reason_codes, FAULT_REASONS);
    let after = slot.decide(&topic_input("sled it is")).unwrap();
    assert_eq!(
        after.decision.note.as_deref(),
        Some("calls=1"),
        "{name}: store reused"
    );
}

fn check_memory(host: &PolicyHost, name: &str, bytes: &[u8], expected: FaultKind) {
    let slot = host
        .slot(&host.prepare::<MemoryPolicy>(name, bytes).unwrap())
        .unwrap();
    assert!(
        slot.decide(&policy_request("e-1", Destination::LocalModel))
            .unwrap()
            .outcome
            .is_plugin()
    );
    let d = slot
        .decide(&policy_request("HOSTILE", Destination::LocalModel))
        .unwrap();
    assert_eq!(
        d.outcome.fault().map(|f| f.kind),
        Some(expected),
        "{name}: {:?}",
        d.outcome
    );
    assert!(!d.decision.allows_content(), "{name}: fail-safe must deny");
    assert_eq!(d.decision.content_fidelity, ContentFidelity::None);
    assert_eq!(d.decision.locality, Locality::Blocked);
    assert_eq!(d.decision.learning_scope, LearningScope::None);
    assert_eq!(d.decision.mutation_authority, MutationAuthority::None);
    assert_eq!(*d.decision.reason_codes, FAULT_REASONS);
    let after = slot
        .decide(&policy_request("e-1", Destination::LocalModel))
        .unwrap();
    assert_eq!(
        after.decision.note.as_deref(),
        Some("calls=1"),
        "{name}: store reused"
    );
}

#[test]
fn hostile_guests_are_contained_while_a_good_plugin_keeps_serving() {
    let (host, sink) = host(config());
    let good = host
        .slot(
            &host
                .prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)
                .unwrap(),
        )
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let (good, stop, served) = (good.clone(), stop.clone(), served.clone());
            thread::spawn(move || {
                let input = turn(&format!(
                    "worker {i}: we decided to keep the raw record forever"
                ));
                while !stop.load(Ordering::Relaxed) {
                    let d = good.decide(&input).expect("good plugin decides");
                    assert!(
                        d.outcome.is_plugin(),
                        "good plugin disturbed: {:?}",
                        d.outcome
                    );
                    assert!(d.decision.captures());
                    served.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    for &(name, path, expected) in HOSTILE {
        let bytes = wasm(path);
        let before = served.load(Ordering::Relaxed);
        check_gate(&host, &sink, name, &bytes, expected);
        check_topic(&host, name, &bytes, expected);
        check_memory(&host, name, &bytes, expected);
        // Let the workers make progress between guests, so "meanwhile" is
        // shown for each of them.
        while served.load(Ordering::Relaxed) < before + 10 {
            thread::yield_now();
        }
    }

    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("worker thread");
    }
    assert!(served.load(Ordering::Relaxed) >= 10 * HOSTILE.len() as u64);
    assert_eq!(good.status().faults, 0);
}

#[test]
fn every_invalid_output_rule_is_enforced() {
    let (host, _) = host(config());
    let bytes = wasm(env!("CAIRN_PLUGIN_HOSTILE_INVALID_OUTPUT"));
    let gate = host
        .slot(
            &host
                .prepare::<SignificanceGate>("hostile-invalid-output", &bytes)
                .unwrap(),
        )
        .unwrap();
    for (trigger, rule) in [
        ("HOSTILE", "NaN"),
        ("HOSTILE-RANGE", "not a number in [0, 1]"),
        ("HOSTILE-INCONSISTENT", "contradicts"),
    ] {
        let d = gate.decide(&turn(trigger)).unwrap();
        let fault = d.outcome.fault().expect("fault");
        assert_eq!(fault.kind, FaultKind::InvalidOutput, "{trigger}");
        assert!(fault.message.contains(rule), "{trigger}: {}", fault.message);
    }
}

#[test]
fn a_huge_list_is_refused_like_a_huge_note() {
    let (host, _) = host(config());
    let bytes = wasm(env!("CAIRN_PLUGIN_HOSTILE_OVERSIZED_OUTPUT"));
    let gate = host
        .slot(
            &host
                .prepare::<SignificanceGate>("hostile-oversized-output", &bytes)
                .unwrap(),
        )
        .unwrap();
    let d = gate.decide(&turn("HOSTILE-LIST")).unwrap();
    let fault = d.outcome.fault().expect("fault");
    assert_eq!(fault.kind, FaultKind::OutputTooLarge);
    assert!(fault.message.contains("100016 bytes"), "{}", fault.message);
}

#[test]
fn limits_are_per_plugin() {
    let (host, sink) = host(config());
    let bytes = wasm(env!("CAIRN_PLUGIN_HOSTILE_INFINITE_LOOP"));
    let plugin = host
        .prepare::<SignificanceGate>("hostile-infinite-loop", &bytes)
        .unwrap()
        .with_limits(Limits::default().fuel(200_000));
    let gate = host.slot(&plugin).unwrap();
    assert_eq!(gate.status().limits.fuel, 200_000);
    let d = gate.decide(&turn("HOSTILE")).unwrap();
    assert_eq!(
        d.outcome.fault().map(|f| f.kind),
        Some(FaultKind::OutOfFuel)
    );
    let record = sink.records().pop().expect("recorded");
    assert_eq!(
        record.fuel_consumed,
        Some(200_000),
        "the whole budget, and no more"
    );
}
