#!/usr/bin/env bash
# Start a real OpenID Connect provider (django-oidc-provider, tests/oidc_site/) for the sign-in
# tests and print how to reach it, like scripts/test-postgres.sh:
#   eval "$(bash scripts/test-oidc-provider.sh start)"   # exports MODELYARD_TEST_OIDC_URL and _DIR
#   bash scripts/test-oidc-provider.sh stop               # stops the one named by MODELYARD_TEST_OIDC_DIR
# Each start makes its own directory (mktemp) and listens on a free loopback port. Needs the
# test extra (Django, django-oidc-provider) in the active Python.
set -euo pipefail
action=${1:-start}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}

case "$action" in
  start)
    root=$(mktemp -d "${TMPDIR:-/tmp}/modelyard-test-oidc.XXXXXX")
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    nohup "$python" "$here/tests/oidc_site/serve.py" run "$root" "$port" >"$root/provider.log" 2>&1 &
    echo $! >"$root/pid"
    if ! "$python" - "$port" <<'PY' >&2; then
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/.well-known/openid-configuration"
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            if answer.status == 200:
                sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
PY
      echo "the OIDC provider did not start; see $root/provider.log" >&2
      tail -n 20 "$root/provider.log" >&2 || true
      exit 1
    fi
    echo "export MODELYARD_TEST_OIDC_URL=http://127.0.0.1:$port"
    echo "export MODELYARD_TEST_OIDC_DIR=$root"
    ;;
  stop)
    root=${MODELYARD_TEST_OIDC_DIR:-}
    if [ -z "$root" ]; then
      echo "MODELYARD_TEST_OIDC_DIR is not set: nothing to stop" >&2
      exit 0
    fi
    case "$root" in
      */modelyard-test-oidc.*) ;;
      *) echo "refusing to remove $root: not a directory this script made" >&2; exit 1 ;;
    esac
    if [ -f "$root/pid" ]; then kill "$(cat "$root/pid")" 2>/dev/null || true; fi
    rm -rf "$root"
    ;;
  *)
    echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
