#!/bin/bash
# Prepares, on a machine with network access, everything the offline H200 field run needs
# (scripts/field/h200.sh); run from the project root with the dev venv active:
#
#   bash scripts/field/prepare.sh
#
# It leaves, all under git-ignored folders:
#   .whl/field/*.whl                  modelyard's dependencies the GPU image lacks (Python 3.12)
#   .whl/field/model-source/core      the field model's trained core (python -m modelyard.testing.field_model train)
#   .whl/field/model-source/tokenizer Qwen3's tokenizer (tokenizer.json xz-compressed) and chat template
#   .gpu/p1 .gpu/p2 .gpu/kit          the vLLM 0.25.0 bundle (../shared/gpu/build-vllm-kit.sh)
#   .sglx/p1 .sglx/kit                the SGLang 0.5.17 bundle (../shared/gpu/sglang/build-sglang-kit.sh)
# The bundles are built only when missing (about 5 and 15 minutes). Every transfer to the GPU
# machine is at most 64 MiB, so the script prints what each phase carries.
set -euo pipefail
cd "$(dirname "$0")/../.."
for folder in .whl .gpu .sglx; do grep -qx "/$folder/" .git/info/exclude || echo "/$folder/" >> .git/info/exclude; done
PY312=${PY312:-python3.12}
SOURCE=.whl/field/model-source
mkdir -p .whl/field "$SOURCE"

# 1. Wheels: what modelyard imports that the GPU image (torch, transformers, aiohttp, httpx,
#    rich, pyyaml, psutil, nvidia-ml-py ... are there) lacks, pinned to the versions CI tests.
#    plotly is left out: HTML reports are drawn afterwards, from the results, on this machine.
rm -f .whl/field/*.whl
$PY312 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_34_x86_64 -d .whl/field \
  fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic_core==2.50.5 uvicorn==0.54.0 \
  httptools==0.9.0 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 orjson==3.13.0 openai==3.57.0 \
  typer==0.29.2 rich==15.0.0 httpx==0.28.1
rm -f .whl/field/pygments-*.whl  # the image has it

# 2. The model: Qwen3's real tokenizer, and a core trained on it (about 40 s on one CPU core).
if [ ! -f "$SOURCE/core/core.json" ]; then
  bash scripts/field/fetch-qwen3-tokenizer.sh /tmp/field-tokenizer
  python -m modelyard.testing.field_model train --tokenizer /tmp/field-tokenizer --out "$SOURCE/core"
  mkdir -p "$SOURCE/tokenizer"
  cp /tmp/field-tokenizer/tokenizer_config.json "$SOURCE/tokenizer/"
  xz -T1 -9 -c /tmp/field-tokenizer/tokenizer.json > "$SOURCE/tokenizer/tokenizer.json.xz"
fi

# 3. The engines' offline bundles.
[ -f .gpu/kit/SHA256SUMS ] || bash ../shared/gpu/build-vllm-kit.sh .gpu
[ -f .sglx/kit/SHA256SUMS.base ] || PY312=$PY312 bash ../shared/gpu/sglang/build-sglang-kit.sh
(cat .gpu/p1/* .gpu/p2/* | sha256sum | grep -q "$(cut -d' ' -f1 .gpu/kit/SHA256SUMS)") || { echo "vLLM kit checksum mismatch"; exit 1; }
xz -t .sglx/p1/sgl-base.tar.xz
# The vLLM bundle's first part (55 MiB) travels in two pieces: with the working tree it would
# pass the 64 MiB limit of one transfer.
mkdir -p .gpu/p1a .gpu/p1b && rm -f .gpu/p1a/* .gpu/p1b/*
split -b 50M -d -a 1 .gpu/p1/site.tar.xz.part-0 .gpu/p1a/site.tar.xz.part-0.
mv .gpu/p1a/site.tar.xz.part-0.1 .gpu/p1b/

tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
for phase in "stage-vllm:.gpu/p1a .gpu/kit" "stage-sglang:.sglx/p1 .sglx/kit" "setup:.gpu/p1b .gpu/p2 .gpu/kit .whl/field"; do
  carried=$(du -cb ${phase#*:} | tail -1 | cut -f1)
  echo "${phase%%:*}: carries ${phase#*:}: $(( (tree + carried) / 1048576 )) MiB with the working tree (limit 64)"
done
