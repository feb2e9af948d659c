//! Three `cairn serve` nodes on one PostgreSQL database (the storage
//! matrix's postgres leg; on sled there is no cluster and these tests say
//! so and return): load over all three, one node SIGKILLed in the middle,
//! and nothing lost, duplicated or out of sequence; its workspaces taken
//! over by the others.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use cairn::worlds::defaults;
use serde_json::Value;

use crate::support::{Server, cairn_bin, fresh_database_url};

/// The lease time of the test nodes: a dead node's workspaces wait about
/// this long before another node takes them.
const LEASE_MS: u64 = 1_500;

/// A fresh database, or `None` (said) on the sled leg.
fn postgres_only(test: &str) -> Option<String> {
    let url = fresh_database_url();
    if url.is_none() {
        eprintln!(
            "{test}: skipped: a cluster needs the postgres backend (the postgres leg runs it)"
        );
    }
    url
}

fn node_env(url: &str, node: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CAIRN_STORAGE__BACKEND", "postgres".to_owned()),
        ("CAIRN_STORAGE__POSTGRES__URL", url.to_owned()),
        ("CAIRN_STORAGE__CLUSTER__NODE", node.to_owned()),
        ("CAIRN_STORAGE__CLUSTER__LEASE_MS", LEASE_MS.to_string()),
    ]
}

/// Starts nodes `n1`, `n2`… on the database at `url`, and waits until each
/// sees all of them live.
fn start_cluster(url: &str, dir: &std::path::Path, n: usize) -> Result<Vec<Server>> {
    start_cluster_with(url, dir, n, &[])
}

