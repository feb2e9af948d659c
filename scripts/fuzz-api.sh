#!/usr/bin/env bash
# Property-based fuzzing of `cairn serve` from its own OpenAPI description
# (schemathesis, pinned, from PyPI).
#
# What it does, in order:
#   1. installs schemathesis==$ST_VERSION into a venv under
#      ${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}/ (idempotent: an existing venv of
#      that version is reused, no network);
#   2. builds the `cairn` binary (or uses $CAIRN_BIN);
#   3. starts `cairn serve` on a temporary data dir, on a free loopback port,
#      with an admin token and a workspace token configured (the limiters of
#      requests and of failed authentications off, so the run measures the
#      API and not the limits);
#   4. runs schemathesis against /openapi.json, as the workspace token then as
#      the admin (sending `x-cairn-client`, so bodiless state-changing routes
#      pass the cross-site guard and reach their handlers), bounded in examples per operation and in time, with a fixed
#      seed, checking:
#      no 5xx (not_a_server_error), every status documented
#      (status_code_conformance), every content type documented
#      (content_type_conformance), every JSON body matching its schema
#      (response_schema_conformance), the token needed where it is declared
#      (ignored_auth);
#   4b. fuzzes the MCP endpoint's tools with arguments drawn from their own
#      input schemas and edge values (scripts/fuzz_mcp.py);
#   5. checks the server is still alive (/healthz answers 200 with no panic
#      caught in a worker) and still indexing (a turn written into another
#      workspace after the run is found by search), and stops it.
# Exits non-zero if any check failed, the run timed out or the server died.
#
# Knobs (environment): CAIRN_FUZZ_EXAMPLES (per operation, default 60),
# CAIRN_FUZZ_SEED (default 17), CAIRN_FUZZ_MAX_SECONDS (wall clock for
# each schemathesis pass, default 240), CAIRN_FUZZ_WORKERS (default 1, see
# below), CAIRN_BIN (a prebuilt binary), CAIRN_FUZZ_REPORT (a directory to keep
# the JUnit report and the server's log in; default: a temporary one, printed
# on failure).
#
# The embedding model is needed by `cairn serve` (search starts with it): set
# CAIRN_EMBEDDING__MODEL_DIR / CAIRN_EMBEDDING__ORT_DYLIB, or this script runs
# scripts/setup-embeddings.sh (idempotent) to get them.
set -euo pipefail

ST_VERSION=4.32.5

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

examples="${CAIRN_FUZZ_EXAMPLES:-60}"
seed="${CAIRN_FUZZ_SEED:-17}"
max_seconds="${CAIRN_FUZZ_MAX_SECONDS:-240}"
# One worker by default: with two, schemathesis runs hypothesis in two threads,
# and hypothesis parses source with `ast` to describe its strategies; CPython
# 3.11 builds ASTs with a recursion counter that is not thread-safe
# (python/cpython#106905) and now and then raises a spurious
# "SystemError: AST constructor recursion depth mismatch", which schemathesis
# reports as a runtime error of the run (it failed CI once this way, on an
# operation that had passed). One thread costs about a minute more.
workers="${CAIRN_FUZZ_WORKERS:-1}"
cache="${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}"
venv="$cache/schemathesis-$ST_VERSION"

