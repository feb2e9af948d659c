//! [`Leases`] on PostgreSQL: `cairn_nodes` and `cairn_leases` (schema
//! version 2). Times are the database's (`now()`), so nodes' clocks may
//! disagree without harm; a lease row is the only word on who owns a
//! workspace, and its token the only proof a writer may write.

use std::collections::HashMap;

use super::{PostgresStore, StoreError, classify, column, pool_error};
use crate::{LeaseRow, Leases, NodeInfo};

/// True when `node` holds `space`'s lease with `token`, checked inside a
/// write transaction `tx`. The row stays share-locked until `tx` ends, so a
/// take-over (an `UPDATE` of that row) waits for the write to commit, and a
/// write after the take-over sees the new token and is refused.
pub(super) async fn holds(
    tx: &deadpool_postgres::Transaction<'_>,
    space: &str,
    node: &str,
    token: i64,
) -> Result<bool, StoreError> {
    let op = "check the lease";
    let statement = tx
        .prepare_cached(
            "SELECT 1 FROM cairn_leases WHERE space = $1 AND owner = $2 AND token = $3 FOR SHARE",
        )
        .await
        .map_err(|e| classify(op, e))?;
    let row = tx
        .query_opt(&statement, &[&space, &node, &token])
        .await
        .map_err(|e| classify(op, e))?;
    Ok(row.is_some())
}

