//! Where a single node's decision log keeps its chunks' bytes: append-only
//! segment files beside the store (`<data_dir>/decisions/<n>.seg`), the
//! store holding only a 24-byte pointer under each chunk's key.
//!
//! Why: sled rewrites a leaf whole, values included, every few changes to
//! it, and moves live pages out of old segments; a chunk of decisions
//! stored as a sled value was written about four times before it was
//! retired, and the decision log was most of what cairn handed sled per
//! turn. Here a chunk is written once, and retention deletes a segment
//! file whole once every chunk in it has fallen out of the newest `keep`.
//!
//! # A segment
//!
//! A sequence of frames: [`MAGIC`], the chunk's first sequence number
//! (`u64`), its record count (`u32`), the body's length (`u32`), a CRC-32
//! of those three and the body, then the body (the chunk's stored form,
//! [`super::decision_log`]'s `CHUNK_V4` and the records). Integers are
//! big-endian. A frame is never changed once written; scrubbing a chunk
//! appends its new body and moves the pointer.
//!
//! # Crashes
//!
//! The writer makes the files durable (`fdatasync`, and the directory when
//! a segment was created) before it hands the store the pointers, so a
//! pointer never names bytes that a crash can lose. A crash can leave a
//! torn frame at the end of the newest segment (no pointer names it):
//! opening cuts the segment back to its last whole frame. A segment file is
//! deleted only after the store has made the retirement of all its chunks
//! durable; one a crash left behind is deleted by the next retirement.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use parking_lot::{Mutex, MutexGuard};

/// The directory under the data directory.
pub(crate) const DIR: &str = "decisions";

/// A segment is sealed (and a new one started) once it holds this much.
pub(crate) const SEGMENT_BYTES: u64 = 8 << 20;

/// The first four bytes of every frame.
const MAGIC: [u8; 4] = *b"cdf1";

/// magic, first, count, length, CRC.
const HEADER: usize = 4 + 8 + 4 + 4 + 4;

/// Where one chunk's body is: what the store keeps under the chunk's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyRef {
    segment: u64,
    offset: u64,
    len: u32,
    crc: u32,
}

impl BodyRef {
    /// The bytes stored for this pointer.
    pub(crate) const BYTES: usize = 8 + 8 + 4 + 4;

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.segment.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(&self.crc.to_be_bytes());
    }

    /// The segment the body is in.
    pub(crate) fn segment(&self) -> u64 {
        self.segment
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<BodyRef> {
        if bytes.len() != Self::BYTES {
            return None;
        }
        Some(BodyRef {
            segment: u64::from_be_bytes(bytes[0..8].try_into().ok()?),
            offset: u64::from_be_bytes(bytes[8..16].try_into().ok()?),
            len: u32::from_be_bytes(bytes[16..20].try_into().ok()?),
            crc: u32::from_be_bytes(bytes[20..24].try_into().ok()?),
        })
    }
}

/// The segment files of one log. Appends and retirements take a lock;
/// reads open the segment they need and take none.
pub(crate) struct ChunkFiles {
    dir: PathBuf,
    segment_bytes: u64,
    state: Mutex<Appender>,
    /// Held from the first append of a write until the store has its
    /// pointers (the writer's batch, a scrub's page), and through a move of
    /// segments' chunks: a mover sees every pointer into what it moves.
    gate: Mutex<()>,
}

struct Appender {
    /// The segment appended to, if one is open.
    current: Option<Segment>,
    /// Sealed segments: id → the sequence number past their newest record.
    sealed: BTreeMap<u64, u64>,
    /// The id the next new segment takes.
    next_id: u64,
    /// Bytes written that are not yet durable.
    dirty: bool,
    /// A segment file was created since the directory was last synced.
    created: bool,
}

impl Appender {
    /// Seals the open segment, made durable now: nothing syncs it later.
    fn seal_current(&mut self) -> io::Result<()> {
        if let Some(old) = self.current.take() {
            old.file.sync_data()?;
            self.sealed.insert(old.id, old.end);
        }
        Ok(())
    }

    /// Deletes sealed segment `id`'s file (gone already is fine).
    fn remove_sealed(&mut self, dir: &Path, id: u64) -> io::Result<()> {
        match std::fs::remove_file(segment_path(dir, id)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.sealed.remove(&id);
        Ok(())
    }
}

struct Segment {
    id: u64,
    file: File,
    len: u64,
    /// The sequence number past the newest record framed in it.
    end: u64,
}

impl std::fmt::Debug for ChunkFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkFiles")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn damaged(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.seg"))
}

