// cairn as OpenClaw's context engine (openclaw 2026.9.6's `ContextEngine`).
//
// | OpenClaw                    | cairn                                                         |
// |-----------------------------|---------------------------------------------------------------|
// | bootstrap                   | POST /sessions (the session, with its kind and parent)        |
// | commitTurn                  | POST /turns, keys `<advancementKey>:<i>`; then after_turn     |
// | ingest (fallback path)      | POST /turns, one message                                      |
// | assemble                    | POST /assemble: the memory block, to the system prompt        |
// | compact                     | POST /sessions/{s}/compact (capture, then cairn's lossless    |
// |                             | compaction), then OpenClaw's own compaction of its transcript |
// | prepareSubagentSpawn        | POST /sessions for the child, parent = the requester          |
// | onSubagentEnded             | POST /sessions/{child}/end                                    |
//
// Who owns compaction. OpenClaw does (`ownsCompaction: false`): it keeps the
// prompt window — its transcript, its summary of older messages, its
// overflow recovery — and `compact` hands that to its runtime
// (`delegateCompactionToRuntime`). cairn owns the record: before OpenClaw
// compacts, cairn runs its mandatory pre-compaction capture and its own
// lossless compaction over the raw turns (a summary DAG whose every summary
// expands back to the exact originals). Whatever OpenClaw's summary leaves
// out stays one memory_search / memory_expand away, and the assembled block
// keeps carrying what matters. (Owning the window would mean replacing
// OpenClaw's transcript rewriting and overflow recovery, which its API
// marks experimental; delegating keeps OpenClaw's behaviour the user knows.)
//
// No method throws because cairn is down or slow: OpenClaw quarantines an
// engine that throws for the rest of the gateway process. A turn cairn did
// not take goes to the durable outbox and `commitTurn` answers `committed`
// once it is on disk there.

import { estimateTokens, toTurns } from "./messages.js";

export const ENGINE_ID = "cairn";

const GUIDANCE =
  "## Memory (cairn)\n" +
  "cairn keeps this gateway's memory: every conversation, what was decided, facts about the people. " +
  "Below is what it assembled for this turn. Use memory_search to look further back, " +
  "memory_get to read an item in full, and memory_expand to get the exact words behind a summary.";

/**
 * A context-engine instance (OpenClaw makes one per operation).
 * @param {import("./memory.js").CairnMemory} memory
 * @param {{ workspaceDir?: string }} factoryCtx
 * @param {{ writeBriefing: (dir?: string, opts?: object) => Promise<void> }} plugin
 */
