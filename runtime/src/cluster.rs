//! Several `cairn serve` nodes on one PostgreSQL database: which node
//! serves which workspace (see `docs/SCALING.md`).
//!
//! **Ownership.** A workspace, with its work contexts, sessions and
//! actors, is owned by one node at a time: the node that holds its lease
//! in the database ([`Leases`]). The lease expires unless renewed, and its
//! fencing token grows at every change of hands; every write transaction
//! checks the token, so a node that lost a lease (paused, partitioned)
//! cannot write what it no longer owns.
//!
//! **Placement.** Rendezvous hashing over the live nodes names the node
//! that *should* own each workspace: each (workspace, node) pair gets a
//! score, the highest wins. A node that joins or leaves moves only the
//! workspaces whose winner it is. Every node runs the same loop, every
//! third of a lease:
//!
//! 1. heartbeat (the node's row, with the URL others forward to), then
//!    renew its leases; a lease it could not renew is gone (its caches and
//!    actors for that workspace are dropped);
//! 2. give up the leases of workspaces another live node should own
//!    (a node joined);
//! 3. take the workspaces it should own that are free: never leased, or
//!    whose owner's lease expired (a node died). Taking one drops whatever
//!    this node had cached about it, so its actors rebuild their state
//!    from the store, as after a restart;
//! 4. give up the leases of workspaces that do not exist (erased, or a name
//!    a request was routed by that nothing was written to) once they were
//!    taken at least a lease time ago: a lease is not renewed forever for
//!    any name a client sends.
//!
//! Every turn also serves the plugins another node installed (the registry
//! is shared; see `Policies::follow_registry`).
//!
//! **Requests.** [`Cairn::route`] answers where a request about a
//! workspace is served: here, or at its owner (the HTTP server forwards
//! it there). A request for a free workspace this node should own takes
//! the lease at once rather than waiting for the loop.
//!
//! **Forwarding between nodes.** A forwarded request carries a stamp
//! ([`Cairn::forward_stamp`]): the sending node, the time, and a BLAKE3
//! MAC of both and of the request's method and target under a key derived
//! from the install secret, which the nodes share through the database and
//! clients never see. A node serves a request as forwarded (here or
//! refused, never sent on, taking a free lease even when another node
//! should own it) only when [`Cairn::forwarded_by`] accepts its stamp, so
//! a client cannot pose as a node to move leases about.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use cairn_actors::ActorRuntime;
use cairn_memory::Memory;
use cairn_memory::store::{LeaseRow, Leases, NodeInfo, StoreError};
use chrono::{DateTime, Utc};
use parking_lot::{Condvar, Mutex, RwLock};
use serde::Serialize;

use crate::error::Result;
use crate::host::Cairn;

/// Take-overs kept for [`ClusterStatus::takeovers`].
const KEPT_TAKEOVERS: usize = 256;

/// The key-derivation context of the forwarding stamps' MAC key.
const FORWARD_KEY_CONTEXT: &str = "cairn cluster forwarding v1";

/// How far a forwarding stamp's time may be from the receiver's clock, in
/// ms (nodes' clocks differ a little; a captured stamp is not good for long).
const FORWARD_STAMP_SKEW_MS: i64 = 120_000;

/// Where a request about a workspace is served.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    /// Here: this process owns the workspace (or is not in a cluster).
    Local,
    /// At another node, which owns the workspace or should take it.
    Forward {
        /// The node's id.
        node: String,
        /// Its URL (`storage.cluster.advertise`).
        url: String,
    },
}

/// A workspace this node took over from another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Takeover {
    /// The workspace.
    pub workspace: String,
    /// The node that held it before.
    pub from: String,
    /// The new fencing token.
    pub token: i64,
    /// When (this node's clock).
    pub at: DateTime<Utc>,
    /// How long the former owner's lease had been expired when this node
    /// took it, in ms (as of this node's last look at the leases).
    pub expired_ms: i64,
}