fn frame_crc(first: u64, count: u32, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&first.to_be_bytes());
    hasher.update(&count.to_be_bytes());
    hasher.update(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// A frame's header fields, if `header` is one.
fn parse_header(header: &[u8; HEADER]) -> Option<(u64, u32, u32, u32)> {
    if header[0..4] != MAGIC {
        return None;
    }
    Some((
        u64::from_be_bytes(header[4..12].try_into().ok()?),
        u32::from_be_bytes(header[12..16].try_into().ok()?),
        u32::from_be_bytes(header[16..20].try_into().ok()?),
        u32::from_be_bytes(header[20..24].try_into().ok()?),
    ))
}

impl ChunkFiles {
    /// Opens (or creates) the segment files in `dir`, cutting a torn frame
    /// off the end of the newest.
    pub(crate) fn open(dir: &Path, segment_bytes: u64) -> io::Result<ChunkFiles> {
        create_private_dir(dir)?;
        let mut ids = Vec::new();
        for item in std::fs::read_dir(dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            ids.push(id);
        }
        ids.sort_unstable();
        let mut sealed = BTreeMap::new();
        let mut current = None;
        for (i, &id) in ids.iter().enumerate() {
            let newest = i + 1 == ids.len();
            let path = segment_path(dir, id);
            let file = OpenOptions::new().read(true).write(newest).open(&path)?;
            let (whole, end) = scan(&file, newest)?;
            if newest {
                if whole < file.metadata()?.len() {
                    tracing::warn!(
                        segment = %path.display(),
                        kept = whole,
                        "decision log: a torn frame at the end of the newest segment was cut off"
                    );
                    file.set_len(whole)?;
                    file.sync_data()?;
                }
                current = Some(Segment {
                    id,
                    file,
                    len: whole,
                    end,
                });
            } else {
                sealed.insert(id, end);
            }
        }
        Ok(ChunkFiles {
            dir: dir.to_owned(),
            segment_bytes,
            state: Mutex::new(Appender {
                current,
                sealed,
                next_id: ids.last().map_or(1, |id| id + 1),
                dirty: false,
                created: false,
            }),
            gate: Mutex::new(()),
        })
    }

    /// See the field: taken by whoever appends and hands the store the
    /// pointers, and by whoever moves chunks between segments.
    pub(crate) fn gate(&self) -> MutexGuard<'_, ()> {
        self.gate.lock()
    }

    /// Seals the open segment if it is one of `segments` (new appends go
    /// to a new one), so that all of `segments` can be deleted.
    pub(crate) fn seal(&self, segments: &BTreeSet<u64>) -> io::Result<()> {
        let mut state = self.state.lock();
        if state
            .current
            .as_ref()
            .is_some_and(|s| segments.contains(&s.id))
        {
            state.seal_current()?;
        }
        Ok(())
    }

    /// Deletes sealed `segments` (whatever any of them still holds is
    /// gone: the caller moved what it keeps), durably.
    pub(crate) fn delete(&self, segments: &BTreeSet<u64>) -> io::Result<()> {
        let mut state = self.state.lock();
        for id in segments {
            if state.current.as_ref().is_some_and(|s| s.id == *id) {
                continue;
            }
            state.remove_sealed(&self.dir, *id)?;
        }
        File::open(&self.dir)?.sync_all()
    }

    /// Appends the body of the chunk of `count` records from `first`; not
    /// durable until [`ChunkFiles::sync`].
    pub(crate) fn append(&self, first: u64, count: u32, body: &[u8]) -> io::Result<BodyRef> {
        let len = u32::try_from(body.len())
            .map_err(|_| damaged(format!("a chunk of {} bytes is too large", body.len())))?;
        let mut state = self.state.lock();
        let frame = HEADER as u64 + u64::from(len);
        let full = state
            .current
            .as_ref()
            .is_some_and(|s| s.len > 0 && s.len + frame > self.segment_bytes);
        if full {
            state.seal_current()?;
        }
        if state.current.is_none() {
            let id = state.next_id;
            let file = create_private_file(&segment_path(&self.dir, id))?;
            state.next_id += 1;
            state.created = true;
            state.current = Some(Segment {
                id,
                file,
                len: 0,
                end: 0,
            });
        }
        let crc = frame_crc(first, count, body);
        let mut bytes = Vec::with_capacity(HEADER + body.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&first.to_be_bytes());
        bytes.extend_from_slice(&count.to_be_bytes());
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&crc.to_be_bytes());
        bytes.extend_from_slice(body);
        state.dirty = true;
        let Some(segment) = state.current.as_mut() else {
            return Err(damaged("no segment to append to".to_owned()));
        };
        // On an error, whatever part of the frame reached the file is past
        // `len`: the next append writes over it.
        segment.file.write_all_at(&bytes, segment.len)?;
        let at = BodyRef {
            segment: segment.id,
            offset: segment.len,
            len,
            crc,
        };
        segment.len += frame;
        segment.end = segment.end.max(first.saturating_add(u64::from(count)));
        Ok(at)
    }

    /// Makes every append so far durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.dirty {
            if let Some(segment) = &state.current {
                segment.file.sync_data()?;
            }
            state.dirty = false;
        }
        if state.created {
            File::open(&self.dir)?.sync_all()?;
            state.created = false;
        }
        Ok(())
    }

    /// Deletes the sealed segments whose every record is older than
    /// `first` (the oldest record the log keeps). Call only once the
    /// store's retirement of those records is durable.
    pub(crate) fn retire(&self, first: u64) -> io::Result<usize> {
        let mut state = self.state.lock();
        let stale: Vec<u64> = state
            .sealed
            .iter()
            .filter(|&(_, &end)| end <= first)
            .map(|(&id, _)| id)
            .collect();
        for id in &stale {
            state.remove_sealed(&self.dir, *id)?;
        }
        Ok(stale.len())
    }

    /// Bytes of the segment files.
    pub(crate) fn bytes(&self) -> u64 {
        let state = self.state.lock();
        let sealed: u64 = state
            .sealed
            .keys()
            .filter_map(|&id| std::fs::metadata(segment_path(&self.dir, id)).ok())
            .map(|m| m.len())
            .sum();
        sealed + state.current.as_ref().map_or(0, |s| s.len)
    }

    /// The body `at` names, checked against its CRC and against the chunk
    /// it should hold (`first`, `count`); `None` when its segment is gone
    /// (retired since the pointer was read).
    pub(crate) fn read(&self, at: &BodyRef, first: u64, count: u64) -> io::Result<Option<Vec<u8>>> {
        let path = segment_path(&self.dir, at.segment);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A damaged pointer must not size an allocation past the file.
        let size = file.metadata()?.len();
        let frame_end = at.offset.saturating_add(HEADER as u64 + u64::from(at.len));
        if frame_end > size {
            return Err(damaged(format!(
                "segment {} ends at {size}, before the frame at {} ends",
                at.segment, at.offset
            )));
        }
        let mut frame = vec![0; HEADER + at.len as usize];
        file.read_exact_at(&mut frame, at.offset).map_err(|e| {
            damaged(format!(
                "segment {} has no whole frame at {}: {e}",
                at.segment, at.offset
            ))
        })?;
        let (header, body) = frame.split_at(HEADER);
        let header: &[u8; HEADER] = header
            .try_into()
            .map_err(|_| damaged("a short frame header".to_owned()))?;
        let fits = parse_header(header).is_some_and(|(f, c, len, crc)| {
            f == first && u64::from(c) == count && len == at.len && crc == at.crc
        });
        if !fits || frame_crc(first, u32::try_from(count).unwrap_or(u32::MAX), body) != at.crc {
            return Err(damaged(format!(
                "segment {} at {} does not hold records {first}..{}",
                at.segment,
                at.offset,
                first.saturating_add(count)
            )));
        }
        frame.drain(..HEADER);
        Ok(Some(frame))
    }
}

