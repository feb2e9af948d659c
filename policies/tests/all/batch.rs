//! The batched memory policy (`memory-policy-batch`, 0.1.1,
//! `memory-policy-assembly`, 0.1.2, and `memory-policy-interned`, 0.1.3,
//! which the default policy implements): one plugin call and one decision-log
//! record for many requests, the same decisions as one call each (whether
//! the requests share their asker or not), a plugin built for the
//! single-request world still served, and a fault in a batch contained for
//! the whole batch.

use std::sync::Arc;

use cairn_policies::*;
use parking_lot::Mutex;

use crate::support::{HOSTILE, policy_request, shared_cache_dir, wasm};

/// A sink that keeps what it is handed, batch by batch.
#[derive(Default)]
struct Batches(Mutex<Vec<Vec<DecisionRecord>>>);

impl DecisionSink for Batches {
    fn record(&self, record: &DecisionRecord) -> Result<(), SinkError> {
        self.0.lock().push(vec![record.clone()]);
        Ok(())
    }

    fn record_batch(&self, records: &[DecisionRecord]) -> Result<(), SinkError> {
        self.0.lock().push(records.to_vec());
        Ok(())
    }
}

fn host_with_batches() -> (PolicyHost, Arc<Batches>) {
    let sink = Arc::new(Batches::default());
    let config = HostConfig::default()
        .prewarm_instances(1)
        .max_idle_instances(1)
        .breaker_trip_after(1_000)
        .cache_dir(shared_cache_dir(), [3; 32]);
    let host = PolicyHost::new(config, sink.clone()).unwrap();
    (host, sink)
}

/// Requests that take different paths through the default policy.
fn requests() -> Vec<PolicyRequest> {
    let mut out = Vec::new();
    let destinations = [
        Destination::LocalModel,
        Destination::CloudModel,
        Destination::ShareLink,
        Destination::UserVisibleUi,
    ];
    let sensitivities = [
        Sensitivity::Normal,
        Sensitivity::Personal,
        Sensitivity::Confidential,
        Sensitivity::Secret,
    ];
    for (i, destination) in destinations.into_iter().enumerate() {
        for (j, sensitivity) in sensitivities.into_iter().enumerate() {
            let mut request = policy_request(&format!("e-{i}-{j}"), destination);
            request.object_ref.sensitivity = sensitivity;
            if j == 2 {
                request.object_ref.work_context_id = Some("elsewhere".into());
            }
            request.object_ref.low_trust = i == 3;
            out.push(request);
        }
    }
    out
}

/// Requests with one asker (as an assembly's are) that take different paths
/// through the default policy: sensitivity, context, lineage, trust.
fn one_asker_requests() -> Vec<PolicyRequest> {
    let mut out = Vec::new();
    for (i, sensitivity) in [
        Sensitivity::Normal,
        Sensitivity::Personal,
        Sensitivity::Confidential,
        Sensitivity::Secret,
    ]
    .into_iter()
    .enumerate()
    {
        for j in 0..4 {
            let mut request = policy_request(&format!("e-{i}-{j}"), Destination::CloudModel);
            request.surface_ref = Some("assemble".into());
            request.object_ref.sensitivity = sensitivity;
            if j >= 2 {
                request.object_ref.work_context_id = Some("elsewhere".into());
            }
            // Sessions shared by some candidates and not others, and
            // objects without a context or a session, as an assembly's.
            request.object_ref.session_id = (j != 1).then(|| format!("s-{}", (i + j) % 3));
            if i == 3 && j == 0 {
                request.object_ref.work_context_id = None;
            }
            request.lineage_permitted = j == 3;
            request.object_ref.low_trust = j == 1;
            out.push(request);
        }
    }
    out
}

#[test]
fn a_batch_is_one_call_and_one_record_with_the_same_decisions() {
    a_batch_decides_as_one_call_each(requests());
}

#[test]
fn a_batch_with_one_asker_is_one_call_with_the_same_decisions() {
    a_batch_decides_as_one_call_each(one_asker_requests());
}

/// A slot of the default memory policy on `host`.
fn default_slot(host: &PolicyHost) -> PolicySlot<MemoryPolicy> {
    host.slot(
        &host
            .prepare::<MemoryPolicy>("memory-policy-default", defaults::MEMORY_POLICY.wasm)
            .unwrap(),
    )
    .unwrap()
}

