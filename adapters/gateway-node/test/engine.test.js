// The adapter against a real `cairn serve` (path in CAIRN_BIN) with tokens:
// every hook, retries that never write a turn twice, and refusals that are
// not retried. Run: CAIRN_BIN=target/debug/cairn npm test.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { CairnError, createContextEngine } from "../src/index.js";

const CAIRN = process.env.CAIRN_BIN ?? "";
const TOKEN = "acme-token-0123456789abcdef";
const OTHER = "globex-token-0123456789abcdef";

let dir;
let server;
let baseUrl;

before(async () => {
  assert.ok(CAIRN && existsSync(CAIRN), "set CAIRN_BIN to a built cairn binary (scripts/dev.sh test does)");
  dir = mkdtempSync(join(tmpdir(), "cairn-adapter-"));
  const config = join(dir, "cairn.toml");
  writeFileSync(
    config,
    `[server]\nrequests_per_minute = 0\n` +
      `[[server.tokens]]\ntoken = "${TOKEN}"\nworkspaces = ["acme"]\n` +
      `[[server.tokens]]\ntoken = "${OTHER}"\nworkspaces = ["globex"]\n`,
  );
  server = spawn(
    CAIRN,
    ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--config", config],
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, RUST_LOG: "warn" } },
  );
  const lines = createInterface({ input: server.stdout });
  const first = await new Promise((resolve, reject) => {
    lines.once("line", resolve);
    server.once("exit", (code) => reject(new Error(`cairn serve exited with ${code}`)));
  });
  const prefix = "cairn listening on ";
  assert.ok(first.startsWith(prefix), first);
  baseUrl = first.slice(prefix.length).trim();
});

after(() => {
  server?.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

const engine = (options = {}) =>
  createContextEngine({ baseUrl, workspace: "acme", token: TOKEN, minDelayMs: 5, ...options });

/** The session's turns as cairn stored them (the operator's read). */
async function transcript(session) {
  return engine().request("GET", `/v1/workspaces/acme/sessions/${session}/transcript`);
}

test("every hook reaches cairn serve", async () => {
  const hooks = engine().hooks();
  const session = await hooks.bootstrap("s1", { workContext: "launch" });
  assert.equal(session.id, "s1");
  assert.equal(session.work_context, "launch");
  const acks = await hooks.ingest("s1", [
    { id: "m1", role: "user", content: "We launch the beta on April 1." },
    { id: "m2", role: "assistant", content: "Noted: beta launch April 1." },
  ]);
  assert.deepEqual(acks, [
    { seq: 0, duplicate: false },
    { seq: 1, duplicate: false },
  ]);
  const block = await hooks.assemble("s1", { budgetTokens: 400, retrieval: "off" });
  assert.ok(block.text.includes("We launch the beta on April 1."), block.text);
  assert.ok(block.tokens <= 400);
  assert.equal((await hooks.after_turn("s1")).id, "s1");
  const compacted = await hooks.compact("s1");
  assert.ok(compacted && typeof compacted === "object");
  assert.equal((await hooks.session_end("s1")).id, "s1");
  assert.equal((await hooks.before_reset("s1")).id, "s1");
});

test("a lost acknowledgement is retried without writing the turn twice", async () => {
  await engine().bootstrap("s2");
  // The first attempt reaches cairn, then the connection "drops" before the
  // answer arrives; the second attempt carries the same idempotency keys.
  let calls = 0;
  const flaky = async (url, init) => {
    calls += 1;
    const response = await fetch(url, init);
    if (calls === 1) {
      await response.text();
      throw new TypeError("fetch failed: socket hang up");
    }
    return response;
  };
  const retried = [];
  const acks = await engine({ fetch: flaky, onRetry: (r) => retried.push(r.error.code) }).ingest("s2", [
    { role: "user", content: "Retries must not duplicate turns." },
    { role: "user", content: "A second turn in the same call." },
  ]);
  assert.equal(calls, 2);
  assert.deepEqual(retried, ["network"]);
  assert.deepEqual(acks, [
    { seq: 0, duplicate: true },
    { seq: 1, duplicate: true },
  ]);
  const turns = await transcript("s2");
  assert.equal(turns.length, 2);
  // The same gateway message ingested again later is a duplicate too.
  const again = await engine().ingest("s2", [{ id: "x", role: "user", content: "once" }]);
  const twice = await engine().ingest("s2", [{ id: "x", role: "user", content: "once" }]);
  assert.equal(twice[0].seq, again[0].seq);
  assert.equal(twice[0].duplicate, true);
});

test("busy answers are retried, honouring Retry-After", async () => {
  let calls = 0;
  const busy = async (url, init) => {
    calls += 1;
    if (calls <= 2) {
      return new Response(JSON.stringify({ code: "backpressure", message: "busy" }), {
        status: calls === 1 ? 503 : 429,
        headers: { "content-type": "application/json", "retry-after": "0" },
      });
    }
    return fetch(url, init);
  };
  const session = await engine({ fetch: busy }).bootstrap("s3");
  assert.equal(session.id, "s3");
  assert.equal(calls, 3);
  // Out of retries: the last error, with its attempts.
  const down = async () => new Response("", { status: 503 });
  await assert.rejects(engine({ fetch: down, retries: 2 }).bootstrap("s4"), (err) => {
    assert.ok(err instanceof CairnError);
    assert.equal(err.status, 503);
    assert.equal(err.attempts, 3);
    return true;
  });
});

test("refusals are not retried", async () => {
  let calls = 0;
  const counting = (url, init) => {
    calls += 1;
    return fetch(url, init);
  };
  await assert.rejects(engine({ token: "wrong-token-0123456789", fetch: counting }).bootstrap("s5"), (err) => {
    assert.equal(err.status, 401);
    assert.equal(err.code, "unauthorized");
    return true;
  });
  assert.equal(calls, 1);
  // A workspace token opens its own workspaces only.
  await assert.rejects(engine({ token: OTHER }).bootstrap("s5"), (err) => {
    assert.equal(err.status, 403);
    assert.equal(err.code, "forbidden");
    return true;
  });
  // cairn's own refusals carry its code.
  await assert.rejects(engine().assemble("no-such-session"), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, "session_not_found");
    assert.equal(err.attempts, 1);
    return true;
  });
  await assert.rejects(engine().ingest("s1", [{ role: "tool", content: "no call id" }]), (err) => {
    assert.equal(err.status, 400);
    return true;
  });
});

test("no server at all is a network error after the retries", async () => {
  const gone = createContextEngine({ baseUrl: "http://127.0.0.1:9", workspace: "acme", retries: 1, minDelayMs: 1 });
  await assert.rejects(gone.bootstrap("s6"), (err) => {
    assert.equal(err.code, "network");
    assert.equal(err.attempts, 2);
    return true;
  });
});