/// [`start_cluster`] with more environment for every node.
fn start_cluster_with(
    url: &str,
    dir: &std::path::Path,
    n: usize,
    extra: &[(&'static str, String)],
) -> Result<Vec<Server>> {
    let mut nodes = Vec::new();
    for i in 1..=n {
        let data = dir.join(format!("n{i}"));
        let mut env = node_env(url, &format!("n{i}"));
        env.extend(extra.iter().cloned());
        nodes.push(Server::start_env(&data, &[], &env)?);
    }
    wait_for(
        Duration::from_secs(20),
        "every node to see every node live",
        || {
            nodes.iter().try_fold(true, |all, node| {
                let status = cluster(node)?;
                let live = status["nodes"]
                    .as_array()
                    .map_or(0, |all| all.iter().filter(|n| n["live"] == true).count());
                Ok(all && live == n)
            })
        },
    )?;
    Ok(nodes)
}

/// `GET /v1/cluster` of a node.
fn cluster(node: &Server) -> Result<Value> {
    let (status, body) = node.get("/v1/cluster")?;
    ensure!(
        status == 200 && body["clustered"] == true,
        "{status} {body}"
    );
    Ok(body)
}

/// A node outside a cluster (either backend) says so with an object, not
/// an empty answer, so a client can tell "lone node" from "no such route".
#[test]
fn a_lone_server_says_it_is_not_clustered() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = Server::start(&dir.path().join("data"))?;
    let (status, body) = server.get("/v1/cluster")?;
    ensure!(status == 200, "{status} {body}");
    ensure!(body == serde_json::json!({"clustered": false}), "{body}");
    Ok(())
}

/// Polls `check` every 50 ms until it is true; the time it took.
fn wait_for(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if check()? {
            return Ok(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("waited {limit:?} for {what}")
}

/// The workspaces whose lease `owner` holds, as `node` sees the leases.
fn owned_by(node: &Server, owner: &str) -> Result<Vec<String>> {
    Ok(cluster(node)?["leases"]
        .as_array()
        .context("leases")?
        .iter()
        .filter(|l| l["owner"] == owner)
        .filter_map(|l| l["workspace"].as_str().map(str::to_owned))
        .collect())
}

#[test]
fn three_nodes_survive_a_sigkill_losing_and_duplicating_nothing() -> Result<()> {
    let Some(url) = postgres_only("three_nodes_survive_a_sigkill_losing_and_duplicating_nothing")
    else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let nodes = start_cluster(&url, dir.path(), 3)?;
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| n.base.trim_start_matches("http://").to_owned())
        .collect();
    let loadgen = Command::new(cairn_bin())
        .arg("loadgen")
        .args([
            "--http", &addrs[0], "--http", &addrs[1], "--http", &addrs[2],
        ])
        .args([
            "--sessions",
            "40",
            "--workspaces",
            "6",
            "--work-contexts",
            "12",
        ])
        .args(["--concurrency", "16", "--duration", "14", "--json"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting cairn loadgen")?;

    // Under load, once n2 owns its share, kill it.
    let mut victims = Vec::new();
    wait_for(Duration::from_secs(20), "n2 to own a workspace", || {
        victims = owned_by(&nodes[0], "n2")?;
        Ok(!victims.is_empty())
    })?;
    std::thread::sleep(Duration::from_secs(3));
    let victims = owned_by(&nodes[0], "n2")?;
    ensure!(!victims.is_empty(), "n2 owns nothing any more");
    nodes[1].sigkill()?;
    let took = wait_for(
        Duration::from_secs(20),
        "n2's workspaces to be taken over",
        || Ok(owned_by(&nodes[0], "n2")?.is_empty()),
    )?;
    eprintln!("take-over of {victims:?} after SIGKILL: {took:?} (lease {LEASE_MS} ms)");
    ensure!(
        took < Duration::from_millis(4 * LEASE_MS),
        "take-over took {took:?}"
    );

    let out = loadgen.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "loadgen failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).context("loadgen JSON")?;
    ensure!(report["mode"] == "http-cluster", "{report}");
    ensure!(report["turns_acked"].as_u64() > Some(100), "{report}");
    for zero in ["turns_lost", "turns_duplicated", "seq_gaps", "turns_failed"] {
        ensure!(report[zero] == 0, "{zero}: {report}");
    }
    // The kill was felt: calls went to another node, or were retried.
    ensure!(
        report["failovers"].as_u64() > Some(0) || report["retries"].as_u64() > Some(0),
        "{report}"
    );

    // The survivors took n2's workspaces over, each with a greater token.
    let mut taken = Vec::new();
    for node in [&nodes[0], &nodes[2]] {
        for t in cluster(node)?["takeovers"]
            .as_array()
            .context("takeovers")?
        {
            if t["from"] == "n2" && t["token"].as_i64() > Some(1) {
                taken.extend(t["workspace"].as_str().map(str::to_owned));
            }
        }
    }
    for workspace in &victims {
        ensure!(
            taken.contains(workspace),
            "{workspace} not taken over: {taken:?}"
        );
    }

    // Any node answers for any workspace: n3 forwards what n1 owns.
    let on_n1 = owned_by(&nodes[2], "n1")?;
    let workspace = on_n1.first().context("n1 owns nothing")?;
    let resp = nodes[2]
        .agent
        .get(format!(
            "{}/v1/workspaces/{workspace}/sessions",
            nodes[2].base
        ))
        .call()?;
    ensure!(resp.status() == 200, "{}", resp.status());
    ensure!(
        resp.headers()
            .get("x-cairn-node")
            .and_then(|v| v.to_str().ok())
            == Some("n1"),
        "served by {:?}",
        resp.headers().get("x-cairn-node")
    );
    Ok(())
}

#[test]
fn a_plugin_installed_on_one_node_is_served_by_all() -> Result<()> {
    let Some(url) = postgres_only("a_plugin_installed_on_one_node_is_served_by_all") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let nodes = start_cluster(&url, dir.path(), 2)?;
    let mut resp = nodes[0]
        .agent
        .put(format!("{}/v1/plugins/significance-gate", nodes[0].base))
        .header("content-type", "application/wasm")
        .send(defaults::EXAMPLE_QUIET.wasm)?;
    ensure!(resp.status() == 200, "{}", resp.status());
    let installed: Value = resp.body_mut().read_json()?;
    let generation = installed["generation"]
        .as_str()
        .context("generation")?
        .to_owned();
    let serving = |node: &Server| -> Result<Option<String>> {
        let (_, plugins) = node.get("/v1/plugins")?;
        Ok(plugins["plugins"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["world"] == "significance-gate"))
            .and_then(|p| p["generation"].as_str())
            .map(str::to_owned))
    };
    wait_for(Duration::from_secs(10), "n2 to serve n1's install", || {
        Ok(serving(&nodes[1])? == Some(generation.clone()))
    })?;
    // Decisions made on both nodes are counted under the one generation,
    // whichever node is asked.
    // New workspaces until each node owns one (placement spreads them).
    let mut ingested = 0u64;
    for i in 0..40 {
        let (status, body) = nodes[i % 2].post(
            &format!("/v1/workspaces/w{i}/turns"),
            &serde_json::json!({ "turns": [{ "session": "s", "role": "user", "content": "We decided to ship on Friday." }] }),
        )?;
        ensure!(status == 200, "{status} {body}");
        ingested += 1;
        let held = |node: &Server| -> Result<bool> {
            Ok(cluster(node)?["held"]
                .as_array()
                .is_some_and(|h| !h.is_empty()))
        };
        if held(&nodes[0])? && held(&nodes[1])? {
            break;
        }
    }
    let path = format!(
        "/v1/plugins/generations/{}",
        generation.replace('@', "%40").replace('#', "%23")
    );
    for node in &nodes {
        wait_for(
            Duration::from_secs(10),
            "both nodes' decisions to be counted",
            || {
                let (_, counts) = node.get(&path)?;
                Ok(counts["decisions"].as_u64() >= Some(ingested))
            },
        )?;
    }
    Ok(())
}

/// The `Host` header of a node.
fn host(node: &Server) -> String {
    node.base.trim_start_matches("http://").to_owned()
}

/// Writes one turn in workspaces `{prefix}0`, `{prefix}1`… through `via`
/// until one of them is owned by `owner`; answers its name.
fn a_workspace_of(via: &Server, owner: &str, prefix: &str, content: &str) -> Result<String> {
    for i in 0..40 {
        let workspace = format!("{prefix}{i}");
        let (s, body) = via.post(
            &format!("/v1/workspaces/{workspace}/turns"),
            &serde_json::json!({"turns": [{"session": "s", "role": "user", "content": content}]}),
        )?;
        ensure!(s == 200, "{s} {body}");
        if owned_by(via, owner)?.contains(&workspace) {
            return Ok(workspace);
        }
    }
    anyhow::bail!("{owner} owns none of 40 workspaces")
}

/// Issue 78: a client could send `x-cairn-forwarded-by` itself, and the
/// node then took the lease of a workspace another node should own (and
/// served it, bypassing placement). Only a node of the cluster can forward:
/// the header carries a MAC under a key the nodes share; anything else is
/// refused. Forwarding between the nodes still works.
#[test]
fn a_client_cannot_pose_as_a_node() -> Result<()> {
    let Some(url) = postgres_only("a_client_cannot_pose_as_a_node") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let nodes = start_cluster(&url, dir.path(), 2)?;
    let n1 = host(&nodes[0]);
    for i in 0..8 {
        for claim in ["n2", "n1", "n2;0;00"] {
            let path = format!("/v1/workspaces/posed-{i}/sessions");
            let (s, body) = nodes[0].raw(
                "GET",
                &path,
                &[("host", n1.as_str()), ("x-cairn-forwarded-by", claim)],
                "",
            )?;
            ensure!(
                s == 403 && body["code"] == "forward_not_authenticated",
                "{path} claiming {claim:?}: {s} {body}"
            );
        }
    }
    let leases = cluster(&nodes[0])?["leases"].to_string();
    ensure!(
        !leases.contains("posed-"),
        "a posed request took a lease: {leases}"
    );
    // A real forward: n1 passes n2's workspace on, n2 serves it.
    let workspace = a_workspace_of(&nodes[0], "n2", "real-", "Forwarded for real.")?;
    let resp = nodes[0]
        .agent
        .get(format!(
            "{}/v1/workspaces/{workspace}/sessions/s/transcript",
            nodes[0].base
        ))
        .call()?;
    ensure!(resp.status() == 200, "{}", resp.status());
    ensure!(
        resp.headers()
            .get("x-cairn-node")
            .and_then(|v| v.to_str().ok())
            == Some("n2"),
        "served by {:?}",
        resp.headers().get("x-cairn-node")
    );
    // A state-changing request from n1's own origin passes n1's cross-site
    // check, and n2 does not judge the origin again against its address.
    let (s, body) = nodes[0].raw(
        "POST",
        &format!("/v1/workspaces/{workspace}/turns"),
        &[("host", n1.as_str()), ("origin", nodes[0].base.as_str())],
        r#"{"turns":[{"session":"s","role":"user","content":"From n1's own page."}]}"#,
    )?;
    ensure!(s == 200, "same-origin through n1 to n2: {s} {body}");
    Ok(())
}

/// Issue 78: a forwarded answer was read whole into memory, whatever its
/// size. It is bounded by `server.max_forwarded_answer_bytes`; a larger one
/// is a 502 that names the setting.
#[test]
fn forwarded_answers_are_bounded() -> Result<()> {
    let Some(url) = postgres_only("forwarded_answers_are_bounded") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let nodes = start_cluster_with(
        &url,
        dir.path(),
        2,
        &[(
            "CAIRN_SERVER__MAX_FORWARDED_ANSWER_BYTES",
            "4096".to_owned(),
        )],
    )?;
    let big = "a long line of the launch plan ".repeat(300);
    let workspace = a_workspace_of(&nodes[0], "n2", "big-", &big)?;
    let path = format!("/v1/workspaces/{workspace}/sessions/s/transcript");
    let (s, body) = nodes[1].get(&path)?;
    ensure!(s == 200, "from its owner: {s}");
    let (s, body_via) = nodes[0].get(&path)?;
    ensure!(
        s == 502 && body_via["code"] == "answer_too_large",
        "through n1: {s} {body_via}"
    );
    ensure!(
        body_via["message"]
            .as_str()
            .is_some_and(|m| m.contains("server.max_forwarded_answer_bytes")),
        "{body_via}"
    );
    ensure!(body.to_string().len() > 4096);
    Ok(())
}

/// Issue 78: a lease was taken and renewed forever for any name a request
/// was routed by, a workspace that does not exist or was erased included.
/// Such a lease is released once it has been idle for a lease time; a real
/// workspace keeps its owner.
#[test]
fn leases_of_workspaces_that_do_not_exist_are_released() -> Result<()> {
    let Some(url) = postgres_only("leases_of_workspaces_that_do_not_exist_are_released") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let nodes = start_cluster(&url, dir.path(), 2)?;
    for i in 0..6 {
        let (s, body) = nodes[0].get(&format!("/v1/workspaces/ghost-{i}/sessions"))?;
        ensure!(s == 404, "{s} {body}");
    }
    let (s, body) = nodes[0].post(
        "/v1/workspaces/real/turns",
        &serde_json::json!({"turns": [{"session": "s", "role": "user", "content": "Here to stay."}]}),
    )?;
    ensure!(s == 200, "{s} {body}");
    let held = |node: &Server| -> Result<Vec<String>> {
        Ok(cluster(node)?["held"]
            .as_array()
            .context("held")?
            .iter()
            .filter_map(|h| h[0].as_str().map(str::to_owned))
            .collect())
    };
    let ghosts_held = || -> Result<usize> {
        let mut n = 0;
        for node in &nodes {
            n += held(node)?
                .iter()
                .filter(|w| w.starts_with("ghost-"))
                .count();
        }
        Ok(n)
    };
    ensure!(ghosts_held()? > 0, "the requests took no lease");
    wait_for(
        Duration::from_millis(10 * LEASE_MS),
        "the leases of the workspaces that do not exist to be released",
        || Ok(ghosts_held()? == 0),
    )?;
    // Erased: its lease goes too.
    let (s, body) = nodes[0].post(
        "/v1/workspaces/real/forget",
        &serde_json::json!({"target": "workspace", "id": "real", "reason": "test"}),
    )?;
    ensure!(s == 200, "{s} {body}");
    wait_for(
        Duration::from_millis(10 * LEASE_MS),
        "the erased workspace's lease to be released",
        || {
            let mut n = 0;
            for node in &nodes {
                n += held(node)?.iter().filter(|w| *w == "real").count();
            }
            Ok(n == 0)
        },
    )?;
    Ok(())
}

/// Issue 78: with no `storage.cluster.advertise`, a node listening on
/// `0.0.0.0` advertised `http://0.0.0.0:PORT`, which other nodes cannot
/// reach. It refuses to start, naming the setting.
#[test]
fn a_node_will_not_advertise_an_unspecified_address() -> Result<()> {
    let Some(url) = postgres_only("a_node_will_not_advertise_an_unspecified_address") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(cairn_bin())
        .envs(node_env(&url, "n1"))
        .env("CAIRN_SERVER__ADMIN_TOKEN", "admin-token-0123456789abcdef")
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path().join("n1"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("a node listening on 0.0.0.0 without advertise kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().context("stderr")?, &mut err)?;
    ensure!(!status.success(), "{err}");
    ensure!(err.contains("storage.cluster.advertise"), "{err}");
    Ok(())
}

/// Tokens are checked from each node's memory; a token made on one node
/// counts on the others within `server.token_refresh_ms`, and turns
/// authentication on there too.
#[test]
fn a_token_made_on_one_node_counts_on_the_others() -> Result<()> {
    let Some(url) = postgres_only("a_token_made_on_one_node_counts_on_the_others") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let nodes = start_cluster_with(
        &url,
        dir.path(),
        2,
        &[("CAIRN_SERVER__TOKEN_REFRESH_MS", "200".to_owned())],
    )?;
    let (s, made) = nodes[0].post(
        "/v1/tokens",
        &serde_json::json!({"workspace": "acme", "scope": "write"}),
    )?;
    ensure!(s == 200, "{s} {made}");
    let token = made["token"].as_str().context("token")?.to_owned();
    let n2 = host(&nodes[1]);
    let auth = format!("Bearer {token}");
    wait_for(Duration::from_secs(10), "n2 to require a token", || {
        Ok(nodes[1].get("/v1/workspaces/acme/sessions")?.0 == 401)
    })?;
    let (s, body) = nodes[1].raw(
        "POST",
        "/v1/workspaces/acme/turns",
        &[("host", n2.as_str()), ("authorization", auth.as_str())],
        r#"{"turns":[{"session":"s","role":"user","content":"Made on n1, used on n2."}]}"#,
    )?;
    ensure!(s == 200, "the token on n2: {s} {body}");
    Ok(())
}
