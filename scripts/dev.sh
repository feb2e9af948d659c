#!/usr/bin/env bash
# cairn's developer entry point: `scripts/dev.sh demo` and `scripts/dev.sh test`.
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
    # The HTTP API fuzzed from its own OpenAPI description (schemathesis,
    # pinned, bounded in examples and time, fixed seed): no 5xx, every status
    # and content type documented, the server alive afterwards.
    log "API fuzzing (schemathesis against cairn serve)"
    scripts/fuzz-api.sh
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
    setup)
        setup
        ;;
    *)
        echo "usage: scripts/dev.sh demo|test|setup" >&2
        exit 2
        ;;
esac
