// What the plugin's hooks, engine instances and tools share in one OpenClaw
// process: the cairn client, which sessions cairn already has, the outbox
// and whether cairn is reachable.
//
// OpenClaw makes a context-engine instance per operation (a turn, a
// compaction, a sub-agent spawn) and calls `register` several times per
// process, so this state lives in one `CairnMemory` per configuration
// (`memoryFor`), not in an engine.
//
// cairn down or slow. Every call waits at most `timeoutMs` and is never
// retried inline: OpenClaw's turn goes on. The first failure is logged once
// (a warning naming the URL and the cause); while cairn stays down, calls
// fail at once without touching the network (a breaker that tries again
// after 1 s, 2 s, 4 s … at most 30 s); turns go to the outbox; a timer
// (unref'd, so a one-shot CLI run still exits) replays the outbox when the
// breaker allows another try; the first success is logged once ("cairn is
// back") with how many queued operations were delivered.

import { join } from "node:path";
import { homedir } from "node:os";

import { HttpClient, query } from "./client.js";
import { NativeClient } from "./native.js";
import { Outbox } from "./outbox.js";
import { agentOf, kindOf, sessionIdOf } from "./messages.js";

const MAX_BACKOFF_MS = 30_000;
/** When a queued operation is tried again after a refusal that was not an outage (429, 500). */
const RETRY_LATER_MS = 5_000;
/** A new outage within this long of the last one's warning or recovery is the same outage (not warned again). */
const FLAP_MS = 60_000;

/** A call that was not made because cairn is known to be down. */
export class CairnUnavailable extends Error {
  constructor(cause) {
    super(`cairn is unreachable (${cause})`);
    this.name = "CairnUnavailable";
    this.code = "unavailable";
    this.retryable = true;
  }
}

// OpenClaw may load this module more than once in one process (a registry
// per run, discovery passes); the state must still be one per process, or
// each copy would keep its own breaker and log the same outage again.
const memories = (globalThis[Symbol.for("cairn.openclaw.memories")] ??= new Map());

/**
 * The shared state for a configuration (one per distinct config in a
 * process).
 * @param {ReturnType<import("./config.js").readConfig>} config
 * @param {{ logger?: any, stateDir?: string, providerUrl?: (provider: string) => string | undefined }} host
 */
export function memoryFor(config, host) {
  const key = JSON.stringify(config);
  let memory = memories.get(key);
  if (!memory) {
    memory = new CairnMemory(config, host);
    memories.set(key, memory);
  }
  memory.host = { ...memory.host, ...host };
  return memory;
}

export class CairnMemory {
  constructor(config, host = {}) {
    this.config = config;
    this.host = host;
    /** cairn in either mode (client.js): `cairn serve` over HTTP, or in this process. */
    this.client = config.mode === "in-process" ? new NativeClient(config, host) : new HttpClient(config);
    /** The client's methods, each through the breaker (`this.api.assemble(…)`). */
    this.api = guardedApi(this);
    const dir = config.outboxDir ?? join(host.stateDir ?? join(homedir(), ".openclaw"), "plugins", "cairn", "outbox");
    this.outbox = new Outbox(dir);
    /** cairn session ids known to exist in cairn (bootstrapped by this process). */
    this.known = new Set();
    /** Child session key → parent session key, from sub-agent spawns. */
    this.parents = new Map();
    this.down = undefined; // { since, cause, retryAt, backoff }
    this.outage = undefined; // { since, upAt }: the last outage warned about, and when it ended
    this.pending = undefined; // operations in the outbox, as far as this process knows
    this.draining = undefined;
    this.timer = undefined;
    /** Session key → when its pre-compaction capture last ran (one per burst of hooks). */
    this.recentCaptures = new Map();
    /** Session key → when before_reset last ran (session_end of the same reset is not a second one). */
    this.recentResets = new Map();
    this.briefingAt = new Map();
  }

  get log() {
    return this.host.logger ?? console;
  }

  /**
   * Sessions the plugin leaves out of memory: OpenClaw's own background
   * runs (`…:internal-session-effects:…`, e.g. the skill workshop's
   * reviews), which hold no conversation with anyone.
   */
  ignored(key) {
    return typeof key === "string" && key.includes(":internal-session-effects:");
  }

  /** cairn's session id for an OpenClaw session key. */
  sessionOf(key) {
    return sessionIdOf(key);
  }

