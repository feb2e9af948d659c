#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for cairn's tests of the postgres backend.
#
#   scripts/pg-cluster.sh start DIR   # prints the admin URL on stdout
#   scripts/pg-cluster.sh stop DIR    # stops the server and removes DIR
#
# `start` installs PostgreSQL from Debian's packages when no server binaries
# are found (apt-get, idempotent; needs root), then makes a cluster in DIR
# (initdb), owned by and run as an unprivileged user when called as root
# (the server refuses to run as root): `nobody`. The server listens on
# 127.0.0.1 only, on a free port, with its Unix socket inside DIR; trust
# authentication is enough for a loopback-only cluster that lives as long as
# one test run. The caller stops it with a trap (see scripts/dev.sh).
set -euo pipefail

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

pg_bindir() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [[ -n "$dir" && -x "$dir/initdb" ]]; then
        echo "$dir"
    elif command -v initdb >/dev/null; then
        dirname "$(command -v initdb)"
    fi
}

install_postgres() {
    [[ $(id -u) -eq 0 ]] || { echo "error: PostgreSQL is not installed and this is not root; install the 'postgresql' package" >&2; exit 1; }
    log "installing PostgreSQL (apt-get install postgresql)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # The server package would make and start a cluster of its own: tell
    # postgresql-common not to (the way container images do), then install.
    apt-get install -y -qq --no-install-recommends postgresql-common >&2
    if [[ -f /etc/postgresql-common/createcluster.conf ]]; then
        sed -ri 's/^#?\s*create_main_cluster\s*=.*$/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf
    fi
    apt-get install -y -qq --no-install-recommends postgresql >&2
}

# Runs a command as the cluster's owner.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
    else
        "$@"
    fi
}

start() {
    local dir="$1" bin port
    bin="$(pg_bindir)"
    if [[ -z "$bin" ]]; then
        install_postgres
        bin="$(pg_bindir)"
        [[ -n "$bin" ]] || { echo "error: no initdb after installing postgresql" >&2; exit 1; }
    fi
    mkdir -p "$dir"
    if [[ $(id -u) -eq 0 ]]; then
        chown nobody:nogroup "$dir"
    fi
    chmod 700 "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U cairn --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=300 -c shared_buffers=32MB" >&2 ||
        { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://cairn@127.0.0.1:$port/postgres"
}

stop() {
    local dir="$1" bin
    bin="$(pg_bindir)"
    if [[ -n "$bin" && -f "$dir/data/postmaster.pid" ]]; then
        # A throwaway cluster: a fast stop, and when a loaded host makes
        # it slower than half a minute, an immediate one (nothing to keep).
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >&2 \
            || as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >&2 \
            || true
    fi
    rm -rf "$dir"
}

case "${1:-}" in
    start) start "${2:?usage: pg-cluster.sh start DIR}" ;;
    stop) stop "${2:?usage: pg-cluster.sh stop DIR}" ;;
    *)
        echo "usage: scripts/pg-cluster.sh start|stop DIR" >&2
        exit 2
        ;;
esac
