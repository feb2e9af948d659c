//! Fault injection for tests: panics and failures at named points.
//!
//! Hidden from the docs; production code never arms a fault. The check on the
//! hot path is one relaxed atomic load when nothing is armed.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// A fault to inject once, at the next matching point.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The session actor panics after the durable write, before it answers.
    PanicSessionAfterWrite {
        /// Workspace.
        workspace: String,
        /// Session.
        session: String,
    },
    /// The work-context actor panics while it takes note of new turns.
    PanicContextObserve {
        /// Workspace.
        workspace: String,
        /// Work context.
        work_context: String,
    },
    /// A capture panics after appending its entries, before recording its
    /// high-water mark (the crash window of a capture).
    PanicCaptureAfterEntries {
        /// Workspace.
        workspace: String,
        /// Work context.
        work_context: String,
    },
    /// The topic watcher panics while it judges a turn (once; the retry
    /// after the restart goes through).
    PanicTopicWatcher {
        /// Workspace.
        workspace: String,
        /// Topic name.
        topic: String,
    },
    /// A session-level extraction fails with an error.
    FailExtraction {
        /// Workspace.
        workspace: String,
        /// Session.
        session: String,
    },
    /// The session's next durable write sleeps first (on the blocking pool).
    StallWrite {
        /// Workspace.
        workspace: String,
        /// Session.
        session: String,
        /// How long.
        millis: u64,
    },
}

#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: AtomicBool,
    faults: Mutex<Vec<Fault>>,
}

impl Faults {
    pub(crate) fn arm(&self, fault: Fault) {
        self.faults.lock().push(fault);
        self.armed.store(true, Ordering::Release);
    }

    /// Removes and returns the first armed fault `matches` accepts.
    pub(crate) fn take(&self, matches: impl Fn(&Fault) -> bool) -> Option<Fault> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut faults = self.faults.lock();
        let index = faults.iter().position(matches)?;
        let fault = faults.remove(index);
        if faults.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
        Some(fault)
    }
}