fn a_batch_decides_as_one_call_each(requests: Vec<PolicyRequest>) {
    let (host, sink) = host_with_batches();
    let slot = default_slot(&host);
    let one_by_one: Vec<MemoryPolicyDecision> = requests
        .iter()
        .map(|r| slot.decide(r).unwrap().decision)
        .collect();
    sink.0.lock().clear();
    let calls_before = slot.status().calls;

    let decided = slot.decide_many(&requests).unwrap();

    assert_eq!(slot.status().calls, calls_before + 1, "one plugin call");
    let batched: Vec<MemoryPolicyDecision> = decided.iter().map(|d| d.decision.clone()).collect();
    assert_eq!(batched, one_by_one);
    assert!(decided.iter().all(|d| d.outcome.is_plugin()));
    // Some requests were narrowed, so the comparison is not vacuous.
    assert!(batched.iter().any(|d| !d.allows_content()));
    assert!(
        batched
            .iter()
            .any(|d| d.content_fidelity == ContentFidelity::Full)
    );

    let logged = sink.0.lock().clone();
    assert_eq!(logged.len(), 1, "one record for the batch");
    let ids: Vec<DecisionId> = logged[0].iter().map(|r| r.decision_id).collect();
    assert_eq!(
        ids,
        decided.iter().map(|d| d.decision_id).collect::<Vec<_>>()
    );
    assert_eq!(
        logged[0]
            .iter()
            .filter(|r| r.fuel_consumed.is_some())
            .count(),
        1,
        "the call's fuel is recorded once"
    );
}

/// A sensitivity from a number.
fn sensitivity(n: u8) -> Sensitivity {
    match n % 4 {
        0 => Sensitivity::Normal,
        1 => Sensitivity::Personal,
        2 => Sensitivity::Confidential,
        _ => Sensitivity::Secret,
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever contexts and sessions an assembly's candidates share (the
    /// default policy takes them interned, and answers each distinct
    /// decision once), the batch decides as one call each.
    #[test]
    fn any_assembly_is_decided_as_one_call_each(
        candidates in proptest::collection::vec(
            (0u8..4, 0u8..5, 0u8..4, proptest::bool::ANY, proptest::bool::ANY),
            1..60,
        ),
        destination in 0u8..3,
    ) {
        let destination = [Destination::LocalModel, Destination::CloudModel, Destination::UserVisibleUi]
            [usize::from(destination)];
        let requests: Vec<PolicyRequest> = candidates
            .iter()
            .enumerate()
            .map(|(n, &(context, session, level, low_trust, lineage))| {
                let mut r = policy_request(&format!("e-{n}"), destination);
                r.object_ref.work_context_id = match context {
                    0 => None,
                    1 => Some("wc-test".into()),
                    c => Some(format!("wc-{c}")),
                };
                r.object_ref.session_id = (session > 0).then(|| format!("s-{session}"));
                r.object_ref.sensitivity = sensitivity(level);
                r.object_ref.low_trust = low_trust;
                r.lineage_permitted = lineage;
                r
            })
            .collect();
        let slot = default_policy_slot();
        let one_by_one: Vec<MemoryPolicyDecision> = requests
            .iter()
            .map(|r| slot.decide(r).unwrap().decision)
            .collect();
        let calls_before = slot.status().calls;
        let batched: Vec<MemoryPolicyDecision> = slot
            .decide_many(&requests)
            .unwrap()
            .into_iter()
            .map(|d| d.decision)
            .collect();
        proptest::prop_assert_eq!(slot.status().calls, calls_before + 1);
        proptest::prop_assert_eq!(batched, one_by_one);
    }
}

/// One slot of the default policy, shared by the property's cases.
fn default_policy_slot() -> &'static PolicySlot<MemoryPolicy> {
    static SLOT: std::sync::OnceLock<(PolicyHost, PolicySlot<MemoryPolicy>)> =
        std::sync::OnceLock::new();
    let (_, slot) = SLOT.get_or_init(|| {
        let (host, _) = host_with_batches();
        let slot = default_slot(&host);
        (host, slot)
    });
    slot
}

#[test]
fn a_batch_passes_its_asker_once_only_when_every_request_has_it() {
    // The hostile guests note which call served a decision.
    let (name, path, _) = HOSTILE[0];
    let (host, _) = host_with_batches();
    let slot = host
        .slot(&host.prepare::<MemoryPolicy>(name, &wasm(path)).unwrap())
        .unwrap();
    let served_by_candidates = |decided: &[Decided<MemoryPolicyDecision>]| -> Vec<bool> {
        decided
            .iter()
            .map(|d| {
                d.decision
                    .note
                    .as_deref()
                    .is_some_and(|n| n.ends_with(" candidates"))
            })
            .collect()
    };
    let one_asker = one_asker_requests();
    let decided = slot.decide_many(&one_asker).unwrap();
    assert!(served_by_candidates(&decided).iter().all(|&c| c));

    // Any field of the asker that differs sends the batch through
    // `decide-batch`.
    type Change = fn(&mut PolicyRequest);
    let changes: [Change; 5] = [
        |r| r.action = Action::Retrieve,
        |r| r.destination = None,
        |r| r.principal_ref = None,
        |r| r.surface_ref = Some("elsewhere".into()),
        |r| r.requesting_work_context_id = None,
    ];
    for change in changes {
        let mut mixed = one_asker.clone();
        change(&mut mixed[5]);
        let decided = slot.decide_many(&mixed).unwrap();
        assert_eq!(decided.len(), mixed.len());
        assert!(served_by_candidates(&decided).iter().all(|&c| !c));
    }
}

