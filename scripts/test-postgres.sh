#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the test suite and print its URL.
#   eval "$(bash scripts/test-postgres.sh start)"   # exports MODELYARD_TEST_POSTGRES_URL
#   bash scripts/test-postgres.sh stop
# Installs Debian's postgresql package when it is missing. Listens on loopback only.
set -euo pipefail
action=${1:-start}
port=${MODELYARD_TEST_POSTGRES_PORT:-55432}
root=${MODELYARD_TEST_POSTGRES_DIR:-/tmp/modelyard-test-postgres}

pg_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$action" in
  start)
    if [ -z "$(pg_bin)" ]; then
      if [ "$(id -u)" != 0 ]; then echo "postgresql is not installed and this user cannot install it" >&2; exit 1; fi
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    fi
    bin=$(pg_bin)
    if [ -f "$root/data/postmaster.pid" ] && as_postgres "$bin/pg_ctl" -D "$root/data" status >/dev/null 2>&1; then
      echo "export MODELYARD_TEST_POSTGRES_URL=postgresql://modelyard@127.0.0.1:$port/modelyard"
      exit 0
    fi
    rm -rf "$root"
    mkdir -p "$root"
    if [ "$(id -u)" = 0 ]; then chown postgres "$root"; fi
    as_postgres "$bin/initdb" -D "$root/data" -U modelyard --auth=trust >/dev/null
    as_postgres "$bin/pg_ctl" -D "$root/data" -l "$root/server.log" -w \
      -o "-p $port -k $root -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U modelyard modelyard
    echo "export MODELYARD_TEST_POSTGRES_URL=postgresql://modelyard@127.0.0.1:$port/modelyard"
    ;;
  stop)
    bin=$(pg_bin)
    [ -n "$bin" ] && [ -d "$root/data" ] && as_postgres "$bin/pg_ctl" -D "$root/data" -m fast stop >/dev/null || true
    ;;
  *)
    echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