  /** The work context of a session key: the configured one, else the agent id. */
  workContextOf(key) {
    return this.config.workContext ?? sessionIdOf(agentOf(key));
  }

  /** The memory policy's destination for the model of `provider`. */
  destinationFor(provider) {
    if (this.config.destination !== "auto") return this.config.destination;
    const url = provider ? this.host.providerUrl?.(provider) : undefined;
    if (!url) return "cloud_model";
    try {
      const host = new URL(url).hostname.replace(/^\[|\]$/g, "");
      return host === "localhost" || host === "::1" || /^127\./.test(host) ? "local_model" : "cloud_model";
    } catch {
      return "cloud_model";
    }
  }

  /** `?a=…&b=…` of the defined values. */
  query(params) {
    return query(params);
  }

  /** A failure in a few words for a log line or a tool result. */
  describe(err) {
    if (err instanceof CairnUnavailable) return err.message;
    if (err?.status === 0) return `${this.client.where} is unreachable (${err.code}: ${err.cause?.cause?.code ?? err.cause?.message ?? err.message})`;
    if (err?.status) return `cairn answered ${err.status} ${err.code}: ${err.message}`;
    return String(err?.message ?? err);
  }

  async guarded(fn) {
    if (this.down && Date.now() < this.down.retryAt) throw new CairnUnavailable(this.down.cause);
    try {
      const out = await fn();
      this.markUp();
      return out;
    } catch (err) {
      if (isOutage(err)) this.markDown(err);
      else if (err?.status > 0) this.markUp(); // it answered: it is up
      throw err;
    }
  }

  markDown(err) {
    const cause = this.describe(err);
    if (!this.down) {
      // One outage, one warning: a server that flaps while it shuts down or
      // restarts (a kept-alive connection still answered, then refused)
      // is the same outage if it comes back down within a minute.
      const sameOutage = this.outage?.upAt !== undefined && Date.now() - this.outage.upAt < FLAP_MS;
      if (!sameOutage) {
        this.log.warn(`cairn: ${cause}; turns go on without cairn's memory and are kept in ${this.outbox.dir} until it is back`);
        this.outage = { since: Date.now() };
      }
      this.down = { since: Date.now(), cause, backoff: 1000, retryAt: Date.now() + 1000 };
    } else {
      this.down.cause = cause;
      this.down.backoff = Math.min(MAX_BACKOFF_MS, this.down.backoff * 2);
      this.down.retryAt = Date.now() + this.down.backoff;
    }
    this.schedule();
  }

  markUp() {
    if (!this.down) return;
    this.outage ??= { since: this.down.since };
    const seconds = Math.round((Date.now() - this.outage.since) / 1000);
    this.outage.upAt = Date.now();
    this.down = undefined;
    this.log.info(`cairn: reachable again: ${this.client.where} after ${seconds} s`);
    this.schedule(0);
  }

