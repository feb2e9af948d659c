"""Schemathesis hooks for scripts/fuzz-api.sh (loaded through SCHEMATHESIS_HOOKS).

A plugin upload (`PUT /v1/plugins/{world}`) is `application/wasm` and a bundle
import (`POST /v1/workspaces/{workspace}/import`) is `application/x-ndjson`:
raw bytes, sent as schemathesis sends `application/octet-stream`.

Every `date-time` string is drawn one time in three from the edges: times at
chrono's limits (one of them used to stop search indexing for every
workspace), just past the years RFC 3339 writes, at the epoch, with offsets
and fractions; otherwise as schemathesis draws them.
"""

from datetime import timezone

import schemathesis
from hypothesis import strategies as st

schemathesis.serializer.alias("application/wasm", "application/octet-stream")
schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")

EDGE_TIMES = [
    "+262142-12-31T23:59:59Z",
    "-262143-01-01T00:00:00Z",
    "+10000-01-01T00:00:00Z",
    "-0001-12-31T23:59:59Z",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999999Z",
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59.999999999-00:01",
    "2026-03-01T09:00:00+14:00",
    "2026-03-01T09:00:00-12:00",
]

schemathesis.openapi.format(
    "date-time",
    st.one_of(
        st.sampled_from(EDGE_TIMES),
        st.datetimes(timezones=st.just(timezone.utc)).map(
            lambda d: d.isoformat().replace("+00:00", "Z")
        ),
        st.datetimes(timezones=st.just(timezone.utc)).map(
            lambda d: d.isoformat().replace("+00:00", "Z")
        ),
    ),
)
