//! Hot swap: generations replace each other atomically under concurrent
//! calls; no call fails or is lost; every decision is stamped with the
//! generation that made it; calls in flight finish on the old generation.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use cairn_policies::*;

use crate::support::{generation_number, host, policy_request, turn, wasm};

#[test]
fn swaps_under_concurrent_calls_lose_and_fail_nothing() {
    const THREADS: usize = 4;
    const SWAPS: usize = 40;
    let (host, sink) = host(HostConfig::default());
    let default = host
        .prepare::<MemoryPolicy>("memory-policy-default", defaults::MEMORY_POLICY.wasm)
        .unwrap();
    let local_only = host
        .prepare::<MemoryPolicy>("example-custom", defaults::EXAMPLE_CUSTOM.wasm)
        .unwrap();
    let slot = host.slot(&default).unwrap();
    let first = slot.generation();

    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let (slot, stop) = (slot.clone(), stop.clone());
            thread::spawn(move || {
                let request = policy_request(&format!("e-{i}"), Destination::CloudModel);
                let mut seen = Vec::new();
                let mut last = 0;
                while !stop.load(Ordering::Relaxed) {
                    let d = slot.decide(&request).expect("no decision fails");
                    assert!(d.outcome.is_plugin(), "{:?}", d.outcome);
                    // The decision matches the plugin its generation names.
                    let by_example = d.generation.as_str().starts_with("example-custom@");
                    if by_example {
                        assert_eq!(d.decision.locality, Locality::Blocked);
                    } else {
                        assert!(d.generation.as_str().starts_with("memory-policy-default@"));
                        assert_eq!(d.decision.locality, Locality::ApprovedExternal);
                    }
                    // One thread never goes back to an older generation.
                    let n = generation_number(&d.generation);
                    assert!(n >= last, "generation {n} after {last}");
                    last = n;
                    seen.push(d.generation);
                }
                seen
            })
        })
        .collect();

    let mut installed = vec![first];
    for i in 0..SWAPS {
        thread::sleep(Duration::from_millis(5));
        let next = if i % 2 == 0 { &local_only } else { &default };
        installed.push(slot.swap(next).unwrap());
        assert_eq!(slot.generation(), *installed.last().unwrap());
    }
    thread::sleep(Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);

    let mut decisions = 0u64;
    let mut generations_seen = HashSet::new();
    for w in workers {
        let seen = w.join().expect("worker");
        decisions += seen.len() as u64;
        generations_seen.extend(seen);
    }
    let installed: HashSet<_> = installed.into_iter().collect();
    assert!(generations_seen.is_subset(&installed));
    assert!(
        generations_seen.len() > SWAPS / 2,
        "swaps happened under load"
    );
    // Every decision returned was logged, and none was lost.
    assert_eq!(sink.total(), decisions);
    assert!(sink.records().iter().all(|r| r.fault().is_none()));
}

#[test]
fn a_call_in_flight_finishes_on_the_old_generation() {
    let (host, sink) = host(HostConfig::default().prewarm_instances(1));
    // A long call: the infinite-loop guest burning a large fuel budget
    // (with a deadline that does not stop it first).
    let slow = host
        .prepare::<SignificanceGate>(
            "hostile-infinite-loop",
            &wasm(env!("CAIRN_PLUGIN_HOSTILE_INFINITE_LOOP")),
        )
        .unwrap()
        .with_limits(
            Limits::default()
                .fuel(3_000_000_000)
                .deadline(Duration::from_secs(600)),
        );
    let slot = host.slot(&slow).unwrap();
    let old = slot.generation();

    let barrier = Arc::new(Barrier::new(2));
    let in_flight = {
        let (slot, barrier) = (slot.clone(), barrier.clone());
        thread::spawn(move || {
            barrier.wait();
            slot.decide(&turn("HOSTILE")).unwrap()
        })
    };
    barrier.wait();
    thread::sleep(Duration::from_millis(100));
    let fresh = host
        .prepare::<SignificanceGate>("significance-default", defaults::SIGNIFICANCE.wasm)
        .unwrap();
    let new = slot.swap(&fresh).unwrap();
    let after = slot.decide(&turn("We decided to ship.")).unwrap();
    assert_eq!(after.generation, new);

    let finished = in_flight.join().unwrap();
    assert_eq!(
        finished.generation, old,
        "the long call started before the swap"
    );
    assert_eq!(
        finished.outcome.fault().map(|f| f.kind),
        Some(FaultKind::OutOfFuel)
    );
    let logged = sink.records();
    let record = logged
        .iter()
        .find(|r| r.decision_id == finished.decision_id)
        .unwrap();
    assert_eq!(record.generation, old);
    assert_eq!(&*record.plugin, "hostile-infinite-loop");
}
