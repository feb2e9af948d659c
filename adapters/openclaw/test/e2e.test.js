// cairn inside the real OpenClaw (openclaw@2026.9.6), end to end, in both
// of the plugin's modes.
//
// Real parts: the OpenClaw gateway and CLI (OPENCLAW_BIN, run by Node 24),
// this plugin loaded from its folder into both of OpenClaw's memory slots,
// and cairn itself: a real `cairn serve` (CAIRN_BIN) on a temporary data dir
// in mode `server`, the native addon (CAIRN_NODE_ADDON, the built
// `cairn.node`) inside the gateway's process in mode `in-process`. The only
// fake is the model: a stub OpenAI-compatible server on 127.0.0.1 that
// records every request and answers by the test's rule (text, or a tool
// call). Nothing reaches beyond 127.0.0.1.
//
// What it shows, in each mode and in order (each test builds on the ones
// before):
//  1. a fact said in one session reaches the model's prompt in a later
//     session whose own history is empty (and prints what the model got);
//  2. the model's memory_search call is answered from cairn, sized for a
//     model (no ranking breakdown unless asked);
//  3. `openclaw sessions compact` runs cairn's pre-compaction capture and
//     lossless compaction, and nothing said before is lost: the summaries
//     expand back to every original turn, and the model's memory_expand
//     call gets the exact words back;
//  4. a sub-agent spawned by the model (sessions_spawn) is recorded with
//     its parent and sees only its lineage;
//  5. server: with cairn stopped, turns complete, the failure is logged
//     once, and the missed turns arrive exactly once, in order, when cairn
//     is back; in process: a restart of the gateway keeps the memory (the
//     store is closed on gateway_stop and opened again);
//  6. MEMORY.md carries cairn's briefing between its markers, the person's
//     own lines kept;
// and once, the control: the same conversation with OpenClaw's own
// memory-core does not put the fact in front of the model (it involves no
// cairn, so no mode).
//
// The test reads what cairn stored through cairn serve's HTTP API (admin
// token) in server mode, and through the gateway in process
// (`openclaw gateway call cairn.read`): the gateway's process holds the
// data dir, as it would for a user.
//
// Run: OPENCLAW_BIN=…/openclaw.mjs CAIRN_BIN=…/cairn CAIRN_NODE_ADDON=…/cairn.node \
//   node --test test/e2e.test.js   (scripts/dev.sh test-openclaw builds and installs all three).
// CAIRN_E2E_MODES=server (or in-process) runs one mode.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import {
  CAIRN_BIN,
  OPENCLAW_BIN,
  cairnClient,
  freePort,
  openclaw,
  openclawConfig,
  startCairn,
  startGateway,
  until,
  indexed as waitIndexed,
} from "./harness.js";
import { StubModel, lastPersonText, systemOf, textOf } from "./stub-model.js";

const PLUGIN_DIR = join(dirname(fileURLToPath(import.meta.url)), "..");
const CAIRN_NODE_ADDON = process.env.CAIRN_NODE_ADDON ?? "";
const MODES = (process.env.CAIRN_E2E_MODES ?? "server,in-process").split(",").map((m) => m.trim()).filter(Boolean);
const WS = "openclaw";
const ADMIN = "e2e-admin-token-0123456789";
const PLUGIN_TOKEN = "e2e-openclaw-token-0123456789";

const CAIRN_CONFIG = `
[server]
requests_per_minute = 0
admin_token = "${ADMIN}"
[[server.tokens]]
token = "${PLUGIN_TOKEN}"
workspaces = ["${WS}"]
[search]
rate_per_minute = 1000
rate_per_day = 100000
refresh_ms = 100
[compaction]
budget_tokens = 60
min_tail_turns = 2
`;

let stub;
let root;

before(async () => {
  assert.ok(OPENCLAW_BIN && existsSync(OPENCLAW_BIN), "set OPENCLAW_BIN to openclaw.mjs of openclaw@2026.9.6 (scripts/dev.sh test-openclaw installs it)");
  const [major, minor] = process.versions.node.split(".").map(Number);
  assert.ok(major > 24 || (major === 24 && minor >= 16), `OpenClaw needs Node >= 24.16; this is ${process.version}`);
  root = mkdtempSync(join(tmpdir(), "cairn-openclaw-e2e-"));
  stub = new StubModel();
  await stub.start();
  stub.answer(() => ({ text: "Noted." }));
});

