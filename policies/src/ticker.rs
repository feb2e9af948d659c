//! The epoch ticker: the one thread per [`PolicyHost`](crate::PolicyHost)
//! that advances its engine's epoch, which is what bounds every plugin call
//! in wall-clock time.
//!
//! # How a call is bounded in time
//!
//! The engine is built with epoch interruption: compiled guest code checks,
//! at every function entry and loop back-edge, the engine's epoch counter
//! against its store's deadline, and traps (`Trap::Interrupt`) once the
//! counter reaches it. This thread increments the counter every
//! [`HostConfig::epoch_tick`](crate::HostConfig::epoch_tick); before each
//! instantiation and each call the slot sets the store's deadline to the
//! current epoch plus the call's [`Limits::deadline`](crate::Limits::deadline)
//! in ticks (rounded up, plus one tick, since the next tick may come at
//! once). So a call is stopped between its deadline and one tick after it,
//! give or take the thread's scheduling. Fuel still bounds the work; the
//! deadline bounds work whose time is not proportional to its fuel.
//!
//! # Threads, shutdown, supervision
//!
//! The thread is spawned by [`PolicyHost::new`](crate::PolicyHost::new) and
//! owned by the host: dropping the last clone of the host stops and joins
//! it (it parks between ticks, so it wakes at once). Hot swaps do not touch
//! it: every generation of every slot shares the engine and its epoch.
//!
//! A panic in a tick is caught, logged and counted ([`TickerStatus`]), and
//! the thread carries on ticking: a ticker that died would silently turn
//! every deadline off.
//!
//! # The epoch follows the clock
//!
//! Ticks are due on a fixed grid from the thread's start, and a wake-up
//! makes every tick due by then: a thread that wakes late (timer slack, a
//! busy machine) catches up at once instead of stretching every deadline
//! by its lateness (measured before this: a 100 ms deadline stopped a call
//! after about 200 ms on a loaded two-core machine). The other side of it:
//! a deadline set while the thread is late by more than the one spare tick
//! can end that much early.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The state of a host's epoch ticker, for health checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TickerStatus {
    /// Whether the thread is running (it stops only when its host is
    /// dropped).
    pub running: bool,
    /// Ticks made since the host started.
    pub ticks: u64,
    /// Ticks that panicked (caught and logged; the thread went on).
    pub panics: u64,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    ticks: AtomicU64,
    panics: AtomicU64,
}

/// A supervised thread that calls `tick` every `period` until dropped.
pub(crate) struct Ticker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts the thread. `name` names it (for debuggers and panics).
    pub(crate) fn spawn(
        name: &str,
        period: Duration,
        mut tick: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Ticker> {
        let shared = Arc::new(Shared::default());
        let state = shared.clone();
        let thread = thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let started = Instant::now();
                let period_ns = period.as_nanos().max(1);
                // Ticks made so far (each one call of `tick`).
                let mut made: u128 = 0;
                while !state.stop.load(Ordering::Acquire) {
                    let due = started.elapsed().as_nanos() / period_ns;
                    if made >= due {
                        // Parks until the next tick is due; a spurious or
                        // early wake-up finds nothing due and parks again.
                        let next = (made + 1) * period_ns;
                        let wait = next.saturating_sub(started.elapsed().as_nanos());
                        thread::park_timeout(Duration::from_nanos(
                            u64::try_from(wait).unwrap_or(u64::MAX),
                        ));
                        continue;
                    }
                    // Every tick due, so the epoch follows the clock.
                    while made < due {
                        made += 1;
                        match catch_unwind(AssertUnwindSafe(&mut tick)) {
                            Ok(()) => {
                                state.ticks.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(panic) => {
                                state.panics.fetch_add(1, Ordering::Relaxed);
                                tracing::error!(
                                    panic = panic_message(panic.as_ref()),
                                    "the plugin deadline ticker panicked; it keeps ticking"
                                );
                            }
                        }
                    }
                }
            })?;
        Ok(Ticker {
            shared,
            thread: Some(thread),
        })
    }

    pub(crate) fn status(&self) -> TickerStatus {
        TickerStatus {
            running: self.thread.as_ref().is_some_and(|t| !t.is_finished()),
            ticks: self.shared.ticks.load(Ordering::Relaxed),
            panics: self.shared.panics.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // The loop catches every panic of a tick, so the join only
            // waits for the thread to see the flag.
            if thread.join().is_err() {
                tracing::error!("the plugin deadline ticker ended with a panic");
            }
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(not a string)"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn a_panicking_tick_is_caught_counted_and_the_ticker_goes_on() {
        let (sent, ticked) = mpsc::channel();
        let mut n = 0u32;
        let ticker = Ticker::spawn("test-ticker", Duration::from_millis(1), move || {
            n += 1;
            let _ = sent.send(n);
            if n == 2 {
                panic!("tick {n} fails");
            }
        })
        .unwrap();
        // Ticks 1 to 5 arrive: the panic in the second did not end the
        // thread.
        for expected in 1..=5 {
            let got = ticked.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(got, expected);
        }
        let status = ticker.status();
        assert!(status.running);
        assert_eq!(status.panics, 1);
        assert!(status.ticks >= 3, "{status:?}");
    }

    #[test]
    fn dropping_the_ticker_stops_its_thread() {
        let (sent, ticked) = mpsc::channel();
        let ticker = Ticker::spawn("test-ticker", Duration::from_secs(3600), move || {
            let _ = sent.send(());
        })
        .unwrap();
        assert!(ticker.status().running);
        // Parked for an hour: the drop wakes and joins it at once.
        drop(ticker);
        assert_eq!(
            ticked.recv_timeout(Duration::from_secs(10)),
            Err(mpsc::RecvTimeoutError::Disconnected),
            "the closure (and the thread holding it) is gone, no tick made"
        );
    }
}