#[test]
fn a_plugin_built_against_0_1_2_is_still_served_with_one_call_a_batch() {
    let old = include_bytes!("../fixtures/memory-policy-default-0.1.2.wasm");
    let (host, _) = host_with_batches();
    let old_slot = host
        .slot(
            &host
                .prepare::<MemoryPolicy>("memory-policy-default-0-1-2", old)
                .unwrap(),
        )
        .unwrap();
    let requests = one_asker_requests();
    let calls_before = old_slot.status().calls;

    let decided = old_slot.decide_many(&requests).unwrap();

    assert_eq!(old_slot.status().calls, calls_before + 1, "one plugin call");
    assert!(decided.iter().all(|d| d.outcome.is_plugin()));
    // The same rules then and now: the same decisions as today's default.
    let today = default_policy_slot().decide_many(&requests).unwrap();
    let decisions = |d: &[Decided<MemoryPolicyDecision>]| -> Vec<MemoryPolicyDecision> {
        d.iter().map(|d| d.decision.clone()).collect()
    };
    assert_eq!(decisions(&decided), decisions(&today));
}

#[test]
fn a_plugin_for_the_single_request_world_is_still_served() {
    let (host, sink) = host_with_batches();
    let slot = host
        .slot(
            &host
                .prepare::<MemoryPolicy>("example-custom", defaults::EXAMPLE_CUSTOM.wasm)
                .unwrap(),
        )
        .unwrap();
    let requests = requests();
    let calls_before = slot.status().calls;
    sink.0.lock().clear();

    let decided = slot.decide_many(&requests).unwrap();

    assert_eq!(
        slot.status().calls,
        calls_before + requests.len() as u64,
        "one call per request"
    );
    for (d, r) in decided.iter().zip(&requests) {
        assert!(d.outcome.is_plugin());
        let external = r.destination != Some(Destination::LocalModel)
            && r.destination != Some(Destination::UserVisibleUi);
        assert_eq!(d.decision.locality == Locality::Blocked, external, "{r:?}");
    }
    assert_eq!(sink.0.lock().len(), 1, "still one record");
}

#[test]
fn a_fault_in_a_batch_gives_every_request_the_fail_safe() {
    for &(name, path, expected) in HOSTILE {
        let (host, _) = host_with_batches();
        let slot = host
            .slot(&host.prepare::<MemoryPolicy>(name, &wasm(path)).unwrap())
            .unwrap();
        let fine = vec![
            policy_request("e-1", Destination::LocalModel),
            policy_request("e-2", Destination::LocalModel),
        ];
        assert!(
            slot.decide_many(&fine)
                .unwrap()
                .iter()
                .all(|d| d.outcome.is_plugin()),
            "{name}"
        );
        let faults_before = slot.status().faults;
        let mixed = vec![
            policy_request("e-1", Destination::LocalModel),
            policy_request("HOSTILE", Destination::LocalModel),
            policy_request("e-3", Destination::LocalModel),
        ];

        let decided = slot.decide_many(&mixed).unwrap();

        assert_eq!(decided.len(), 3);
        for d in &decided {
            assert_eq!(
                d.outcome.fault().map(|f| f.kind),
                Some(expected),
                "{name}: {:?}",
                d.outcome
            );
            assert!(!d.decision.allows_content(), "{name}: fail-safe must deny");
            assert_eq!(
                *d.decision.reason_codes,
                [ReasonCode::FailSafe, ReasonCode::PluginFault]
            );
        }
        assert_eq!(slot.status().faults, faults_before + 1, "{name}: one fault");
        // The faulted store is gone: the next call runs on a fresh instance.
        let after = slot.decide_many(&fine).unwrap();
        assert!(after.iter().all(|d| d.outcome.is_plugin()), "{name}");
        assert_eq!(
            after[0].decision.note.as_deref(),
            Some("calls=1 candidates"),
            "{name}: store reused"
        );
    }
}