/// Every row of `cairn_nodes`, with liveness on the database's clock.
async fn list_nodes(
    client: &deadpool_postgres::Client,
    op: &'static str,
) -> Result<Vec<NodeInfo>, StoreError> {
    let rows = client
        .query(
            "SELECT node, url,
                    heartbeat_at + lease_ms * interval '1 millisecond' > now(),
                    (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint
             FROM cairn_nodes ORDER BY node COLLATE \"C\"",
            &[],
        )
        .await
        .map_err(|e| classify(op, e))?;
    rows.iter()
        .map(|r| {
            Ok(NodeInfo {
                node: column(r, 0, op)?,
                url: column(r, 1, op)?,
                live: column(r, 2, op)?,
                since_heartbeat_ms: column(r, 3, op)?,
            })
        })
        .collect()
}

impl PostgresStore {
    fn cluster_node(&self) -> (&str, i64) {
        match &self.inner.cluster {
            Some(cluster) => (
                cluster.node.as_str(),
                i64::try_from(cluster.lease_ms).unwrap_or(i64::MAX),
            ),
            None => ("", 0),
        }
    }
}

impl Leases for PostgresStore {
    fn node(&self) -> &str {
        self.cluster_node().0
    }

    fn lease_ms(&self) -> u64 {
        self.inner.cluster.as_ref().map_or(0, |c| c.lease_ms)
    }

    fn heartbeat(&self, url: &str) -> Result<Vec<NodeInfo>, StoreError> {
        let (node, lease_ms) = self.cluster_node();
        let (node, url) = (node.to_owned(), url.to_owned());
        self.run("heartbeat", move |pool| async move {
            let op = "heartbeat";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            client
                .execute(
                    "INSERT INTO cairn_nodes (node, url, lease_ms, started_at, heartbeat_at)
                     VALUES ($1, $2, $3, now(), now())
                     ON CONFLICT (node) DO UPDATE
                     SET url = excluded.url, lease_ms = excluded.lease_ms, heartbeat_at = now()",
                    &[&node, &url, &lease_ms],
                )
                .await
                .map_err(|e| classify(op, e))?;
            list_nodes(&client, op).await
        })
    }

    fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError> {
        self.run("list nodes", |pool| async move {
            let op = "list nodes";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            list_nodes(&client, op).await
        })
    }

    fn acquire(&self, workspace: &str) -> Result<Option<i64>, StoreError> {
        let (node, lease_ms) = self.cluster_node();
        let (node, space) = (node.to_owned(), workspace.to_owned());
        let token = self.run("acquire a lease", move |pool| async move {
            let op = "acquire a lease";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            // A new token even when this node held the lease already: a
            // restarted node must not share a token with its former self.
            let row = client
                .query_opt(
                    "INSERT INTO cairn_leases AS l (space, owner, token, acquired_at, expires_at)
                     VALUES ($1, $2, 1, now(), now() + $3::bigint * interval '1 millisecond')
                     ON CONFLICT (space) DO UPDATE
                     SET owner = excluded.owner, token = l.token + 1,
                         acquired_at = now(), expires_at = excluded.expires_at
                     WHERE l.expires_at <= now() OR l.owner = excluded.owner
                     RETURNING token",
                    &[&space, &node, &lease_ms],
                )
                .await
                .map_err(|e| classify(op, e))?;
            row.map(|r| column::<i64>(&r, 0, op)).transpose()
        })?;
        if let Some(token) = token {
            self.inner
                .fences
                .write()
                .insert(workspace.to_owned(), token);
        }
        Ok(token)
    }

    fn renew(&self) -> Result<Vec<String>, StoreError> {
        let held: HashMap<String, i64> = self.inner.fences.read().clone();
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let (node, lease_ms) = self.cluster_node();
        let node = node.to_owned();
        let (spaces, tokens): (Vec<String>, Vec<i64>) =
            held.iter().map(|(s, t)| (s.clone(), *t)).unzip();
        let renewed = self.run("renew leases", move |pool| async move {
            let op = "renew leases";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            let rows = client
                .query(
                    "UPDATE cairn_leases AS l
                     SET expires_at = now() + $2::bigint * interval '1 millisecond'
                     FROM unnest($3::text[], $4::bigint[]) AS h (space, token)
                     WHERE l.space = h.space AND l.token = h.token AND l.owner = $1
                     RETURNING l.space",
                    &[&node, &lease_ms, &spaces, &tokens],
                )
                .await
                .map_err(|e| classify(op, e))?;
            rows.iter()
                .map(|r| column::<String>(r, 0, op))
                .collect::<Result<Vec<_>, _>>()
        })?;
        let renewed: std::collections::HashSet<String> = renewed.into_iter().collect();
        let mut fences = self.inner.fences.write();
        let mut lost = Vec::new();
        for (space, token) in held {
            if !renewed.contains(&space) && fences.get(&space) == Some(&token) {
                fences.remove(&space);
                lost.push(space);
            }
        }
        lost.sort();
        Ok(lost)
    }

    fn release(&self, workspace: &str) -> Result<(), StoreError> {
        let Some(token) = self.inner.fences.write().remove(workspace) else {
            return Ok(());
        };
        let node = self.cluster_node().0.to_owned();
        let space = workspace.to_owned();
        self.run("release a lease", move |pool| async move {
            let op = "release a lease";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            client
                .execute(
                    "UPDATE cairn_leases SET expires_at = now()
                     WHERE space = $1 AND owner = $2 AND token = $3",
                    &[&space, &node, &token],
                )
                .await
                .map_err(|e| classify(op, e))?;
            Ok(())
        })
    }

    fn list(&self) -> Result<Vec<LeaseRow>, StoreError> {
        self.run("list leases", |pool| async move {
            let op = "list leases";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            let rows = client
                .query(
                    "SELECT space, owner, token,
                            (extract(epoch FROM expires_at - now()) * 1000)::bigint
                     FROM cairn_leases ORDER BY space COLLATE \"C\"",
                    &[],
                )
                .await
                .map_err(|e| classify(op, e))?;
            rows.iter()
                .map(|r| {
                    Ok(LeaseRow {
                        workspace: column(r, 0, op)?,
                        owner: column(r, 1, op)?,
                        token: column(r, 2, op)?,
                        expires_in_ms: column(r, 3, op)?,
                    })
                })
                .collect()
        })
    }

    fn held(&self) -> Vec<(String, i64)> {
        let mut held: Vec<(String, i64)> = self
            .inner
            .fences
            .read()
            .iter()
            .map(|(s, t)| (s.clone(), *t))
            .collect();
        held.sort();
        held
    }

    fn leave(&self) -> Result<(), StoreError> {
        let node = self.cluster_node().0.to_owned();
        self.inner.fences.write().clear();
        self.run("leave the cluster", move |pool| async move {
            let op = "leave the cluster";
            let client = pool.get().await.map_err(|e| pool_error(op, e))?;
            client
                .execute(
                    "UPDATE cairn_leases SET expires_at = now() WHERE owner = $1 AND expires_at > now()",
                    &[&node],
                )
                .await
                .map_err(|e| classify(op, e))?;
            client
                .execute("DELETE FROM cairn_nodes WHERE node = $1", &[&node])
                .await
                .map_err(|e| classify(op, e))?;
            Ok(())
        })
    }
}