export function createEngine(memory, factoryCtx = {}, plugin = {}) {
  const log = memory.log;

  /** Best effort: a failure is logged by the breaker; the turn goes on. */
  const quietly = async (what, fn) => {
    try {
      return await fn();
    } catch (err) {
      if (!memory.down) log.warn(`cairn: ${what}: ${memory.describe(err)}`);
      return undefined;
    }
  };

  async function commit(key, messages, prefix) {
    if (memory.ignored(key)) return { status: "committed" };
    const turns = toTurns(memory.sessionOf(key), messages, prefix, memory.workContextOf(key));
    if (turns.length === 0) return { status: "committed" };
    try {
      const reply = await memory.deliver({ op: "turns", key, parentKey: memory.parents.get(key), turns });
      if (reply?.queued) return { status: "committed" };
      await quietly("after_turn", () => memory.api.afterTurn(memory.sessionOf(key)));
      const duplicate = reply.acks.length > 0 && reply.acks.every((a) => a.duplicate);
      return { status: duplicate ? "duplicate" : "committed" };
    } catch (err) {
      // cairn refused the turn itself (a 4xx): retrying cannot help and
      // throwing would quarantine the engine. Say so loudly, once per turn.
      log.error(`cairn: refused the turn ${prefix} of ${key}: ${memory.describe(err)}`);
      return { status: "committed" };
    }
  }

  return {
    info: {
      id: ENGINE_ID,
      name: "cairn",
      version: "0.1.0",
      ownsCompaction: false,
      turnMaintenanceMode: "background",
      transcriptSemantics: {
        currentTurnFence: "before-current-turn-entry-v1",
        turnAdvancementIdempotency: "atomic-idempotent-v1",
      },
    },

    async bootstrap({ sessionKey, sessionId }) {
      const key = sessionKey ?? sessionId;
      if (memory.ignored(key)) return { bootstrapped: false, reason: "an OpenClaw background session" };
      await quietly("bootstrap", () => memory.ensureSession(key));
      if (plugin.writeBriefing) await plugin.writeBriefing(factoryCtx.workspaceDir, { key });
      return { bootstrapped: true };
    },

    async ingest({ sessionKey, sessionId, message }) {
      // Only called when OpenClaw takes the legacy path for a turn; the key
      // is the message's own idempotency key when it has one.
      const key = sessionKey ?? sessionId;
      const id = message?.idempotencyKey ?? `${sessionId}:${message?.timestamp ?? Date.now()}:${message?.role}`;
      await commit(key, [message], `m-${id}`);
      return { ingested: true };
    },

    async commitTurn({ advancementKey, messages, sessionKey, sessionId }) {
      return commit(sessionKey ?? sessionId, messages ?? [], advancementKey);
    },

    async assemble({ sessionKey, sessionId, messages, tokenBudget, prompt, availableTools, runtimeSettings }) {
      const key = sessionKey ?? sessionId;
      const base = { messages, estimatedTokens: estimateTokens(messages) };
      if (memory.config.injection === "off" || memory.ignored(key)) return base;
      const budget = Math.max(50, Math.min(memory.config.budgetTokens, Math.floor((tokenBudget ?? Infinity) / 4)));
      const block = await quietly("assemble", async () => {
        if ((await memory.pendingCount()) > 0) await memory.drain();
        await memory.ensureSession(key);
        return memory.api.assemble({
          session: memory.sessionOf(key),
          budget_tokens: budget,
          query: typeof prompt === "string" && prompt.trim() ? prompt.slice(0, 4000) : undefined,
          destination: memory.destinationFor(runtimeSettings?.model?.provider),
          retrieval: memory.config.retrieval,
          trace: false,
        });
      });
      const text = block?.text?.trim();
      if (!text) return base;
      const tools = availableTools ? [...availableTools] : [];
      const hasTools = tools.some((t) => t === "memory_search" || t === "tool_search" || t === "tool_call");
      // cairn's block comes wrapped in its own <cairn-memory …> tags.
      const addition = hasTools ? `${GUIDANCE}\n\n${text}` : text;
      const tokens = base.estimatedTokens + (block.tokens ?? Math.ceil(addition.length / 4));
      if (memory.config.injection === "prepend") {
        const first = { role: "user", content: addition, timestamp: Date.now() };
        return { messages: [first, ...(messages ?? [])], estimatedTokens: tokens };
      }
      return { ...base, estimatedTokens: tokens, systemPromptAddition: addition };
    },

    async compact(params) {
      const key = params.sessionKey ?? params.sessionId;
      await plugin.preCompaction?.(key, factoryCtx.workspaceDir);
      let delegate;
      try {
        ({ delegateCompactionToRuntime: delegate } = await import("openclaw/plugin-sdk/core"));
      } catch (err) {
        return { ok: false, compacted: false, reason: `OpenClaw's compaction is not reachable from the plugin: ${err.message}` };
      }
      return delegate(params);
    },

    async prepareSubagentSpawn({ parentSessionKey, childSessionKey }) {
      memory.parents.set(childSessionKey, parentSessionKey);
      await quietly("sub-agent bootstrap", () =>
        memory.deliver({ op: "bootstrap", key: childSessionKey, parentKey: parentSessionKey }),
      );
      return undefined;
    },

    async onSubagentEnded({ childSessionKey }) {
      await quietly("sub-agent end", () => memory.deliver({ op: "end", key: childSessionKey }));
    },
  };
}
