// The plugin's settings: `plugins.entries.cairn.config` in OpenClaw's config,
// validated by OpenClaw against the manifest's JSON schema before the plugin
// loads, read here once more with defaults filled in (and with a clear error
// for a value the schema cannot express, such as a URL that does not parse).

/** What each setting is when the config leaves it out. */
export const DEFAULTS = Object.freeze({
  mode: "server",
  url: "http://127.0.0.1:7878",
  workspace: "openclaw",
  budgetTokens: 800,
  injection: "system",
  retrieval: "hybrid",
  destination: "auto",
  timeoutMs: 3000,
  briefing: true,
});

const MODES = new Set(["server", "in-process"]);
const INJECTIONS = new Set(["system", "prepend", "off"]);
const RETRIEVALS = new Set(["hybrid", "lexical", "off"]);
const DESTINATIONS = new Set(["auto", "local_model", "cloud_model", "external_llm"]);

/** cairn's id rule: 1 to 128 bytes of letters, digits and `. _ : @ + = -` (no `/`). */
export const ID_RE = /^[A-Za-z0-9._:@+=-]{1,128}$/;

/**
 * The settings with defaults; throws a TypeError naming the bad key.
 * @param {Record<string, unknown> | undefined} raw `api.pluginConfig`
 * @param {NodeJS.ProcessEnv} [env]
 */
export function readConfig(raw, env = process.env) {
  const c = { ...DEFAULTS, ...(raw ?? {}) };
  const bad = (key, why) => {
    throw new TypeError(`plugins.entries.cairn.config.${key}: ${why}`);
  };
  if (!MODES.has(c.mode)) bad("mode", `one of ${[...MODES].join(", ")}`);
  for (const key of ["dataDir", "addonPath", "configFile"]) {
    if (c[key] !== undefined && (typeof c[key] !== "string" || c[key] === "")) bad(key, "a path");
  }
  let url;
  try {
    url = new URL(String(c.url));
  } catch {
    bad("url", `${JSON.stringify(c.url)} is not a URL (e.g. http://127.0.0.1:7878)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") bad("url", "must be http:// or https://");
  if (!ID_RE.test(String(c.workspace))) bad("workspace", "1 to 128 letters, digits or . _ : @ + = -");
  if (c.workContext !== undefined && !ID_RE.test(String(c.workContext))) {
    bad("workContext", "1 to 128 letters, digits or . _ : @ + = -");
  }
  if (!Number.isInteger(c.budgetTokens) || c.budgetTokens < 50) bad("budgetTokens", "an integer of at least 50");
  if (!INJECTIONS.has(c.injection)) bad("injection", `one of ${[...INJECTIONS].join(", ")}`);
  if (!RETRIEVALS.has(c.retrieval)) bad("retrieval", `one of ${[...RETRIEVALS].join(", ")}`);
  if (!DESTINATIONS.has(c.destination)) bad("destination", `one of ${[...DESTINATIONS].join(", ")}`);
  if (!Number.isInteger(c.timeoutMs) || c.timeoutMs < 100) bad("timeoutMs", "an integer of at least 100 (ms)");
  const token = c.token ?? env.CAIRN_TOKEN ?? undefined;
  return {
    mode: c.mode,
    dataDir: c.dataDir,
    addonPath: c.addonPath,
    configFile: c.configFile,
    url: url.toString().replace(/\/+$/, ""),
    workspace: String(c.workspace),
    token: token || undefined,
    budgetTokens: c.budgetTokens,
    injection: c.injection,
    retrieval: c.retrieval,
    destination: c.destination,
    workContext: c.workContext,
    timeoutMs: c.timeoutMs,
    outboxDir: c.outboxDir,
    briefing: c.briefing !== false,
  };
}