  /** Replays the outbox soon (when the breaker allows), if anything waits. */
  schedule(delay) {
    if (this.timer) return;
    const wait = delay ?? Math.max(0, (this.down?.retryAt ?? Date.now()) - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.drain().catch((err) => this.log.warn(`cairn: outbox replay failed: ${this.describe(err)}`));
    }, wait);
    this.timer.unref?.();
  }

  /** How many operations wait in the outbox (read once per process, then counted). */
  async pendingCount() {
    this.pending ??= (await this.outbox.names()).length;
    return this.pending;
  }

  /**
   * Replays the outbox in order; resolves to true when it is empty. Only one
   * replay runs at a time in this process.
   */
  drain() {
    this.draining ??= this.drainOnce().finally(() => {
      this.draining = undefined;
    });
    return this.draining;
  }

  async drainOnce() {
    const names = await this.outbox.names();
    this.pending = names.length;
    if (names.length === 0) return true;
    let delivered = 0;
    for (const name of names) {
      const op = await this.outbox.read(name);
      if (op === undefined) {
        this.pending = Math.max(0, this.pending - 1);
        continue;
      }
      try {
        if (op.unreadable) throw Object.assign(new Error(`unreadable: ${op.unreadable}`), { permanent: true });
        await this.perform(op);
        delivered += 1;
      } catch (err) {
        if (isRetryable(err)) {
          this.schedule(this.down ? undefined : RETRY_LATER_MS);
          if (delivered) this.log.info(`cairn: delivered ${delivered} queued operation(s); ${this.pending} still wait`);
          return false;
        }
        this.log.error(`cairn: refused a queued ${op.op ?? "operation"} (${this.describe(err)}); set aside as ${name}.rejected in ${this.outbox.dir}`);
        await this.outbox.reject(name, this.describe(err));
      }
      await this.outbox.remove(name);
      this.pending = Math.max(0, this.pending - 1);
    }
    if (delivered) this.log.info(`cairn: delivered ${delivered} queued operation(s) from the outbox`);
    return true;
  }

  /** Performs one queued operation against cairn. */
  async perform(op) {
    switch (op.op) {
      case "turns":
        await this.ensureSession(op.key, op.parentKey);
        return this.api.ingest(op.turns);
      case "bootstrap":
        return this.ensureSession(op.key, op.parentKey);
      case "reset":
      case "end": {
        await this.ensureSession(op.key);
        const session = this.sessionOf(op.key);
        return op.op === "reset" ? this.api.reset(session) : this.api.end(session);
      }
      default:
        throw Object.assign(new Error(`unknown operation ${JSON.stringify(op.op)}`), { permanent: true });
    }
  }

  /**
   * Makes sure cairn has the session of `key` with the right kind and
   * parent before any of its turns: a sub-agent's session must be created
   * with its parent, or it would be a main session that sees everything.
   * A `…:subagent:…` key whose parent is unknown becomes a sub-agent
   * session without a parent: it sees its own lineage only (closed, not
   * open, when in doubt).
   */
  async ensureSession(key, parentKey) {
    const id = this.sessionOf(key);
    if (this.known.has(id)) return;
    const parent = parentKey ?? this.parents.get(key);
    const kind = kindOf(key);
    const spec = {
      id,
      work_context: this.workContextOf(key),
      kind: parent && kind === "main" ? "subagent" : kind,
      parent: parent ? this.sessionOf(parent) : undefined,
    };
    try {
      await this.api.bootstrap(spec);
    } catch (err) {
      if (err?.code === "parent_not_found" && parent) {
        await this.ensureSession(parent);
        await this.api.bootstrap(spec);
      } else if (err?.code === "work_context_mismatch") {
        // It exists under another work context (the config changed): use it as it is.
        this.log.warn(`cairn: session ${id} exists in another work context; keeping it there`);
      } else {
        throw err;
      }
    }
    this.known.add(id);
  }

  /**
   * Hands cairn an operation now, or queues it durably when cairn cannot
   * take it: resolves to cairn's answer, or to `{ queued: name }`. Earlier
   * queued operations go first so a session's turns keep their order.
   */
  async deliver(op) {
    if ((await this.pendingCount()) > 0 && !(this.down && Date.now() < this.down.retryAt)) {
      await this.drain();
    }
    if ((await this.pendingCount()) === 0) {
      try {
        return await this.perform(op);
      } catch (err) {
        if (!isRetryable(err)) throw err;
        if (!this.down) this.log.warn(`cairn: ${this.describe(err)}; queued in ${this.outbox.dir} for a later try`);
      }
    }
    const name = await this.outbox.put(op);
    this.pending = (this.pending ?? 0) + 1;
    this.schedule(this.down ? undefined : RETRY_LATER_MS);
    return { queued: name };
  }
}

/**
 * The client's methods, each called through `memory`'s breaker: rejects
 * with CairnUnavailable while cairn is known to be down, else with the
 * client's error (`status`, `code`).
 */
function guardedApi(memory) {
  const api = {};
  const proto = Object.getPrototypeOf(memory.client);
  for (const name of Object.getOwnPropertyNames(proto)) {
    const { value } = Object.getOwnPropertyDescriptor(proto, name);
    if (name === "constructor" || typeof value !== "function") continue;
    api[name] = (...args) => memory.guarded(() => memory.client[name](...args));
  }
  return api;
}

/**
 * cairn is not there: no answer, a timeout, or a proxy / restarting node
 * saying so (502, 503, 504). Opens the breaker.
 */
export function isOutage(err) {
  if (err instanceof CairnUnavailable) return true;
  if (typeof err?.status !== "number") return false;
  return err.status === 0 || err.status === 408 || err.status === 502 || err.status === 503 || err.status === 504;
}

/** Worth another try later (an outage, a rate limit, a 5xx); a 4xx refusal is not. */
export function isRetryable(err) {
  if (err?.permanent) return false;
  return isOutage(err) || err?.status === 429 || err?.status >= 500;
}
