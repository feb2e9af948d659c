//! Acknowledged means durable: SIGKILL the server right after
//! acknowledgements (with more requests in flight) and find every
//! acknowledged turn again, exactly once.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::support::Server;

#[test]
fn sigkill_after_acks_loses_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Arc::new(Server::start(dir.path())?);
    let acked: Arc<Mutex<Vec<(String, u64, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (server, acked, stop) = (server.clone(), acked.clone(), stop.clone());
        writers.push(std::thread::spawn(move || -> Result<()> {
            let session = format!("s{w}");
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let content = format!("writer {w} turn {i}");
                let body = json!({"turns": [{"session": session, "role": "user", "content": content, "idempotency_key": format!("k{i}")}]});
                // Once the server is killed requests fail: that is expected.
                let Ok((200, reply)) = server.post("/v1/workspaces/acme/turns", &body) else {
                    break;
                };
                let seq = reply["acks"][0]["seq"].as_u64().unwrap_or(u64::MAX);
                acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push((session.clone(), seq, content));
            }
            Ok(())
        }));
    }
    // Kill as soon as 200 turns are acknowledged, with the writers still going.
    while acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len() < 200 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let acked_at_kill = acked.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len();
    server.sigkill()?;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
    }
    drop(server);
    let acked = acked
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    ensure!(acked.len() >= acked_at_kill);

    let server = Server::start(dir.path())?;
    let mut by_session: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for w in 0..4 {
        let session = format!("s{w}");
        let (status, turns) = server.get(&format!(
            "/v1/workspaces/acme/sessions/{session}/transcript"
        ))?;
        ensure!(status == 200 || status == 404, "transcript status {status}");
        if status == 200 {
            by_session.insert(session, turns.as_array().cloned().unwrap_or_default());
        }
    }
    for (session, seq, content) in &acked {
        let turns = by_session.get(session).cloned().unwrap_or_default();
        let found: Vec<&Value> = turns
            .iter()
            .filter(|t| t["content"] == content.as_str())
            .collect();
        ensure!(
            found.len() == 1,
            "acknowledged turn {session}:{seq} found {} times",
            found.len()
        );
        ensure!(
            found[0]["seq"] == *seq,
            "turn {content:?} has seq {} not {seq}",
            found[0]["seq"]
        );
    }
    for (session, turns) in &by_session {
        let seqs: Vec<u64> = turns.iter().filter_map(|t| t["seq"].as_u64()).collect();
        ensure!(
            seqs == (0..seqs.len() as u64).collect::<Vec<_>>(),
            "{session}: gaps or duplicates in {seqs:?}"
        );
        let contents: HashSet<&str> = turns.iter().filter_map(|t| t["content"].as_str()).collect();
        ensure!(
            contents.len() == turns.len(),
            "{session}: a turn was stored twice"
        );
    }
    // Retrying an acknowledged turn after the crash is recognised as a duplicate.
    let (session, seq, content) = &acked[0];
    let i = content.rsplit(' ').next().unwrap_or("0");
    let (status, reply) = server.post(
        "/v1/workspaces/acme/turns",
        &json!({"turns": [{"session": session, "role": "user", "content": content, "idempotency_key": format!("k{i}")}]}),
    )?;
    ensure!(status == 200);
    ensure!(
        reply["acks"][0] == json!({"seq": seq, "duplicate": true}),
        "{reply}"
    );
    Ok(())
}
