// cairn in OpenClaw's own process (mode `in-process`): the native addon
// (adapters/openclaw/native, crate `cairn-node`, built as `cairn.node`)
// opened on one data dir per gateway. The same methods and answers as the
// HTTP client (client.js); see there for the table.
//
// - Lazy. Nothing is loaded or opened when the plugin registers: OpenClaw
//   registers plugins in every process it starts (`openclaw plugins
//   inspect`, `openclaw agent`, discovery passes), and sled lets one process
//   hold a data dir. The addon is loaded and the store opened on the first
//   call, once per process and data dir (shared by every registration).
// - Another process holds the data dir (the gateway, while a CLI command
//   runs hooks in its own process): the call fails with `data_dir_locked`
//   (status 503), which the breaker treats as cairn being away — turns go
//   to the outbox, the failure is logged once — and the error says so.
//   Reads go through the gateway instead: `openclaw gateway call cairn.read`.
// - Off the JS thread. Every facade call runs on libuv's worker pool (the
//   addon's AsyncTask) and returns a Promise; `timeoutMs` bounds how long a
//   hook waits, as over HTTP (the call itself still finishes).
// - Closed on `gateway_stop` (index.js): the store is flushed and let go.

import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const PLUGIN_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** Where `scripts/dev.sh` (and the docs' install step) put the built addon. */
export const DEFAULT_ADDON = join(PLUGIN_DIR, "cairn.node");

// One store per data dir per process, whatever number of registrations or
// configs share it (sled would refuse a second open of the same dir).
const stores = (globalThis[Symbol.for("cairn.openclaw.stores")] ??= new Map());

/** An error shaped like the HTTP client's (`status`, `code`). */
function failure(message, status, code, cause) {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), {
    name: "CairnError",
    status,
    code,
  });
}

/** Loads the addon at `path` (once per process: Node caches it). */
export function loadAddon(path) {
  if (!existsSync(path)) {
    throw failure(
      `cairn's native addon is not at ${path}: build it (cargo build -p cairn-node) and copy ` +
        `target/debug/libcairn_node.so (or the release one) there, or set addonPath`,
      0,
      "addon_missing",
    );
  }
  try {
    return createRequire(import.meta.url)(path);
  } catch (cause) {
    throw failure(`cairn's native addon at ${path} did not load: ${cause?.message ?? cause}`, 0, "addon_unloadable", cause);
  }
}

/** cairn loaded into this process (mode `in-process`). */
export class NativeClient {
  /**
   * @param {ReturnType<import("./config.js").readConfig>} config
   * @param {{ stateDir?: string }} host
   */
  constructor(config, host = {}) {
    this.mode = "in-process";
    this.workspace = config.workspace;
    this.timeoutMs = config.timeoutMs;
    this.addonPath = config.addonPath ?? DEFAULT_ADDON;
    this.configFile = config.configFile;
    this.dataDir = resolve(config.dataDir ?? join(host.stateDir ?? join(process.env.HOME ?? ".", ".openclaw"), "plugins", "cairn", "data"));
    this.where = `cairn in process (data dir ${this.dataDir})`;
  }

  /** The open store, opening it on first use. */
  store() {
    let entry = stores.get(this.dataDir);
    if (!entry) {
      const opening = (async () => {
        const addon = loadAddon(this.addonPath);
        return addon.open({ dataDir: this.dataDir, configFile: this.configFile });
      })();
      entry = { opening };
      stores.set(this.dataDir, entry);
      // A failed open (locked, missing addon) is tried again on the next call.
      opening.catch(() => {
        if (stores.get(this.dataDir) === entry) stores.delete(this.dataDir);
      });
    }
    return entry.opening;
  }

  /** One facade call, bounded by `timeoutMs`. */
  async call(request) {
    const store = await this.store();
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(failure(`${request.op}: no answer within ${this.timeoutMs} ms`, 0, "timeout")),
        this.timeoutMs,
      );
      timer.unref?.();
    });
    try {
      return await Promise.race([store.call(request), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  ws(op, args) {
    return this.call({ op, workspace: this.workspace, ...args });
  }

  bootstrap(spec) {
    return this.ws("bootstrap", { spec });
  }
  ingest(turns) {
    return this.ws("ingest", { turns });
  }
  afterTurn(session) {
    return this.ws("after_turn", { session });
  }
  assemble(body) {
    return this.ws("assemble", { body });
  }
  beforeCompaction(session) {
    return this.ws("before_compaction", { session });
  }
  reset(session) {
    return this.ws("before_reset", { session });
  }
  end(session) {
    return this.ws("session_end", { session });
  }
  search(request) {
    return this.ws("search", { request });
  }
  get(id, q = {}) {
    return this.ws("get", { id, asking: q.session, destination: q.destination });
  }
  expand(id, q = {}) {
    return this.ws("expand", { id, asking: q.session, destination: q.destination });
  }
  expandAll(id, q = {}) {
    return this.ws("expand_all", { id, from: q.from, asking: q.session, destination: q.destination });
  }
  briefing(q = {}) {
    return this.ws("briefing", { work_context: q.work_context, asking: q.asking, destination: q.destination });
  }
  gatewayStart() {
    return this.call({ op: "gateway_start" });
  }
  session(session, q = {}) {
    return this.ws("session", { session, asking: q.asking });
  }
  transcript(session, q = {}) {
    return this.ws("transcript", { session, from: q.from, limit: q.limit, asking: q.asking, destination: q.destination });
  }
  entries(q = {}) {
    const { asking, destination, ...filter } = q;
    return this.ws("entries", { filter, asking, destination });
  }
  compactionView(session, q = {}) {
    return this.ws("compaction_view", { session, asking: q.session ?? q.asking });
  }
  indexStats() {
    return this.call({ op: "index_stats" });
  }

  /** Flushes and closes this process's store of the data dir (a later call opens it again). */
  async close() {
    const entry = stores.get(this.dataDir);
    if (!entry) return;
    stores.delete(this.dataDir);
    const store = await entry.opening.catch(() => undefined);
    await store?.close();
  }
}
