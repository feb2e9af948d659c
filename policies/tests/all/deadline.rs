//! The wall-clock limit: a call that runs past its deadline before its fuel
//! runs out is interrupted, contained as a `time-limit` fault like any
//! other (store dropped, fail-safe answered, fault logged), trips the
//! breaker, and the host's one epoch ticker keeps every generation of every
//! slot bounded across hot swaps.
//!
//! Timing is not asserted: the guests run with fuel for days, so the only
//! thing that can stop them is the deadline, and the tests check that it
//! did (the fault's kind, and fuel left over).

use std::time::Duration;

use cairn_policies::*;

use crate::support::{host, policy_request, topic_input, turn, wasm};

/// Fuel for about a day of ordinary guest code: never what stops a call
/// here.
const DAYS_OF_FUEL: u64 = 100_000_000_000_000;

/// Limits whose only binding one is a short deadline.
fn deadline_only() -> Limits {
    Limits::default()
        .fuel(DAYS_OF_FUEL)
        .deadline(Duration::from_millis(20))
}

fn config() -> HostConfig {
    HostConfig::default()
        .prewarm_instances(1)
        .max_idle_instances(1)
        .breaker_trip_after(1_000)
}

/// The guests that stall: a plain loop, and the slowest work per unit of
/// fuel found (`memory.grow` calls into the runtime, see
/// `plugins/hostile/stall`).
fn stalling_guests() -> [(&'static str, Vec<u8>); 2] {
    [
        (
            "hostile-infinite-loop",
            wasm(env!("CAIRN_PLUGIN_HOSTILE_INFINITE_LOOP")),
        ),
        ("hostile-stall", wasm(env!("CAIRN_PLUGIN_HOSTILE_STALL"))),
    ]
}

/// Checks that the decision `id` was stopped by its deadline, not its fuel,
/// and logged so.
fn assert_stopped_by_the_deadline(name: &str, sink: &MemorySink, id: DecisionId) {
    let record = sink
        .records()
        .into_iter()
        .find(|r| r.decision_id == id)
        .unwrap_or_else(|| panic!("{name}: decision {id} not logged"));
    let fault = record
        .fault()
        .unwrap_or_else(|| panic!("{name}: {:?}", record.outcome));
    assert_eq!(fault.kind, FaultKind::TimeLimit, "{name}: {fault}");
    assert_eq!(fault.kind.code(), "time-limit");
    if let Some(fuel) = record.fuel_consumed {
        assert!(
            fuel < DAYS_OF_FUEL,
            "{name}: the deadline, not the fuel, stopped it ({fuel} used)"
        );
    }
}

#[test]
fn a_call_past_its_deadline_is_a_time_limit_fault_answered_with_the_fail_safe() {
    let (host, sink) = host(config());
    for (name, bytes) in stalling_guests() {
        // Significance: observe only, nothing captured.
        let gate = host
            .slot(
                &host
                    .prepare::<SignificanceGate>(name, &bytes)
                    .unwrap()
                    .with_limits(deadline_only()),
            )
            .unwrap();
        assert!(gate.decide(&turn("ordinary")).unwrap().outcome.is_plugin());
        let d = gate.decide(&turn("HOSTILE")).unwrap();
        assert_stopped_by_the_deadline(name, &sink, d.decision_id);
        assert_eq!(
            d.outcome.fault().map(|f| f.kind),
            Some(FaultKind::TimeLimit)
        );
        assert!(sink.records().last().unwrap().fuel_consumed.is_some());
        assert_eq!(
            d.decision.collection_decision,
            CollectionDecision::ObserveOnly
        );
        assert!(!d.decision.captures());
        assert_eq!(
            d.decision.reason_codes,
            [ReasonCode::FailSafe, ReasonCode::PluginFault]
        );
        // The interrupted store is dropped: the next call is served by a
        // fresh instance, with a deadline of its own.
        let after = gate.decide(&turn("ordinary")).unwrap();
        assert!(after.outcome.is_plugin(), "{name}: {:?}", after.outcome);
        assert_eq!(after.decision.note.as_deref(), Some("calls=1"));
        let status = gate.status();
        assert_eq!((status.faults, status.instances_discarded), (1, 1));

        // Topic: nothing collected.
        let topic = host
            .slot(
                &host
                    .prepare::<TopicDirective>(name, &bytes)
                    .unwrap()
                    .with_limits(deadline_only()),
            )
            .unwrap();
        let d = topic.decide(&topic_input("HOSTILE")).unwrap();
        assert_stopped_by_the_deadline(name, &sink, d.decision_id);
        assert!(!d.decision.collect);
        assert!(d.decision.output_targets.is_empty());

        // Memory policy: denied, one request and a batch alike.
        let memory = host
            .slot(
                &host
                    .prepare::<MemoryPolicy>(name, &bytes)
                    .unwrap()
                    .with_limits(deadline_only()),
            )
            .unwrap();
        let d = memory
            .decide(&policy_request("HOSTILE", Destination::LocalModel))
            .unwrap();
        assert_stopped_by_the_deadline(name, &sink, d.decision_id);
        assert!(!d.decision.allows_content());
        assert_eq!(d.decision.locality, Locality::Blocked);
        let batch = [
            policy_request("e-1", Destination::LocalModel),
            policy_request("HOSTILE", Destination::LocalModel),
        ];
        let decided = memory.decide_many(&batch).unwrap();
        assert_eq!(decided.len(), 2);
        for d in &decided {
            assert_stopped_by_the_deadline(name, &sink, d.decision_id);
            assert!(!d.decision.allows_content());
        }
    }
}

#[test]
fn deadline_faults_trip_the_breaker() {
    let (host, sink) = host(
        HostConfig::default()
            .prewarm_instances(1)
            .breaker_trip_after(3),
    );
    let bytes = wasm(env!("CAIRN_PLUGIN_HOSTILE_STALL"));
    let gate = host
        .slot(
            &host
                .prepare::<SignificanceGate>("hostile-stall", &bytes)
                .unwrap()
                .with_limits(deadline_only()),
        )
        .unwrap();
    for _ in 0..3 {
        let d = gate.decide(&turn("HOSTILE")).unwrap();
        assert_eq!(
            d.outcome.fault().map(|f| f.kind),
            Some(FaultKind::TimeLimit)
        );
    }
    let status = gate.status();
    assert!(status.breaker_open);
    assert_eq!(status.breaker_trips, 1);
    assert_eq!(
        status.last_fault.map(|f| f.kind),
        Some(FaultKind::TimeLimit)
    );
    // Open: the fail-safe, without calling the plugin.
    let calls = status.calls;
    let d = gate.decide(&turn("HOSTILE")).unwrap();
    assert_eq!(d.outcome, Outcome::CircuitOpen);
    assert!(!d.decision.captures());
    assert_eq!(gate.status().calls, calls);
    assert_eq!(sink.records().pop().unwrap().outcome, Outcome::CircuitOpen);
}

#[test]
fn the_deadline_holds_across_hot_swaps() {
    let (host, _) = host(config());
    let good = host
        .prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)
        .unwrap();
    let slot = host.slot(&good).unwrap();
    for (name, bytes) in stalling_guests() {
        let stalling = host
            .prepare::<SignificanceGate>(name, &bytes)
            .unwrap()
            .with_limits(deadline_only());
        // Twice each, so a generation swapped in after another stalling
        // one is bounded too.
        for _ in 0..2 {
            let generation = slot.swap(&stalling).unwrap();
            let d = slot.decide(&turn("HOSTILE")).unwrap();
            assert_eq!(d.generation, generation);
            assert_eq!(
                d.outcome.fault().map(|f| f.kind),
                Some(FaultKind::TimeLimit),
                "{name}: {:?}",
                d.outcome
            );
        }
        slot.swap(&good).unwrap();
        let d = slot.decide(&turn("We decided to ship on Friday.")).unwrap();
        assert!(d.outcome.is_plugin(), "{:?}", d.outcome);
    }
    let ticker = host.ticker_status();
    assert!(ticker.running);
    assert_eq!(ticker.panics, 0);
    assert!(ticker.ticks > 0);
}