after(async () => {
  await stub?.stop();
  if (root && !process.env.KEEP_E2E) rmSync(root, { recursive: true, force: true });
  else if (root) console.log(`kept ${root}`);
});

const enc = encodeURIComponent;

/** The cairn block of a system prompt. */
function cairnBlock(system) {
  const m = /<cairn-memory session=[\s\S]*?<\/cairn-memory>/.exec(system);
  return m ? m[0] : "";
}

/** What cairn stored, read through cairn serve's HTTP API with the admin token. */
function httpReads(getUrl) {
  const api = cairnClient(getUrl, ADMIN);
  const ws = (path) => `/v1/workspaces/${WS}${path}`;
  return {
    transcript: (key) => api("GET", ws(`/sessions/${enc(key)}/transcript`)),
    entries: ({ session }) => api("GET", ws(`/entries?session=${enc(session)}`)),
    compaction: (key) => api("GET", ws(`/sessions/${enc(key)}/compaction`)),
    summaryTurns: (id) => api("GET", ws(`/summaries/${enc(id)}/turns`)),
    session: (key) => api("GET", ws(`/sessions/${enc(key)}`)),
    search: (query, k) => api("POST", ws("/search"), { query, k }),
    indexStats: () => api("GET", "/v1/stats/index"),
  };
}

