#!/bin/bash
# Prepares, on a machine with network access, everything the offline H200 field run needs
# (scripts/field/h200.sh), checks that every call fits one transfer, and prints the calls;
# run from the project root with the dev venv active:
#
#   bash scripts/field/prepare.sh
#   bash scripts/field/prepare.sh --check     # only the size check and the plan (nothing built)
#   FIELD_BUNDLES="vllm ray" bash scripts/field/prepare.sh   # which bundles (default: vllm sglang)
#
# Prerequisites (docs/field-tests/README.md): git, npm (Qwen3's tokenizer), xz, and for the engine
# bundles a Python 3.12 with torch 2.11.0 (PY312, default python3.12), nvcc 13 and a C++
# compiler (the SGLang bundle), about 3 GB in /tmp; ../shared/gpu/ with the bundle builders.
#
# It leaves, all under git-ignored folders:
#   .whl/field/*.whl                  modelyard's dependencies the GPU image lacks (Python 3.12)
#   .whl/field/model-source/core      the field model's trained core (python -m modelyard.testing.field_model train)
#   .whl/field/model-source/tokenizer Qwen3's tokenizer (tokenizer.json xz-compressed) and chat template
#   .gpu/p1 .gpu/p2 .gpu/kit          the vLLM 0.25.0 bundle (../shared/gpu/build-vllm-kit.sh)
#   .sglx/p1 .sglx/kit                the SGLang 0.5.17 bundle (../shared/gpu/sglang/build-sglang-kit.sh)
#   .whl/ray/*.whl                    Ray (the venv's version) and what it needs that the image lacks
#   .field/vllm-N .field/sglang-N     the bundles in pieces, each small enough for one call
#   .field/ray-N, .field/ray-kit      Ray's wheels as one tar in pieces, and its checksum
#   .field/plan.txt                   the calls, in order, with what each carries
# Every call sends the checkout's working tree too: the pieces are sized from its size in bytes
# (scripts/field/carry.py), and the script fails here, before the GPU machine is asked, when a
# call would pass 64 MiB. `scripts/field/trim-checkout.sh on` leaves docs/ out of the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
check_only=0
[ "${1:-}" = --check ] && check_only=1
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for folder in .whl .gpu .sglx .field; do
  grep -qx "/$folder/" "$exclude" 2>/dev/null || echo "/$folder/" >> "$exclude"
done
PY312=${PY312:-python3.12}
BUNDLES=" ${FIELD_BUNDLES:-vllm sglang} "
wants() { [[ "$BUNDLES" == *" $1 "* ]]; }
SOURCE=.whl/field/model-source
fail() { echo "prepare.sh: $*" >&2; exit 1; }

