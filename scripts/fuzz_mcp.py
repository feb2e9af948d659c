"""Fuzzes the MCP endpoint of `cairn serve` (`POST /v1/workspaces/{ws}/mcp`).

Run by scripts/fuzz-api.sh after the schemathesis passes, with the
schemathesis venv's Python (fuzz-api.sh installs hypothesis-jsonschema, pinned, beside
schemathesis, so nothing more is installed):

    python fuzz_mcp.py BASE_URL TOKEN WORKSPACE EXAMPLES SEED

The server lists its tools (`tools/list`); for each tool, hypothesis draws
arguments from the tool's own input schema, with strings drawn three times in
four from the edge values below (times at chrono's limits and past RFC 3339's
years, ids with `/`, `..` and percent signs, unicode, empty, long) and, one
call in four, arguments that need not match the schema at all. Each call must
answer 200 with a JSON-RPC result (a tool's refusal is a result with
`isError`) or a JSON-RPC error — never a 5xx, a hang, or a body that is not
JSON-RPC. Resource reads get the same treatment with drawn URIs. Exits 1 on
the first failure, printing the request.
"""

import json
import sys
import urllib.error
import urllib.request

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

EDGE_STRINGS = [
    "+262142-12-31T23:59:59Z",
    "-262143-01-01T00:00:00Z",
    "+10000-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999999Z",
    "0000-01-01T00:00:00Z",
    "1970-01-01T00:00:00+14:00",
    "2026-02-30T00:00:00Z",
    "s1",
    "s2",
    "s1/child",
    "agent:main/sub-1",
    "../s1",
    "s1%2F..",
    "e-decision",
    "session:s1:0-5",
    "session:s1:5-0",
    "session:s1:0-18446744073709551615",
    "entry:e-decision",
    "vault",
    "ünïcødé-ßession",
    "\u202e\u0000\ufeff",
    "😀" * 64,
    "",
    " ",
    "a" * 300,
    "x" * 20000,
]

EDGE_NUMBERS = [0, -1, 1, 2**31, 2**53, 2**63 - 1, -(2**63), 10**30, 1e308, -0.0]

edge_string = st.sampled_from(EDGE_STRINGS)
edge_number = st.sampled_from(EDGE_NUMBERS)
anything = st.recursive(
    st.none() | st.booleans() | edge_number | edge_string | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12) | edge_string, inner, max_size=4),
    max_leaves=12,
)


def edged(schema):
    """Strings and numbers of `schema` drawn partly from the edge values."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: edged(v) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = edged(out["items"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in out:
            out[key] = [edged(s) for s in out[key]]
    return out


def arguments(schema):
    base = from_schema(edged(schema or {"type": "object"}))
    with_edges = base.flatmap(
        lambda args: st.fixed_dictionaries(
            {
                k: st.one_of(st.just(v), edge_string if isinstance(v, str) else st.just(v))
                for k, v in (args.items() if isinstance(args, dict) else [])
            }
        )
        if isinstance(args, dict)
        else st.just(args)
    )
    return st.one_of(
        with_edges,
        with_edges,
        with_edges,
        st.dictionaries(st.text(max_size=16) | edge_string, anything, max_size=5),
    )


class Endpoint:
    def __init__(self, base, token, workspace):
        self.url = f"{base}/v1/workspaces/{workspace}/mcp"
        self.base = base
        self.token = token
        self.next_id = 0

    def post(self, method, params):
        self.next_id += 1
        body = json.dumps(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        ).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "authorization": f"Bearer {self.token}",
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-06-18",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, text = response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode("utf-8", "replace")
        return status, text, body


def check(endpoint, method, params):
    status, text, body = endpoint.post(method, params)
    problem = None
    if status >= 500:
        problem = f"status {status}"
    elif status != 200:
        # A refusal before the JSON-RPC layer (the guard, a malformed
        # message): it must still be a described JSON error.
        try:
            refusal = json.loads(text)
        except ValueError:
            refusal = None
        if not (isinstance(refusal, dict) and ("code" in refusal or "error" in refusal)):
            problem = f"status {status} without a JSON error"
    else:
        try:
            answer = json.loads(text)
        except ValueError:
            problem = "a body that is not JSON"
        else:
            if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0":
                problem = "an answer that is not JSON-RPC 2.0"
            elif ("result" in answer) == ("error" in answer):
                problem = "an answer with neither (or both) result and error"
    if problem:
        print(f"MCP fuzz: {method} got {problem}", file=sys.stderr)
        print(f"  request: {body[:2000]!r}", file=sys.stderr)
        print(f"  answer: {text[:2000]!r}", file=sys.stderr)
        raise AssertionError(problem)


def main():
    base, token, workspace, examples, fixed = sys.argv[1:6]
    examples, fixed = int(examples), int(fixed)
    endpoint = Endpoint(base, token, workspace)
    status, text, _ = endpoint.post(
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "cairn-fuzz", "version": "0"},
        },
    )
    if status != 200:
        sys.exit(f"MCP fuzz: initialize answered {status}: {text[:500]}")
    status, text, _ = endpoint.post("tools/list", {})
    tools = json.loads(text)["result"]["tools"]
    if not tools:
        sys.exit("MCP fuzz: the server lists no tools")
    run = settings(
        max_examples=examples,
        derandomize=False,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    calls = 0
    for tool in tools:

        @seed(fixed)
        @run
        @given(args=arguments(tool.get("inputSchema")))
        def call(args, name=tool["name"]):
            check(endpoint, "tools/call", {"name": name, "arguments": args})

        call()
        calls += examples
        print(f"MCP fuzz: {tool['name']}: {examples} calls", file=sys.stderr)

    uris = st.one_of(
        st.just("cairn://briefing"),
        st.builds(lambda s: f"cairn://sessions/{s}/context", edge_string | st.text(max_size=20)),
        edge_string,
        st.text(max_size=60),
    )

    @seed(fixed)
    @run
    @given(uri=uris)
    def read(uri):
        check(endpoint, "resources/read", {"uri": uri})

    read()
    calls += examples

    @seed(fixed)
    @run
    @given(method=edge_string | st.text(max_size=30), params=anything)
    def unknown(method, params):
        check(endpoint, method, params if isinstance(params, dict) else {"p": params})

    unknown()
    calls += examples
    print(f"MCP fuzz: {calls} calls over {len(tools)} tools, resources and unknown methods: passed", file=sys.stderr)


if __name__ == "__main__":
    main()
