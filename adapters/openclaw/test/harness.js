// Real processes for the end-to-end test: a `cairn serve` (CAIRN_BIN) on a
// temporary data dir, and an OpenClaw gateway (OPENCLAW_BIN, the pinned
// openclaw package's `openclaw.mjs`, run by the Node on PATH) in a temporary
// home, headless: no update check, no telemetry, no channels, no Bonjour,
// no hosted model catalog, heartbeats off, and one model provider, the
// stub on 127.0.0.1.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { appendFileSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";

export const CAIRN_BIN = process.env.CAIRN_BIN ?? "";
export const OPENCLAW_BIN = process.env.OPENCLAW_BIN ?? "";

const ANSI = /\u001b\[[0-9;]*m/g;
export const plain = (s) => s.replace(ANSI, "");
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A free loopback TCP port. */
export async function freePort() {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

/** Polls `check` until it returns a truthy value (resolves to it) or `ms` pass (throws with `what`). */
export async function until(what, check, ms = 60_000, every = 250) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last.message}` : ""}`);
    await sleep(every);
  }
}

/**
 * `cairn serve` on `dataDir` (port 0: a free one; else that port, to come
 * back where a client expects it). Resolves once it listens.
 */
export async function startCairn({ dataDir, config, port = 0 }) {
  const configPath = join(dataDir, "..", "cairn.toml");
  writeFileSync(configPath, config);
  const proc = spawn(
    CAIRN_BIN,
    ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", dataDir, "--config", configPath],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" } },
  );
  let stderr = "";
  proc.stderr.on("data", (d) => {
    stderr += d;
  });
  const lines = createInterface({ input: proc.stdout });
  const first = await Promise.race([
    once(lines, "line").then(([l]) => l),
    once(proc, "exit").then(([code]) => {
      throw new Error(`cairn serve exited with ${code}: ${stderr}`);
    }),
  ]);
  const prefix = "cairn listening on ";
  if (!first.startsWith(prefix)) throw new Error(`cairn serve said ${JSON.stringify(first)}`);
  const url = first.slice(prefix.length).trim();
  return {
    url,
    port: Number(new URL(url).port),
    proc,
    stderr: () => stderr,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      const done = await Promise.race([once(proc, "exit").then(() => true), sleep(15_000).then(() => false)]);
      if (!done) {
        proc.kill("SIGKILL");
        await once(proc, "exit");
      }
    },
  };
}

/** OpenClaw's environment for a home folder: isolated and quiet. */
export function openclawEnv(home) {
  return {
    ...process.env,
    HOME: home,
    OPENCLAW_HOME: home,
    OPENCLAW_CONFIG_PATH: join(home, "openclaw.json"),
    OPENCLAW_STATE_DIR: join(home, "state"),
    OPENCLAW_NO_AUTO_UPDATE: "1",
    OPENCLAW_DISABLE_BONJOUR: "1",
    OPENCLAW_SKIP_CHANNELS: "1",
    DO_NOT_TRACK: "1",
    NO_COLOR: "1",
    FORCE_COLOR: "0",
  };
}

/**
 * OpenClaw's config: the stub as the only model provider, nothing that
 * reaches out, the gateway on `gatewayPort` with a token, and `plugins`.
 */
export function openclawConfig({ home, modelUrl, gatewayPort, plugins, extra = {} }) {
  return {
    update: { checkOnStart: false },
    telemetry: { enabled: false },
    logging: { file: join(home, "openclaw.log") },
    discovery: { mdns: { mode: "off" } },
    gateway: {
      mode: "local",
      port: gatewayPort,
      bind: "loopback",
      auth: { mode: "token", token: "openclaw-e2e-gateway-token" },
    },
    models: {
      mode: "replace",
      catalogRefresh: { enabled: false },
      providers: {
        stub: {
          baseUrl: modelUrl,
          apiKey: "stub-key",
          api: "openai-completions",
          models: [
            {
              id: "stub-1",
              name: "Stub",
              reasoning: false,
              input: ["text"],
              contextWindow: 32000,
              maxTokens: 1000,
              cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
            },
          ],
        },
      },
    },
    agents: {
      defaults: {
        model: { primary: "stub/stub-1" },
        workspace: join(home, "workspace"),
        heartbeat: { every: "0m" },
        // OpenClaw audits an LLM-written compaction summary (sections,
        // identifiers, the latest ask) and refuses one that fails; the stub
        // model writes no such summary, and the audit is about the model's
        // prose, not the plugin, so it is off here.
        compaction: { qualityGuard: { enabled: false } },
      },
    },
    plugins,
    ...extra,
  };
}

/** Runs the openclaw CLI; resolves to { code, stdout, stderr, json }. */
export async function openclaw(home, args, { timeoutMs = 120_000 } = {}) {
  const proc = spawn(process.execPath, [OPENCLAW_BIN, ...args], {
    env: openclawEnv(home),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  proc.stdout.on("data", (d) => {
    stdout += d;
  });
  proc.stderr.on("data", (d) => {
    stderr += d;
  });
  const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs);
  const [code] = await once(proc, "exit");
  clearTimeout(timer);
  let json;
  const at = stdout.indexOf("{");
  if (at !== -1) {
    try {
      json = JSON.parse(stdout.slice(at, stdout.lastIndexOf("}") + 1));
    } catch {
      json = undefined;
    }
  }
  return { code, stdout: plain(stdout), stderr: plain(stderr), json };
}

/** A running `openclaw gateway run` for `home`; resolves once it says ready. */
export async function startGateway(home, config) {
  mkdirSync(join(home, "state"), { recursive: true });
  mkdirSync(join(home, "workspace"), { recursive: true });
  writeFileSync(join(home, "openclaw.json"), JSON.stringify(config, null, 2));
  const proc = spawn(process.execPath, [OPENCLAW_BIN, "gateway", "run"], {
    env: openclawEnv(home),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let out = "";
  const onData = (d) => {
    out += plain(String(d));
    appendFileSync(join(home, "gateway.out"), plain(String(d)));
  };
  proc.stdout.on("data", onData);
  proc.stderr.on("data", onData);
  await until(
    "the OpenClaw gateway to be ready",
    () => {
      if (proc.exitCode !== null) throw new Error(`gateway exited with ${proc.exitCode}:\n${out.slice(-4000)}`);
      return /\[gateway\] ready/.test(out);
    },
    120_000,
  );
  return {
    proc,
    output: () => out,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      try {
        process.kill(-proc.pid, "SIGTERM");
      } catch {
        return;
      }
      const done = await Promise.race([once(proc, "exit").then(() => true), sleep(20_000).then(() => false)]);
      if (!done) {
        try {
          process.kill(-proc.pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
    },
  };
}

/** Waits until cairn's search index has caught up with what it acknowledged. */
export async function indexed(api, ms = 30_000) {
  await until(
    "cairn's search index to catch up",
    async () => {
      const stats = await api("GET", "/v1/stats/index");
      return stats.backlog === 0 && stats.entry_backlog === 0;
    },
    ms,
    100,
  );
}

/** A small JSON client of cairn serve for the test's own reads (admin token). */
export function cairnClient(getUrl, token) {
  return async (method, path, body) => {
    const res = await fetch(`${getUrl()}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
}