/// The cluster as one node sees it (`GET /v1/cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// This node.
    pub node: String,
    /// Where it is reached (empty until `cairn serve` listens).
    pub url: String,
    /// How long a lease lasts without renewal, in ms.
    pub lease_ms: u64,
    /// Every node the database knows, live or not.
    pub nodes: Vec<NodeInfo>,
    /// Every workspace lease.
    pub leases: Vec<LeaseRow>,
    /// The workspaces this node holds, with their fencing tokens.
    pub held: Vec<(String, i64)>,
    /// The take-overs this node made, oldest first (the last 256).
    pub takeovers: Vec<Takeover>,
}

/// The node's side of the cluster: its view of nodes and leases, and the
/// loop that keeps its leases (see the module docs).
#[derive(Clone)]
pub(crate) struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &*self.inner.url.read())
            .finish_non_exhaustive()
    }
}

struct Inner {
    memory: Memory,
    actors: ActorRuntime,
    policies: cairn_policies::Policies,
    /// Where other nodes reach this one; empty until known.
    url: RwLock<String>,
    /// The nodes and leases as of the last loop turn.
    view: RwLock<View>,
    takeovers: Mutex<VecDeque<Takeover>>,
    /// Acquisitions one at a time: two at once would bump the token twice
    /// and fence off the first one's writes.
    acquiring: Mutex<()>,
    /// When this node last took each lease it holds: a lease of a
    /// workspace that does not exist is kept one lease time after it was
    /// taken (the request that took it may be creating it), then released.
    taken_at: Mutex<HashMap<String, Instant>>,
    /// A lease time.
    lease: Duration,
    stop: AtomicBool,
    wake: (Mutex<bool>, Condvar),
}

#[derive(Default)]
struct View {
    nodes: Vec<NodeInfo>,
    leases: HashMap<String, LeaseRow>,
}

impl View {
    /// The live nodes that can be reached (they advertise a URL).
    fn live(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.iter().filter(|n| n.live && !n.url.is_empty())
    }

    fn url_of(&self, node: &str) -> Option<&str> {
        self.live().find(|n| n.node == node).map(|n| n.url.as_str())
    }
}

/// The node that should own `workspace` among `nodes`: rendezvous hashing
/// (the highest BLAKE3 score of workspace and node wins), so every node
/// that sees the same live nodes names the same owner, and a node that
/// comes or goes changes the winner only of the workspaces it wins.
pub(crate) fn placement<'a>(
    workspace: &str,
    nodes: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    nodes.into_iter().max_by_key(|node| {
        let mut hasher = blake3::Hasher::new();
        hasher.update(workspace.as_bytes());
        hasher.update(&[0]);
        hasher.update(node.as_bytes());
        let hash = hasher.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        (u64::from_be_bytes(first), *node)
    })
}

impl Cluster {
    /// The cluster side of a node, when `memory`'s store is shared by a
    /// cluster; starts its loop.
    pub(crate) fn start(
        memory: &Memory,
        actors: &ActorRuntime,
        policies: &cairn_policies::Policies,
        url: &str,
    ) -> Option<Cluster> {
        let leases = memory.leases()?;
        let period = Duration::from_millis((leases.lease_ms() / 3).max(50));
        let cluster = Cluster {
            inner: Arc::new(Inner {
                memory: memory.clone(),
                actors: actors.clone(),
                policies: policies.clone(),
                url: RwLock::new(url.to_owned()),
                view: RwLock::new(View::default()),
                takeovers: Mutex::new(VecDeque::new()),
                acquiring: Mutex::new(()),
                taken_at: Mutex::new(HashMap::new()),
                lease: Duration::from_millis(leases.lease_ms()),
                stop: AtomicBool::new(false),
                wake: (Mutex::new(false), Condvar::new()),
            }),
        };
        let weak = Arc::downgrade(&cluster.inner);
        let spawned = std::thread::Builder::new()
            .name("cairn-cluster".to_owned())
            .spawn(move || run(weak, period));
        if let Err(error) = spawned {
            tracing::error!(%error, "cluster: cannot start the lease loop");
        }
        Some(cluster)
    }

    fn leases(&self) -> Option<&dyn Leases> {
        self.inner.memory.leases()
    }

    /// Sets the URL other nodes forward to, and heartbeats at once.
    pub(crate) fn advertise(&self, url: &str) {
        *self.inner.url.write() = url.to_owned();
        self.nudge();
    }

