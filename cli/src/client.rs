//! What the `cairn` command's HTTP clients (the cluster's forwarder and the
//! load generator) share: how a request's time is bounded.

use std::time::Duration;

use ureq::config::ConfigBuilder;
use ureq::typestate::AgentScope;

/// Bounds every phase of a request (connect, send, wait for the answer,
/// read it) by `limit`, and leaves name resolution unbounded.
///
/// Not `timeout_global` nor `timeout_per_call`: either gives resolution a
/// deadline, and ureq meets a resolution deadline by resolving on a thread
/// it spawns for the call, before it looks for a pooled connection. That
/// is a thread created and joined per request even to `127.0.0.1:PORT`:
/// 17 % of the load generator's CPU over HTTP went to it (BENCHMARKS, the
/// forty-first pass). The addresses these clients call are the ones they
/// were configured with; an address literal resolves without a lookup.
pub(crate) fn phase_timeouts(
    builder: ConfigBuilder<AgentScope>,
    limit: Duration,
) -> ConfigBuilder<AgentScope> {
    builder
        .timeout_connect(Some(limit))
        .timeout_send_request(Some(limit))
        .timeout_send_body(Some(limit))
        .timeout_recv_response(Some(limit))
        .timeout_recv_body(Some(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_has_no_deadline_and_every_other_phase_has_the_limit() {
        let limit = Duration::from_secs(7);
        let config = phase_timeouts(ureq::Agent::config_builder(), limit).build();
        let timeouts = config.timeouts();
        assert_eq!(timeouts.global, None);
        assert_eq!(timeouts.per_call, None);
        assert_eq!(timeouts.resolve, None);
        assert_eq!(timeouts.connect, Some(limit));
        assert_eq!(timeouts.send_request, Some(limit));
        assert_eq!(timeouts.send_body, Some(limit));
        assert_eq!(timeouts.recv_response, Some(limit));
        assert_eq!(timeouts.recv_body, Some(limit));
    }
}
