"""Schemathesis hooks for scripts/fuzz-api.sh (loaded through SCHEMATHESIS_HOOKS).

A plugin upload (`PUT /v1/plugins/{world}`) is `application/wasm`: raw bytes,
sent as schemathesis sends `application/octet-stream`.
"""

import schemathesis

schemathesis.serializer.alias("application/wasm", "application/octet-stream")
