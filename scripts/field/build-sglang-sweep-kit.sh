#!/bin/bash
# Builds the offline SGLang 0.5.17 kit for the memory sweep (scripts/field/memory_sweep.py with
# scripts/field/memory_sweep_sglang.yaml): the 36 wheels of ../shared/gpu/sglang/build-sglang-kit.sh,
# installed and trimmed the same way, but WITHOUT its two compiled add-ons: no FlashAttention 3
# (the sweep starts SGLang with --attention-backend triton) and no prebuilt flashinfer sampling
# module (--sampling-backend pytorch), so nothing is compiled here and no nvcc is needed.
# Run from the project root: bash scripts/field/build-sglang-sweep-kit.sh [KITDIR] (default
# .sweep-kit/sglang, ignored by git). Leaves KITDIR/s0..sN (parts of at most 44 MiB, one device
# call each beside the trimmed tree) with the checksum and unpack.sh in the last one.
# The GPU machine must have Python 3.12 with torch 2.11.0+cu130, as the field one.
set -euo pipefail
KIT=${1:-.sweep-kit/sglang}
PART=${SGLANG_KIT_PART:-44M}
grep -qx "/.sweep-kit/" .git/info/exclude 2>/dev/null || grep -qx "/.sweep-kit/" "$(git rev-parse --git-common-dir)/info/exclude" \
  || echo "/.sweep-kit/" >> "$(git rev-parse --git-common-dir)/info/exclude"
rm -rf "$KIT/s"* "$KIT/kit" && mkdir -p "$KIT/whl" "$KIT/kit"
TAGS=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
WHEELS=(sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1
  transformers==5.12.1 tokenizers==0.22.2 xgrammar==0.2.1 apache-tvm-ffi==0.1.11
  openai==2.6.1 distro==1.9.0 sniffio==1.3.1 pydantic==2.14.4 pydantic-core==2.50.5
  annotated-types==0.8.0 typing-inspection==0.4.5 fastapi==0.136.1 starlette==1.10.0
  uvicorn==0.54.0 python-multipart==0.0.34 orjson==3.13.0 pyzmq==27.3.0 msgspec==0.23.0
  pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 setproctitle==1.3.8 dill==0.4.1
  compressed-tensors==0.20.1 loguru==0.7.3 gguf==0.19.0 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  soundfile==0.13.1 cffi==2.1.1 ipython==9.18.1 traitlets==5.16.1)
for w in "${WHEELS[@]}"; do
  name=${w%%==*}
  ls "$KIT"/whl/ 2>/dev/null | grep -qi "^${name//-/_}-${w##*==}-" && continue   # already downloaded
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${TAGS[@]}" -d "$KIT/whl" "$w"
done
STAGE=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$STAGE" \
  --python-version 3.12 --implementation cp --only-binary=:all: "${TAGS[@]}" "$KIT"/whl/*.whl
# What a bf16 model on Hopper with the triton attention and pytorch sampling backends never loads:
# FA3 (1.1 GB), the sm_100 kernel library, FlashMLA and InfLLM-V2 (imports guarded), a static
# library, the opt-in Rust front ends, console scripts (their shebang is this machine's Python),
# (flashinfer stays whole: SGLang imports it, its JIT never runs with these backends).
( cd "$STAGE"
  rm -rf sgl_kernel/flash_ops.abi3.so sgl_kernel/sm100 sgl_kernel/flashmla_ops.abi3.so \
         sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so xgrammar/lib/libxgrammar.a \
         sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so \
         sglang/srt/multimodal/_core.cpython-312-x86_64-linux-gnu.so bin )

du -sh "$STAGE"
tar -C "$STAGE" --sort=name --owner=0 --group=0 -cf - . | xz -T0 -6 > "$KIT/sgl-site.tar.xz"
rm -rf "$STAGE"
( cd "$KIT" && sha256sum sgl-site.tar.xz > kit/SHA256SUMS && split -b "$PART" -d -a 1 sgl-site.tar.xz sgl-site.tar.xz.part- \
  && rm sgl-site.tar.xz && for part in sgl-site.tar.xz.part-*; do n=${part##*-}; mkdir -p "s$n" && mv "$part" "s$n/"; done )
cat > "$KIT/kit/unpack.sh" <<'UNPACK'
#!/bin/bash
# On the GPU machine: joins the parts staged under /tmp/sgl-parts, checks them, unpacks to /tmp/sgl-site.
set -euo pipefail
cat /tmp/sgl-parts/sgl-site.tar.xz.part-* > /tmp/sgl-site.tar.xz
(cd /tmp && sha256sum -c /tmp/sgl-parts/SHA256SUMS)
rm -rf /tmp/sgl-site && mkdir -p /tmp/sgl-site && xz -T0 -dc /tmp/sgl-site.tar.xz | tar -C /tmp/sgl-site -xf - && rm /tmp/sgl-site.tar.xz
echo "unpacked to /tmp/sgl-site"
UNPACK
last=$(ls -d "$KIT"/s* | sort -V | tail -n 1) && cp "$KIT"/kit/* "$last"/  # the last call unpacks
du -sb "$KIT"/s*/*
