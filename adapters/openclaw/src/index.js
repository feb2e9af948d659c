// cairn's OpenClaw plugin (built and tested against openclaw 2026.9.6; the
// plugin API is experimental, so pin the host version).
//
// One plugin fills both of OpenClaw's exclusive memory slots:
//
// - `plugins.slots.contextEngine: "cairn"` — the context engine
//   (`engine.js`): durable turns, the assembled memory block in every
//   prompt, the pre-compaction capture, sub-agent lineage;
// - `plugins.slots.memory: "cairn"` — the memory plugin: the
//   memory_search / memory_get / memory_expand tools (`tools.js`) in place
//   of memory-core's, a prompt section pointing at them, and the briefing in
//   the agent workspace's MEMORY.md (`briefing.js`).
//
// Lifecycle hooks (`api.on`) carry what the engine is not told:
// gateway_start (cairn's own gateway_start sweep, the outbox replayed, the
// briefing refreshed), session_start, before_reset and session_end (cairn's
// reset / end hooks by the stable session key), before_compaction (the
// capture also runs when OpenClaw compacts inside a run without calling the
// engine) and subagent_spawned / subagent_ended (lineage, when OpenClaw
// skips `prepareSubagentSpawn` for a light isolated spawn).
//
// Nothing here runs at registration: OpenClaw registers plugins several
// times per process (a full load and discovery passes), so every side effect
// waits for a hook. In process (`mode: "in-process"`, native.js) that is
// also when cairn's store opens, and gateway_stop flushes and closes it.
//
// One gateway method, `cairn.read` (operator read scope), answers reads of
// this gateway's cairn the way the HTTP API would: in process, the store
// belongs to the gateway's process and nothing else can open it, so
// `openclaw gateway call cairn.read --params '{"op":"transcript",
// "session":"agent:main:main"}'` is how to look inside.

import { writeBriefing as spliceBriefing, MarkerError } from "./briefing.js";
import { readConfig } from "./config.js";
import { createEngine, ENGINE_ID } from "./engine.js";
import { memoryFor } from "./memory.js";
import { memoryTools } from "./tools.js";
import { join } from "node:path";

export const PLUGIN_ID = "cairn";
const TOOL_NAMES = ["memory_search", "memory_get", "memory_expand"];

/** `cairn.read`'s operations: the reads of the workspace, as the HTTP API answers them. */
export const READS = {
  session: (api, p) => api.session(need(p, "session"), { asking: p.asking }),
  transcript: (api, p) => api.transcript(need(p, "session"), { from: p.from, limit: p.limit }),
  entries: (api, p) =>
    api.entries({ session: p.session, kind: p.kind, subject: p.subject, work_context: p.work_context, all: p.all, limit: p.limit }),
  compaction: (api, p) => api.compactionView(need(p, "session")),
  summary_turns: (api, p) => api.expandAll(need(p, "id"), { from: p.from }),
  search: (api, p) => api.search({ query: need(p, "query"), k: p.k, caller: "openclaw-operator" }),
  briefing: (api, p) => api.briefing({ work_context: p.work_context }),
  index_stats: (api) => api.indexStats(),
};

function need(params, key) {
  const value = params?.[key];
  if (typeof value !== "string" || !value) throw Object.assign(new TypeError(`cairn.read: ${key} is required`), { invalid: true });
  return value;
}
const BRIEFING_EVERY_MS = 60_000;
const CAPTURE_DEDUP_MS = 10_000;

function stateDirOf(api) {
  try {
    return api.runtime?.state?.resolveStateDir?.();
  } catch {
    return undefined;
  }
}

