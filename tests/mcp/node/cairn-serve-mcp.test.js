// The MCP tools over streamable HTTP under `cairn serve` (path in
// CAIRN_BIN), driven by the official TypeScript SDK with a bearer token:
// the token decides the workspace, the tools answer as on stdio.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const CAIRN = process.env.CAIRN_BIN ?? "";
const TOKEN = "acme-token-0123456789abcdef";
const ADMIN = "admin-token-0123456789abcdef";

let dir;
let server;
let base;

before(async () => {
  assert.ok(CAIRN && existsSync(CAIRN), "set CAIRN_BIN to a built cairn binary (scripts/dev.sh test does)");
  dir = mkdtempSync(join(tmpdir(), "cairn-serve-mcp-"));
  const data = join(dir, "data");
  const turns = join(dir, "turns.jsonl");
  writeFileSync(
    turns,
    [
      { session: "s1", role: "user", content: "We chose queue-based retries for payments." },
      { session: "s1", role: "assistant", content: "Queue-based retries it is." },
    ]
      .map((t) => JSON.stringify(t))
      .join("\n") + "\n",
  );
  execFileSync(CAIRN, ["--data-dir", data, "ingest", turns]);
  const config = join(dir, "cairn.toml");
  writeFileSync(
    config,
    `[server]\nadmin_token = "${ADMIN}"\n[[server.tokens]]\ntoken = "${TOKEN}"\nworkspaces = ["default"]\n`,
  );
  server = spawn(CAIRN, ["serve", "--listen", "127.0.0.1:0", "--data-dir", data, "--config", config], {
    stdio: ["ignore", "pipe", "ignore"],
    env: { ...process.env, RUST_LOG: "warn", CAIRN_SEARCH__RATE_PER_MINUTE: "1000" },
  });
  const first = await new Promise((resolve, reject) => {
    createInterface({ input: server.stdout }).once("line", resolve);
    server.once("exit", (code) => reject(new Error(`cairn serve exited with ${code}`)));
  });
  base = first.replace("cairn listening on ", "").trim();
  // The server indexes the stored record in the background: wait for it.
  for (let i = 0; ; i++) {
    const stats = await (await fetch(`${base}/v1/stats/index`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
    if (stats.backlog === 0 && stats.indexed > 0) break;
    assert.ok(i < 600, `indexing never caught up: ${JSON.stringify(stats)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
});

after(() => {
  server?.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

async function connect(path = "/v1/workspaces/default/mcp", token = TOKEN) {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}${path}`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "node-http-tests", version: "0.0.0" });
  await client.connect(transport);
  return client;
}

test("the tools over streamable HTTP", async () => {
  const client = await connect();
  try {
    const { tools } = await client.listTools();
    assert.equal(tools.length, 9);
    const found = await client.callTool({ name: "memory_search", arguments: { query: "payments retries" } });
    assert.ok(!found.isError, JSON.stringify(found.structuredContent));
    assert.ok(found.structuredContent.items.length > 0);
    const transcript = await client.callTool({ name: "read_transcript", arguments: { session: "s1" } });
    assert.equal(transcript.structuredContent.turns.length, 2);
    const bad = await client.callTool({ name: "read_transcript", arguments: { session: 5 } });
    assert.equal(bad.isError, true);
    assert.equal(bad.structuredContent.code, "invalid_arguments");
    const { resources } = await client.listResources();
    assert.ok(resources.some((r) => r.uri === "cairn://sessions/s1/context"));
  } finally {
    await client.close();
  }
});

test("the token decides the workspace", async () => {
  await assert.rejects(connect("/v1/workspaces/other/mcp"));
  await assert.rejects(connect("/v1/workspaces/default/mcp", "wrong-token-0123456789"));
});
