#!/bin/bash
# Leave docs/ out of this checkout's working tree while the field run's calls go, and put it back.
#
#   bash scripts/field/trim-checkout.sh on      # git sparse-checkout: every path but docs/
#   bash scripts/field/trim-checkout.sh off     # the whole tree again
#   bash scripts/field/trim-checkout.sh status
#
# Every device call sends a copy of the working tree (docs/ is most of it: screenshots, field
# results); the GPU machine reads none of docs/. Git keeps the files (nothing is deleted from the
# repository); `off` brings them back. Commit or stash changes under docs/ before `on`.
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-status}" in
  on)
    if [ -n "$(git status --porcelain -- docs)" ]; then
      echo "trim-checkout.sh: docs/ has uncommitted changes; commit or stash them first" >&2; exit 1
    fi
    git sparse-checkout set --no-cone '/*' '!/docs/'
    echo "docs/ left out of the working tree (scripts/field/carry.py counts what remains)"
    ;;
  off)
    git sparse-checkout disable
    echo "the whole working tree is back"
    ;;
  status)
    if [ "$(git config --get core.sparseCheckout || true)" = true ]; then
      echo "trimmed: $(git sparse-checkout list | tr '\n' ' ')"
    else
      echo "not trimmed"
    fi
    ;;
  *) echo "usage: $0 on|off|status" >&2; exit 2 ;;
esac