# 1. schemathesis, pinned, in its own venv.
if ! "$venv/bin/st" --version 2>/dev/null | grep -qF "$ST_VERSION"; then
    log "schemathesis $ST_VERSION (PyPI) into $venv"
    command -v python3 >/dev/null || { echo "error: python3 not found" >&2; exit 1; }
    rm -rf "$venv"
    python3 -m venv "$venv" || {
        echo "error: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION"
fi

# The model, for search (the server starts it at once).
if [[ -z "${CAIRN_EMBEDDING__MODEL_DIR:-}" || -z "${CAIRN_EMBEDDING__ORT_DYLIB:-}" ]]; then
    env_lines="$(scripts/setup-embeddings.sh --print-env)"
    eval "$env_lines"
    export CAIRN_EMBEDDING__MODEL_DIR CAIRN_EMBEDDING__ORT_DYLIB
fi

# 2. The binary.
if [[ -z "${CAIRN_BIN:-}" ]]; then
    log "building cairn"
    cargo build --quiet -p cairn-cli --bin cairn
    CAIRN_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/cairn"
fi
[[ -x "$CAIRN_BIN" ]] || { echo "error: no cairn binary at $CAIRN_BIN" >&2; exit 1; }

# 3. The server, on a temporary data dir, with tokens.
work="$(mktemp -d "${TMPDIR:-/tmp}/cairn-fuzz.XXXXXX")"
report="${CAIRN_FUZZ_REPORT:-$work/report}"
mkdir -p "$report"
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    # Keep the report if it was asked for, or if the run failed.
    if [[ "${keep:-0}" == 1 || -n "${CAIRN_FUZZ_REPORT:-}" ]]; then
        rm -rf "$work/data"
        if [[ "${keep:-0}" == 1 ]]; then
            echo "the report and the server's log are in $report" >&2
        fi
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

secret() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
admin="fuzz-admin-$(secret)"
ws_token="fuzz-ws-$(secret)"
cat >"$work/cairn.toml" <<EOF
[server]
admin_token = "$admin"
requests_per_minute = 0
failed_auth_per_minute = 0

[[server.tokens]]
token = "$ws_token"
workspaces = ["fuzz"]
EOF

log "starting cairn serve ($CAIRN_BIN)"
RUST_LOG="${RUST_LOG:-warn}" "$CAIRN_BIN" serve --listen 127.0.0.1:0 \
    --data-dir "$work/data" --config "$work/cairn.toml" \
    >"$report/server.out" 2>"$report/server.log" &
server_pid=$!
base=""
for _ in $(seq 1 300); do
    line="$(head -n1 "$report/server.out" 2>/dev/null || true)"
    if [[ "$line" == "cairn listening on "* ]]; then
        base="${line#cairn listening on }"
        break
    fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if [[ -z "$base" ]]; then
    keep=1
    echo "error: cairn serve did not start; its log:" >&2
    cat "$report/server.log" >&2
    exit 1
fi

# Content for the run to find: a workspace `fuzz` with sessions (a main one
# and a sub-agent), turns, entries, a subject, topics (one fed through its
# webhook), a capture, a compaction summary and a maintenance pass. The
# schemathesis configuration below draws path ids from these most of the
# time, so requests reach the handlers' logic and not only their 404s.
api() {
    local method="$1" path="$2" body="${3:-"{}"}"
    curl -sS --fail-with-body --max-time 60 -X "$method" \
        -H "Authorization: Bearer $admin" -H 'content-type: application/json' \
        --data-binary "$body" "$base/v1/workspaces/fuzz$path"
}
log "seeding workspace fuzz"
keep=1 # until seeding is done: a failed call leaves the server's log
{
    api POST /sessions '{"id":"s1","work_context":"launch"}'
    api POST /sessions '{"id":"s2","kind":"subagent","parent":"s1"}'
    turns=""
    for i in $(seq 0 39); do
        role=user
        [[ $((i % 2)) -eq 1 ]] && role=assistant
        text="Turn $i: we decided to ship the launch on April $((i % 28 + 1)). Should the invoice run move? TODO: tell the billing team."
        turns+="${turns:+,}{\"session\":\"s1\",\"role\":\"$role\",\"content\":\"$text\"}"
    done
    api POST /turns "{\"turns\":[$turns]}"
    api POST /turns '{"turns":[{"session":"s2","role":"user","content":"Sub-agent notes on the invoice run."}]}'
    api POST /subjects '{"slug":"vault","kind":"project","display":"The vault"}'
    api POST /entries '{"entries":[{"id":"e-decision","kind":"decision","subject":"vault","content":"Ship on April 1","provenance":{"session":"s1","from_seq":0,"to_seq":1}},{"id":"e-task","kind":"task","content":"Tell the billing team"}]}'
    api POST /topics '{"name":"alerts","description":"Alerts","activation":"auto","priority":"critical","triggers":[{"kind":"webhook"}]}'
    api POST /topics '{"name":"billing","description":"Invoices","activation":"gated","triggers":[{"kind":"keyword","value":"invoice"}]}'
    api POST /topics/alerts/webhook '{"text":"The invoice run failed"}'
    api POST /capture
    api POST /sessions/s1/compaction '{"budget":300}' >"$work/compaction.json"
    api POST /maintain
} >/dev/null
keep=0
summary="$("$venv/bin/python" -c '
import json, sys
view = json.load(open(sys.argv[1]))["view"]["items"]
print(next((i["id"] for i in view if i.get("type") == "summary"), "sum-none"))
' "$work/compaction.json")"

# Dictionaries of the seeded ids: each path parameter is drawn from its
# dictionary three times in four, and generated otherwise.
cat >"$work/schemathesis.toml" <<TOML
[dictionaries.workspaces]
values = ["fuzz"]
[dictionaries.sessions]
values = ["s1", "s2", "s1/child", "agent:main/sub-1", "ünïcødé"]
[dictionaries.ids]
values = ["e-decision", "e-task", "$summary", "session:s1:0-5", "entry:e-decision"]
[dictionaries.slugs]
values = ["vault"]
[dictionaries.topics]
values = ["alerts", "billing"]
[dictionaries.turns]
values = ["s1/0", "s1/3", "tool/0"]
[dictionaries.worlds]
values = ["memory-policy", "significance-gate", "topic-directive"]
[dictionaries.runs]
values = ["run-1"]

[parameters]
"path.workspace" = { dictionary = "workspaces", probability = 0.75 }
"path.session" = { dictionary = "sessions", probability = 0.75 }
"path.id" = { dictionary = "ids", probability = 0.75 }
"path.slug" = { dictionary = "slugs", probability = 0.75 }
"path.name" = { dictionary = "topics", probability = 0.75 }
"path.turn" = { dictionary = "turns", probability = 0.75 }
"path.world" = { dictionary = "worlds", probability = 0.75 }
"path.run" = { dictionary = "runs", probability = 0.75 }
"query.asking" = { dictionary = "sessions", probability = 0.5 }
"query.session" = { dictionary = "sessions", probability = 0.5 }
"body.session" = { dictionary = "sessions", probability = 0.5 }
"body.turns[*].session" = { dictionary = "sessions", probability = 0.5 }
TOML

# 4. schemathesis, twice: as the `fuzz` workspace's token (a quarter of the
# examples: the handlers' paths that depend on who asks, and every other
# workspace and admin route refused as described), then as the admin. The
# description is fetched from the server itself, so it is the one the code
# serves. `timeout` bounds each pass's wall clock whatever the machine's
# speed; the example count and the seed keep a run the same as the last.
status=0
fuzz_as() {
    local who="$1" token="$2" count="$3"
    log "fuzzing $base as $who ($count examples per operation, seed $seed, at most ${max_seconds}s)"
    # Run from the temporary dir: schemathesis keeps a `.schemathesis/`
    # cache in its working directory.
    (cd "$work" && SCHEMATHESIS_HOOKS="$root/scripts/fuzz_hooks.py" \
        timeout --kill-after=10 "$max_seconds" \
        "$venv/bin/st" --no-color --config-file "$work/schemathesis.toml" run "$base/openapi.json" \
        --header "Authorization: Bearer $token" \
        --header "X-Cairn-Client: fuzz" \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,ignored_auth \
        --phases examples,coverage,fuzzing \
        --max-examples "$count" \
        --seed "$seed" \
        --generation-database none \
        --workers "$workers" \
        --request-timeout 30 \
        --suppress-health-check all \
        --report junit --report-dir "$report/$who") \
        || status=$?
    if [[ $status -eq 124 || $status -eq 137 ]]; then
        echo "error: schemathesis did not finish in ${max_seconds}s" >&2
    fi
}
fuzz_as workspace-token "$ws_token" $(((examples + 3) / 4))
if [[ $status -eq 0 ]]; then
    fuzz_as admin "$admin" "$examples"
fi

# 4b. The MCP endpoint's tools, resources and methods, with arguments drawn
# from each tool's own input schema and edge values (scripts/fuzz_mcp.py).
if [[ $status -eq 0 ]]; then
    log "fuzzing the MCP endpoint ($(((examples + 1) / 2)) calls per tool, seed $seed)"
    timeout --kill-after=10 "$max_seconds" \
        "$venv/bin/python" "$root/scripts/fuzz_mcp.py" "$base" "$admin" fuzz \
        $(((examples + 1) / 2)) "$seed" || status=$?
fi

# 5. Still alive, with no panic caught in a worker, and still indexing: a
# turn written now in another workspace is found by search.
alive=0
if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "error: cairn serve died during the run" >&2
    alive=1
elif ! health="$(curl -sS --max-time 10 "$base/healthz")"; then
    echo "error: /healthz did not answer after the run" >&2
    alive=1
elif ! "$venv/bin/python" -c 'import json,sys; h=json.loads(sys.argv[1]); sys.exit(0 if h.get("panics")==0 else 1)' "$health"; then
    echo "error: a worker panicked during the run: $health" >&2
    alive=1
else
    canary="canary-$(secret)"
    curl -sS --fail-with-body --max-time 60 -X POST -H "Authorization: Bearer $admin" \
        -H 'content-type: application/json' \
        --data-binary "{\"turns\":[{\"session\":\"c1\",\"role\":\"user\",\"content\":\"The $canary was seen after the fuzz run.\"}]}" \
        "$base/v1/workspaces/canary/turns" >/dev/null || alive=1
    # A caller of its own: the run spent the admin's other search budgets.
    found=0
    answer=""
    for _ in $(seq 1 120); do
        answer="$(curl -sS --max-time 30 -X POST -H "Authorization: Bearer $admin" \
            -H 'content-type: application/json' \
            --data-binary "{\"query\":\"$canary\",\"k\":3,\"caller\":\"$canary\"}" \
            "$base/v1/workspaces/canary/search" || true)"
        if grep -qF "$canary" <<<"$answer"; then
            found=1
            break
        fi
        sleep 0.5
    done
    if [[ $found -ne 1 ]]; then
        echo "error: a turn written after the run was never indexed; search answered: ${answer:0:500}" >&2
        alive=1
    fi
fi
if [[ $status -ne 0 || $alive -ne 0 ]]; then
    keep=1
    echo "fuzz run failed" >&2
    tail -n 40 "$report/server.log" >&2 || true
    exit 1
fi
log "fuzz run passed; the server is alive"
