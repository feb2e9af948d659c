// cairn-context-engine: a Node gateway's context-engine hooks (bootstrap,
// ingest, assemble, compact, after_turn, session_end, before_reset) mapped
// onto `cairn serve`'s HTTP API.
//
// - Every request carries `Authorization: Bearer <token>` when a token is
//   given (a workspace token opens its workspaces' routes only).
// - Transient failures (the connection dropped, a timeout, 429, 502, 503,
//   504) are retried with exponential backoff and jitter, honouring
//   `Retry-After`. Retrying is safe: every ingested turn carries an
//   idempotency key fixed before the first attempt, so a turn whose
//   acknowledgement was lost is answered `duplicate: true` with its original
//   sequence number instead of being written twice; the other hooks are
//   idempotent on cairn's side (bootstrap returns the existing session,
//   ending an ended session changes nothing, assembly only reads).
// - Any other failure rejects with a `CairnError` carrying the HTTP status
//   and cairn's stable error `code`; caller errors (4xx) are never retried.

import { randomUUID } from "node:crypto";

/** HTTP statuses worth another try: cairn (or a proxy) is busy or restarting. */
const RETRY_STATUSES = new Set([429, 502, 503, 504]);

/** A failed call: the HTTP status (0 when no answer came) and cairn's code. */
export class CairnError extends Error {
  /**
   * @param {string} message
   * @param {{status: number, code: string, attempts: number, cause?: unknown}} details
   */
  constructor(message, { status, code, attempts, cause }) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "CairnError";
    this.status = status;
    this.code = code;
    this.attempts = attempts;
  }

  /** True when cairn (or the network) may answer the same call later. */
  get retryable() {
    return this.status === 0 || RETRY_STATUSES.has(this.status);
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** `Retry-After` in milliseconds (seconds or an HTTP date), when present. */
function retryAfterMs(response) {
  const value = response.headers.get("retry-after");
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/**
 * The context engine a gateway registers: one method per hook, each a call
 * of `cairn serve` for this engine's workspace.
 */
export class CairnContextEngine {
  /**
   * @param {import("./index.js").CairnContextEngineOptions} options
   */
  constructor(options) {
    const { baseUrl, workspace } = options ?? {};
    if (!baseUrl) throw new TypeError("baseUrl is required (e.g. http://127.0.0.1:7878)");
    if (!workspace) throw new TypeError("workspace is required");
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.workspace = workspace;
    this.token = options.token;
    this.retries = options.retries ?? 4;
    this.minDelayMs = options.minDelayMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 5_000;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.fetch = options.fetch ?? globalThis.fetch;
    this.onRetry = options.onRetry;
  }

  /** `/v1/workspaces/{workspace}` + `path`. */
  path(path) {
    return `/v1/workspaces/${encodeURIComponent(this.workspace)}${path}`;
  }

  /**
   * One call with retries; resolves to the parsed JSON answer.
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   */
  async request(method, path, body) {
    const url = `${this.baseUrl}${path}`;
    // `x-cairn-client` lets the bodiless hooks (end, reset, compact,
    // after_turn) through cairn's cross-site guard, which refuses a
    // state-changing request with neither a JSON body nor this header.
    const headers = { accept: "application/json", "x-cairn-client": "gateway-node" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    for (let attempt = 1; ; attempt++) {
      let failure;
      let wait;
      try {
        const response = await this.fetch(url, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        const text = await response.text();
        const parsed = text ? safeJson(text) : null;
        if (response.ok) return parsed;
        failure = new CairnError(
          `${method} ${path}: ${response.status} ${parsed?.message ?? text ?? ""}`.trim(),
          { status: response.status, code: parsed?.code ?? "http_error", attempts: attempt },
        );
        wait = retryAfterMs(response);
      } catch (cause) {
        failure = new CairnError(`${method} ${path}: ${cause?.message ?? cause}`, {
          status: 0,
          code: cause?.name === "TimeoutError" ? "timeout" : "network",
          attempts: attempt,
          cause,
        });
      }
      if (!failure.retryable || attempt > this.retries) throw failure;
      const backoff = Math.min(this.maxDelayMs, this.minDelayMs * 2 ** (attempt - 1));
      const delay = wait ?? backoff / 2 + Math.random() * (backoff / 2);
      this.onRetry?.({ attempt, delayMs: delay, error: failure });
      await sleep(delay);
    }
  }

  /** Hook `bootstrap`: the session starts (created, or the existing one returned). */
  bootstrap(session, { workContext, kind, parent } = {}) {
    return this.request("POST", this.path("/sessions"), {
      id: session,
      work_context: workContext,
      kind,
      parent,
    });
  }

  /**
   * Hook `ingest`: appends turns, durable when it resolves. Each turn's
   * idempotency key is its `idempotencyKey`, else its `id` (a gateway's
   * message id), else a fresh UUID fixed before the first attempt, so a
   * retry never writes a turn twice. Resolves to one `{seq, duplicate}` per
   * turn.
   * @param {string} session
   * @param {import("./index.js").Turn[]} turns
   */
  async ingest(session, turns) {
    const body = {
      turns: turns.map((t) => ({
        session,
        role: t.role,
        content: t.content,
        work_context: t.workContext,
        tool_call_id: t.toolCallId,
        timestamp: t.timestamp,
        idempotency_key: t.idempotencyKey ?? (t.id === undefined ? randomUUID() : `${session}:${t.id}`),
      })),
    };
    const reply = await this.request("POST", this.path("/turns"), body);
    return reply.acks;
  }

  /** Hook `assemble`: the memory block for the session's next model call. */
  assemble(session, { budgetTokens, query, destination, directives, retrieval } = {}) {
    return this.request("POST", this.path("/assemble"), {
      session,
      budget_tokens: budgetTokens,
      query,
      destination,
      directives,
      retrieval,
    });
  }

  /** Hook `compact`: capture what is new, then compact the session. */
  compact(session) {
    return this.request("POST", this.path(`/sessions/${encodeURIComponent(session)}/compact`));
  }

  /** Hook `after_turn`: a turn finished (may trigger compaction by configuration). */
  afterTurn(session) {
    return this.request("POST", this.path(`/sessions/${encodeURIComponent(session)}/after_turn`));
  }

  /** Hook `session_end`: the session ended (its memory is extracted). */
  sessionEnd(session) {
    return this.request("POST", this.path(`/sessions/${encodeURIComponent(session)}/end`));
  }

  /** Hook `before_reset`: the session is about to be reset. */
  beforeReset(session) {
    return this.request("POST", this.path(`/sessions/${encodeURIComponent(session)}/reset`));
  }

  /** The hooks under the names a gateway registers them by. */
  hooks() {
    return {
      bootstrap: (...a) => this.bootstrap(...a),
      ingest: (...a) => this.ingest(...a),
      assemble: (...a) => this.assemble(...a),
      compact: (...a) => this.compact(...a),
      after_turn: (...a) => this.afterTurn(...a),
      session_end: (...a) => this.sessionEnd(...a),
      before_reset: (...a) => this.beforeReset(...a),
    };
  }
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** A context engine for `options.workspace` on `options.baseUrl`. */
export function createContextEngine(options) {
  return new CairnContextEngine(options);
}
