//! The host API: what a gateway calls, named after a gateway's
//! context-engine hooks.

use std::sync::Arc;

use cairn_memory::{
    Ack, AssembleRequest, AssembledContext, Clock, Memory, Session, SessionSpec, SessionState,
    SystemClock, TurnInput, Workspace,
};
use serde::{Deserialize, Serialize};

use crate::config::CairnConfig;
use crate::error::Result;

/// What `gateway_start` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GatewayStartReport {
    /// Workspaces in the store.
    pub workspaces: Vec<String>,
    /// Sessions left open by the previous run, as `(workspace, session)`.
    pub open_sessions: Vec<OpenSession>,
}

/// A session that was still open when the gateway (re)started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OpenSession {
    /// Workspace.
    pub workspace: String,
    /// Session id.
    pub session: String,
    /// Its work context.
    pub work_context: String,
    /// Turns it holds.
    pub turns: u64,
}

/// cairn, embedded: one per process, cheap to clone.
///
/// ```
/// use cairn::{Cairn, CairnConfig, Role, TurnInput};
///
/// let dir = tempfile::tempdir()?;
/// let config = CairnConfig { data_dir: dir.path().to_owned(), ..CairnConfig::default() };
/// let cairn = Cairn::open(config)?;
/// cairn.bootstrap("acme", &cairn::SessionSpec { id: "s1".into(), ..Default::default() })?;
/// let acks = cairn.ingest("acme", &[TurnInput::new("s1", Role::User, "Ship it Friday.")])?;
/// assert_eq!(acks[0].seq, 0);
/// let block = cairn.assemble("acme", &cairn::AssembleRequest { session: "s1".into(), budget_tokens: 100 })?;
/// assert!(block.text.contains("Ship it Friday."));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cairn {
    memory: Memory,
    config: Arc<CairnConfig>,
}

impl Cairn {
    /// Opens cairn on `config.data_dir` with the system clock.
    pub fn open(config: CairnConfig) -> Result<Self> {
        Cairn::open_with_clock(config, Arc::new(SystemClock))
    }

    /// Opens cairn with a clock of the caller's (tests drive a `ManualClock`).
    pub fn open_with_clock(config: CairnConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let memory = Memory::open_sled(&config.data_dir, config.memory.clone(), clock)?;
        tracing::info!(data_dir = %config.data_dir.display(), "cairn opened");
        Ok(Cairn {
            memory,
            config: Arc::new(config),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &CairnConfig {
        &self.config
    }

    /// The memory core, for log, subject and forget operations.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// A workspace handle (created on first use).
    pub fn workspace(&self, workspace: &str) -> Result<Workspace> {
        Ok(self.memory.workspace(workspace)?)
    }

    /// Hook `bootstrap`: a session starts. Creates it (durably) or returns it.
    pub fn bootstrap(&self, workspace: &str, spec: &SessionSpec) -> Result<Session> {
        Ok(self.workspace(workspace)?.ensure_session(spec)?)
    }

    /// Hook `ingest`: appends turns; acknowledged only once durable.
    pub fn ingest(&self, workspace: &str, turns: &[TurnInput]) -> Result<Vec<Ack>> {
        Ok(self.workspace(workspace)?.append_turns(turns)?)
    }

    /// Hook `after_turn`: a model turn completed. Returns the session's state.
    ///
    /// In this release the hook only reads; capture triggers hang off it once
    /// the actor runtime lands.
    pub fn after_turn(&self, workspace: &str, session: &str) -> Result<Session> {
        Ok(self.workspace(workspace)?.session(session)?)
    }

    /// Hook `session_end`: marks the session ended (idempotent, durable).
    pub fn session_end(&self, workspace: &str, session: &str) -> Result<Session> {
        Ok(self.workspace(workspace)?.end_session(session)?)
    }

    /// Hook `before_reset`: the host is about to reset the session's context.
    /// Records the reset; the transcript is kept.
    pub fn before_reset(&self, workspace: &str, session: &str) -> Result<Session> {
        Ok(self.workspace(workspace)?.record_reset(session)?)
    }

    /// Hook `gateway_start`: the gateway (re)started. Reports the workspaces
    /// and the sessions the previous run left open.
    pub fn gateway_start(&self) -> Result<GatewayStartReport> {
        let workspaces = self.memory.workspaces()?;
        let mut open_sessions = Vec::new();
        for ws in &workspaces {
            for session in self.memory.workspace(ws)?.sessions(None)? {
                if session.state == SessionState::Open {
                    open_sessions.push(OpenSession {
                        workspace: ws.clone(),
                        session: session.id,
                        work_context: session.work_context,
                        turns: session.next_seq,
                    });
                }
            }
        }
        Ok(GatewayStartReport {
            workspaces,
            open_sessions,
        })
    }

    /// Hook `assemble`: the memory block for the next model call.
    pub fn assemble(&self, workspace: &str, request: &AssembleRequest) -> Result<AssembledContext> {
        Ok(self.workspace(workspace)?.assemble(request)?)
    }
}