/** What cairn stored, read through the gateway that holds it (`openclaw gateway call cairn.read`). */
function gatewayReads(getHome) {
  const read = async (params) => {
    const r = await openclaw(getHome(), ["gateway", "call", "cairn.read", "--params", JSON.stringify(params), "--json"]);
    if (r.code !== 0) throw new Error(`openclaw gateway call cairn.read ${JSON.stringify(params)} exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
    const at = r.stdout.search(/[[{]/);
    return JSON.parse(r.stdout.slice(at));
  };
  return {
    transcript: (session) => read({ op: "transcript", session }),
    entries: ({ session }) => read({ op: "entries", session }),
    compaction: (session) => read({ op: "compaction", session }),
    summaryTurns: (id) => read({ op: "summary_turns", id }),
    session: (session) => read({ op: "session", session }),
    search: (query, k) => read({ op: "search", query, k }),
    indexStats: () => read({ op: "index_stats" }),
  };
}

function suite(mode) {
  let cairn;
  let cairnPort;
  let gateway;
  let home;
  let outboxDir;
  let inspected;
  let config;
  let dir;
  const reads = mode === "server" ? httpReads(() => cairn.url) : gatewayReads(() => home);

  /** One `openclaw agent` turn through the gateway; asserts it completed. */
  async function turn(sessionKey, message) {
    const r = await openclaw(home, ["agent", "--session-key", sessionKey, "-m", message, "--json", "--timeout", "120"]);
    assert.equal(r.code, 0, `openclaw agent (${sessionKey}) exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
    assert.equal(r.json?.status, "ok", `turn status: ${r.stdout.slice(0, 2000)}`);
    return r;
  }

  /** cairn's stored turns of a session. */
  const transcript = (key) => reads.transcript(key);

  /** Waits until cairn's search index has caught up (so retrieval sees the last turns). */
  const indexed = () => waitIndexed((_method, _path) => reads.indexStats(), mode === "server" ? 30_000 : 90_000);

  /** The plugin's lines in the gateway's output, oldest first. */
  function cairnLog() {
    return (gateway?.output() ?? "")
      .split("\n")
      .map((l) => l.slice(l.indexOf("cairn: ")))
      .filter((l) => l.startsWith("cairn: "));
  }

  before(async () => {
    dir = join(root, mode);
    mkdirSync(join(dir, "cairn"), { recursive: true });
    home = join(dir, "openclaw");
    outboxDir = join(dir, "outbox");
    mkdirSync(join(home, "workspace"), { recursive: true });
    // The person's own MEMORY.md: cairn must keep every line of it.
    writeFileSync(join(home, "workspace", "MEMORY.md"), "# My notes\n\nKeep this line: the plants need water on Sundays.\n");
    const common = { workspace: WS, budgetTokens: 600, timeoutMs: 2000, outboxDir };
    let cairnConfig;
    if (mode === "server") {
      assert.ok(CAIRN_BIN && existsSync(CAIRN_BIN), "set CAIRN_BIN to a built cairn binary (scripts/dev.sh test-openclaw does)");
      cairn = await startCairn({ dataDir: join(dir, "cairn", "data"), config: CAIRN_CONFIG });
      cairnPort = cairn.port;
      cairnConfig = { ...common, url: cairn.url, token: PLUGIN_TOKEN };
    } else {
      assert.ok(CAIRN_NODE_ADDON && existsSync(CAIRN_NODE_ADDON), "set CAIRN_NODE_ADDON to the built addon, cairn.node (scripts/dev.sh test-openclaw builds it)");
      const configFile = join(dir, "cairn", "cairn.toml");
      writeFileSync(configFile, CAIRN_CONFIG);
      cairnConfig = { ...common, mode: "in-process", dataDir: join(dir, "cairn", "data"), configFile, addonPath: CAIRN_NODE_ADDON };
    }
    config = openclawConfig({
      home,
      modelUrl: stub.url,
      gatewayPort: await freePort(),
      plugins: {
        load: { paths: [PLUGIN_DIR] },
        allow: ["cairn"],
        slots: { memory: "cairn", contextEngine: "cairn" },
        entries: {
          cairn: { enabled: true, config: cairnConfig },
          "memory-core": { enabled: false },
        },
      },
    });
    // The documented check, run before the gateway starts: both take
    // OpenClaw's state lock, and a gateway whose start-up checks find it
    // held exits ("another OpenClaw process owns gateway-lifecycle").
    mkdirSync(join(home, "state"), { recursive: true });
    writeFileSync(join(home, "openclaw.json"), JSON.stringify(config, null, 2));
    inspected = await openclaw(home, ["plugins", "inspect", "cairn", "--runtime", "--json"]);
    gateway = await startGateway(home, config);
    stub.answer(() => ({ text: "Noted." }));
  });

  after(async () => {
    await gateway?.stop();
    await cairn?.stop();
  });

  test("the plugin loads into both memory slots (openclaw plugins inspect)", async () => {
    const r = await inspected;
    assert.equal(r.code, 0, r.stderr);
    const p = r.json.plugin;
    assert.equal(p.status, "loaded", JSON.stringify(p.error ?? p));
    assert.deepEqual(p.contextEngineIds, ["cairn"]);
    assert.deepEqual([...p.toolNames].sort(), ["memory_expand", "memory_get", "memory_search"]);
    assert.equal(p.memorySlotSelected, true);
  });

  test("a fact said in one session reaches the model's prompt in a later, empty session", async () => {
    await turn("agent:main:first", "Please remember: my favourite colour is teal, and my cat is called Miso.");
    const stored = await transcript("agent:main:first");
    assert.deepEqual(
      stored.map((t) => t.role),
      ["user", "assistant"],
      "commitTurn stored the user turn and the reply under the stable session key",
    );
    await indexed();
    const before = stub.requests.length;
    await turn("agent:main:second", "Quick question: what is my favourite colour?");
    const req = stub.requests.slice(before).find((r) => r.session === "agent:main:second");
    assert.ok(req, "the stub model got the second session's request");
    const system = systemOf(req.body);
    const block = cairnBlock(system);
    const history = req.body.messages.filter((m) => m.role !== "system" && m.role !== "developer");
    console.log("\n--- what the model received in the new session (agent:main:second) ---");
    console.log("system prompt, cairn's part:\n" + block);
    console.log("messages after the system prompt:");
    for (const m of history) console.log(`  [${m.role}] ${textOf({ messages: [m] }).slice(0, 400).replace(/\n/g, " ⏎ ")}`);
    console.log("--- end ---\n");
    assert.ok(block, "cairn's block is in the system prompt");
    assert.match(block, /teal/, "the fact from the first session is in cairn's block");
    assert.ok(!history.some((m) => /teal/i.test(textOf({ messages: [m] }))), "the new session's own history does not hold the fact");
  });

  test("the model's memory_search call is answered from cairn, sized for a model", async () => {
    stub.answer((body, { toolResult, session }) => {
      if (session !== "agent:main:third") return { text: "Noted." };
      if (toolResult) return { text: "Your cat is Miso." };
      return { tool: "memory_search", args: { query: "cat called Miso" } };
    });
    const before = stub.requests.length;
    const r = await turn("agent:main:third", "What is my cat called?");
    const reqs = stub.requests.slice(before).filter((x) => x.session === "agent:main:third");
    const called = reqs.find((x) => x.called)?.called;
    assert.ok(called, "the model called a tool");
    const answered = reqs.find((x) => x.toolResult);
    assert.ok(answered, "the tool result came back to the model");
    const text = answered.toolResult;
    assert.match(text, /Miso/, `memory_search found the cat: ${text}`);
    assert.match(text, /session:agent:main:first:\d+-\d+/, "each result carries the id memory_get takes");
    assert.match(text, /agent:main:first/, "and where it comes from");
    for (const detail of ["cosine", "lexical_rank", "vector_rank", "lexical_score"]) {
      assert.doesNotMatch(text, new RegExp(detail), `no ${detail} unless details are asked for`);
    }
    assert.match(r.stdout, /Your cat is Miso/);
    stub.answer(() => ({ text: "Noted." }));
  });

  test("openclaw sessions compact runs cairn's capture and compaction; nothing said is lost", async () => {
    const key = "agent:main:fourth";
    const said = [
      "We decided to ship the beta on Friday the 18th.",
      "The staging password hint is ORCHID-7, keep it handy.",
      "TODO: write the release notes before Thursday.",
      "The deploy window is 02:00 UTC on launch day.",
      "Maria owns the rollback plan.",
    ];
    for (const line of said) await turn(key, line);
    const entriesBefore = await reads.entries({ session: key });
    const viewBefore = await reads.compaction(key).catch(() => null);
    const r = await openclaw(home, ["sessions", "compact", key, "--json"]);
    assert.equal(r.code, 0, `openclaw sessions compact: ${r.stdout}\n${r.stderr}`);
    assert.equal(r.json?.ok, true, r.stdout);
    // cairn's pre-compaction capture wrote what the session decided and owes.
    const entriesAfter = await until("the pre-compaction capture's entries", async () => {
      const e = await reads.entries({ session: key });
      return e.length > entriesBefore.length ? e : undefined;
    }, 60_000);
    const captured = entriesAfter.map((e) => `${e.kind}: ${e.content}`).join("\n");
    assert.match(captured, /Friday/, `the decision was captured:\n${captured}`);
    await until("the capture's line in the gateway log", () => cairnLog().some((l) => /pre-compaction capture of agent:main:fourth: [1-9]\d* entries/.test(l)), 15_000);
    // cairn's own compaction: summaries over the turns before the kept tail…
    const view = await reads.compaction(key);
    const ids = view.items.filter((c) => c.type === "summary").map((c) => c.id);
    assert.ok(ids.length > 0, `cairn's view of the session has summaries: ${JSON.stringify(view)}`);
    assert.ok(view.passes > (viewBefore?.passes ?? 0), "the compaction pass ran now");
    // …each expands back to the exact original turns.
    let expanded = "";
    for (const id of ids) {
      const all = await reads.summaryTurns(id);
      expanded += all.turns.map((t) => t.content).join("\n") + "\n";
    }
    const stored = (await transcript(key)).map((t) => t.content).join("\n");
    for (const line of said) assert.ok(stored.includes(line), `the record keeps "${line}"`);
    const covered = said.filter((line) => expanded.includes(line));
    assert.ok(covered.length >= 1, `the summaries expand to original turns:\n${expanded}`);
    // The model gets the exact words back through OpenClaw: memory_expand.
    stub.answer((body, { toolResult, session }) => {
      if (session !== key) return { text: "Noted." };
      if (toolResult) return { text: "Found it." };
      return { tool: "memory_expand", args: { id: ids[0], all: true } };
    });
    const before = stub.requests.length;
    await turn(key, "What did we say earlier, word for word?");
    const answered = stub.requests.slice(before).find((x) => x.session === key && x.toolResult);
    assert.ok(answered, "memory_expand's result came back to the model");
    const result = answered.toolResult;
    for (const line of covered) assert.ok(result.includes(line.slice(0, 30)), `memory_expand gave back "${line}": ${result.slice(0, 1500)}`);
    stub.answer(() => ({ text: "Noted." }));
  });

  test("a sub-agent spawned by the model sees only its lineage", async () => {
    const parent = "agent:main:fifth";
    await turn(parent, "The project codename is HERON.");
    await indexed();
    stub.answer((body, { toolResult, session }) => {
      if (session === parent) {
        if (toolResult) return { text: "A helper is on it." };
        if (/Spawn a helper/.test(lastPersonText(body))) {
          return { tool: "sessions_spawn", args: { task: "Find the project codename and my favourite colour.", context: "isolated" } };
        }
        return { text: "Noted." };
      }
      if (session?.includes(":subagent:")) {
        if (toolResult) return { text: "Done." };
        return { tool: "memory_search", args: { query: "project codename HERON favourite colour teal" } };
      }
      return { text: "Noted." };
    });
    const before = stub.requests.length;
    await turn(parent, "Spawn a helper to look things up.");
    const childReq = await until("the sub-agent's memory_search result", () =>
      stub.requests
        .slice(before)
        .find((x) => x.session?.includes(":subagent:") && x.toolResult),
    90_000);
    const child = childReq.session;
    const session = await reads.session(child);
    assert.equal(session.kind, "subagent", JSON.stringify(session));
    assert.equal(session.parent, parent, "cairn recorded the spawning session as the parent");
    const result = childReq.toolResult;
    assert.match(result, /HERON/, `the sub-agent finds its parent's turns: ${result}`);
    assert.doesNotMatch(result, /teal|Miso/, "and nothing from sessions outside its lineage");
    const firstChild = stub.requests.slice(before).find((x) => x.session === child);
    assert.doesNotMatch(cairnBlock(systemOf(firstChild.body)), /teal|Miso/, "its memory block holds nothing from outside its lineage either");
    // An admin read of the same search for a main session does find the colour: the filter is lineage, not absence.
    const open = await reads.search("favourite colour teal", 5);
    assert.ok(open.items.some((i) => /teal/.test(i.snippet)), "the fact exists in the workspace");
    await until("the sub-agent to finish", () => stub.requests.some((x) => x.session === child && x.reply?.text === "Done."), 30_000);
    stub.answer(() => ({ text: "Noted." }));
  });

  if (mode === "server") {
    test("with cairn stopped the turn completes; the missed turns arrive once it is back", async () => {
      const key = "agent:main:sixth";
      const logBefore = cairnLog().length;
      await cairn.stop();
      await turn(key, "While cairn is down: the boat is named PELICAN.");
      await turn(key, "Still down: the anchor is called ALBATROSS.");
      // (The gateway writes its log file asynchronously: wait for the line.)
      await until("the outage warning in the gateway log", () => cairnLog().slice(logBefore).some((l) => /unreachable/.test(l)), 15_000);
      const log = cairnLog().slice(logBefore);
      const warnings = log.filter((l) => /unreachable.*kept in/.test(l));
      assert.equal(warnings.length, 1, `the outage is logged once over two turns:\n${log.join("\n")}`);
      const queued = readdirSync(outboxDir).filter((n) => n.endsWith(".json"));
      assert.ok(queued.length >= 2, `the turns wait in the outbox: ${queued}`);
      cairn = await startCairn({ dataDir: join(dir, "cairn", "data"), config: CAIRN_CONFIG, port: cairnPort });
      const turns = await until("the queued turns to reach cairn", async () => {
        const t = await transcript(key);
        return t.length >= 4 ? t : undefined;
      }, 90_000, 500);
      assert.deepEqual(
        turns.map((t) => [t.role, t.content.replace(/\s+/g, " ")]),
        [
          ["user", "While cairn is down: the boat is named PELICAN."],
          ["assistant", "Noted."],
          ["user", "Still down: the anchor is called ALBATROSS."],
          ["assistant", "Noted."],
        ],
        "each missed turn arrived exactly once, in order",
      );
      await until("the outbox to empty", () => readdirSync(outboxDir).filter((n) => n.endsWith(".json")).length === 0, 30_000);
      await until("'reachable again' in the gateway log", () => cairnLog().slice(logBefore).some((l) => /reachable again/.test(l)), 15_000);
      // And the next turn goes straight through.
      await turn(key, "cairn is back.");
      assert.equal((await transcript(key)).length, 6);
    });
  }

  if (mode === "in-process") {
    test("a restart of the gateway keeps memory (closed on stop, opened again on first use)", async () => {
      const old = gateway;
      await gateway.stop();
      gateway = undefined;
      assert.match(old.output(), /cairn: closed cairn in process \(data dir /, "gateway_stop flushed and closed the store");
      gateway = await startGateway(home, config);
      await indexed();
      const stored = await transcript("agent:main:first");
      assert.equal(stored.length, 2, "the first session's turns are still there");
      const before = stub.requests.length;
      await turn("agent:main:seventh", "After the restart: what is my favourite colour?");
      const req = stub.requests.slice(before).find((r) => r.session === "agent:main:seventh");
      assert.ok(req, "the stub model got the new session's request");
      assert.match(cairnBlock(systemOf(req.body)), /teal/, "the fact from before the restart is in cairn's block");
    });
  }

  test("MEMORY.md carries cairn's briefing between its markers; the person's lines stay", async () => {
    const path = join(home, "workspace", "MEMORY.md");
    const text = await until("the briefing in MEMORY.md", () => {
      const t = readFileSync(path, "utf8");
      return t.includes("<!-- cairn:briefing:start -->") ? t : undefined;
    }, 30_000);
    assert.ok(text.startsWith("# My notes\n\nKeep this line: the plants need water on Sundays.\n"), text);
    assert.equal(text.match(/<!-- cairn:briefing:start -->/g).length, 1);
    assert.equal(text.match(/<!-- cairn:briefing:end -->/g).length, 1);
    const block = text.split("<!-- cairn:briefing:start -->")[1].split("<!-- cairn:briefing:end -->")[0];
    assert.match(block, /Friday/, `the captured decision is in the briefing:\n${block}`);
  });

}

for (const mode of MODES) describe(mode, () => suite(mode));

describe("control", () => {
  test("with OpenClaw's own memory-core the fact does not reach the new session", async () => {
    const home = join(root, "control");
    mkdirSync(join(home, "workspace"), { recursive: true });
    const config = openclawConfig({
      home,
      modelUrl: stub.url,
      gatewayPort: await freePort(),
      plugins: { slots: { memory: "memory-core" }, entries: { "memory-core": { enabled: true } } },
      extra: { memory: { search: { provider: "none" } } },
    });
    const turn = async (sessionKey, message) => {
      const r = await openclaw(home, ["agent", "--session-key", sessionKey, "-m", message, "--json", "--timeout", "120"]);
      assert.equal(r.code, 0, `openclaw agent (${sessionKey}) exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
    };
    const control = await startGateway(home, config);
    try {
      stub.answer(() => ({ text: "Noted." }));
      await turn("agent:main:first", "Please remember: my favourite colour is teal, and my cat is called Miso.");
      const before = stub.requests.length;
      await turn("agent:main:second", "Quick question: what is my favourite colour?");
      const req = stub.requests.slice(before).find((r) => r.session === "agent:main:second");
      assert.ok(req, "the stub model got the control's second request");
      assert.doesNotMatch(textOf(req.body), /teal/i, "without cairn the new session's prompt does not hold the fact");
      assert.equal(cairnBlock(systemOf(req.body)), "");
    } finally {
      await control.stop();
    }
  });
});