export function register(api) {
  const config = readConfig(api.pluginConfig);
  const memory = memoryFor(config, {
    logger: api.logger,
    stateDir: stateDirOf(api),
    providerUrl: (provider) => api.config?.models?.providers?.[provider]?.baseUrl,
  });
  const log = memory.log;
  const warned = new Set();

  /** The briefing into `<dir>/MEMORY.md` (at most once a minute per folder unless forced). */
  async function writeBriefing(dir, { force = false } = {}) {
    if (!config.briefing || !dir) return;
    const last = memory.briefingAt.get(dir) ?? 0;
    if (!force && Date.now() - last < BRIEFING_EVERY_MS) return;
    memory.briefingAt.set(dir, Date.now());
    try {
      const briefing = await memory.api.briefing({ work_context: config.workContext });
      const path = join(dir, "MEMORY.md");
      const written = await spliceBriefing(path, briefing.text ?? "");
      if (written !== "unchanged") log.info?.(`cairn: briefing ${written} in ${path}`);
    } catch (err) {
      const key = `${dir}:${err?.name}`;
      if (err?.code === "workspace_not_found") {
        // Nothing stored yet: no briefing to write.
      } else if (err instanceof MarkerError) {
        if (!warned.has(key)) log.warn(`cairn: ${join(dir, "MEMORY.md")}: ${err.message}; the briefing is not written until the markers are fixed`);
        warned.add(key);
      } else if (!memory.down) {
        log.warn(`cairn: briefing for ${dir}: ${memory.describe(err)}`);
      }
    }
  }

  /** cairn's compaction hook: the mandatory capture, then its lossless pass (once per burst). */
  async function preCompaction(key, workspaceDir) {
    if (!key || memory.ignored(key)) return;
    const last = memory.recentCaptures.get(key) ?? 0;
    if (Date.now() - last < CAPTURE_DEDUP_MS) return;
    memory.recentCaptures.set(key, Date.now());
    try {
      await memory.deliver({ op: "bootstrap", key });
      const report = await memory.api.beforeCompaction(memory.sessionOf(key));
      const captured = report?.capture?.entries?.length ?? 0;
      const summaries = report?.compaction?.created?.length ?? 0;
      log.info?.(`cairn: pre-compaction capture of ${key}: ${captured} entries; ${summaries} new summaries`);
      // What the capture found belongs in the briefing now, whatever OpenClaw's own pass does next.
      await writeBriefing(workspaceDir, { force: true });
    } catch (err) {
      log.warn(`cairn: pre-compaction capture of ${key} did not run (${memory.describe(err)}); its turns are kept and captured later`);
    }
  }

  const plugin = { writeBriefing, preCompaction };

  api.registerContextEngine(ENGINE_ID, (ctx) => createEngine(memory, ctx ?? {}, plugin));

  api.registerMemoryCapability({
    promptBuilder: ({ availableTools }) => {
      const has = (name) => availableTools?.has?.(name);
      if (!has("memory_search") && !has("tool_search")) return [];
      return [
        "## Memory (cairn)",
        "cairn keeps every conversation of this gateway. Before answering about past work, decisions, dates, people or preferences, call memory_search; read an item in full with memory_get and a summary's original words with memory_expand.",
      ];
    },
  });

  api.registerTool((ctx) => memoryTools(memory, ctx), { names: TOOL_NAMES });

  const keyOf = (event, ctx) => event?.sessionKey ?? ctx?.sessionKey;
  const enqueue = (what, op) =>
    memory.ignored(op.key)
      ? undefined
      : memory.deliver(op).catch((err) => log.warn(`cairn: ${what} of ${op.key}: ${memory.describe(err)}`));

  api.registerGatewayMethod?.(
    "cairn.read",
    async ({ params, respond }) => {
      const read = READS[params?.op];
      if (!read) {
        respond(false, undefined, { code: "INVALID_REQUEST", message: `cairn.read: op is one of ${Object.keys(READS).join(", ")}` });
        return;
      }
      try {
        respond(true, await read(memory.api, params));
      } catch (err) {
        const code = err?.invalid || (err?.status >= 400 && err?.status < 500) ? "INVALID_REQUEST" : "UNAVAILABLE";
        respond(false, undefined, { code, message: err?.invalid ? err.message : memory.describe(err), details: { cairn: err?.code } });
      }
    },
    { scope: "operator.read" },
  );

  api.on("gateway_start", async (_event, ctx) => {
    try {
      await memory.api.gatewayStart();
    } catch (err) {
      if (err?.status === 401 || err?.status === 403) {
        log.info?.("cairn: gateway_start needs cairn's admin token (a workspace token cannot run the sweep); skipped");
      } else if (!memory.down) {
        log.warn(`cairn: gateway_start: ${memory.describe(err)}`);
      }
    }
    await memory.drain().catch(() => false);
    await writeBriefing(ctx?.workspaceDir, { force: true });
  });

  api.on("gateway_stop", async () => {
    // In process: the store's last writes flushed and its data dir let go
    // (a restart in the same process opens it again on first use).
    try {
      await memory.client.close();
      if (memory.client.mode === "in-process") log.info?.(`cairn: closed ${memory.client.where}`);
    } catch (err) {
      log.warn(`cairn: closing ${memory.client.where}: ${memory.describe(err)}`);
    }
  });

  api.on("session_start", async (event, ctx) => {
    const key = keyOf(event, ctx);
    if (key) await enqueue("session start", { op: "bootstrap", key });
  });

  api.on("before_reset", async (event, ctx) => {
    const key = keyOf(event, ctx);
    if (!key) return;
    memory.recentResets.set(key, Date.now());
    await enqueue("reset", { op: "reset", key });
  });

  api.on("session_end", async (event, ctx) => {
    const key = keyOf(event, ctx);
    if (!key) return;
    switch (event?.reason) {
      case "deleted":
        await enqueue("session end", { op: "end", key });
        break;
      case "new":
      case "reset":
      case "idle":
      case "daily": {
        // The key lives on under a new sessionId: cairn records a reset.
        const reset = memory.recentResets.get(key) ?? 0;
        if (Date.now() - reset > CAPTURE_DEDUP_MS) await enqueue("reset", { op: "reset", key });
        break;
      }
      default:
        // shutdown, restart, compaction: the conversation goes on.
        break;
    }
  });

  api.on("before_compaction", async (_event, ctx) => {
    await preCompaction(ctx?.sessionKey, ctx?.workspaceDir);
  });

  api.on("after_compaction", async (_event, ctx) => {
    await writeBriefing(ctx?.workspaceDir, { force: true });
  });

  api.on("subagent_spawned", async (event, ctx) => {
    const child = event?.childSessionKey;
    const parent = ctx?.requesterSessionKey;
    if (!child) return;
    if (parent && !memory.parents.has(child)) memory.parents.set(child, parent);
    await enqueue("sub-agent bootstrap", { op: "bootstrap", key: child, parentKey: memory.parents.get(child) });
  });

  api.on("subagent_ended", async (event) => {
    const child = event?.targetSessionKey;
    if (child) await enqueue("sub-agent end", { op: "end", key: child });
  });
}

export default {
  id: PLUGIN_ID,
  name: "cairn memory",
  description: "cairn as OpenClaw's memory slot and context engine",
  register,
};
