"""Fuzzes the MCP endpoint of `cairn serve` (`POST /v1/workspaces/{ws}/mcp`).

Run by scripts/fuzz-api.sh after the schemathesis passes, with the
schemathesis venv's Python (hypothesis comes with schemathesis, so nothing
more is installed; the tools' input schemas are small, and `from_schema`
below draws from the subset of JSON Schema they use):

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


def from_schema(schema):
    """Values for the subset of JSON Schema the MCP tools' input schemas use
    (object, array, string, integer, number, boolean, enum, anyOf/oneOf,
    nullable type lists), strings three times in four from the edge values."""
    if not isinstance(schema, dict) or not schema:
        return anything
    if "enum" in schema:
        return st.sampled_from(schema["enum"]) | edge_string
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}) for k in kind])
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        return st.integers(min_value=low, max_value=high) | edge_number
    if kind == "number":
        return st.floats(allow_nan=False) | edge_number
    if kind == "string":
        return st.one_of(edge_string, edge_string, edge_string, st.text(max_size=40))
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})), max_size=4)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: from_schema(v) for k, v in properties.items() if k in required},
            optional={k: from_schema(v) for k, v in properties.items() if k not in required},
        )
    return anything


def arguments(schema):
    """Arguments that match the schema three times in four, anything else the fourth."""
    base = from_schema(schema or {"type": "object"})
    return st.one_of(
        base,
        base,
        base,
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


OUTCOMES = {}


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
    if not problem:
        outcome = "refused"
        if status == 200:
            result = answer.get("result")
            outcome = "error" if "error" in answer else (
                "tool error" if isinstance(result, dict) and result.get("isError") else "ok")
        OUTCOMES[outcome] = OUTCOMES.get(outcome, 0) + 1
    if problem:
        print(f"MCP fuzz: {method} got {problem}", file=sys.stderr)
        print(f"  request: {body[:2000]!r}", file=sys.stderr)
        print(f"  answer: {text[:2000]!r}", file=sys.stderr)
        raise AssertionError(problem)


def fuzz_tool(endpoint, run, fixed, tool):
    """The hypothesis test of one tool (a closure: `@given` takes no defaults)."""
    name = tool["name"]

    @seed(fixed)
    @run
    @given(args=arguments(tool.get("inputSchema")))
    def call(args):
        check(endpoint, "tools/call", {"name": name, "arguments": args})

    return call


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

        fuzz_tool(endpoint, run, fixed, tool)()
        calls += examples

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
    tally = ", ".join(f"{n} {k}" for k, n in sorted(OUTCOMES.items()))
    print(
        f"MCP fuzz: {calls} calls over {len(tools)} tools, resources and unknown methods: passed ({tally})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
