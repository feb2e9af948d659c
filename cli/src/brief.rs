//! `cairn brief --write PATH`: the generated briefing between two markers
//! in a `MEMORY.md`, and nothing else of the file touched.
//!
//! The file has two authors. A person (or an agent) writes whatever they
//! like around the block; cairn writes only between
//!
//! ```text
//! <!-- cairn:briefing:start -->
//! …generated…
//! <!-- cairn:briefing:end -->
//! ```
//!
//! [`splice`] is the pure rule, on bytes (a file that is not UTF-8 keeps its
//! bytes too):
//!
//! - no file: a new one, a title and the block;
//! - a file without markers: the block is appended; every existing byte
//!   stays, in place;
//! - one start marker, then one end marker: the bytes between them are
//!   replaced; every byte before the end of the start marker and from the
//!   start of the end marker on stays as it was;
//! - anything else (a marker alone, the end before the start, a marker
//!   twice) is refused with [`MarkerError`], which says where the markers
//!   are: nothing is written, because guessing which block is cairn's could
//!   overwrite the person's text.
//!
//! [`write_briefing`] applies it to a path atomically: the new content goes
//! to a temporary file in the same folder, is synced, and replaces the old
//! one by a rename (a crash leaves the old file or the new one, never half
//! of one). A symbolic link is followed, so the file it points at is
//! updated and the link stays; the file's permissions are kept. When the
//! bytes would not change, nothing is written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Opens the generated block.
pub const START_MARKER: &str = "<!-- cairn:briefing:start -->";
/// Closes the generated block.
pub const END_MARKER: &str = "<!-- cairn:briefing:end -->";

/// The title of a `MEMORY.md` cairn creates.
const NEW_FILE_HEAD: &str = "# Memory\n\nWrite freely outside the markers below: `cairn brief --write` replaces only the block between them.\n\n";

/// Why a file's markers cannot be trusted. Line numbers count from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// A start marker without an end marker.
    #[error(
        "the start marker `{START_MARKER}` (line {line}) has no end marker `{END_MARKER}` after it"
    )]
    MissingEnd {
        /// Line of the start marker.
        line: usize,
    },
    /// An end marker without a start marker.
    #[error(
        "the end marker `{END_MARKER}` (line {line}) has no start marker `{START_MARKER}` before it"
    )]
    MissingStart {
        /// Line of the end marker.
        line: usize,
    },
    /// The end marker comes before the start marker.
    #[error("the end marker (line {end}) comes before the start marker (line {start})")]
    Reversed {
        /// Line of the start marker.
        start: usize,
        /// Line of the end marker.
        end: usize,
    },
    /// A marker appears more than once.
    #[error("the marker `{marker}` appears {} times (lines {}); keep exactly one start and one end marker", lines.len(), join(lines))]
    Duplicated {
        /// The marker.
        marker: &'static str,
        /// Its lines.
        lines: Vec<usize>,
    },
    /// The generated text itself holds a marker (it never should).
    #[error("the generated briefing contains a marker; refusing to write it")]
    BlockHasMarker,
}

fn join(lines: &[usize]) -> String {
    lines
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return Vec::new();
    }
    (0..=haystack.len() - needle.len())
        .filter(|&i| &haystack[i..i + needle.len()] == needle)
        .collect()
}

fn line_of(bytes: &[u8], at: usize) -> usize {
    bytes[..at].iter().filter(|b| **b == b'\n').count() + 1
}

