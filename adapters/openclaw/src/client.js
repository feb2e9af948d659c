// The plugin's one way to reach cairn, in either mode (`mode` in the
// config):
//
// - `server` (`HttpClient`): `cairn serve` over HTTP, through
//   adapters/gateway-node;
// - `in-process` (`NativeClient`, native.js): cairn loaded into this Node
//   process as a native addon (adapters/openclaw/native, `cairn.node`) on
//   the gateway's own data dir.
//
// Both have the same methods and answer with the same values: the JSON
// bodies of cairn's HTTP API. Both fail with an error carrying cairn's
// stable `code` and the HTTP `status` of the failure (`status: 0` when cairn
// gave no answer at all: unreachable, timed out, its addon not loaded), so
// the breaker, the outbox, the engine, the tools and the briefing never ask
// which mode they are in.
//
// | method                       | HTTP API                                    |
// |------------------------------|---------------------------------------------|
// | bootstrap(spec)              | POST …/sessions                             |
// | ingest(turns)                | POST …/turns → { acks }                     |
// | afterTurn(session)           | POST …/sessions/{s}/after_turn              |
// | assemble(body)               | POST …/assemble                             |
// | beforeCompaction(session)    | POST …/sessions/{s}/compact                 |
// | reset(session), end(session) | POST …/sessions/{s}/reset, …/end            |
// | search(request)              | POST …/search                               |
// | get(id, q)                   | GET …/items/{id}                            |
// | expand(id, q)                | GET …/summaries/{id}                        |
// | expandAll(id, q)             | GET …/summaries/{id}/turns                  |
// | briefing(q)                  | GET …/briefing                              |
// | gatewayStart()               | POST /v1/gateway_start                      |
// | session(s, q), transcript(s, q), entries(q), compactionView(s, q),     |
// | indexStats()                 | the reads `openclaw gateway call cairn.read` serves |
//
// `q` holds the query string's values (`session`, `destination`, `from`…),
// with the HTTP API's names.

import { createContextEngine } from "cairn-context-engine";

/** `?a=…&b=…` of the defined values. */
export function query(params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

const enc = encodeURIComponent;

/** cairn serve over HTTP (mode `server`). */
export class HttpClient {
  constructor(config) {
    this.mode = "server";
    this.where = `cairn at ${config.url}`;
    this.http = createContextEngine({
      baseUrl: config.url,
      workspace: config.workspace,
      token: config.token,
      retries: 0,
      timeoutMs: config.timeoutMs,
    });
  }

  /** The base URL (tests point a client elsewhere by setting it). */
  get baseUrl() {
    return this.http.baseUrl;
  }

  set baseUrl(url) {
    this.http.baseUrl = url;
    this.where = `cairn at ${url}`;
  }

  ws(method, path, body) {
    return this.http.request(method, this.http.path(path), body);
  }

  bootstrap(spec) {
    return this.ws("POST", "/sessions", spec);
  }
  ingest(turns) {
    return this.ws("POST", "/turns", { turns });
  }
  afterTurn(session) {
    return this.ws("POST", `/sessions/${enc(session)}/after_turn`);
  }
  assemble(body) {
    return this.ws("POST", "/assemble", body);
  }
  beforeCompaction(session) {
    return this.ws("POST", `/sessions/${enc(session)}/compact`);
  }
  reset(session) {
    return this.ws("POST", `/sessions/${enc(session)}/reset`);
  }
  end(session) {
    return this.ws("POST", `/sessions/${enc(session)}/end`);
  }
  search(request) {
    return this.ws("POST", "/search", request);
  }
  get(id, q) {
    return this.ws("GET", `/items/${enc(id)}${query(q)}`);
  }
  expand(id, q) {
    return this.ws("GET", `/summaries/${enc(id)}${query(q)}`);
  }
  expandAll(id, q) {
    return this.ws("GET", `/summaries/${enc(id)}/turns${query(q)}`);
  }
  briefing(q) {
    return this.ws("GET", `/briefing${query(q)}`);
  }
  gatewayStart() {
    return this.http.request("POST", "/v1/gateway_start");
  }
  session(session, q) {
    return this.ws("GET", `/sessions/${enc(session)}${query(q)}`);
  }
  transcript(session, q) {
    return this.ws("GET", `/sessions/${enc(session)}/transcript${query(q)}`);
  }
  entries(q) {
    return this.ws("GET", `/entries${query(q)}`);
  }
  compactionView(session, q) {
    return this.ws("GET", `/sessions/${enc(session)}/compaction${query(q)}`);
  }
  indexStats() {
    return this.http.request("GET", "/v1/stats/index");
  }
  /** Nothing to let go: each call is its own request. */
  async close() {}
}
