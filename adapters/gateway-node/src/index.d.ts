/** Options of a context engine on `cairn serve`. */
export interface CairnContextEngineOptions {
  /** Where `cairn serve` listens, e.g. `http://127.0.0.1:7878`. */
  baseUrl: string;
  /** The workspace every hook acts on. */
  workspace: string;
  /** A bearer token (a workspace token for this workspace, or the admin token). */
  token?: string;
  /** Further attempts after a transient failure (default 4). */
  retries?: number;
  /** First backoff, doubled per attempt, with jitter (default 100 ms). */
  minDelayMs?: number;
  /** Longest backoff (default 5,000 ms). */
  maxDelayMs?: number;
  /** Per-attempt timeout (default 30,000 ms). */
  timeoutMs?: number;
  /** A `fetch` of your own (default: the global one). */
  fetch?: typeof globalThis.fetch;
  /** Told before each retry. */
  onRetry?: (retry: { attempt: number; delayMs: number; error: CairnError }) => void;
}

/** One turn a gateway hands to `ingest`. */
export interface Turn {
  role: "user" | "assistant" | "system" | "tool";
  content: string;
  /** The gateway's message id: the idempotency key is derived from it. */
  id?: string;
  /** An idempotency key of your own (wins over `id`). */
  idempotencyKey?: string;
  workContext?: string;
  /** Required for role `tool`. */
  toolCallId?: string;
  /** RFC 3339; the server's time when absent. */
  timestamp?: string;
}

/** One acknowledgement per ingested turn. */
export interface Ack {
  seq: number;
  /** The key was used before: nothing was written, `seq` is the original's. */
  duplicate: boolean;
}

/** A failed call. */
export class CairnError extends Error {
  /** The HTTP status; 0 when no answer came (network, timeout). */
  readonly status: number;
  /** cairn's stable error code (`unauthorized`, `session_not_found`…), or `network` / `timeout`. */
  readonly code: string;
  /** Attempts made. */
  readonly attempts: number;
  /** True for a failure another attempt may fix. */
  readonly retryable: boolean;
}

export interface AssembleOptions {
  budgetTokens?: number;
  query?: string;
  destination?: string;
  directives?: string[];
  retrieval?: "hybrid" | "lexical" | "off";
}

/** What a gateway registers: one function per context-engine hook. */
export interface Hooks {
  bootstrap(session: string, spec?: { workContext?: string; kind?: string; parent?: string }): Promise<any>;
  ingest(session: string, turns: Turn[]): Promise<Ack[]>;
  assemble(session: string, options?: AssembleOptions): Promise<{ text: string; tokens: number; [k: string]: any }>;
  compact(session: string): Promise<any>;
  after_turn(session: string): Promise<any>;
  session_end(session: string): Promise<any>;
  before_reset(session: string): Promise<any>;
}

export class CairnContextEngine {
  constructor(options: CairnContextEngineOptions);
  readonly workspace: string;
  bootstrap(session: string, spec?: { workContext?: string; kind?: string; parent?: string }): Promise<any>;
  ingest(session: string, turns: Turn[]): Promise<Ack[]>;
  assemble(session: string, options?: AssembleOptions): Promise<{ text: string; tokens: number; [k: string]: any }>;
  compact(session: string): Promise<any>;
  afterTurn(session: string): Promise<any>;
  sessionEnd(session: string): Promise<any>;
  beforeReset(session: string): Promise<any>;
  /** Any call of `cairn serve`'s API, with the same auth and retries. */
  request(method: string, path: string, body?: unknown): Promise<any>;
  hooks(): Hooks;
}

export function createContextEngine(options: CairnContextEngineOptions): CairnContextEngine;
