#!/bin/bash
# Builds the offline vLLM 0.25.0 kit for the memory sweep (scripts/field/memory_sweep.py): the
# field kit of ../shared/gpu/build-vllm-kit.sh plus what the sweep's architectures load and that
# kit leaves out: the MoE kernels (Qwen3-MoE, Mixtral, DeepSeek), compressed-tensors with loguru
# (imported by the Qwen3.5/3.6 model code) and blake3 (multimodal models' cache keys).
# Run from the project root: bash scripts/field/build-sweep-kit.sh [KITDIR] (default .sweep-kit).
# Leaves KITDIR/p0..pN (parts of at most 43 MiB, one device call each beside the 17 MB tree) and KITDIR/kit (checksum,
# unpack script). The GPU machine must have Python 3.12 with torch 2.11.0+cu130, as the field one.
set -euo pipefail
KIT=${1:-.sweep-kit}
grep -qx "/$KIT/" .git/info/exclude 2>/dev/null || echo "/$KIT/" >> .git/info/exclude
rm -rf "$KIT" && mkdir -p "$KIT/whl" "$KIT/kit"
TAGS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64)
WHEELS=(vllm==0.25.0 xgrammar==0.2.5.post1 apache-tvm-ffi==0.1.9 llguidance==1.6.1
  openai-harmony==0.0.8 openai==3.57.0 pydantic==2.14.4 pydantic-core==2.50.5
  annotated-types==0.8.0 typing-inspection==0.4.5 pyzmq==27.3.0 cbor2==6.3.0
  watchfiles==1.3.0 msgspec==0.23.0 model-hosting-container-standards==0.1.16
  jmespath==1.1.0 fastapi==0.136.1 starlette==1.10.0 uvicorn==0.54.0 httpx2==2.16.2
  sniffio==1.3.1 pybase64==1.5.1 prometheus-fastapi-instrumentator==8.1.0
  cachetools==8.0.2 partial-json-parser==0.2.1.1.post7
  compressed-tensors==0.17.0 loguru==0.7.3 blake3==1.0.11)
for w in "${WHEELS[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${TAGS[@]}" -d "$KIT/whl" "$w"
done
STAGE=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$STAGE" \
  --python-version 3.12 --implementation cp --only-binary=:all: "${TAGS[@]}" "$KIT"/whl/*.whl
# Hopper runs FA3, so FA2 stays behind; so do the Rust front end, a static library, JIT headers
# and builds for other Pythons. The MoE kernels stay (unlike the field kit).
( cd "$STAGE"
  rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs \
        xgrammar/lib/libxgrammar.a vllm/third_party/deep_gemm/_C.cpython-31[0134]-x86_64-linux-gnu.so
  rm -rf vllm/third_party/deep_gemm/include vllm/third_party/fmha_sm100/cutlass/include \
         vllm/third_party/fmha_sm100/cutlass/tools/util/include bin )
tar -C "$STAGE" -cf - . | xz -T0 -6 > "$KIT/site.tar.xz"
rm -rf "$STAGE" "$KIT/whl"
( cd "$KIT" && split -b 43M -d -a 1 site.tar.xz site.tar.xz.part- \
  && sha256sum site.tar.xz > kit/SHA256SUMS && rm site.tar.xz \
  && for part in site.tar.xz.part-*; do n=${part##*-}; mkdir -p "p$n" && mv "$part" "p$n/"; done )
cat > "$KIT/kit/unpack.sh" <<'UNPACK'
#!/bin/bash
# On the GPU machine: joins the parts staged under /tmp/sweep-parts, checks them, unpacks to /tmp/site.
set -euo pipefail
cat /tmp/sweep-parts/site.tar.xz.part-* > /tmp/site.tar.xz
(cd /tmp && sha256sum -c /tmp/sweep-parts/SHA256SUMS)
rm -rf /tmp/site && mkdir -p /tmp/site && xz -T0 -dc /tmp/site.tar.xz | tar -C /tmp/site -xf - && rm /tmp/site.tar.xz
echo "unpacked to /tmp/site"
UNPACK
last=$(ls -d "$KIT"/p* | sort -V | tail -n 1) && cp "$KIT"/kit/* "$last"/  # the last call unpacks
du -sh "$KIT"/p* "$KIT/kit"