if [ "$check_only" = 0 ]; then
  # 0. Prerequisites, named before anything slow starts.
  for tool in git xz npm split sha256sum; do
    command -v "$tool" >/dev/null || fail "$tool is missing (see docs/field-tests/README.md, prerequisites)"
  done
  if { wants vllm && [ ! -f .gpu/kit/SHA256SUMS ]; } || { wants sglang && [ ! -f .sglx/kit/SHA256SUMS.base ]; }; then
    [ -d ../shared/gpu ] || fail "../shared/gpu (the bundle builders) is not beside this checkout"
    torch_312=$("$PY312" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
      || fail "no Python 3.12 with torch at PY312=$PY312: python3.12 -m venv /tmp/py312 && /tmp/py312/bin/pip install torch==2.11.0, then PY312=/tmp/py312/bin/python"
    [[ "$torch_312" == 2.11.0* ]] || fail "PY312 has torch $torch_312; the bundles are built for torch 2.11.0 (the GPU image's)"
  fi
  mkdir -p .whl/field "$SOURCE"

  # 1. Wheels: what modelyard imports that the GPU image (torch, transformers, aiohttp, httpx,
  #    rich, pyyaml, psutil, nvidia-ml-py ... are there) lacks, at the versions this venv (and
  #    so CI) runs. plotly too: the console serves its plotly.js, so the server imports it.
  pins=$(python - <<'EOF'
import importlib.metadata as metadata
names = ["fastapi", "starlette", "pydantic", "pydantic_core", "uvicorn", "httptools", "sqlalchemy",
         "alembic", "mako", "orjson", "openai", "typer", "rich", "httpx", "zxcvbn",
         # the image lacks these too (or has huggingface_hub 1.x; modelyard needs 2.x)
         "cryptography", "cffi", "pycparser", "python_multipart", "swagger_ui_bundle_v2", "huggingface_hub",
         "plotly", "narwhals",
         # schedules (croniter), sign-in (authlib, joserfc), the gateway workers' loop (uvloop)
         "croniter", "python_dateutil", "six", "authlib", "joserfc", "uvloop"]
pins = []
for name in names:
    try:
        pins.append(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
print(" ".join(pins))
EOF
)
  rm -f .whl/field/*.whl
  # shellcheck disable=SC2086
  python -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_34_x86_64 -d .whl/field $pins
  # the image has these (and the same versions would only shadow its own)
  rm -f .whl/field/{pygments,hf_xet,fsspec,filelock,tqdm,packaging,pyyaml}-*.whl

  # 2. The model: Qwen3's real tokenizer, and a core trained on it (about 40 s on one CPU core).
  if [ ! -f "$SOURCE/core/core.json" ]; then
    bash scripts/field/fetch-qwen3-tokenizer.sh /tmp/field-tokenizer
    python -m modelyard.testing.field_model train --tokenizer /tmp/field-tokenizer --out "$SOURCE/core"
    mkdir -p "$SOURCE/tokenizer"
    cp /tmp/field-tokenizer/tokenizer_config.json "$SOURCE/tokenizer/"
    xz -T1 -9 -c /tmp/field-tokenizer/tokenizer.json > "$SOURCE/tokenizer/tokenizer.json.xz"
  fi

  # 3. The engines' offline bundles (built only when missing: about 5 and 15 minutes).
  if wants vllm; then
    [ -f .gpu/kit/SHA256SUMS ] || bash ../shared/gpu/build-vllm-kit.sh .gpu
    (cat .gpu/p1/* .gpu/p2/* | sha256sum | grep -q "$(cut -d' ' -f1 .gpu/kit/SHA256SUMS)") \
      || fail "the vLLM bundle does not match .gpu/kit/SHA256SUMS: remove .gpu and run again"
  fi
  if wants sglang; then
    [ -f .sglx/kit/SHA256SUMS.base ] || PY312=$PY312 bash ../shared/gpu/sglang/build-sglang-kit.sh
    (cd .sglx/p1 && sha256sum -c --quiet ../kit/SHA256SUMS.base) \
      || fail "the SGLang bundle does not match .sglx/kit/SHA256SUMS.base: remove .sglx and run again"
  fi
  # Ray for the Ray runtime's phase: the venv's version (what CI tests), for Python 3.12, with the
  # packages it needs that the GPU image lacks (jsonschema's; click, msgpack, protobuf ... are there).
  if wants ray; then
    ray_version=$(python -c 'import importlib.metadata as m; print(m.version("ray"))') \
      || fail "Ray is not in this venv: pip install -e '.[ray]' first"
    rm -rf .whl/ray && mkdir -p .whl/ray .field/ray-kit
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl/ray "ray==$ray_version" jsonschema jsonschema-specifications referencing rpds-py
    (cd .whl/ray && tar -cf ../../.field/ray-wheels.tar ./*.whl)
    (cd .field && sha256sum ray-wheels.tar > ray-kit/SHA256SUMS)
  fi
fi

# 4. Pieces: each bundle as one stream, cut into pieces that fit one call beside the working tree.
piece_bytes() {  # what one call may carry beside the working tree and the given kit folder
  python3 scripts/field/carry.py --largest-piece-bytes "piece=$1"
}
cut_pieces() {  # NAME KIT FILES...: .field/NAME-1, .field/NAME-2, ... each holding one piece
  local name=$1 kit=$2 size
  shift 2
  # FIELD_PIECE_SLACK: bytes kept free besides carry.py's margin, for a tree that grows before the calls.
  size=$(( $(piece_bytes "$kit") - ${FIELD_PIECE_SLACK:-0} ))
  [ "$size" -gt 1048576 ] || fail "the working tree alone leaves no room for a piece ($size bytes): trim it (scripts/field/trim-checkout.sh on)"
  rm -rf .field/"$name"-[0-9]* .field/"$name"-pieces
  mkdir -p .field/"$name"-pieces
  cat "$@" | split -b "$size" -d -a 2 - ".field/$name-pieces/piece-"
  local index=0 piece
  for piece in .field/"$name"-pieces/piece-*; do
    index=$((index + 1))
    mkdir -p ".field/$name-$index" && mv "$piece" ".field/$name-$index/"
  done
  rmdir .field/"$name"-pieces
}
if [ "$check_only" = 0 ] || [ ! -d .field/vllm-1 ]; then
  if wants vllm && [ -f .gpu/kit/SHA256SUMS ]; then cut_pieces vllm .gpu/kit .gpu/p1/* .gpu/p2/*; fi
  if wants sglang && [ -f .sglx/kit/SHA256SUMS.base ]; then
    cut_pieces sglang .sglx/kit .sglx/p1/sgl-base.tar.xz
  fi
  if wants ray && [ -f .field/ray-wheels.tar ]; then
    cut_pieces ray .field/ray-kit .field/ray-wheels.tar && rm .field/ray-wheels.tar
  fi
fi

# 5. The calls, in order, and the size check of each (bytes, with 1 MiB kept spare).
calls=()
for piece in .field/vllm-*; do [ -d "$piece" ] && calls+=("stage-vllm=$piece,.gpu/kit"); done
for piece in .field/sglang-*; do [ -d "$piece" ] && calls+=("stage-sglang=$piece,.sglx/kit"); done
for piece in .field/ray-[0-9]*; do [ -d "$piece" ] && calls+=("stage-ray=$piece,.field/ray-kit"); done
calls+=("setup=.gpu/kit,.whl/field")
# The later phases carry nothing: the working tree alone must fit.
python3 scripts/field/carry.py "${calls[@]}" "later-phases=" \
  || fail "the size check failed (see above); nothing was sent to the GPU machine"
{
  echo "# The field run's device calls, in order: bash scripts/field/h200.sh PHASE, carrying the folders named."
  for call in "${calls[@]}"; do
    phase=${call%%=*}; carry=${call#*=}
    echo "bash scripts/field/h200.sh $phase    # carry: ${carry//,/ }"
  done
  echo "# then, carrying nothing: bench, faults-kv, engines-one-gpu (one GPU) or transformers and tp2 (two);"
  echo "# or, for the 2026-12-02 run: share-setup instead of setup (same carry), share-routing, ray-runtime"
} > .field/plan.txt
cat .field/plan.txt