/// The file's new bytes with `block` (the briefing, without markers)
/// between the markers; see the [module docs](self) for the rules.
///
/// ```
/// use cairn_cli::brief::{splice, START_MARKER, END_MARKER};
/// let old = format!("# Goals\n- ship\n{START_MARKER}\nold\n{END_MARKER}\n## Notes\n");
/// let new = splice(Some(old.as_bytes()), "## Briefing\n- new [e1]\n").unwrap();
/// assert_eq!(
///     String::from_utf8(new).unwrap(),
///     format!("# Goals\n- ship\n{START_MARKER}\n## Briefing\n- new [e1]\n{END_MARKER}\n## Notes\n")
/// );
/// assert!(splice(Some(START_MARKER.as_bytes()), "x\n").is_err());
/// ```
pub fn splice(existing: Option<&[u8]>, block: &str) -> Result<Vec<u8>, MarkerError> {
    if block.contains(START_MARKER) || block.contains(END_MARKER) {
        return Err(MarkerError::BlockHasMarker);
    }
    let mut body = String::with_capacity(block.len() + 2);
    body.push('\n');
    body.push_str(block);
    if !body.ends_with('\n') {
        body.push('\n');
    }
    let Some(old) = existing else {
        return Ok(format!("{NEW_FILE_HEAD}{START_MARKER}{body}{END_MARKER}\n").into_bytes());
    };
    let starts = find_all(old, START_MARKER.as_bytes());
    let ends = find_all(old, END_MARKER.as_bytes());
    let lines = |at: &[usize]| at.iter().map(|&i| line_of(old, i)).collect::<Vec<_>>();
    if starts.len() > 1 {
        return Err(MarkerError::Duplicated {
            marker: START_MARKER,
            lines: lines(&starts),
        });
    }
    if ends.len() > 1 {
        return Err(MarkerError::Duplicated {
            marker: END_MARKER,
            lines: lines(&ends),
        });
    }
    match (starts.first(), ends.first()) {
        (None, None) => {
            let mut out = old.to_vec();
            if !out.is_empty() {
                if !out.ends_with(b"\n") {
                    out.push(b'\n');
                }
                out.push(b'\n');
            }
            out.extend_from_slice(START_MARKER.as_bytes());
            out.extend_from_slice(body.as_bytes());
            out.extend_from_slice(END_MARKER.as_bytes());
            out.push(b'\n');
            Ok(out)
        }
        (Some(&s), None) => Err(MarkerError::MissingEnd {
            line: line_of(old, s),
        }),
        (None, Some(&e)) => Err(MarkerError::MissingStart {
            line: line_of(old, e),
        }),
        (Some(&s), Some(&e)) if e < s + START_MARKER.len() => Err(MarkerError::Reversed {
            start: line_of(old, s),
            end: line_of(old, e),
        }),
        (Some(&s), Some(&e)) => {
            let keep_to = s + START_MARKER.len();
            let mut out = Vec::with_capacity(old.len() + body.len());
            out.extend_from_slice(&old[..keep_to]);
            out.extend_from_slice(body.as_bytes());
            out.extend_from_slice(&old[e..]);
            Ok(out)
        }
    }
}

/// What [`write_briefing`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The file did not exist; it was created.
    Created,
    /// The block was replaced (or appended to a file without markers).
    Updated,
    /// The file already held this briefing; nothing was written.
    Unchanged,
}

/// Why [`write_briefing`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The markers are broken.
    #[error("{}: {source}; nothing was written", path.display())]
    Markers {
        /// The file.
        path: PathBuf,
        /// What is wrong with its markers.
        source: MarkerError,
    },
    /// Reading or writing failed.
    #[error("{}: {what}: {source}; nothing was written", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
}

