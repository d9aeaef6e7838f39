#!/usr/bin/env bash
# Make a Docker engine usable for the test suite (the Docker runtime's tests start real containers).
#   bash scripts/test-docker.sh start   # installs Debian's docker.io if missing, starts dockerd if none answers
#   bash scripts/test-docker.sh stop    # stops the dockerd this script started (one already running is left alone)
# Nothing is ever pulled: the tests import their own image (modelyard.testing.container_image).
set -euo pipefail
action=${1:-start}
root=${MODELYARD_TEST_DOCKER_DIR:-/tmp/modelyard-test-docker}
pid_file="$root/dockerd.pid"

case "$action" in
  start)
    if ! command -v dockerd >/dev/null 2>&1; then
      if [ "$(id -u)" != 0 ]; then echo "docker.io is not installed and this user cannot install it" >&2; exit 1; fi
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io) >&2
    fi
    if docker info >/dev/null 2>&1; then
      exit 0  # a daemon answers already: use it, do not stop it later
    fi
    mkdir -p "$root"
    dockerd >"$root/dockerd.log" 2>&1 &
    echo $! >"$pid_file"
    for _ in $(seq 1 120); do
      if docker info >/dev/null 2>&1; then exit 0; fi
      sleep 0.5
    done
    echo "dockerd did not answer within 60 s; its log:" >&2
    tail -n 30 "$root/dockerd.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$pid_file" ]; then
      kill "$(cat "$pid_file")" 2>/dev/null || true
      rm -f "$pid_file"
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
