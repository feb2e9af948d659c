// cairn mcp, driven by the official TypeScript SDK (@modelcontextprotocol/sdk)
// with node's test runner. Each test spawns the real `cairn mcp` binary
// (path in CAIRN_BIN) over stdio on a data dir filled with the CLI, lists
// the tools, calls each one and checks results and errors: bad arguments are
// tool errors (isError) and the server keeps answering after them.
//
// Run: CAIRN_BIN=target/debug/cairn npm test (scripts/dev.sh test does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const CAIRN = process.env.CAIRN_BIN ?? "";
const SECRET = "sk-abcdefghijklmnopqrstuvwxyz123456";
const TOOLS = [
  "memory_correct",
  "memory_expand",
  "memory_get",
  "memory_note",
  "memory_pin",
  "memory_retract",
  "memory_search",
  "read_transcript",
  "session_list",
];

let dir;
let data;
let summary;

function cairn(...args) {
  return execFileSync(CAIRN, ["--data-dir", data, ...args], { encoding: "utf8" });
}

before(() => {
  assert.ok(CAIRN && existsSync(CAIRN), "set CAIRN_BIN to a built cairn binary (scripts/dev.sh test does)");
  dir = mkdtempSync(join(tmpdir(), "cairn-mcp-node-"));
  data = join(dir, "data");
  const lines = [];
  for (let i = 0; i < 24; i++) {
    const role = i % 2 === 0 ? "user" : "assistant";
    const content =
      i === 22
        ? `The staging API key is ${SECRET}, keep it safe.`
        : `Turn ${i}: we discussed the payments retry queue and the Postgres migration, item ${i}.`;
    lines.push(JSON.stringify({ session: "s1", role, content }));
  }
  const turns = join(dir, "turns.jsonl");
  writeFileSync(turns, lines.join("\n") + "\n");
  cairn("ingest", turns);
  summary = JSON.parse(cairn("compact", "s1", "--budget", "200", "--json")).created[0];
});

after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `body` with a client connected to `cairn mcp` (one at a time: the
 * server holds the store's lock until it exits). */
async function withClient(body, { args = [], env = {} } = {}) {
  const transport = new StdioClientTransport({
    command: CAIRN,
    args: ["--data-dir", data, "mcp", "--caller", "node-tests", ...args],
    env: { ...process.env, CAIRN_SEARCH__RATE_PER_MINUTE: "1000", ...env },
    stderr: "ignore",
  });
  const client = new Client({ name: "node-tests", version: "0.0.0" });
  await client.connect(transport);
  try {
    assert.equal(client.getServerVersion()?.name, "cairn");
    await body(client);
  } finally {
    await client.close();
  }
}

async function ok(client, name, args = {}) {
  const result = await client.callTool({ name, arguments: args });
  assert.ok(!result.isError, `${name}: ${JSON.stringify(result.structuredContent)}`);
  // The text content carries the same JSON as the structured one.
  assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
  return result.structuredContent;
}

async function fails(client, name, args, code) {
  const result = await client.callTool({ name, arguments: args });
  assert.equal(result.isError, true, `${name} ${JSON.stringify(args)}: expected an error`);
  assert.equal(result.structuredContent.code, code, JSON.stringify(result.structuredContent));
  assert.ok(result.structuredContent.message);
  return result.structuredContent;
}

test("lists every tool with a JSON schema", () =>
  withClient(async (client) => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, "object", t.name);
      assert.ok(t.description);
    }
    const search = tools.find((t) => t.name === "memory_search");
    assert.deepEqual(search.inputSchema.required, ["query"]);
    assert.equal(search.annotations?.readOnlyHint, true);
    const note = tools.find((t) => t.name === "memory_note");
    assert.equal(note.annotations?.readOnlyHint, false);
    const retract = tools.find((t) => t.name === "memory_retract");
    assert.equal(retract.annotations?.destructiveHint, true);
    assert.deepEqual(retract.inputSchema.required.sort(), ["id", "reason"]);
  }));

