// The plugin's parts without OpenClaw, against a real `cairn serve`
// (CAIRN_BIN): the MEMORY.md splice rules, OpenClaw messages as cairn turns,
// the outbox, cairn down / slow / back, the sub-agent hooks, and the memory
// tools' model-sized results; and the in-process client on the native addon
// (CAIRN_NODE_ADDON, the built cairn.node) answering as cairn serve does.
// Run: CAIRN_BIN=…/cairn CAIRN_NODE_ADDON=…/cairn.node node --test test/unit.test.js

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { END_MARKER, MarkerError, START_MARKER, splice, writeBriefing } from "../src/briefing.js";
import { readConfig } from "../src/config.js";
import { createEngine } from "../src/engine.js";
import { CairnMemory } from "../src/memory.js";
import { kindOf, sessionIdOf, toTurns } from "../src/messages.js";
import { Outbox } from "../src/outbox.js";
import { memoryTools } from "../src/tools.js";
import { cairnClient, indexed, startCairn } from "./harness.js";

const CAIRN = process.env.CAIRN_BIN ?? "";
const ADMIN = "unit-admin-token-0123456789";
const TOKEN = "unit-openclaw-token-0123456789";
let root;
let cairn;
let api;

before(async () => {
  root = mkdtempSync(join(tmpdir(), "cairn-openclaw-unit-"));
  assert.ok(CAIRN && existsSync(CAIRN), "set CAIRN_BIN to a built cairn binary (scripts/dev.sh test-openclaw does)");
  mkdirSync(join(root, "cairn"));
  cairn = await startCairn({
    dataDir: join(root, "cairn", "data"),
    config: `[server]\nrequests_per_minute = 0\nadmin_token = "${ADMIN}"\n[[server.tokens]]\ntoken = "${TOKEN}"\nworkspaces = ["ws"]\n[search]\nrate_per_minute = 1000\nrate_per_day = 100000\nrefresh_ms = 100\n`,
  });
  api = cairnClient(() => cairn.url, ADMIN);
});

