// cairn's briefing in the agent workspace's MEMORY.md, between the markers
// `cairn brief --write` uses (cli/src/brief.rs), by the same rules:
//
// - no file: a new one, a title and the block;
// - a file without markers: the block is appended; every existing byte stays;
// - one start marker, then one end marker: only the bytes between them are
//   replaced;
// - anything else (a marker alone, reversed, twice) is refused and nothing
//   is written: guessing which block is cairn's could overwrite the person's
//   text.
//
// The write is atomic (a temporary file beside it, fsynced, renamed over
// it); a symbolic link is followed; nothing is written when the bytes would
// not change. OpenClaw loads MEMORY.md into main sessions' prompts, so the
// briefing reaches the model there too, and the person keeps writing their
// own notes around it.

import { randomBytes } from "node:crypto";
import { open, readFile, realpath, rename, stat, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

export const START_MARKER = "<!-- cairn:briefing:start -->";
export const END_MARKER = "<!-- cairn:briefing:end -->";

const NEW_FILE_HEAD =
  "# Memory\n\nWrite freely outside the markers below: cairn's OpenClaw plugin replaces only the block between them.\n\n";

/** Why a file's markers cannot be trusted. */
export class MarkerError extends Error {
  constructor(message) {
    super(message);
    this.name = "MarkerError";
  }
}

function indexesOf(text, needle) {
  const out = [];
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + 1)) out.push(at);
  return out;
}

const lineOf = (text, at) => text.slice(0, at).split("\n").length;

/**
 * The file's new text with `block` between the markers.
 * @param {string | undefined} existing the file's text, undefined when there is no file
 * @param {string} block the briefing, without markers
 */
export function splice(existing, block) {
  if (block.includes(START_MARKER) || block.includes(END_MARKER)) {
    throw new MarkerError("the generated briefing contains a marker; refusing to write it");
  }
  let body = `\n${block}`;
  if (!body.endsWith("\n")) body += "\n";
  if (existing === undefined) return `${NEW_FILE_HEAD}${START_MARKER}${body}${END_MARKER}\n`;
  const starts = indexesOf(existing, START_MARKER);
  const ends = indexesOf(existing, END_MARKER);
  const lines = (at) => at.map((i) => lineOf(existing, i)).join(", ");
  if (starts.length > 1) {
    throw new MarkerError(`the marker \`${START_MARKER}\` appears ${starts.length} times (lines ${lines(starts)}); keep exactly one start and one end marker`);
  }
  if (ends.length > 1) {
    throw new MarkerError(`the marker \`${END_MARKER}\` appears ${ends.length} times (lines ${lines(ends)}); keep exactly one start and one end marker`);
  }
  const [s] = starts;
  const [e] = ends;
  if (s === undefined && e === undefined) {
    let out = existing;
    if (out.length > 0) {
      if (!out.endsWith("\n")) out += "\n";
      out += "\n";
    }
    return `${out}${START_MARKER}${body}${END_MARKER}\n`;
  }
  if (e === undefined) {
    throw new MarkerError(`the start marker \`${START_MARKER}\` (line ${lineOf(existing, s)}) has no end marker \`${END_MARKER}\` after it`);
  }
  if (s === undefined) {
    throw new MarkerError(`the end marker \`${END_MARKER}\` (line ${lineOf(existing, e)}) has no start marker \`${START_MARKER}\` before it`);
  }
  if (e < s + START_MARKER.length) {
    throw new MarkerError(`the end marker (line ${lineOf(existing, e)}) comes before the start marker (line ${lineOf(existing, s)})`);
  }
  return existing.slice(0, s + START_MARKER.length) + body + existing.slice(e);
}

/**
 * Writes `block` into the MEMORY.md at `path`; resolves to `created`,
 * `updated` or `unchanged`. Throws a MarkerError (nothing written) when the
 * file's markers are broken.
 */
export async function writeBriefing(path, block) {
  let target = path;
  try {
    target = await realpath(path);
  } catch (err) {
    if (err.code !== "ENOENT") throw err;
  }
  let existing;
  try {
    existing = await readFile(target, "utf8");
  } catch (err) {
    if (err.code !== "ENOENT") throw err;
  }
  const next = splice(existing, block);
  if (next === existing) return "unchanged";
  const dir = dirname(target);
  const tmp = join(dir, `.cairn-briefing-${basename(target)}-${randomBytes(4).toString("hex")}.tmp`);
  const mode = existing === undefined ? 0o644 : (await stat(target)).mode & 0o777;
  const file = await open(tmp, "wx", mode);
  try {
    await file.writeFile(next);
    await file.sync();
  } catch (err) {
    await file.close();
    await unlink(tmp).catch(() => {});
    throw err;
  }
  await file.close();
  await rename(tmp, target);
  return existing === undefined ? "created" : "updated";
}
