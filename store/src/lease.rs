//! Workspace ownership in a cluster: the seam between the store that keeps
//! the leases (PostgreSQL) and the runtime that decides which node should
//! own what (`cairn::Cairn`'s cluster loop, `docs/SCALING.md`).
//!
//! A **lease** says which node owns a workspace (its work contexts,
//! sessions and actors) until it expires; it carries a **fencing token**
//! that grows by one every time the lease changes hands. The owner writes
//! with its token, and every write transaction checks that the token is
//! still the workspace's, so a node that was paused past its lease and
//! wakes up after a take-over cannot write: its token is stale.

use crate::StoreError;

/// A node of the cluster, as the store last saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeInfo {
    /// The node's id (`storage.cluster.node`).
    pub node: String,
    /// Where other nodes forward its requests (`storage.cluster.advertise`).
    pub url: String,
    /// True while its heartbeat is younger than its lease time.
    pub live: bool,
    /// Milliseconds since its last heartbeat (the database's clock).
    pub since_heartbeat_ms: i64,
}

/// A workspace's lease, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseRow {
    /// The workspace.
    pub workspace: String,
    /// The node that holds (or last held) it.
    pub owner: String,
    /// The fencing token: one more at every change of hands.
    pub token: i64,
    /// Milliseconds until it expires (negative: expired that long ago).
    pub expires_in_ms: i64,
}

impl LeaseRow {
    /// True while the lease has not expired.
    pub fn current(&self) -> bool {
        self.expires_in_ms > 0
    }
}

/// The leases of a cluster, seen from one node. Every call is one short
/// transaction on the database's clock (no node's clock is trusted).
pub trait Leases: Send + Sync + std::fmt::Debug {
    /// This node's id.
    fn node(&self) -> &str;

    /// How long a lease lasts without renewal, in ms.
    fn lease_ms(&self) -> u64;

    /// Records this node alive, reachable at `url`, and answers every node
    /// the store knows, live or not, sorted by id.
    fn heartbeat(&self, url: &str) -> Result<Vec<NodeInfo>, StoreError>;

    /// Every node the store knows, live or not, sorted by id (a read only).
    fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError>;

    /// Takes `workspace`'s lease if it is free, expired, or already this
    /// node's, with a new fencing token; from then on this node's writes to
    /// the workspace carry that token. `None` while another node holds a
    /// current lease.
    fn acquire(&self, workspace: &str) -> Result<Option<i64>, StoreError>;

    /// Extends every lease this node holds; answers the workspaces whose
    /// lease it lost (taken over while it could not renew), which it no
    /// longer writes.
    fn renew(&self) -> Result<Vec<String>, StoreError>;

    /// Gives `workspace`'s lease up now (it expires at once; the token
    /// stays, so the next owner's is greater).
    fn release(&self, workspace: &str) -> Result<(), StoreError>;

    /// Every lease in the store, sorted by workspace.
    fn list(&self) -> Result<Vec<LeaseRow>, StoreError>;

    /// The workspaces this node holds, with their tokens.
    fn held(&self) -> Vec<(String, i64)>;

    /// Leaves the cluster: releases every lease and removes this node's
    /// row, so the others take its workspaces at once.
    fn leave(&self) -> Result<(), StoreError>;
}
