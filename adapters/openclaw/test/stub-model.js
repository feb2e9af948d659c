// The one fake in the end-to-end test: an OpenAI-compatible chat-completions
// server on 127.0.0.1 standing in for the LLM. OpenClaw always streams, so
// every answer is server-sent events. It records every request it gets and
// answers by a rule the test sets: text, or a tool call.
//
// A tool the model wants may be deferred behind OpenClaw's Tool Search (the
// default `tools.toolSearch` mode lists `tool_search` / `tool_call` and
// hides most tools): the stub then calls `tool_call` with the tool's name,
// as a model that read the directory would.

import http from "node:http";

/** Everything said in a request's messages, as one string. */
export function textOf(body) {
  return (body?.messages ?? [])
    .map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "")))
    .join("\n");
}

/** The system prompt of a request. */
export function systemOf(body) {
  const sys = (body?.messages ?? []).find((m) => m.role === "system" || m.role === "developer");
  return typeof sys?.content === "string" ? sys.content : JSON.stringify(sys?.content ?? "");
}

/** The OpenClaw session key a request is for (from the runtime line OpenClaw adds). */
export function sessionOf(body) {
  const m = /\bsession=(agent:[^\s|]+)/.exec(textOf(body));
  return m ? m[1] : undefined;
}

const INTERNAL = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>";

/** A user message the person wrote (not context OpenClaw adds as a user message). */
function isPersonTurn(m) {
  if (m?.role !== "user") return false;
  const text = typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "");
  return !text.includes(INTERNAL);
}

/** What the person said last in a request (the newest user message OpenClaw did not add). */
export function lastPersonText(body) {
  const m = (body?.messages ?? []).filter(isPersonTurn).at(-1);
  if (!m) return "";
  return typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "");
}

/**
 * The tool result this request answers: the last tool message after the
 * person's last message (OpenClaw may add context after it), else undefined.
 */
export function toolResultOf(body) {
  const messages = body?.messages ?? [];
  let lastPerson = -1;
  messages.forEach((m, i) => {
    if (isPersonTurn(m)) lastPerson = i;
  });
  const tool = messages.slice(lastPerson + 1).filter((m) => m.role === "tool").at(-1);
  if (!tool) return undefined;
  return typeof tool.content === "string" ? tool.content : JSON.stringify(tool.content);
}

export class StubModel {
  constructor() {
    this.requests = [];
    this.rule = () => ({ text: "ok" });
    this.count = 0;
    this.server = http.createServer((req, res) => this.handle(req, res));
  }

  /** Listens on a free loopback port; resolves to the base URL (…/v1). */
  async start() {
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}/v1`;
    return this.url;
  }

  stop() {
    this.server.closeAllConnections?.();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  /**
   * How to answer: `rule(body, info)` returns `{ text }` or
   * `{ tool: name, args }`; `info.toolResult` is the tool result the
   * request ends with, if any.
   */
  answer(rule) {
    this.rule = rule;
  }

  /** Requests for one session key. */
  for(sessionKey) {
    return this.requests.filter((r) => r.session === sessionKey);
  }

  async handle(req, res) {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    if (req.method === "GET" && req.url.endsWith("/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", data: [{ id: "stub-1", object: "model" }] }));
      return;
    }
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "not JSON" } }));
      return;
    }
    const record = { at: Date.now(), session: sessionOf(body), body, toolResult: toolResultOf(body) };
    this.requests.push(record);
    const toolNames = new Set((body.tools ?? []).map((t) => t.function?.name));
    let reply;
    try {
      reply = this.rule(body, { toolResult: record.toolResult, session: record.session, toolNames }) ?? { text: "ok" };
    } catch (err) {
      reply = { text: `stub rule failed: ${err.message}` };
    }
    record.reply = reply;
    this.count += 1;
    const id = `chatcmpl-${this.count}`;
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (delta, finish = null) =>
      res.write(
        `data: ${JSON.stringify({
          id,
          object: "chat.completion.chunk",
          created: Math.floor(Date.now() / 1000),
          model: body.model ?? "stub-1",
          choices: [{ index: 0, delta, finish_reason: finish }],
        })}\n\n`,
      );
    if (reply.tool) {
      let name = reply.tool;
      let args = reply.args ?? {};
      if (!toolNames.has(name) && toolNames.has("tool_call")) {
        args = { id: name, args };
        name = "tool_call";
      }
      record.called = { name, args };
      const call = { index: 0, id: `call_${this.count}`, type: "function", function: { name, arguments: "" } };
      send({ role: "assistant", content: null, tool_calls: [call] });
      send({ tool_calls: [{ index: 0, function: { arguments: JSON.stringify(args) } }] });
      send({}, "tool_calls");
    } else {
      send({ role: "assistant", content: "" });
      send({ content: String(reply.text) });
      send({}, "stop");
    }
    res.write(
      `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 0, model: "stub-1", choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } })}\n\n`,
    );
    res.end("data: [DONE]\n\n");
  }
}