/// Writes `block` between the markers of the file at `path` (see the
/// [module docs](self)): atomically, following a symbolic link, keeping
/// permissions; nothing at all when the markers are broken or the bytes
/// would not change.
pub fn write_briefing(path: &Path, block: &str) -> Result<Written, WriteError> {
    let io = |what: &'static str, p: &Path| {
        let p = p.to_owned();
        move |source| WriteError::Io {
            path: p,
            what,
            source,
        }
    };
    // Follow a symbolic link to the file it names.
    let target = match std::fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_owned(),
        Err(e) => return Err(io("resolving the path", path)(e)),
    };
    let existing = match std::fs::read(&target) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("reading", &target)(e)),
    };
    let new = splice(existing.as_deref(), block).map_err(|source| WriteError::Markers {
        path: path.to_owned(),
        source,
    })?;
    if existing.as_deref() == Some(new.as_slice()) {
        return Ok(Written::Unchanged);
    }
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".cairn-briefing-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(io("creating a temporary file beside it", &target))?;
    tmp.write_all(&new)
        .map_err(io("writing the temporary file", &target))?;
    if existing.is_some() {
        let permissions = std::fs::metadata(&target)
            .map_err(io("reading its permissions", &target))?
            .permissions();
        tmp.as_file()
            .set_permissions(permissions)
            .map_err(io("copying its permissions", &target))?;
    }
    tmp.as_file()
        .sync_all()
        .map_err(io("syncing the temporary file", &target))?;
    tmp.persist(&target)
        .map_err(|e| io("replacing it", &target)(e.error))?;
    // The rename is durable once the folder is synced (best effort: not
    // every platform lets a folder be opened).
    if let Ok(folder) = std::fs::File::open(&dir) {
        let _ = folder.sync_all();
    }
    Ok(if existing.is_some() {
        Written::Updated
    } else {
        Written::Created
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const BLOCK: &str = "## Briefing: acme (2026-03-06)\n- a line [e1]\n";

    fn s(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn new_file_and_file_without_markers() {
        let new = s(splice(None, BLOCK).unwrap());
        assert!(new.starts_with("# Memory\n"));
        assert!(new.ends_with(&format!("{START_MARKER}\n{BLOCK}{END_MARKER}\n")));
        assert_eq!(
            s(splice(Some(b"# Goals\n- ship"), BLOCK).unwrap()),
            format!("# Goals\n- ship\n\n{START_MARKER}\n{BLOCK}{END_MARKER}\n")
        );
        assert_eq!(
            s(splice(Some(b""), "x").unwrap()),
            format!("{START_MARKER}\nx\n{END_MARKER}\n")
        );
    }

    #[test]
    fn broken_markers_are_named() {
        let cases: [(String, &str); 5] = [
            (
                format!("a\n{START_MARKER}\nb\n"),
                "line 2) has no end marker",
            ),
            (
                format!("a\nb\n{END_MARKER}\n"),
                "(line 3) has no start marker",
            ),
            (
                format!("{END_MARKER}\nx\n{START_MARKER}\n"),
                "end marker (line 1) comes before the start marker (line 3)",
            ),
            (
                format!("{START_MARKER}\n{START_MARKER}\n{END_MARKER}\n"),
                "appears 2 times (lines 1, 2)",
            ),
            (
                format!("{START_MARKER}\n{END_MARKER}\n{END_MARKER}\n"),
                "appears 2 times (lines 2, 3)",
            ),
        ];
        for (file, says) in cases {
            let err = splice(Some(file.as_bytes()), BLOCK).unwrap_err();
            assert!(err.to_string().contains(says), "{err} / {says}");
        }
        // Overlapping markers (an end marker inside a start marker) cannot
        // happen; an end marker right after the start one is an empty block.
        let empty = format!("{START_MARKER}{END_MARKER}");
        assert_eq!(
            s(splice(Some(empty.as_bytes()), BLOCK).unwrap()),
            format!("{START_MARKER}\n{BLOCK}{END_MARKER}")
        );
        assert_eq!(
            splice(Some(b""), &format!("x {END_MARKER}\n")),
            Err(MarkerError::BlockHasMarker)
        );
    }

    #[test]
    fn write_is_atomic_and_refuses_broken_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("MEMORY.md");
        assert_eq!(write_briefing(&path, BLOCK).unwrap(), Written::Created);
        assert_eq!(write_briefing(&path, BLOCK).unwrap(), Written::Unchanged);
        let manual = format!(
            "# Goals\n{}\nnotes\n",
            std::fs::read_to_string(&path).unwrap()
        );
        std::fs::write(&path, &manual).unwrap();
        assert_eq!(write_briefing(&path, "new\n").unwrap(), Written::Updated);
        let after = std::fs::read_to_string(&path).unwrap();
        assert!(after.starts_with("# Goals\n# Memory\n") && after.ends_with("\nnotes\n"));
        assert!(after.contains(&format!("{START_MARKER}\nnew\n{END_MARKER}")));
        // Broken: refused, the file untouched, no temporary file left.
        let broken = format!("{manual}{START_MARKER}\n");
        std::fs::write(&path, &broken).unwrap();
        let err = write_briefing(&path, BLOCK).unwrap_err();
        assert!(err.to_string().contains("nothing was written"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["MEMORY.md"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_followed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.md");
        std::fs::write(&real, "mine\n").unwrap();
        let link = dir.path().join("MEMORY.md");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(write_briefing(&link, BLOCK).unwrap(), Written::Updated);
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(
            std::fs::read_to_string(&real)
                .unwrap()
                .starts_with("mine\n\n")
        );
    }

    /// Text around and inside the block: anything, including near-misses of
    /// the markers, but never a whole marker.
    fn text() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            "[a-z \n#\\-<>!:]{0,40}".prop_map(String::into_bytes),
            Just(b"<!-- cairn:briefing:star -->".to_vec()),
            Just(b"<!-- cairn:briefing:end ->".to_vec()),
            Just(b"\r\n".to_vec()),
        ];
        proptest::collection::vec(piece, 0..6)
            .prop_map(|parts| parts.concat())
            .prop_filter("no whole marker", |b| {
                find_all(b, START_MARKER.as_bytes()).is_empty()
                    && find_all(b, END_MARKER.as_bytes()).is_empty()
            })
    }

    proptest! {
        /// Every byte before the end of the start marker and from the
        /// start of the end marker on is unchanged; between them is exactly
        /// the new block; and writing twice changes nothing more.
        #[test]
        fn bytes_outside_the_block_are_unchanged(
            before in text(), inside in text(), after in text(), block in "[a-z #\\-\n]{0,60}",
        ) {
            let mut file = before.clone();
            file.extend_from_slice(START_MARKER.as_bytes());
            file.extend_from_slice(&inside);
            file.extend_from_slice(END_MARKER.as_bytes());
            file.extend_from_slice(&after);
            let new = splice(Some(&file), &block).unwrap();
            let head = before.len() + START_MARKER.len();
            prop_assert_eq!(&new[..head], &file[..head]);
            let tail = after.len() + END_MARKER.len();
            prop_assert_eq!(&new[new.len() - tail..], &file[file.len() - tail..]);
            let middle = &new[head..new.len() - tail];
            let mut expected = format!("\n{block}");
            if !expected.ends_with('\n') {
                expected.push('\n');
            }
            prop_assert_eq!(middle, expected.as_bytes());
            prop_assert_eq!(splice(Some(&new), &block).unwrap(), new);
        }

        /// A file without markers keeps all its bytes as a prefix.
        #[test]
        fn a_file_without_markers_is_a_prefix(file in text(), block in "[a-z \n]{0,40}") {
            let new = splice(Some(&file), &block).unwrap();
            prop_assert!(new.starts_with(&file));
            prop_assert_eq!(find_all(&new, START_MARKER.as_bytes()).len(), 1);
            prop_assert_eq!(splice(Some(&new), &block).unwrap(), new);
        }

        /// A second marker anywhere makes the file refused.
        #[test]
        fn a_duplicated_marker_is_refused(
            a in text(), b in text(), c in text(), d in text(), end in any::<bool>(),
        ) {
            let extra = if end { END_MARKER } else { START_MARKER };
            let file = [
                a, START_MARKER.as_bytes().to_vec(), b, extra.as_bytes().to_vec(), c,
                END_MARKER.as_bytes().to_vec(), d,
            ]
            .concat();
            let refused = matches!(splice(Some(&file), "x"), Err(MarkerError::Duplicated { .. }));
            prop_assert!(refused);
        }
    }
}