after(async () => {
  await cairn?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** A logger that keeps what it was told. */
function recorder() {
  const lines = [];
  const at = (level) => (msg) => lines.push(`${level} ${msg}`);
  return { lines, warn: at("warn"), info: at("info"), error: at("error") };
}

function memoryAt(url, extra = {}) {
  const logger = recorder();
  const config = readConfig({ url, workspace: "ws", token: TOKEN, timeoutMs: 400, outboxDir: join(root, `outbox-${Math.random().toString(36).slice(2)}`), ...extra });
  const memory = new CairnMemory(config, { logger });
  return { memory, logger, config };
}

describe("MEMORY.md splice (the rules of cairn brief --write)", () => {
  const block = "## Briefing\n- a line [e1]\n";
  test("a new file, a file without markers, a file with markers", () => {
    const created = splice(undefined, block);
    assert.ok(created.startsWith("# Memory\n"));
    assert.ok(created.endsWith(`${START_MARKER}\n${block}${END_MARKER}\n`));
    assert.equal(splice("# Mine\nkeep", block), `# Mine\nkeep\n\n${START_MARKER}\n${block}${END_MARKER}\n`);
    const old = `# Goals\n- ship\n${START_MARKER}\nold\n${END_MARKER}\n## Notes\n`;
    assert.equal(splice(old, block), `# Goals\n- ship\n${START_MARKER}\n${block}${END_MARKER}\n## Notes\n`);
  });
  test("broken markers are refused", () => {
    for (const bad of [START_MARKER, END_MARKER, `${END_MARKER}\n${START_MARKER}`, `${START_MARKER}${END_MARKER}${START_MARKER}`]) {
      assert.throws(() => splice(bad, block), MarkerError, bad);
    }
    assert.throws(() => splice(undefined, `x ${START_MARKER}`), MarkerError);
  });
  test("writing keeps the person's bytes and writes nothing when unchanged", async () => {
    const path = join(root, "MEMORY.md");
    writeFileSync(path, "# Mine\n\nmy own line\n");
    assert.equal(await writeBriefing(path, block), "updated");
    assert.equal(await writeBriefing(path, block), "unchanged");
    const text = readFileSync(path, "utf8");
    assert.ok(text.startsWith("# Mine\n\nmy own line\n"));
    writeFileSync(path, `${START_MARKER}\nno end`);
    await assert.rejects(writeBriefing(path, block), MarkerError);
    assert.equal(readFileSync(path, "utf8"), `${START_MARKER}\nno end`, "nothing written");
  });
});

describe("OpenClaw messages as cairn turns", () => {
  test("roles, tool calls and results, keys by position", () => {
    const messages = [
      { role: "user", content: "Ship on Friday.", timestamp: Date.UTC(2026, 0, 2) },
      { role: "assistant", content: [{ type: "thinking", thinking: "hmm" }] },
      { role: "assistant", content: [{ type: "text", text: "Checking." }, { type: "toolCall", id: "c1", name: "memory_search", arguments: { query: "ship" } }] },
      { role: "toolResult", toolCallId: "c1", toolName: "memory_search", content: [{ type: "text", text: "1 result" }] },
      { role: "custom", content: "ignored" },
      { role: "assistant", content: [{ type: "text", text: "Friday it is." }] },
    ];
    const turns = toTurns("agent:main:main", messages, "adv-1", "main");
    assert.deepEqual(
      turns.map((t) => [t.role, t.content, t.idempotency_key]),
      [
        ["user", "Ship on Friday.", "adv-1:0"],
        ["assistant", 'Checking.\n[tool call memory_search {"query":"ship"}]', "adv-1:2"],
        ["tool", "memory_search: 1 result", "adv-1:3"],
        ["assistant", "Friday it is.", "adv-1:5"],
      ],
    );
    assert.equal(turns[0].timestamp, "2026-01-02T00:00:00.000Z");
    assert.equal(turns[2].tool_call_id, "c1");
  });
  test("session keys: stable ids, kinds", () => {
    assert.equal(sessionIdOf("agent:main:telegram:direct:+15551234"), "agent:main:telegram:direct:+15551234");
    assert.match(sessionIdOf("agent:main:discord:#general/thread x"), /^oc-[0-9a-f]{40}$/);
    assert.equal(sessionIdOf("a/b"), sessionIdOf("a/b"));
    assert.equal(kindOf("agent:main:subagent:123"), "subagent");
    assert.equal(kindOf("agent:main:cron:daily"), "cron");
    assert.equal(kindOf("agent:main:main"), "main");
  });
  test("config: defaults and clear errors", () => {
    const c = readConfig({}, {});
    assert.equal(c.url, "http://127.0.0.1:7878");
    assert.equal(c.workspace, "openclaw");
    assert.equal(c.injection, "system");
    assert.equal(readConfig({}, { CAIRN_TOKEN: "from-env-0123456789" }).token, "from-env-0123456789");
    assert.throws(() => readConfig({ url: "nope" }), /config\.url/);
    assert.throws(() => readConfig({ workspace: "a b" }), /config\.workspace/);
    assert.throws(() => readConfig({ injection: "loud" }), /config\.injection/);
  });
});

describe("the outbox", () => {
  test("operations come back in order; half-written files are not operations", async () => {
    const box = new Outbox(join(root, "box"));
    const names = [];
    for (let i = 0; i < 5; i++) names.push(await box.put({ op: "turns", n: i }));
    writeFileSync(join(root, "box", "000-crashed.tmp"), "{");
    assert.deepEqual(await box.names(), names);
    assert.deepEqual((await box.read(names[2])).n, 2);
    await box.remove(names[0]);
    await box.remove(names[0]);
    assert.equal((await box.names()).length, 4);
    await box.reject(names[1], "400 invalid");
    assert.ok(readdirSync(join(root, "box")).includes(`${names[1]}.rejected`));
    assert.equal((await box.names()).length, 3);
  });
});

describe("against cairn serve", () => {
  test("cairn down: the turn completes, the failure is logged once, the turns arrive once when it is back", async () => {
    // A port nobody listens on: connection refused at once.
    const probe = createServer().listen(0, "127.0.0.1");
    await once(probe, "listening");
    const deadPort = probe.address().port;
    probe.close();
    const { memory, logger } = memoryAt(`http://127.0.0.1:${deadPort}`);
    const engine = createEngine(memory, {}, {});
    const key = "agent:main:down";
    const t0 = Date.now();
    const assembled = await engine.assemble({ sessionKey: key, messages: [], prompt: "hello" });
    assert.equal(assembled.systemPromptAddition, undefined, "no block, no error");
    for (const [i, text] of ["first while down", "second while down"].entries()) {
      const r = await engine.commitTurn({
        advancementKey: `adv-${i}`,
        sessionKey: key,
        messages: [
          { role: "user", content: text },
          { role: "assistant", content: [{ type: "text", text: `ok ${i}` }] },
        ],
      });
      assert.equal(r.status, "committed");
    }
    assert.ok(Date.now() - t0 < 3000, "nothing waited on the dead server");
    assert.equal(logger.lines.filter((l) => l.startsWith("warn")).length, 1, logger.lines.join("\n"));
    assert.equal((await memory.outbox.names()).length, 2);
    // cairn comes back (here: the client is pointed at the live server).
    memory.client.baseUrl = cairn.url;
    memory.down.retryAt = 0;
    assert.equal(await memory.drain(), true);
    assert.equal((await memory.outbox.names()).length, 0);
    const turns = await api("GET", `/v1/workspaces/ws/sessions/${encodeURIComponent(key)}/transcript`);
    assert.deepEqual(turns.map((t) => t.content), ["first while down", "ok 0", "second while down", "ok 1"]);
    assert.ok(logger.lines.some((l) => /reachable again/.test(l)));
    // A host retry of an already delivered turn is answered `duplicate` and written nowhere.
    const again = await engine.commitTurn({
      advancementKey: "adv-1",
      sessionKey: key,
      messages: [
        { role: "user", content: "second while down" },
        { role: "assistant", content: [{ type: "text", text: "ok 1" }] },
      ],
    });
    assert.equal(again.status, "duplicate");
    assert.equal((await api("GET", `/v1/workspaces/ws/sessions/${encodeURIComponent(key)}/transcript`)).length, 4);
    // Down again within a minute (a server flapping as it restarts): the same outage, not a second warning.
    memory.client.baseUrl = `http://127.0.0.1:${deadPort}`;
    await engine.assemble({ sessionKey: key, messages: [], prompt: "hello" });
    assert.ok(memory.down, "the breaker is open again");
    assert.equal(logger.lines.filter((l) => l.startsWith("warn")).length, 1, logger.lines.join("\n"));
  });

  test("cairn slow: a hook waits at most timeoutMs, then the breaker answers at once", async () => {
    const sockets = [];
    const hang = createServer((s) => sockets.push(s)).listen(0, "127.0.0.1");
    await once(hang, "listening");
    try {
      const { memory, logger } = memoryAt(`http://127.0.0.1:${hang.address().port}`, { timeoutMs: 300 });
      const engine = createEngine(memory, {}, {});
      let t = Date.now();
      await engine.assemble({ sessionKey: "agent:main:slow", messages: [], prompt: "x" });
      assert.ok(Date.now() - t < 2000, `assemble gave up after the timeout (${Date.now() - t} ms)`);
      t = Date.now();
      const r = await engine.commitTurn({ advancementKey: "s1", sessionKey: "agent:main:slow", messages: [{ role: "user", content: "hi" }] });
      assert.equal(r.status, "committed");
      assert.ok(Date.now() - t < 300, "the open breaker queued the turn without waiting");
      assert.equal(logger.lines.filter((l) => l.startsWith("warn")).length, 1);
    } finally {
      for (const s of sockets) s.destroy();
      hang.close();
    }
  });

  test("sub-agent hooks: the child is a sub-agent session of its parent and sees its lineage only", async () => {
    const { memory } = memoryAt(cairn.url);
    const engine = createEngine(memory, {}, {});
    const commit = (key, adv, text) =>
      engine.commitTurn({ advancementKey: adv, sessionKey: key, messages: [{ role: "user", content: text }] });
    await commit("agent:main:other", "o1", "The vault code is 4471.");
    await commit("agent:main:boss", "b1", "The release train is called KESTREL.");
    const child = "agent:main:subagent:0b1c";
    await engine.prepareSubagentSpawn({ parentSessionKey: "agent:main:boss", childSessionKey: child, contextMode: "isolated" });
    await commit(child, "c1", "Child started.");
    await indexed(api);
    const s = await api("GET", `/v1/workspaces/ws/sessions/${encodeURIComponent(child)}`);
    assert.equal(s.kind, "subagent");
    assert.equal(s.parent, "agent:main:boss");
    const [search] = memoryTools(memory, { sessionKey: child });
    const found = await search.execute("t1", { query: "release train KESTREL vault code 4471" });
    const texts = found.details.items.map((i) => i.text).join("\n");
    assert.match(texts, /KESTREL/, found.content[0].text);
    assert.doesNotMatch(texts, /4471/, "another main session is outside the child's lineage");
    // A sub-agent key nobody announced is closed, not open: a sub-agent without a parent.
    const stray = "agent:main:subagent:stray";
    await commit(stray, "x1", "stray child");
    await indexed(api);
    const strayResult = await memoryTools(memory, { sessionKey: stray })[0].execute("t2", { query: "vault code 4471 KESTREL" });
    assert.doesNotMatch(strayResult.details.items.map((i) => i.text).join("\n"), /4471|KESTREL/, strayResult.content[0].text);
    await engine.onSubagentEnded({ childSessionKey: child, reason: "completed" });
    assert.equal((await api("GET", `/v1/workspaces/ws/sessions/${encodeURIComponent(child)}`)).state, "ended");
  });

  test("memory tools: results sized for a model, the breakdown on request", async () => {
    const { memory } = memoryAt(cairn.url);
    const engine = createEngine(memory, {}, {});
    await engine.commitTurn({ advancementKey: "m1", sessionKey: "agent:main:tools", messages: [{ role: "user", content: "The kiln fires at 1240 degrees." }] });
    await indexed(api);
    const [search, get] = memoryTools(memory, { sessionKey: "agent:main:tools" });
    const short = await search.execute("t", { query: "kiln degrees" });
    const text = short.content[0].text;
    assert.match(text, /\[session:agent:main:tools:0-0\] user turn · agent:main:tools #0 · \d{4}-\d\d-\d\d \d\d:\d\d UTC/, text);
    assert.match(text, /The kiln fires at 1240 degrees\./);
    assert.doesNotMatch(text, /cosine|score|rank/);
    assert.deepEqual(Object.keys(short.details.items[0]).sort(), ["at", "from", "id", "kind", "text"]);
    const long = (await search.execute("t", { query: "kiln degrees", details: true })).content[0].text;
    assert.match(long, /ranking: score \d\.\d{3}, lexical #1/);
    const item = (await get.execute("t", { id: "session:agent:main:tools:0-0" })).content[0].text;
    assert.match(item, /#0 user \(.*\): The kiln fires at 1240 degrees\./);
    const missing = (await get.execute("t", { id: "session:agent:main:tools:9-9" })).content[0].text;
    assert.ok(typeof missing === "string" && missing.length > 0);
    // An entry (what a capture wrote) reads as its kind, text and provenance.
    await engine.commitTurn({ advancementKey: "m2", sessionKey: "agent:main:tools", messages: [{ role: "user", content: "We decided to fire the kiln on Friday." }] });
    await api("POST", `/v1/workspaces/ws/sessions/${encodeURIComponent("agent:main:tools")}/compact`);
    const entries = await api("GET", `/v1/workspaces/ws/entries?session=${encodeURIComponent("agent:main:tools")}`);
    const decision = entries.find((e) => /Friday/.test(e.content) && /decision/.test(e.kind));
    assert.ok(decision, JSON.stringify(entries));
    const entry = (await get.execute("t", { id: decision.id })).content[0].text;
    assert.match(entry, new RegExp(`^\\[${decision.id}\\] ${decision.kind} · \\d{4}-`));
    assert.match(entry, /We decided to fire the kiln on Friday\./);
    assert.match(entry, /From: agent:main:tools #1/);
  });

  test("assemble puts cairn's block in the system prompt (or first, or nowhere)", async () => {
    const { memory } = memoryAt(cairn.url);
    const engine = createEngine(memory, {}, {});
    await engine.commitTurn({ advancementKey: "a1", sessionKey: "agent:main:asm1", messages: [{ role: "user", content: "Our office plant is a monstera named Gerald." }] });
    await indexed(api);
    const system = await engine.assemble({ sessionKey: "agent:main:asm2", messages: [], prompt: "what is the office plant called?", availableTools: new Set(["memory_search"]) });
    assert.match(system.systemPromptAddition, /<cairn-memory session="agent:main:asm2"[^>]*>[\s\S]*Gerald[\s\S]*<\/cairn-memory>/);
    assert.match(system.systemPromptAddition, /memory_search/);
    const prepend = createEngine(memoryAt(cairn.url, { injection: "prepend" }).memory, {}, {});
    const p = await prepend.assemble({ sessionKey: "agent:main:asm2", messages: [{ role: "user", content: "hi" }], prompt: "office plant" });
    assert.equal(p.systemPromptAddition, undefined);
    assert.match(p.messages[0].content, /Gerald/);
    assert.equal(p.messages[1].content, "hi");
    const off = createEngine(memoryAt(cairn.url, { injection: "off" }).memory, {}, {});
    const o = await off.assemble({ sessionKey: "agent:main:asm2", messages: [], prompt: "office plant" });
    assert.equal(o.systemPromptAddition, undefined);
    // Outside OpenClaw, compact says plainly that OpenClaw's compaction is not reachable.
    const c = await engine.compact({ sessionKey: "agent:main:asm1", sessionId: "x" });
    assert.equal(c.ok, false);
  });
});

describe("in process: the native addon (CAIRN_NODE_ADDON)", () => {
  const ADDON = process.env.CAIRN_NODE_ADDON ?? "";

  function nativeMemory(dataDir, extra = {}) {
    const logger = recorder();
    const config = readConfig({
      mode: "in-process",
      dataDir,
      addonPath: ADDON,
      workspace: "ws",
      timeoutMs: 20_000,
      outboxDir: join(root, `outbox-${Math.random().toString(36).slice(2)}`),
      ...extra,
    });
    return { memory: new CairnMemory(config, { logger }), logger };
  }

  test("a missing addon is cairn away: the turn is queued, the failure logged once and named", async () => {
    const { memory, logger } = nativeMemory(join(root, "native-missing"), { addonPath: join(root, "nowhere", "cairn.node") });
    const engine = createEngine(memory, {}, {});
    for (const i of [0, 1]) {
      const r = await engine.commitTurn({ advancementKey: `n-${i}`, sessionKey: "agent:main:n", messages: [{ role: "user", content: `t${i}` }] });
      assert.equal(r.status, "committed");
    }
    assert.equal((await memory.outbox.names()).length, 2);
    const warnings = logger.lines.filter((l) => l.startsWith("warn"));
    assert.equal(warnings.length, 1, logger.lines.join("\n"));
    assert.match(warnings[0], /cairn in process \(data dir .*native-missing\).*addon_missing.*cargo build -p cairn-node/);
  });

  test("the same calls answer as cairn serve does, errors with the same code and status", async () => {
    assert.ok(ADDON && existsSync(ADDON), "set CAIRN_NODE_ADDON to the built addon, cairn.node (scripts/dev.sh test-openclaw builds it)");
    const dataDir = join(root, "native-data");
    const { memory } = nativeMemory(dataDir);
    const http = memoryAt(cairn.url).memory;
    const native = memory.client;
    const session = (id) => ({ id, work_context: "main", kind: "main" });
    const turn = (s, key) => ({ session: s, role: "user", content: "The kiln fires at 1240 degrees.", idempotency_key: key });
    const shape = (v) => (Array.isArray(v) ? v.map(shape) : v && typeof v === "object" ? Object.keys(v).sort() : typeof v);
    const [a, b] = [await native.bootstrap(session("agent:main:nat")), await http.client.bootstrap(session("agent:main:nat"))];
    assert.deepEqual(shape(a), shape(b), "a session");
    const [ia, ib] = [await native.ingest([turn("agent:main:nat", "k0")]), await http.client.ingest([turn("agent:main:nat", "k0")])];
    assert.deepEqual(shape(ia), shape(ib), "acks");
    assert.equal((await native.ingest([turn("agent:main:nat", "k0")])).acks[0].duplicate, true, "the idempotency key holds in process");
    const [ta, tb] = [await native.transcript("agent:main:nat"), await http.client.transcript("agent:main:nat")];
    assert.deepEqual(shape(ta), shape(tb), "a transcript");
    const body = { session: "agent:main:nat", budget_tokens: 300, retrieval: "lexical", trace: false };
    const [ba, bb] = [await native.assemble(body), await http.client.assemble(body)];
    assert.deepEqual(Object.keys(ba).sort(), Object.keys(bb).sort(), "an assembled block");
    assert.match(ba.text, /kiln/);
    const failed = async (p) => p.then(() => assert.fail("no error"), (e) => [e.status, e.code]);
    assert.deepEqual(await failed(native.session("agent:main:none")), await failed(http.client.session("agent:main:none")));
    assert.deepEqual(await failed(native.session("agent:main:none")), [404, "session_not_found"]);
    // A second client of the same data dir in this process shares the one store (sled would refuse a second open).
    const again = nativeMemory(dataDir).memory.client;
    assert.equal((await again.transcript("agent:main:nat")).length, 1);
    await native.close();
    // Closed and let go: another process can open it now.
    const locked = await startCairn({ dataDir, config: "" });
    try {
      // …and while that process holds it, this one cannot: a clear error, status 503 (the breaker's "away").
      const [status, code] = await failed(again.transcript("agent:main:nat"));
      assert.deepEqual([status, code], [503, "data_dir_locked"]);
      const err = await again.transcript("agent:main:nat").catch((e) => e);
      assert.match(err.message, /open in another process/);
    } finally {
      await locked.stop();
    }
  });
});
