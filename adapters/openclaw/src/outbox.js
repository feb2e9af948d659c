// The outbox: what the plugin owes cairn while cairn cannot be reached.
//
// OpenClaw's turn must complete when cairn is down or slow, and nothing
// acknowledged may be lost. So a turn cairn did not acknowledge is written
// here before `commitTurn` returns, one file per operation:
//
//   1. the JSON goes to `<name>.tmp` in the outbox folder and is fsynced;
//   2. it is renamed to `<name>.json` and the folder is fsynced;
//
// so a crash leaves the whole operation or nothing. Names sort in the order
// the operations happened (time, process, counter), and the drain replays
// them in that order with their original idempotency keys: a turn cairn had
// stored before its acknowledgement was lost comes back `duplicate`, never
// twice. Several OpenClaw processes (a gateway and a `--local` CLI run) may
// share the folder; a file two of them replay is still written once, and
// each deletes it after cairn's answer (a missing file is not an error).
//
// An operation cairn refuses for good (a 4xx other than 404/408/409/429) is
// moved to `<name>.rejected` with the reason beside it, so one bad turn
// cannot hold the rest back; the operator can read it there.

import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, readFile, rename, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";

let counter = 0;

export class Outbox {
  /** @param {string} dir */
  constructor(dir) {
    this.dir = dir;
    this.ready = undefined;
  }

  async ensure() {
    this.ready ??= mkdir(this.dir, { recursive: true, mode: 0o700 });
    await this.ready;
  }

  /** Durably adds one operation; resolves to its name once it is on disk. */
  async put(op) {
    await this.ensure();
    counter = (counter + 1) % 1_000_000;
    const name = [
      String(Date.now()).padStart(15, "0"),
      String(process.pid).padStart(8, "0"),
      String(counter).padStart(6, "0"),
      randomBytes(4).toString("hex"),
    ].join("-");
    const tmp = join(this.dir, `${name}.tmp`);
    const file = await open(tmp, "wx", 0o600);
    try {
      await file.writeFile(JSON.stringify({ v: 1, ...op }));
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(tmp, join(this.dir, `${name}.json`));
    await syncDir(this.dir);
    return name;
  }

  /** Pending operations' names, oldest first. */
  async names() {
    let entries;
    try {
      entries = await readdir(this.dir);
    } catch (err) {
      if (err.code === "ENOENT") return [];
      throw err;
    }
    return entries
      .filter((n) => n.endsWith(".json"))
      .map((n) => n.slice(0, -5))
      .sort();
  }

  /** One operation, or undefined when another process already delivered it. */
  async read(name) {
    try {
      return JSON.parse(await readFile(join(this.dir, `${name}.json`), "utf8"));
    } catch (err) {
      if (err.code === "ENOENT") return undefined;
      if (err instanceof SyntaxError) return { v: 0, unreadable: err.message };
      throw err;
    }
  }

  /** Forgets a delivered operation. */
  async remove(name) {
    try {
      await unlink(join(this.dir, `${name}.json`));
    } catch (err) {
      if (err.code !== "ENOENT") throw err;
    }
  }

  /** Sets a refused operation aside with the reason. */
  async reject(name, reason) {
    try {
      await rename(join(this.dir, `${name}.json`), join(this.dir, `${name}.rejected`));
      await writeFile(join(this.dir, `${name}.reason.txt`), `${reason}\n`);
    } catch (err) {
      if (err.code !== "ENOENT") throw err;
    }
  }
}

async function syncDir(dir) {
  // Best effort: not every platform lets a folder be opened for syncing.
  let handle;
  try {
    handle = await open(dir, "r");
    await handle.sync();
  } catch {
    // the rename is still atomic; only its durability across a power cut is weaker
  } finally {
    await handle?.close();
  }
}