/// Walks a segment's frames: the length of its whole frames and the
/// sequence number past the newest record in them. Only the newest
/// segment's bodies are read and checked (a torn write can only be there).
fn scan(file: &File, check_bodies: bool) -> io::Result<(u64, u64)> {
    let size = file.metadata()?.len();
    let (mut at, mut end) = (0u64, 0u64);
    let mut header = [0u8; HEADER];
    while at + HEADER as u64 <= size {
        file.read_exact_at(&mut header, at)?;
        let Some((first, count, len, crc)) = parse_header(&header) else {
            break;
        };
        let next = at + HEADER as u64 + u64::from(len);
        if next > size {
            break;
        }
        if check_bodies {
            let mut body = vec![0; len as usize];
            file.read_exact_at(&mut body, at + HEADER as u64)?;
            if frame_crc(first, count, &body) != crc {
                break;
            }
        }
        end = end.max(first.saturating_add(u64::from(count)));
        at = next;
    }
    Ok((at, end))
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            if let Some(parent) = dir.parent() {
                File::open(parent)?.sync_all()?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn create_private_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for item in std::fs::read_dir(dir)? {
            names.push(item?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    #[test]
    fn bodies_read_back_across_a_reopen() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(DIR);
        let files = ChunkFiles::open(&path, SEGMENT_BYTES)?;
        let a = files.append(0, 3, b"first chunk")?;
        let b = files.append(3, 1, b"second")?;
        files.sync()?;
        assert_eq!(files.read(&a, 0, 3)?, Some(b"first chunk".to_vec()));
        drop(files);
        let files = ChunkFiles::open(&path, SEGMENT_BYTES)?;
        assert_eq!(files.read(&b, 3, 1)?, Some(b"second".to_vec()));
        // Appends continue the same segment after the frames kept.
        let c = files.append(4, 2, b"third")?;
        assert_eq!(c.segment, b.segment);
        assert!(c.offset > b.offset);
        assert_eq!(files.read(&c, 4, 2)?, Some(b"third".to_vec()));
        // A pointer asked for the wrong records is an error, not their bytes,
        // and so is one past the end of its segment.
        assert!(files.read(&c, 5, 2).is_err());
        let past = BodyRef { len: u32::MAX, ..c };
        assert!(files.read(&past, 4, 2).is_err());
        let mut bytes = Vec::new();
        c.encode(&mut bytes);
        assert_eq!(bytes.len(), BodyRef::BYTES);
        assert_eq!(BodyRef::decode(&bytes), Some(c));
        assert_eq!(BodyRef::decode(&bytes[1..]), None);
        Ok(())
    }

    #[test]
    fn a_torn_frame_is_cut_off_and_a_damaged_one_refused() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(DIR);
        let files = ChunkFiles::open(&path, SEGMENT_BYTES)?;
        let kept = files.append(0, 1, b"kept")?;
        let torn = files.append(1, 1, b"torn in half")?;
        files.sync()?;
        drop(files);
        let seg = segment_path(&path, kept.segment);
        let full = std::fs::metadata(&seg)?.len();
        let file = OpenOptions::new().write(true).open(&seg)?;
        file.set_len(full - 4)?;
        drop(file);
        let files = ChunkFiles::open(&path, SEGMENT_BYTES)?;
        assert_eq!(std::fs::metadata(&seg)?.len(), torn.offset);
        assert_eq!(files.read(&kept, 0, 1)?, Some(b"kept".to_vec()));
        assert!(files.read(&torn, 1, 1).is_err());
        // The next append writes where the torn frame was.
        let again = files.append(1, 1, b"written again")?;
        assert_eq!(again.offset, torn.offset);
        files.sync()?;
        // A flipped byte in a body is found by its CRC.
        let file = OpenOptions::new().write(true).open(&seg)?;
        file.write_all_at(b"K", kept.offset + HEADER as u64)?;
        drop(file);
        let error = files.read(&kept, 0, 1).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        Ok(())
    }

    #[test]
    fn segments_are_sealed_when_full_and_deleted_once_retired() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(DIR);
        let files = ChunkFiles::open(&path, 256)?;
        let body = [7u8; 100];
        let mut refs = Vec::new();
        for first in 0..6u64 {
            refs.push(files.append(first * 10, 10, &body)?);
        }
        files.sync()?;
        // Two frames of 124 bytes fit in 256: three segments.
        assert_eq!(ids(&path)?.len(), 3);
        // Records 0..30 retired: only the first segment (0..20) goes; the
        // open one is never deleted.
        assert_eq!(files.retire(30)?, 1);
        assert_eq!(ids(&path)?.len(), 2);
        assert_eq!(files.read(&refs[0], 0, 10)?, None);
        assert_eq!(files.read(&refs[2], 20, 10)?, Some(body.to_vec()));
        assert_eq!(files.retire(1_000)?, 1);
        assert_eq!(ids(&path)?.len(), 1);
        assert_eq!(files.read(&refs[5], 50, 10)?, Some(body.to_vec()));
        // Reopened, the sealed ends are found again from the frames.
        let more = files.append(60, 10, &body)?;
        files.sync()?;
        drop(files);
        let files = ChunkFiles::open(&path, 256)?;
        assert_eq!(files.retire(70)?, 1);
        assert_eq!(files.read(&more, 60, 10)?, Some(body.to_vec()));
        Ok(())
    }
}