    /// Runs a loop turn now.
    fn nudge(&self) {
        let (flag, condvar) = &self.inner.wake;
        *flag.lock() = true;
        condvar.notify_all();
    }

    /// One loop turn (see the module docs).
    fn tick(&self) -> std::result::Result<(), StoreError> {
        let Some(leases) = self.leases() else {
            return Ok(());
        };
        let url = self.inner.url.read().clone();
        if url.is_empty() {
            // Not reachable yet: own nothing, so nothing is sent here.
            return Ok(());
        }
        let nodes = leases.heartbeat(&url)?;
        if let Err(error) = self.inner.policies.follow_registry() {
            tracing::warn!(%error, "cluster: following the plugin registry failed; retried next turn");
        }
        for workspace in leases.renew()? {
            tracing::warn!(%workspace, "cluster: lease lost (taken over while this node could not renew it)");
            self.dropped(&workspace);
        }
        let rows: HashMap<String, LeaseRow> = leases
            .list()?
            .into_iter()
            .map(|row| (row.workspace.clone(), row))
            .collect();
        {
            let mut view = self.inner.view.write();
            view.nodes = nodes;
            view.leases = rows;
        }
        let me = leases.node().to_owned();
        let workspaces = self.inner.memory.workspaces().map_err(|e| match e {
            cairn_memory::MemoryError::Store(e) => e,
            other => StoreError::Config(other.to_string()),
        })?;
        self.release_absent(leases, &workspaces)?;
        for workspace in workspaces {
            let (should, row) = {
                let view = self.inner.view.read();
                let should =
                    placement(&workspace, view.live().map(|n| n.node.as_str())).map(str::to_owned);
                (should, view.leases.get(&workspace).cloned())
            };
            let held = self.inner.memory.serves(&workspace);
            match should {
                Some(should) if held && should != me => {
                    // A node joined that should own it: hand it over.
                    leases.release(&workspace)?;
                    self.dropped(&workspace);
                    tracing::info!(%workspace, to = %should, "cluster: workspace handed over");
                }
                Some(should) if !held && should == me => {
                    let owned_elsewhere = row
                        .as_ref()
                        .is_some_and(|r| r.current() && r.owner != me && self.is_live(&r.owner));
                    if !owned_elsewhere {
                        self.take(&workspace, row.as_ref())?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Gives up the leases this node holds of workspaces that are not in
    /// `existing` (sorted), once taken at least a lease time ago: erased
    /// workspaces, and names requests were routed by that nothing was
    /// written to.
    fn release_absent(
        &self,
        leases: &dyn Leases,
        existing: &[String],
    ) -> std::result::Result<(), StoreError> {
        for (workspace, _) in leases.held() {
            if existing.binary_search(&workspace).is_ok() {
                continue;
            }
            let recent = self
                .inner
                .taken_at
                .lock()
                .get(&workspace)
                .is_some_and(|at| at.elapsed() < self.inner.lease);
            if recent {
                continue;
            }
            leases.release(&workspace)?;
            self.inner.taken_at.lock().remove(&workspace);
            self.dropped(&workspace);
            tracing::debug!(%workspace, "cluster: lease of a workspace that does not exist released");
        }
        Ok(())
    }

    fn is_live(&self, node: &str) -> bool {
        self.inner.view.read().url_of(node).is_some()
    }

    /// Takes `workspace`'s lease if it is free; `true` when this node holds
    /// it afterwards.
    fn take(
        &self,
        workspace: &str,
        before: Option<&LeaseRow>,
    ) -> std::result::Result<bool, StoreError> {
        let Some(leases) = self.leases() else {
            return Ok(true);
        };
        let _one = self.inner.acquiring.lock();
        if self.inner.memory.serves(workspace) {
            return Ok(true);
        }
        // Whatever this node knew of the workspace may be stale now.
        self.dropped(workspace);
        let Some(token) = leases.acquire(workspace)? else {
            return Ok(false);
        };
        {
            let mut taken_at = self.inner.taken_at.lock();
            // Only the leases held now are worth remembering.
            if taken_at.len() > 4 * leases.held().len() + 64 {
                let held: std::collections::HashSet<String> =
                    leases.held().into_iter().map(|(w, _)| w).collect();
                taken_at.retain(|w, _| held.contains(w));
            }
            taken_at.insert(workspace.to_owned(), Instant::now());
        }
        if let Some(before) = before.filter(|b| b.owner != leases.node()) {
            tracing::info!(
                %workspace, from = %before.owner, token,
                "cluster: workspace taken over"
            );
            let mut kept = self.inner.takeovers.lock();
            if kept.len() == KEPT_TAKEOVERS {
                kept.pop_front();
            }
            kept.push_back(Takeover {
                workspace: workspace.to_owned(),
                from: before.owner.clone(),
                token,
                at: Utc::now(),
                expired_ms: before.expires_in_ms.saturating_neg().max(0),
            });
        }
        Ok(true)
    }

    /// Forgets what this node cached about `workspace` (log snapshot,
    /// actors): it is not, or was not, the only writer.
    fn dropped(&self, workspace: &str) {
        self.inner.memory.evict(workspace);
        self.inner.actors.forget_workspace(workspace);
    }

    /// The leases to ask about `workspace`; `None` when this node serves it
    /// by its own view (no leases, or a lease it holds), known without a
    /// read of the lease store.
    fn leases_to_ask(&self, workspace: &str) -> Option<&dyn Leases> {
        self.leases()
            .filter(|_| !self.inner.memory.serves(workspace))
    }

    /// Where a request about `workspace` is served (see [`Cairn::route`]).
    fn route(&self, workspace: &str, forwarded: bool) -> std::result::Result<Route, StoreError> {
        let Some(leases) = self.leases_to_ask(workspace) else {
            return Ok(Route::Local);
        };
        let me = leases.node().to_owned();
        let not_owner = || StoreError::NotOwner {
            workspace: workspace.to_owned(),
            node: me.clone(),
        };
        let (owner, should, row) = {
            let view = self.inner.view.read();
            let row = view.leases.get(workspace).cloned();
            let owner = row
                .as_ref()
                .filter(|r| r.current() && r.owner != me)
                .and_then(|r| {
                    view.url_of(&r.owner)
                        .map(|url| (r.owner.clone(), url.to_owned()))
                });
            let mut candidates: Vec<&str> = view.live().map(|n| n.node.as_str()).collect();
            if !candidates.contains(&me.as_str()) {
                candidates.push(&me);
            }
            let should = placement(workspace, candidates).map(|node| {
                (
                    node.to_owned(),
                    view.url_of(node).unwrap_or_default().to_owned(),
                )
            });
            (owner, should, row)
        };
        if let Some((node, url)) = owner {
            // Owned by a live node: its business (a forwarded request that
            // lands here went by a stale view: the sender retries).
            return if forwarded {
                Err(not_owner())
            } else {
                Ok(Route::Forward { node, url })
            };
        }
        match should {
            Some((node, url)) if node != me && !forwarded && !url.is_empty() => {
                Ok(Route::Forward { node, url })
            }
            _ => {
                if self.inner.url.read().is_empty() {
                    return Err(not_owner());
                }
                if self.take(workspace, row.as_ref())? {
                    Ok(Route::Local)
                } else {
                    Err(not_owner())
                }
            }
        }
    }

    fn status(&self) -> std::result::Result<Option<ClusterStatus>, StoreError> {
        let Some(leases) = self.leases() else {
            return Ok(None);
        };
        let url = self.inner.url.read().clone();
        Ok(Some(ClusterStatus {
            node: leases.node().to_owned(),
            url,
            lease_ms: leases.lease_ms(),
            nodes: self.inner.view.read().nodes.clone(),
            leases: leases.list()?,
            held: leases.held(),
            takeovers: self.inner.takeovers.lock().iter().cloned().collect(),
        }))
    }

    /// Leaves the cluster: the loop stops, every lease is released at once.
    fn leave(&self) -> std::result::Result<(), StoreError> {
        self.inner.stop.store(true, Ordering::Release);
        self.nudge();
        let Some(leases) = self.leases() else {
            return Ok(());
        };
        for (workspace, _) in leases.held() {
            self.dropped(&workspace);
        }
        leases.leave()
    }
}

/// The lease loop: a turn every `period` (or when nudged) until the node
/// leaves or every handle on it is gone.
fn run(weak: Weak<Inner>, period: Duration) {
    let Some(supervised) = weak
        .upgrade()
        .map(|inner| inner.memory.workers().worker("cluster-leases"))
    else {
        return;
    };
    supervised.set_running(true);
    loop {
        let Some(inner) = weak.upgrade() else {
            break;
        };
        if inner.stop.load(Ordering::Acquire) {
            break;
        }
        let cluster = Cluster { inner };
        // A panic in a turn is caught and counted; the next turn runs.
        if let Some(Err(error)) = supervised.pass(|| cluster.tick()) {
            tracing::warn!(%error, "cluster: lease loop turn failed; retried next turn");
        }
        let inner = cluster.inner;
        let (flag, condvar) = &inner.wake;
        let mut woken = flag.lock();
        if !*woken {
            condvar.wait_for(&mut woken, period);
        }
        *woken = false;
    }
    supervised.set_running(false);
}

/// The host of `url` when it is an unspecified address (`0.0.0.0`, `::`).
pub(crate) fn unspecified_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host.parse::<std::net::IpAddr>()
        .ok()
        .filter(std::net::IpAddr::is_unspecified)
        .map(|ip| ip.to_string())
}

impl Cairn {
    /// Where a request about `workspace` is served: [`Route::Local`] when
    /// this process is not in a cluster or owns the workspace, else the
    /// node that owns it (or should take it). A free workspace this node
    /// should own is taken now. `forwarded` says another node already sent
    /// the request here: it is then served here or refused (an
    /// `unavailable` error, retryable), never sent on, so a request never
    /// goes round in circles while nodes' views differ.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Route};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// assert_eq!(cairn.route("acme", false)?, Route::Local); // one process: always here
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn route(&self, workspace: &str, forwarded: bool) -> Result<Route> {
        cairn_memory::ids::validate_id("workspace id", workspace)?;
        match &self.cluster {
            Some(cluster) => Ok(cluster
                .route(workspace, forwarded)
                .map_err(cairn_memory::MemoryError::from)?),
            None => Ok(Route::Local),
        }
    }

    /// [`Cairn::route`] when it is known without waiting on storage:
    /// `Some(Route::Local)` outside a cluster or for a workspace this node
    /// already serves; `None` when only [`Cairn::route`] can tell (it may
    /// take a lease, a write to the cluster's store). A server asks this
    /// first on its request thread and hands the rest to a thread that may
    /// block.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig, Route};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// assert_eq!(cairn.route_now("acme")?, Some(Route::Local));
    /// assert!(cairn.route_now("not an id").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn route_now(&self, workspace: &str) -> Result<Option<Route>> {
        cairn_memory::ids::validate_id("workspace id", workspace)?;
        match &self.cluster {
            Some(cluster) if cluster.leases_to_ask(workspace).is_some() => Ok(None),
            _ => Ok(Some(Route::Local)),
        }
    }

    /// The cluster as this node sees it; `None` outside a cluster.
    pub fn cluster_status(&self) -> Result<Option<ClusterStatus>> {
        match &self.cluster {
            Some(cluster) => Ok(cluster.status().map_err(cairn_memory::MemoryError::from)?),
            None => Ok(None),
        }
    }

    /// Tells the cluster where this node is reached (`cairn serve` calls it
    /// with its listening address when `storage.cluster.advertise` is
    /// empty). Until then the node takes no workspace. An unspecified
    /// address (`0.0.0.0`, `::`), which no other node can reach, is refused
    /// with a configuration error naming `storage.cluster.advertise`.
    ///
    /// ```
    /// use cairn::{Cairn, CairnConfig};
    /// let dir = tempfile::tempdir()?;
    /// let cairn = Cairn::open(CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() })?;
    /// cairn.advertise("http://0.0.0.0:7878")?; // not in a cluster: nothing to tell
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn advertise(&self, url: &str) -> Result<()> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        if let Some(host) = unspecified_host(url) {
            return Err(crate::error::CairnError::Config(format!(
                "this node would advertise {url}, but {host} is an unspecified address that no \
                 other node can reach: set storage.cluster.advertise \
                 (CAIRN_STORAGE__CLUSTER__ADVERTISE) to the URL the other nodes reach this one \
                 at, or listen on a specific address"
            )));
        }
        cluster.advertise(url);
        Ok(())
    }

    /// The stamp a request this node forwards to another carries (the value
    /// of `x-cairn-forwarded-by`): this node's id, the time, and a MAC of
    /// both, `method` and `target` (the path and query) under the cluster's
    /// forwarding key. `None` outside a cluster.
    pub fn forward_stamp(&self, method: &str, target: &str) -> Option<String> {
        let leases = self.cluster.as_ref()?.leases()?;
        let node = leases.node();
        let at = Utc::now().timestamp_millis();
        let mac = self.forward_mac(node, at, method, target);
        Some(format!("{node} {at} {mac}"))
    }

    /// The node that forwarded a request, when `stamp` (its
    /// `x-cairn-forwarded-by`) was made by a node of this cluster for this
    /// `method` and `target` within the last two minutes; `None` for
    /// anything else (a client posing as a node, a stamp of another request,
    /// an old one), and always outside a cluster.
    pub fn forwarded_by(&self, stamp: &str, method: &str, target: &str) -> Option<String> {
        self.cluster.as_ref()?.leases()?;
        let mut parts = stamp.split(' ');
        let (node, at, mac) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || node.is_empty() || node.len() > 48 {
            return None;
        }
        let at: i64 = at.parse().ok()?;
        if (Utc::now().timestamp_millis() - at).abs() > FORWARD_STAMP_SKEW_MS {
            return None;
        }
        let expected = self.forward_mac(node, at, method, target);
        let same = expected.len() == mac.len()
            && expected
                .bytes()
                .zip(mac.bytes())
                .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                == 0;
        same.then(|| node.to_owned())
    }

    fn forward_mac(&self, node: &str, at: i64, method: &str, target: &str) -> String {
        let key = self.memory().derive_key(FORWARD_KEY_CONTEXT);
        let mut mac = blake3::Hasher::new_keyed(&key);
        for part in [node, &at.to_string(), method, target] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part.as_bytes());
        }
        mac.finalize().to_hex().to_string()
    }

