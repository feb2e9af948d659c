// OpenClaw's identities and messages in cairn's terms.
//
// - A cairn session is an OpenClaw `sessionKey` (`agent:main:main`,
//   `agent:main:subagent:<uuid>`…), never a `sessionId`: the key is stable,
//   the id rotates on /new, /reset, idle and daily rollover and compaction,
//   and one conversation must stay one cairn record across those.
// - An accepted OpenClaw turn (the admitted user message through the final
//   assistant message, with tool calls and results between) becomes cairn
//   turns, each with the idempotency key `<advancementKey>:<index>`: a host
//   retry of the same turn presents the same key and cairn answers
//   `duplicate` instead of writing it twice.

import { createHash } from "node:crypto";

import { ID_RE } from "./config.js";

/**
 * The cairn session id of an OpenClaw session key: the key itself when it
 * is a valid cairn id (almost always), else `oc-` and a hash of it (a key
 * with `/`, spaces or over 128 bytes), so any key maps to one stable id.
 * @param {string} key
 */
export function sessionIdOf(key) {
  if (ID_RE.test(key)) return key;
  return `oc-${createHash("sha256").update(key).digest("hex").slice(0, 40)}`;
}

/** The agent id in `agent:<id>:…`, else `main`. */
export function agentOf(key) {
  const m = /^agent:([^:]+):/.exec(key ?? "");
  return m ? m[1] : "main";
}

/** `subagent` for `…:subagent:…` keys, `cron` for `…:cron:…`, else `main`. */
export function kindOf(key) {
  if (/(^|:)subagent:/.test(key ?? "")) return "subagent";
  if (/(^|:)cron:/.test(key ?? "")) return "cron";
  return "main";
}

/** The text blocks of a message's content (a string or content parts). */
function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  const parts = [];
  for (const part of content) {
    if (part?.type === "text" && typeof part.text === "string") parts.push(part.text);
    else if (part?.type === "image") parts.push("[image]");
  }
  return parts.join("\n");
}

function toolCallsOf(content) {
  if (!Array.isArray(content)) return [];
  return content.filter((part) => part?.type === "toolCall" && typeof part.name === "string");
}

function timestampOf(message) {
  const t = message?.timestamp;
  if (typeof t === "number" && Number.isFinite(t)) return new Date(t).toISOString();
  if (typeof t === "string" && !Number.isNaN(Date.parse(t))) return new Date(t).toISOString();
  return undefined;
}

/**
 * cairn turns (`TurnInput`s) for OpenClaw messages. A user message is a
 * `user` turn; an assistant message is an `assistant` turn with its text and
 * one `[tool call name {args}]` line per call; a tool result is a `tool`
 * turn paired by its call id. Messages without text (a bare thinking block)
 * and roles cairn does not keep are left out; the index in the key is the
 * message's position, so leaving one out never shifts another's key.
 * @param {string} session cairn session id
 * @param {any[]} messages OpenClaw `AgentMessage`s
 * @param {string} keyPrefix e.g. the turn's advancement key
 * @param {string} [workContext]
 */
export function toTurns(session, messages, keyPrefix, workContext) {
  const turns = [];
  messages.forEach((message, index) => {
    const base = {
      session,
      work_context: workContext,
      idempotency_key: `${keyPrefix}:${index}`,
      timestamp: timestampOf(message),
    };
    switch (message?.role) {
      case "user": {
        const content = textOf(message.content).trim();
        if (content) turns.push({ ...base, role: "user", content });
        break;
      }
      case "assistant": {
        const lines = [textOf(message.content).trim()];
        for (const call of toolCallsOf(message.content)) {
          const args = call.arguments === undefined ? "" : ` ${JSON.stringify(call.arguments)}`;
          lines.push(`[tool call ${call.name}${args}]`);
        }
        const content = lines.filter(Boolean).join("\n");
        if (content) turns.push({ ...base, role: "assistant", content });
        break;
      }
      case "toolResult": {
        const content = textOf(message.content).trim() || (message.isError ? "[error]" : "[empty result]");
        const name = message.toolName ? `${message.toolName}: ` : "";
        turns.push({
          ...base,
          role: "tool",
          tool_call_id: String(message.toolCallId ?? `call-${index}`).slice(0, 128),
          content: `${name}${content}`,
        });
        break;
      }
      default:
        break;
    }
  });
  // cairn ids allow 128 bytes: a long prefix is hashed, keeping the index.
  for (const turn of turns) {
    if (turn.idempotency_key.length > 128 || !ID_RE.test(turn.idempotency_key)) {
      const [prefix, index] = splitLast(turn.idempotency_key);
      turn.idempotency_key = `k-${createHash("sha256").update(prefix).digest("hex").slice(0, 48)}:${index}`;
    }
  }
  return turns;
}

function splitLast(key) {
  const at = key.lastIndexOf(":");
  return [key.slice(0, at), key.slice(at + 1)];
}

/** A rough token count (4 characters a token) for OpenClaw's budget checks. */
export function estimateTokens(messages) {
  let chars = 0;
  for (const m of messages ?? []) {
    chars += textOf(m?.content).length;
    for (const call of toolCallsOf(m?.content)) chars += JSON.stringify(call.arguments ?? {}).length;
  }
  return Math.ceil(chars / 4);
}
