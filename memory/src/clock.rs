//! Time, behind a trait so that tests can drive it.
//!
//! Every timestamp cairn writes and every decay or trigger decision reads the
//! time through a [`Clock`]. Production uses [`SystemClock`]; tests use
//! [`ManualClock`] and move it forward explicitly.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use parking_lot::Mutex;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to. Cloning shares the same time.
///
/// ```
/// use cairn_memory::{Clock, ManualClock};
/// use chrono::{Duration, TimeZone, Utc};
///
/// let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap());
/// clock.advance(Duration::minutes(15));
/// assert_eq!(clock.now(), Utc.with_ymd_and_hms(2026, 1, 1, 9, 15, 0).unwrap());
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward (or backward, with a negative duration).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock();
        *now += by;
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock() = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock()
    }
}
