"""cairn mcp, driven by the official Python SDK (`mcp` from PyPI).

Each test spawns the real `cairn mcp` binary (path in CAIRN_BIN) over stdio
on a data dir the fixture fills with the CLI, lists the tools, calls each
one and checks results and errors: bad arguments are tool errors
(isError), and the server keeps answering after them.

Run: CAIRN_BIN=target/debug/cairn python -m unittest discover tests/mcp/python
(`scripts/dev.sh test` does, in a venv under ~/.cache/cairn).
"""

import json
import os
import subprocess
import tempfile
import unittest
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
import httpx2
from mcp.shared.exceptions import MCPError
import mcp.types as types

CAIRN = os.environ.get("CAIRN_BIN", "")
SECRET = "sk-abcdefghijklmnopqrstuvwxyz123456"
TOOLS = {
    "memory_search",
    "memory_get",
    "memory_expand",
    "session_list",
    "read_transcript",
    "memory_note",
    "memory_correct",
    "memory_retract",
    "memory_pin",
}


def cairn(data_dir, *args):
    out = subprocess.run(
        [CAIRN, "--data-dir", data_dir, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"cairn {args}: {out.stderr}")
    return out.stdout


def fill(data_dir):
    """24 turns of session s1 (one with a secret), compacted; returns the summary id."""
    lines = []
    for i in range(24):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Turn {i}: we discussed the payments retry queue and the Postgres migration, item {i}."
        if i == 22:
            text = f"The staging API key is {SECRET}, keep it safe."
        lines.append(json.dumps({"session": "s1", "role": role, "content": text}))
    path = os.path.join(os.path.dirname(data_dir), "turns.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    cairn(data_dir, "ingest", path)
    report = json.loads(cairn(data_dir, "compact", "s1", "--budget", "200", "--json"))
    return report["created"][0]


class CairnMcpTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        if not CAIRN or not os.path.exists(CAIRN):
            raise RuntimeError("set CAIRN_BIN to a built cairn binary (scripts/dev.sh test does)")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.summary = fill(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @asynccontextmanager
    async def connect(self, *extra, env=None):
        """A session with `cairn mcp` on the fixture's data dir (one test at
        a time: the server holds the store's lock until it exits)."""
        params = StdioServerParameters(
            command=CAIRN,
            args=["--data-dir", self.data, "mcp", "--caller", "python-tests", *extra],
            env={**os.environ, "CAIRN_SEARCH__RATE_PER_MINUTE": "1000", **(env or {})},
        )
        async with stdio_client(params) as (read, write):
            client_info = types.Implementation(name="python-tests", version="0")
            async with ClientSession(read, write, client_info=client_info) as session:
                info = await session.initialize()
                self.assertEqual(info.server_info.name, "cairn")
                yield session

    async def call(self, session, name, arguments=None):
        result = await session.call_tool(name, arguments or {})
        return result, result.structured_content

    async def ok(self, session, name, arguments=None):
        result, body = await self.call(session, name, arguments)
        self.assertFalse(result.is_error, f"{name}: {body}")
        # The text content carries the same JSON as the structured one.
        self.assertEqual(json.loads(result.content[0].text), body)
        return body

    async def error(self, session, name, arguments, code):
        result, body = await self.call(session, name, arguments)
        self.assertTrue(result.is_error, f"{name} {arguments}: expected an error, got {body}")
        self.assertEqual(body["code"], code, body)
        self.assertTrue(body["message"])
        return body

    async def test_lists_every_tool_with_a_json_schema(self):
        async with self.connect() as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            self.assertEqual(set(tools), TOOLS)
            for t in tools.values():
                self.assertEqual(t.input_schema["type"], "object", t.name)
                self.assertTrue(t.description)
            self.assertEqual(tools["memory_search"].input_schema["required"], ["query"])
            self.assertIn("kind", tools["memory_note"].input_schema["required"])
            self.assertEqual(set(tools["memory_correct"].input_schema["required"]), {"id", "content", "reason"})
            self.assertEqual(set(tools["memory_retract"].input_schema["required"]), {"id", "reason"})
            self.assertTrue(tools["memory_retract"].annotations.destructive_hint)

    async def test_calls_each_tool(self):
        async with self.connect() as s:
            # memory_search: ranked items, the fallback flag, redaction.
            found = await self.ok(s, "memory_search", {"query": "payments retry queue", "k": 5})
            self.assertTrue(found["items"])
            self.assertIsInstance(found["lexical_fallback"], bool)
            if os.environ.get("CAIRN_EMBEDDING__MODEL_DIR"):
                self.assertFalse(found["lexical_fallback"], found)
                self.assertEqual(found["mode"], "hybrid")
            self.assertTrue(all("low_trust" in i for i in found["items"]))
            secret = await self.ok(s, "memory_search", {"query": "staging API key", "kind": "turn"})
            self.assertNotIn(SECRET, json.dumps(secret))
            # memory_get: what a search result points at.
            item = await self.ok(s, "memory_get", {"id": found["items"][0]["id"]})
            self.assertIn(item["kind"], ("turns", "entry"))
            turns = await self.ok(s, "memory_get", {"id": "session:s1:20-23"})
            self.assertEqual([t["seq"] for t in turns["turns"]], [20, 21, 22, 23])
            self.assertNotIn(SECRET, json.dumps(turns))
            # memory_expand: one level down, then every original turn.
            expansion = await self.ok(s, "memory_expand", {"summary": self.summary})
            self.assertEqual(expansion["node"]["id"], self.summary)
            self.assertTrue(expansion["children"])
            everything = await self.ok(s, "memory_expand", {"summary": self.summary, "all": True})
            self.assertEqual(everything["turns"][0]["seq"], 0)
            # session_list.
            sessions = await self.ok(s, "session_list")
            self.assertIn("s1", [x["id"] for x in sessions["sessions"]])
            # read_transcript, redacted.
            transcript = await self.ok(s, "read_transcript", {"session": "s1", "from": 20})
            self.assertEqual(transcript["session"], "s1")
            self.assertEqual(transcript["turns"][0]["seq"], 20)
            self.assertNotIn(SECRET, json.dumps(transcript))
            # memory_note: an entry with provenance, readable and searchable.
            entry = await self.ok(
                s,
                "memory_note",
                {"kind": "decision", "content": "Payments retry through the queue", "subject": "payments",
                 "session": "s1", "turns": [2, 4]},
            )
            self.assertEqual(entry["provenance"], {"session": "s1", "from_seq": 2, "to_seq": 4})
            self.assertEqual(entry["kind"], "decision")
            again = await self.ok(s, "memory_get", {"id": entry["id"]})
            self.assertEqual(again["entry"]["content"], "Payments retry through the queue")
            last = await self.ok(s, "memory_note", {"kind": "fact", "content": "Staging has a key", "session": "s1"})
            self.assertEqual(last["provenance"]["from_seq"], 23)
            # memory_correct: a new version that replaces the note, with the reason.
            fixed = await self.ok(
                s,
                "memory_correct",
                {"id": entry["id"], "content": "Payments retry through the outbox", "reason": "the queue was dropped",
                 "session": "s1"},
            )
            self.assertEqual(fixed["replaces"], entry["id"])
            self.assertIn("the queue was dropped", fixed["detail"])
            old = await self.ok(s, "memory_get", {"id": entry["id"]})
            self.assertEqual(old["entry"]["status"]["state"], "replaced")
            # memory_pin: pinned, then unpinned.
            pinned = await self.ok(s, "memory_pin", {"id": fixed["id"]})
            self.assertEqual(pinned["pins"], [fixed["id"]])
            unpinned = await self.ok(s, "memory_pin", {"id": fixed["id"], "pinned": False})
            self.assertEqual(unpinned["pins"], [])
            # memory_retract: erased, with a tombstone that keeps the reason.
            tombstone = await self.ok(s, "memory_retract", {"id": last["id"], "reason": "said in error"})
            self.assertEqual(tombstone["reason"], "said in error")
            await self.error(s, "memory_get", {"id": last["id"]}, "entry_not_found")

    async def test_bad_arguments_are_tool_errors_and_the_server_lives_on(self):
        async with self.connect() as s:
            await self.error(s, "memory_search", {}, "invalid_arguments")
            await self.error(s, "memory_search", {"query": "x", "workspace": "other"}, "invalid_arguments")
            await self.error(s, "memory_search", {"query": "x", "kind": "nope"}, "invalid")
            await self.error(s, "memory_search", {"query": "x", "k": "ten"}, "invalid_arguments")
            await self.error(s, "memory_get", {"id": "no-such-entry"}, "entry_not_found")
            await self.error(s, "memory_get", {"id": "session:s1:9-1"}, "invalid_reference")
            await self.error(s, "memory_expand", {"summary": "sum-nope"}, "summary_not_found")
            await self.error(s, "read_transcript", {"session": "nope"}, "session_not_found")
            await self.error(s, "read_transcript", {}, "invalid_arguments")
            await self.error(s, "session_list", {"asking": "s1"}, "invalid_arguments")
            await self.error(s, "memory_note", {"kind": "directive", "content": "x", "session": "s1"}, "invalid_arguments")
            await self.error(s, "memory_note", {"kind": "fact", "content": "x"}, "invalid")
            await self.error(s, "memory_note", {"kind": "fact", "content": "x", "session": "s1", "turns": [5, 99]}, "invalid")
            await self.error(s, "memory_note", {"kind": "fact", "content": "x", "session": "ghost"}, "session_not_found")
            await self.error(s, "memory_correct", {"id": "no-such-entry", "content": "x", "reason": "r"}, "entry_not_found")
            await self.error(s, "memory_correct", {"id": "no-such-entry", "content": "x"}, "invalid_arguments")
            await self.error(s, "memory_retract", {"id": "no-such-entry", "reason": " "}, "invalid")
            await self.error(s, "memory_pin", {"id": "no-such-entry"}, "entry_not_found")
            # An unknown tool is a protocol error; the server still answers.
            with self.assertRaises(MCPError):
                await s.call_tool("no_such_tool", {})
            await self.ok(s, "session_list")

    async def test_resources_are_the_briefing_and_each_session_context(self):
        async with self.connect() as s:
            await self.ok(s, "memory_note", {"kind": "decision", "content": "Launch on April 1", "subject": "launch",
                                             "session": "s1"})
            uris = {str(r.uri) for r in (await s.list_resources()).resources}
            self.assertIn("cairn://briefing", uris)
            self.assertIn("cairn://sessions/s1/context", uris)
            templates = (await s.list_resource_templates()).resource_templates
            self.assertEqual([t.uri_template for t in templates], ["cairn://sessions/{session}/context"])
            briefing = (await s.read_resource("cairn://briefing")).contents[0].text
            self.assertIn("Launch on April 1", briefing)
            context = (await s.read_resource("cairn://sessions/s1/context")).contents[0].text
            self.assertIn("cairn-memory", context)
            self.assertNotIn(SECRET, context)
            with self.assertRaises(MCPError):
                await s.read_resource("cairn://sessions/ghost/context")
            with self.assertRaises(MCPError):
                await s.read_resource("cairn://nothing")
            await self.ok(s, "session_list")

    async def test_search_is_rate_limited_per_caller(self):
        async with self.connect(env={"CAIRN_SEARCH__RATE_PER_MINUTE": "2"}) as s:
            await self.ok(s, "memory_search", {"query": "payments"})
            await self.ok(s, "memory_search", {"query": "payments"})
            body = await self.error(s, "memory_search", {"query": "payments"}, "rate_limited")
            self.assertIn("mcp:python-tests", body["message"])

    async def test_the_workspace_is_fixed_at_start(self):
        async with self.connect("--workspace", "elsewhere") as s:
            await self.error(s, "session_list", {}, "workspace_not_found")
            await self.error(s, "read_transcript", {"session": "s1"}, "workspace_not_found")


TOKEN = "acme-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"


class CairnServeMcpTest(unittest.IsolatedAsyncioTestCase):
    """The same tools over streamable HTTP under `cairn serve`, with a token."""

    @classmethod
    def setUpClass(cls):
        if not CAIRN or not os.path.exists(CAIRN):
            raise RuntimeError("set CAIRN_BIN to a built cairn binary (scripts/dev.sh test does)")
        cls.tmp = tempfile.TemporaryDirectory()
        data = os.path.join(cls.tmp.name, "data")
        cls.summary = fill(data)
        config = os.path.join(cls.tmp.name, "cairn.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f'[server]\nadmin_token = "{ADMIN}"\n'
                    f'[[server.tokens]]\ntoken = "{TOKEN}"\nworkspaces = ["default"]\n')
        cls.server = subprocess.Popen(
            [CAIRN, "serve", "--listen", "127.0.0.1:0", "--data-dir", data, "--config", config],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "warn", "CAIRN_SEARCH__RATE_PER_MINUTE": "1000"},
        )
        first = cls.server.stdout.readline()
        prefix = "cairn listening on "
        if not first.startswith(prefix):
            cls.server.kill()
            raise RuntimeError(f"unexpected first line from cairn serve: {first!r}")
        cls.base = first[len(prefix):].strip()
        # The server indexes the stored record in the background: wait for it.
        import time
        import urllib.request

        deadline = time.monotonic() + 60
        while True:
            request = urllib.request.Request(f"{cls.base}/v1/stats/index", headers={"Authorization": f"Bearer {ADMIN}"})
            with urllib.request.urlopen(request) as answer:
                stats = json.load(answer)
            if stats["backlog"] == 0 and stats["entry_backlog"] == 0 and stats["indexed"] > 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"indexing never caught up: {stats}")
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()
        cls.tmp.cleanup()

    @asynccontextmanager
    async def connect(self, path="/v1/workspaces/default/mcp", token=TOKEN):
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with streamable_http_client(f"{self.base}{path}", http_client=http) as (read, write):
                client_info = types.Implementation(name="python-http-tests", version="0")
                async with ClientSession(read, write, client_info=client_info) as session:
                    await session.initialize()
                    yield session

    async def test_tools_over_streamable_http(self):
        async with self.connect() as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            self.assertEqual(tools, TOOLS)
            found = await s.call_tool("memory_search", {"query": "payments retry queue"})
            self.assertFalse(found.is_error, found.structured_content)
            self.assertTrue(found.structured_content["items"])
            note = await s.call_tool("memory_note", {"kind": "fact", "content": "Over HTTP", "session": "s1"})
            self.assertFalse(note.is_error, note.structured_content)
            self.assertEqual(note.structured_content["provenance"]["session"], "s1")
            bad = await s.call_tool("memory_get", {"id": "nope"})
            self.assertTrue(bad.is_error)
            self.assertEqual(bad.structured_content["code"], "entry_not_found")
            briefing = (await s.read_resource("cairn://briefing")).contents[0].text
            self.assertIn("Over HTTP", briefing)

    async def test_the_token_decides_the_workspace(self):
        with self.assertRaises(Exception):
            async with self.connect(path="/v1/workspaces/other/mcp") as s:
                await s.list_tools()
        with self.assertRaises(Exception):
            async with self.connect(token="wrong-token-0123456789") as s:
                await s.list_tools()


if __name__ == "__main__":
    unittest.main()
