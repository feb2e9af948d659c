//! The loss ledger: which turns the runtime acknowledged, per session, for
//! the read-back at the end of a run.
//!
//! A live session's ledger is in memory (its slot's); an ended session's
//! goes to an unnamed temporary file ([`Spill`]) and is read back from it
//! one session at a time. Held in memory, the ledgers of a ten-minute run
//! (2.8 million turns, 16 bytes each) were 45 MB of the resident memory
//! the in-process loadgen reports as the runtime's.
//!
//! The file's records, little-endian: the workspace and the session as a
//! `u32` length and their UTF-8 bytes, a `u64` count, then that many
//! `(seq: u64, hash: u64)` pairs.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};

use super::LoadgenError;
use super::target::ContentHash;

/// One session's acknowledged turns: `(seq, ContentHash)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ledger {
    pub(crate) workspace: String,
    pub(crate) session: String,
    pub(crate) acked: Vec<(u64, ContentHash)>,
}

/// Ended sessions' ledgers, written to a temporary file as they end.
pub(crate) struct Spill {
    out: BufWriter<File>,
    /// The first write that failed: the run goes on, its loss check does not.
    failed: Option<io::Error>,
}

impl Spill {
    /// A spill on a new unnamed temporary file (gone when closed).
    pub(crate) fn new() -> Result<Spill, LoadgenError> {
        let file = tempfile::tempfile()
            .map_err(|e| LoadgenError::Setup(format!("the ledger's temporary file: {e}")))?;
        Ok(Spill {
            out: BufWriter::with_capacity(64 * 1024, file),
            failed: None,
        })
    }

    /// Appends one session's ledger.
    pub(crate) fn push(&mut self, ledger: &Ledger) {
        if self.failed.is_none()
            && let Err(e) = write_ledger(&mut self.out, ledger)
        {
            self.failed = Some(e);
        }
    }

    /// Every ledger pushed, read back in order; the error of a write that
    /// failed, if one did.
    pub(crate) fn read_back(
        &mut self,
    ) -> Result<impl Iterator<Item = Result<Ledger, LoadgenError>> + use<>, LoadgenError> {
        let failed = |e: &io::Error| LoadgenError::Setup(format!("the ledger's file: {e}"));
        if let Some(e) = &self.failed {
            return Err(failed(e));
        }
        self.out.flush().map_err(|e| failed(&e))?;
        let mut file = self.out.get_ref().try_clone().map_err(|e| failed(&e))?;
        file.rewind().map_err(|e| failed(&e))?;
        let mut input = BufReader::with_capacity(64 * 1024, file);
        Ok(std::iter::from_fn(move || {
            read_ledger(&mut input)
                .map_err(|e| LoadgenError::Setup(format!("reading the ledger's file back: {e}")))
                .transpose()
        }))
    }
}

fn write_ledger(out: &mut impl Write, ledger: &Ledger) -> io::Result<()> {
    for name in [&ledger.workspace, &ledger.session] {
        let len = u32::try_from(name.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name over 4 GiB"))?;
        out.write_all(&len.to_le_bytes())?;
        out.write_all(name.as_bytes())?;
    }
    out.write_all(&(ledger.acked.len() as u64).to_le_bytes())?;
    for (seq, hash) in &ledger.acked {
        out.write_all(&seq.to_le_bytes())?;
        out.write_all(&hash.to_le_bytes())?;
    }
    Ok(())
}

/// The next ledger, or `None` at the end of the file (between records).
fn read_ledger(input: &mut impl Read) -> io::Result<Option<Ledger>> {
    // The end of the file only between records: a cut length is an error.
    let mut first = Vec::with_capacity(4);
    input.take(4).read_to_end(&mut first)?;
    if first.is_empty() {
        return Ok(None);
    }
    let mut len: [u8; 4] = first
        .try_into()
        .map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    let workspace = read_name(input, u32::from_le_bytes(len))?;
    input.read_exact(&mut len)?;
    let session = read_name(input, u32::from_le_bytes(len))?;
    let count = read_u64(input)?;
    let mut acked = Vec::new();
    for _ in 0..count {
        acked.push((read_u64(input)?, read_u64(input)?));
    }
    Ok(Some(Ledger {
        workspace,
        session,
        acked,
    }))
}

fn read_name(input: &mut impl Read, len: u32) -> io::Result<String> {
    let mut bytes = Vec::new();
    input.take(u64::from(len)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != u64::from(len) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn read_u64(input: &mut impl Read) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    input.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(workspace: &str, session: &str, acked: &[(u64, u64)]) -> Ledger {
        Ledger {
            workspace: workspace.to_owned(),
            session: session.to_owned(),
            acked: acked.to_vec(),
        }
    }

    #[test]
    fn ledgers_come_back_as_they_were_spilled() {
        let ledgers = [
            ledger("ws-0", "s-1", &[(0, 7), (1, u64::MAX), (2, 0)]),
            ledger("ws-1", "s-é", &[]),
            ledger("", "s-3", &[(5, 42)]),
        ];
        let mut spill = Spill::new().unwrap();
        for l in &ledgers {
            spill.push(l);
        }
        let back: Vec<Ledger> = spill.read_back().unwrap().map(Result::unwrap).collect();
        assert_eq!(back, ledgers);
        // Nothing pushed: nothing read.
        assert_eq!(Spill::new().unwrap().read_back().unwrap().count(), 0);
    }

    #[test]
    fn a_cut_record_is_an_error_not_a_shorter_ledger() {
        let mut bytes = Vec::new();
        write_ledger(&mut bytes, &ledger("ws", "s", &[(0, 1), (1, 2)])).unwrap();
        for cut in 1..bytes.len() {
            let read = read_ledger(&mut &bytes[..cut]);
            assert!(read.is_err(), "cut at {cut} read {read:?}");
        }
        assert!(read_ledger(&mut &bytes[..]).unwrap().is_some());
    }
}