test("calls each tool", () =>
  withClient(async (client) => {
    const found = await ok(client, "memory_search", { query: "payments retry queue", k: 5 });
    assert.ok(found.items.length > 0);
    assert.equal(typeof found.lexical_fallback, "boolean");
    if (process.env.CAIRN_EMBEDDING__MODEL_DIR) {
      assert.equal(found.lexical_fallback, false);
      assert.equal(found.mode, "hybrid");
    }
    assert.ok(found.items.every((i) => typeof i.low_trust === "boolean"));
    const secret = await ok(client, "memory_search", { query: "staging API key", kind: "turn" });
    assert.ok(!JSON.stringify(secret).includes(SECRET));

    const item = await ok(client, "memory_get", { id: found.items[0].id });
    assert.ok(["turns", "entry"].includes(item.kind));
    const range = await ok(client, "memory_get", { id: "session:s1:21-22" });
    assert.deepEqual(range.turns.map((t) => t.seq), [21, 22]);
    assert.ok(!JSON.stringify(range).includes(SECRET));

    const expansion = await ok(client, "memory_expand", { summary });
    assert.equal(expansion.node.id, summary);
    const all = await ok(client, "memory_expand", { summary, all: true });
    assert.equal(all.turns[0].seq, 0);

    const { sessions } = await ok(client, "session_list");
    assert.ok(sessions.some((s) => s.id === "s1"));

    const transcript = await ok(client, "read_transcript", { session: "s1", from: 22 });
    assert.equal(transcript.turns[0].seq, 22);
    assert.ok(!JSON.stringify(transcript).includes(SECRET));

    const entry = await ok(client, "memory_note", {
      kind: "task",
      content: "Rotate the staging key",
      session: "s1",
      turns: [22, 22],
    });
    assert.deepEqual(entry.provenance, { session: "s1", from_seq: 22, to_seq: 22 });
    const again = await ok(client, "memory_get", { id: entry.id });
    assert.equal(again.entry.content, "Rotate the staging key");

    const fixed = await ok(client, "memory_correct", {
      id: entry.id,
      content: "Rotate the staging key today",
      reason: "it leaked",
      status: "open",
      session: "s1",
    });
    assert.equal(fixed.replaces, entry.id);
    assert.equal(fixed.kind, "task");
    const pinned = await ok(client, "memory_pin", { id: fixed.id });
    assert.deepEqual(pinned.pins, [fixed.id]);
    const tombstone = await ok(client, "memory_retract", { id: fixed.id, reason: "done elsewhere" });
    assert.equal(tombstone.reason, "done elsewhere");
    assert.equal(tombstone.removed.entries, 2);
    await fails(client, "memory_get", { id: fixed.id }, "entry_not_found");
  }));

test("bad arguments are tool errors and the server lives on", () =>
  withClient(async (client) => {
    await fails(client, "memory_search", {}, "invalid_arguments");
    await fails(client, "memory_search", { query: "x", caller: "someone-else" }, "invalid_arguments");
    await fails(client, "memory_search", { query: "x", mode: "psychic" }, "invalid_arguments");
    await fails(client, "memory_get", {}, "invalid_arguments");
    await fails(client, "memory_get", { id: "no-such-entry" }, "entry_not_found");
    await fails(client, "memory_expand", { summary: "sum-nope" }, "summary_not_found");
    await fails(client, "read_transcript", { session: "nope" }, "session_not_found");
    await fails(client, "read_transcript", { session: "s1", from: -1 }, "invalid_arguments");
    await fails(client, "memory_note", { kind: "obligation", content: "x", session: "s1" }, "invalid_arguments");
    await fails(client, "memory_note", { kind: "fact", content: "", session: "s1" }, "empty");
    await fails(client, "memory_correct", { id: "no-such-entry", content: "x", reason: "r" }, "entry_not_found");
    await fails(client, "memory_retract", { id: "no-such-entry" }, "invalid_arguments");
    await fails(client, "memory_pin", { id: "no-such-entry", pinned: "yes" }, "invalid_arguments");
    // An unknown tool is a protocol error; the server still answers.
    await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }));
    await ok(client, "session_list");
  }));

test("resources are the briefing and each session's context", () =>
  withClient(async (client) => {
    await ok(client, "memory_note", { kind: "decision", content: "Ship the beta on Friday", session: "s1" });
    const { resources } = await client.listResources();
    const uris = resources.map((r) => r.uri);
    assert.ok(uris.includes("cairn://briefing"));
    assert.ok(uris.includes("cairn://sessions/s1/context"));
    const { resourceTemplates } = await client.listResourceTemplates();
    assert.deepEqual(
      resourceTemplates.map((t) => t.uriTemplate),
      ["cairn://sessions/{session}/context"],
    );
    const briefing = await client.readResource({ uri: "cairn://briefing" });
    assert.ok(briefing.contents[0].text.includes("Ship the beta on Friday"));
    const context = await client.readResource({ uri: "cairn://sessions/s1/context" });
    assert.ok(context.contents[0].text.includes("cairn-memory"));
    assert.ok(!context.contents[0].text.includes(SECRET));
    await assert.rejects(client.readResource({ uri: "cairn://sessions/ghost/context" }));
    await ok(client, "session_list");
  }));

test("search is rate-limited per caller", () =>
  withClient(
    async (client) => {
      await ok(client, "memory_search", { query: "payments" });
      const body = await fails(client, "memory_search", { query: "payments" }, "rate_limited");
      assert.ok(body.message.includes("mcp:node-tests"), body.message);
    },
    { env: { CAIRN_SEARCH__RATE_PER_MINUTE: "1" } },
  ));