    /// Leaves the cluster (a graceful stop): releases every lease now, so
    /// the other nodes take this node's workspaces at their next turn
    /// instead of after the leases expire. Nothing outside a cluster.
    pub fn leave_cluster(&self) -> Result<()> {
        if let Some(cluster) = &self.cluster {
            cluster.leave().map_err(cairn_memory::MemoryError::from)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{placement, unspecified_host};

    #[test]
    fn unspecified_addresses_are_told_apart() {
        assert_eq!(
            unspecified_host("http://0.0.0.0:7878").as_deref(),
            Some("0.0.0.0")
        );
        assert_eq!(
            unspecified_host("https://[::]:7878/").as_deref(),
            Some("::")
        );
        for reachable in [
            "http://10.0.0.5:7878",
            "http://[::1]:1",
            "http://node-1:7878",
            "",
        ] {
            assert_eq!(unspecified_host(reachable), None, "{reachable}");
        }
    }

    #[test]
    fn placement_moves_only_the_share_of_a_node_that_leaves() {
        let three = ["n1", "n2", "n3"];
        let two = ["n1", "n3"];
        let mut moved = 0;
        let mut won_by_n2 = 0;
        for i in 0..300 {
            let ws = format!("ws-{i}");
            let before = placement(&ws, three).unwrap_or_default();
            let after = placement(&ws, two).unwrap_or_default();
            if before == "n2" {
                won_by_n2 += 1;
            }
            if before != after {
                moved += 1;
                assert_eq!(
                    before, "n2",
                    "{ws} moved from {before}, which did not leave"
                );
            }
        }
        assert_eq!(moved, won_by_n2);
        // Each of three nodes wins about a third.
        assert!((60..140).contains(&won_by_n2), "n2 won {won_by_n2} of 300");
    }

    #[test]
    fn placement_is_the_same_whatever_the_order_of_the_nodes() {
        for i in 0..50 {
            let ws = format!("ws-{i}");
            assert_eq!(
                placement(&ws, ["a", "b", "c"]),
                placement(&ws, ["c", "a", "b"])
            );
        }
        assert_eq!(placement("ws", std::iter::empty()), None);
    }
}
