#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the test suite and print how to reach it.
#   eval "$(bash scripts/test-postgres.sh start)"   # exports MODELYARD_TEST_POSTGRES_URL and _DIR
#   bash scripts/test-postgres.sh stop               # stops the one named by MODELYARD_TEST_POSTGRES_DIR
# Each start makes its own directory (mktemp) and listens on a free loopback port, so two runs on
# one host never share or stop each other's server. MODELYARD_TEST_POSTGRES_PORT pins the port.
# Installs Debian's postgresql package when it is missing.
set -euo pipefail
action=${1:-start}

pg_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case "$action" in
  start)
    if [ -z "$(pg_bin)" ]; then
      if [ "$(id -u)" != 0 ]; then echo "postgresql is not installed and this user cannot install it" >&2; exit 1; fi
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    fi
    bin=$(pg_bin)
    root=$(mktemp -d "${TMPDIR:-/tmp}/modelyard-test-postgres.XXXXXX")
    if [ "$(id -u)" = 0 ]; then chown postgres "$root"; fi
    as_postgres "$bin/initdb" -D "$root/data" -U modelyard --auth=trust >/dev/null
    # A free port can be taken between the probe and the bind: try a few.
    for attempt in 1 2 3 4 5; do
      port=${MODELYARD_TEST_POSTGRES_PORT:-$(free_port)}
      if as_postgres "$bin/pg_ctl" -D "$root/data" -l "$root/server.log" -w \
        -o "-p $port -k $root -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
        start >/dev/null; then
        break
      fi
      if [ "$attempt" = 5 ] || [ -n "${MODELYARD_TEST_POSTGRES_PORT:-}" ]; then
        echo "PostgreSQL did not start; see $root/server.log" >&2
        tail -n 5 "$root/server.log" >&2 || true
        exit 1
      fi
    done
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U modelyard modelyard
    echo "export MODELYARD_TEST_POSTGRES_URL=postgresql://modelyard@127.0.0.1:$port/modelyard"
    echo "export MODELYARD_TEST_POSTGRES_DIR=$root"
    ;;
  stop)
    root=${MODELYARD_TEST_POSTGRES_DIR:-}
    if [ -z "$root" ]; then
      echo "MODELYARD_TEST_POSTGRES_DIR is not set: nothing to stop" >&2
      exit 0
    fi
    case "$root" in
      */modelyard-test-postgres.*) ;;
      *) echo "refusing to remove $root: not a directory this script made" >&2; exit 1 ;;
    esac
    bin=$(pg_bin)
    if [ -n "$bin" ] && [ -d "$root/data" ]; then
      as_postgres "$bin/pg_ctl" -D "$root/data" -m fast stop >/dev/null || true
    fi
    rm -rf "$root"
    ;;
  *)
    echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
