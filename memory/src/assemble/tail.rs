//! The recent tail's turns, read from the newest back only as far as the
//! assembly asks.
//!
//! A tail rarely needs more than a few dozen turns, while a long session has
//! hundreds; reading (and decoding) [`MAX_TAIL_CANDIDATES`] turns for every
//! assembly made the cost of an assembly grow with the session. [`Tail`]
//! reads a first few turns and then doubles what it holds each time a step
//! asks past them: the estimate ahead of the policy call, the minimum tail,
//! a tool result whose call is older, or the tail extension. Every step sees
//! the turns it would have seen with all of them read at once.
//!
//! Turns are addressed by *age*: 0 is the newest turn, 1 the one before it.
//! An age never changes when older turns are read, so a step can read more
//! in the middle of a walk.

use crate::error::Result;
use crate::memory::Workspace;
use crate::record::{Role, Session, Turn};

/// Turns read for the tail at most (the rest of the session is reachable
/// through the projection).
pub(super) const MAX_TAIL_CANDIDATES: u64 = 256;

/// Turns in the first read; each later read adds as many as are held.
pub(super) const FIRST_READ_TURNS: u64 = 16;

#[cfg(not(test))]
fn first_read() -> u64 {
    FIRST_READ_TURNS
}

#[cfg(test)]
thread_local! {
    /// The first read's size in tests: 1 makes every step read more on its
    /// own, [`MAX_TAIL_CANDIDATES`] reads everything at once.
    pub(super) static FIRST_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(FIRST_READ_TURNS) };
}

#[cfg(test)]
fn first_read() -> u64 {
    FIRST_READ.with(std::cell::Cell::get)
}

/// A session's newest turns, newest first, read on demand.
pub(super) struct Tail<'w> {
    ws: &'w Workspace,
    session: String,
    /// Newest first: `turns[age]`.
    turns: Vec<Turn>,
    /// The lowest sequence number the tail reads: the compacted turns (in
    /// the block as summaries) and those past the candidates cap are not.
    floor: u64,
    /// Everything from here up is read.
    read_from: u64,
}

impl<'w> Tail<'w> {
    /// The first few turns of `session` from its newest, none below
    /// `covered_to`.
    pub(super) fn read(ws: &'w Workspace, session: &Session, covered_to: u64) -> Result<Self> {
        let mut tail = Tail {
            ws,
            session: session.id.clone(),
            turns: Vec::new(),
            floor: covered_to.max(session.next_seq.saturating_sub(MAX_TAIL_CANDIDATES)),
            read_from: session.next_seq,
        };
        tail.grow()?;
        Ok(tail)
    }

    /// The turns read so far, newest first.
    pub(super) fn held(&self) -> &[Turn] {
        &self.turns
    }

    /// The turn of `age` (0: the newest), reading older turns if it is not
    /// read yet; `None` past the oldest the tail may read.
    pub(super) fn get(&mut self, age: usize) -> Result<Option<&Turn>> {
        while age >= self.turns.len() {
            if !self.grow()? {
                return Ok(None);
            }
        }
        Ok(self.turns.get(age))
    }

    /// Reads older turns: as many as are held (at least the first read's
    /// size), more while a range holds none (erased turns). False when
    /// there is nothing older to read.
    fn grow(&mut self) -> Result<bool> {
        while self.read_from > self.floor {
            let want = (self.turns.len() as u64).max(first_read());
            let from = self.read_from.saturating_sub(want).max(self.floor);
            let below = self.read_from;
            let older = self
                .ws
                .transcript(&self.session, from, Some((below - from) as usize))?;
            self.read_from = from;
            let before = self.turns.len();
            self.turns
                .extend(older.into_iter().rev().filter(|t| t.seq < below));
            if self.turns.len() > before {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The age of the call the tool result of `age` answers, reading older
    /// turns until it is found or there are none.
    pub(super) fn call_of(&mut self, age: usize) -> Result<Option<usize>> {
        let Some(t) = self.turns.get(age) else {
            return Ok(None);
        };
        if t.role != Role::Tool {
            return Ok(None);
        }
        let Some(id) = t.tool_call_id.clone() else {
            return Ok(None);
        };
        let mut searched = age + 1;
        loop {
            if let Some(i) = self.turns[searched..]
                .iter()
                .position(|c| c.role != Role::Tool && c.tool_call_id.as_ref() == Some(&id))
            {
                return Ok(Some(searched + i));
            }
            searched = self.turns.len();
            if !self.grow()? {
                return Ok(None);
            }
        }
    }

    /// Reads until at least `n` turns are held (or there are no more).
    pub(super) fn hold(&mut self, n: usize) -> Result<()> {
        if n > 0 {
            self.get(n - 1)?;
        }
        Ok(())
    }
}
