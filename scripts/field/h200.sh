#!/bin/bash
# The H200 field run, one phase per call: real vLLM 0.25.0, real SGLang 0.5.17 and transformers
# serve, deployed, verified, benchmarked and broken on purpose by modelyard itself.
# docs/field-tests/README.md says how to rerun it; docs/field-tests/h200-2026-11-30.md is a run.
#
#   bash scripts/field/h200.sh PHASE
#
# Phases, in order (each fits a 10-minute window; what a phase leaves running, modelyard serve
# and its engines, is there for the next one while the machine stays up):
#   stage-vllm     keep the vLLM bundle's pieces this call carries (.field/vllm-N) on the machine;
#                  one call per piece (prepare.sh cuts them to fit one transfer each)
#   stage-sglang   the same for SGLang's pieces (.field/sglang-N); unpacked to /tmp/sgl once all are there
#   setup          join and unpack vLLM, install modelyard's wheels (.whl/field), build the model,
#                  start `modelyard serve`, deploy vLLM (GPU 0) and SGLang (GPU 1, if there is one)
#   bench          benchmark each running deployment through the gateway and directly
#   faults-kv      SIGKILL vLLM mid-benchmark; the KV-cache estimate against the engines' logs
#   engines-one-gpu (one GPU) vLLM and SGLang on the same GPU, one after the other: vLLM deployed
#                  and benchmarked, removed, SGLang deployed, benchmarked and removed (report.py
#                  puts their tables side by side)
#   sglang-single  (one GPU only) SGLang deployed, benchmarked and measured once vLLM is gone
#   transformers   transformers serve --continuous-batching: deploy, benchmark; refused deployments
#   tp2            (two GPUs) tensor parallelism 2 on vLLM and SGLang, benchmarked
#   gateway-cost   gateway and direct side by side against vLLM (the gateway's cost, precisely)
#   gateway-control the side-by-side pair at 128 streams each, with its A/A controls
#   kill-abba      SIGKILL of vLLM mid-answer; then gateway/direct alternated, fixed work per point
#   prefix-routing two vLLM replicas sharing GPU 0 per routing policy (least outstanding, prefix),
#                  the multi-turn workload of benchmarks/prefix_routing.py (needs replicas that can
#                  share a GPU: the clusters issue's scheduler)
#   collect PHASE  pack what PHASE wrote (after a window that closed before PHASE could)
# Each phase leaves its new results in $OUT (or ./field-out) as results-PHASE.tar.gz, and exits 0
# when every step it ran passed (field_run.py's exit status), 1 otherwise, naming the failed steps.
# FIELD_GPUS overrides the GPU count (nvidia-smi -L); FIELD_RUN the step runner (field_run.py).
#
# scripts/field/prepare.sh makes what the phases carry (wheels, the model's core and tokenizer,
# the engines' bundles). On another machine: have vLLM (a `vllm` program) and SGLang (importable
# from SGLANG_PYTHONPATH) installed, point MODEL_SOURCE at the field model's core and tokenizer,
# and run the phases from setup on; the stage phases only bring the offline bundles onto the H200.
set -u
PHASE=${1:?usage: h200.sh PHASE}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/field-out}
# Where the phases keep what the next phase needs (FIELD_TMP: tests run the phases elsewhere).
FIELD=${FIELD_TMP:-/tmp/field}
mkdir -p "$OUT" "$FIELD/results"
export FIELD_RESULTS=$FIELD/results FIELD_DATA=$FIELD/data FIELD_PORT=${FIELD_PORT:-8080}
export FIELD_POINT_S=${FIELD_POINT_S:-8}  # measured seconds per load point (plus 3 s of warm-up)
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 NO_COLOR=1
# NVLink multicast stays off (the machine's rules; engines inherit the environment).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$FIELD/bin:$PATH
export PYTHONPATH=$FIELD/site:$ROOT/src
MODEL=$FIELD/qwen3-field
SGLANG_PYTHONPATH=${SGLANG_PYTHONPATH:-/tmp/sgl}
MODEL_SOURCE=${MODEL_SOURCE:-.whl/field/model-source}
GPUS=${FIELD_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
STAGE=${FIELD_STAGE:-/root/field-stage}
if [ "$PHASE" = collect ]; then
  # `collect PHASE`: what PHASE wrote, after a window that ended before PHASE could pack it.
  MARK=$FIELD/phase-${2:-setup}.start; PHASE=${2:-setup}-late
else
  MARK=$FIELD/phase-$PHASE.start; touch "$MARK"
fi
# Every step's outcome counts: the phase's exit status says whether all of them passed.
FAILED=()
STEPS=0
run() {
  STEPS=$((STEPS + 1))
  ${FIELD_RUN:-python3 scripts/field/field_run.py} "$@" || FAILED+=("$*")
}
# Steps side by side: run_bg STEP ARGS... (as run), then wait_steps for all of them.
PIDS=()
NAMES=()
run_bg() {  # a step (as run takes it) or a function of steps, in the background
  (
    FAILED=()
    if declare -F "$1" >/dev/null; then "$@"; else run "$@"; fi
    [ ${#FAILED[@]} -eq 0 ]
  ) &
  PIDS+=($!)
  NAMES+=("$*")
}
wait_steps() {
  local index
  for index in "${!PIDS[@]}"; do
    STEPS=$((STEPS + 1))
    wait "${PIDS[$index]}" || FAILED+=("${NAMES[$index]}")
  done
  PIDS=()
  NAMES=()
}
finish() {
  if [ ${#FAILED[@]} -gt 0 ]; then
    echo "phase $PHASE: ${#FAILED[@]} of $STEPS steps failed:"; printf '  %s\n' "${FAILED[@]}"
    exit 1
  fi
  echo "phase $PHASE: all $STEPS steps passed"
  exit 0
}

# The bundles travel in pieces (prepare.sh): keep each call's pieces; join them once all are here.
stage_pieces() {  # NAME: copy .field/NAME-*/piece-* into $STAGE/NAME
  mkdir -p "$STAGE/$1"
  local found=0 piece
  for piece in .field/"$1"-*/piece-*; do
    [ -f "$piece" ] || continue
    cp "$piece" "$STAGE/$1/" && found=$((found + 1))
  done
  echo "$1: $found piece(s) in this call; $(ls "$STAGE/$1" | wc -l) on the machine"
  [ "$found" -gt 0 ]
}
join_pieces() {  # NAME FILE KIT_SUMS: join $STAGE/NAME/piece-* into $STAGE/NAME/FILE, check it
  local joined=$STAGE/$1/$2 sums=$ROOT/$3
  [ -f "$joined" ] && (cd "$STAGE/$1" && sha256sum -c --quiet "$sums") && return 0
  cat "$STAGE/$1"/piece-* > "$joined"
  (cd "$STAGE/$1" && sha256sum -c --quiet "$sums") || {
    echo "$1: the joined pieces do not match $3: a piece is missing (stage it first) or damaged"
    rm -f "$joined"; return 1; }
}

collect() {
  # What this phase wrote, packed for the trip back (requests.jsonl files included).
  (cd $FIELD && find results -newer "$MARK" -type f -print0 | tar --null -czf "$OUT/results-$PHASE.tar.gz" -T -)
  ls -la "$OUT"
}
trap collect EXIT
trap 'exit 143' TERM
[ "$1" = collect ] && exit 0

# Engine arguments: the Qwen3 parsers (hermes-style tool calls), half the GPU, 8k context.
VLLM_ARGS="--gpu-memory-utilization 0.5 --max-model-len 8192 --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3"
SGLANG_ARGS="--mem-fraction-static 0.5 --context-length 8192 --tool-call-parser qwen25 --reasoning-parser qwen3 --attention-backend triton --sampling-backend pytorch"

sglang_kv_variants() {  # GPU index: the SGLang KV-cache settings other than the benchmarked one
  run kv-truth sglang-kv-mem08 --backend sglang --version 0.5.17 --gpu-ids "$1" --skip-verification --remove \
    --args="${SGLANG_ARGS/--mem-fraction-static 0.5/--mem-fraction-static 0.8}" --env PYTHONPATH=$SGLANG_PYTHONPATH
  run kv-truth sglang-kv-ctx32k --backend sglang --version 0.5.17 --gpu-ids "$1" --skip-verification --remove \
    --args="${SGLANG_ARGS/--context-length 8192/--context-length 32768}" --env PYTHONPATH=$SGLANG_PYTHONPATH
}

sglang_off_gpu_1() {  # two GPUs: SGLang removed from GPU 1, then its KV-cache settings measured there
  run remove sglang
  sglang_kv_variants 1
}

refusals() {  # deliberately wrong deployments on GPU 0; each must be refused or diagnosed, fix named
  # Another tenant holds most of GPU 0, and a vLLM asks for 90% of it.
  FIELD=$FIELD python3 -c 'import os, torch, time, pathlib
x = torch.empty(110 * 2**30, dtype=torch.uint8, device="cuda:0")
pathlib.Path(os.environ["FIELD"] + "/hog.ready").touch(); time.sleep(300)' &
  local hog=$!
  for _ in $(seq 1 60); do [ -f $FIELD/hog.ready ] && break; sleep 1; done
  run expect-refusal vllm-too-big --backend vllm --version 0.25.0 --gpu-ids 0 \
    --args="${VLLM_ARGS/--gpu-memory-utilization 0.5/--gpu-memory-utilization 0.9}"
  kill $hog; wait $hog 2>/dev/null
  # A tool-call parser for another format than this model's.
  run expect-refusal vllm-wrong-parser --backend vllm --version 0.25.0 --gpu-ids 0 --timeout 300 \
    --args="${VLLM_ARGS/--tool-call-parser hermes/--tool-call-parser qwen3_coder}"
}

case $PHASE in
stage-vllm)
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count())'
  stage_pieces vllm || exit 3
  ;;
stage-sglang)
  stage_pieces sglang || exit 3
  # All pieces here (the joined file matches the kit's checksum): unpack; else wait for the next call.
  if [ ! -f "$SGLANG_PYTHONPATH/.ok" ] && join_pieces sglang sgl-base.tar.xz .sglx/kit/SHA256SUMS.base; then
    mkdir -p "$SGLANG_PYTHONPATH"
    tar -xJf "$STAGE/sglang/sgl-base.tar.xz" -C "$SGLANG_PYTHONPATH" && touch "$SGLANG_PYTHONPATH/.ok"
    PYTHONPATH=$SGLANG_PYTHONPATH python3 -c 'import sglang; print("sglang", sglang.__version__)'
  fi
  ;;
setup)
  mkdir -p $FIELD/site $FIELD/bin ~/.cache/huggingface/hub  # transformers serve 5.17's /v1/models needs the cache folder
  if [ -f .gpu/kit/SHA256SUMS ]; then
    # The offline vLLM bundle (the H200 image has no vLLM): join its pieces, check, unpack.
    if [ ! -f /tmp/site/.ok ]; then
      join_pieces vllm site.tar.xz .gpu/kit/SHA256SUMS || exit 3
      mkdir -p /tmp/site && tar -xJf "$STAGE/vllm/site.tar.xz" -C /tmp/site && touch /tmp/site/.ok || exit 3
      PYTHONPATH=/tmp/site python3 -c 'import vllm; from vllm.entrypoints.openai import api_server; print("vllm", vllm.__version__, "imports")' || exit 3
    fi
    # `vllm` as a user's venv would have it: the bundle, with FlashInfer's sampler off (not bundled).
    cat > $FIELD/bin/vllm <<EOF
#!/bin/sh
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0
exec $(command -v python3) -m vllm.entrypoints.cli.main "\$@"
EOF
    chmod +x $FIELD/bin/vllm
  fi
  if ls .whl/field/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target $FIELD/site .whl/field/*.whl || exit 3
  fi
  started=$(date +%s.%N)
  mkdir -p $FIELD/tokenizer && cp "$MODEL_SOURCE/tokenizer/tokenizer_config.json" $FIELD/tokenizer/
  xz -dc "$MODEL_SOURCE/tokenizer/tokenizer.json.xz" > $FIELD/tokenizer/tokenizer.json
  python3 -m modelyard.testing.field_model expand --core "$MODEL_SOURCE/core" --tokenizer $FIELD/tokenizer \
    --out "$MODEL" --device cuda || exit 4
  echo "model built in $(python3 -c "import time; print(round(time.time() - $started, 1))") s"; du -sh "$MODEL"
  run serve --model-dir "$MODEL"
  [ ${#FAILED[@]} -eq 0 ] || finish
  # FIELD_ENGINES=vllm deploys vLLM alone (the second window's setup: gateway cost, SIGKILL, TP 2).
  run_bg deploy vllm --backend vllm --version 0.25.0 --gpu-ids 0 --args="$VLLM_ARGS"
  if [ "$GPUS" -ge 2 ] && [[ " ${FIELD_ENGINES:-vllm sglang} " == *" sglang "* ]]; then
    run_bg deploy sglang --backend sglang --version 0.5.17 --gpu-ids 1 --args="$SGLANG_ARGS" --env PYTHONPATH=$SGLANG_PYTHONPATH
  fi
  wait_steps
  MODELYARD_URL=http://127.0.0.1:$FIELD_PORT MODELYARD_DATA_DIR=$FIELD_DATA python3 -m modelyard.cli.main ps
  ;;
bench)
  run bench vllm
  if [ "$GPUS" -ge 2 ]; then run bench sglang; fi
  run kv-truth vllm --backend vllm --version 0.25.0 --args="$VLLM_ARGS" --reuse
  if [ "$GPUS" -ge 2 ]; then
    run kv-truth sglang --backend sglang --version 0.5.17 --args="$SGLANG_ARGS" --reuse
  fi
  ;;
engines-one-gpu)
  # One GPU, both engines on it, one after the other, the same prompts and loads: vLLM (from
  # setup, or deployed here), benchmarked through the gateway and directly, removed; then SGLang.
  run deploy vllm --backend vllm --version 0.25.0 --gpu-ids 0 --args="$VLLM_ARGS" --reuse
  run bench vllm
  run remove vllm
  run deploy sglang --backend sglang --version 0.5.17 --gpu-ids 0 --args="$SGLANG_ARGS" --env PYTHONPATH=$SGLANG_PYTHONPATH
  run bench sglang
  run remove sglang
  ;;
sglang-single)
  # One GPU: SGLang once vLLM is gone (faults-kv removes it).
  run deploy sglang --backend sglang --version 0.5.17 --gpu-ids 0 --args="$SGLANG_ARGS" --env PYTHONPATH=$SGLANG_PYTHONPATH
  run bench sglang
  run kv-truth sglang --backend sglang --version 0.5.17 --args="$SGLANG_ARGS" --reuse
  run remove sglang
  sglang_kv_variants 0
  ;;
faults-kv)
  run_bg kill-during-bench vllm --bench-s 180 --kill-after-s 15
  if [ "$GPUS" -ge 2 ]; then run_bg sglang_off_gpu_1; fi
  wait_steps
  run remove vllm
  run kv-truth vllm-kv-mem08 --backend vllm --version 0.25.0 --gpu-ids 0 --skip-verification --remove \
    --args="${VLLM_ARGS/--gpu-memory-utilization 0.5/--gpu-memory-utilization 0.8}"
  run kv-truth vllm-kv-ctx32k --backend vllm --version 0.25.0 --gpu-ids 0 --skip-verification --remove \
    --args="${VLLM_ARGS/--max-model-len 8192/--max-model-len 32768}"
  ;;
transformers)
  if [ "$GPUS" -ge 2 ]; then
    run_bg deploy transformers --backend transformers --gpu-ids 1 --args="--continuous-batching"
    refusals
    wait_steps
    run bench transformers
  else
    run deploy transformers --backend transformers --gpu-ids 0 --args="--continuous-batching"
    run bench transformers
    run remove transformers
    refusals
  fi
  ;;
transformers-again)
  # The first try failed: transformers serve 5.17 answers /v1/models with HTTP 500 when the
  # Hugging Face cache folder does not exist (setup makes it now). Meanwhile vLLM on GPU 0
  # for the gateway's cost, with a fixed amount of work per point, twice.
  mkdir -p ~/.cache/huggingface/hub
  run remove transformers
  run_bg deploy transformers --backend transformers --gpu-ids 1 --args=--continuous-batching
  run_bg deploy vllm --backend vllm --version 0.25.0 --gpu-ids 0 --args="$VLLM_ARGS"
  wait_steps
  run bench transformers
  FIELD_CONCURRENCY=64,256 FIELD_NUM_REQUESTS=768 FIELD_REPEATS=2 run bench vllm --suffix -fixed
  ;;
gateway-cost)
  # The gateway's cost at the precision its targets need (ratio >= 0.98, <= 1 ms added TTFT):
  # both paths at once against one vLLM, half the streams each (FIELD_SIDE_CONCURRENCY per path).
  run gateway-cost vllm
  ;;
gateway-control)
  # At 128 + 128 streams the gateway's half lost a quarter of its throughput (vLLM's API server
  # was the bottleneck: GPU 46 % busy, nothing waiting). The same pair again, and the controls:
  # two identical clients, direct and through the gateway.
  for pair in gateway,direct direct,direct gateway,gateway; do
    FIELD_SIDE_PATHS=$pair FIELD_SIDE_CONCURRENCY=${FIELD_SIDE_CONCURRENCY:-128} run gateway-cost vllm
  done
  ;;
prefix-routing)
  # vLLM's prefix caching (on by default) against the gateway's routing: one deployment of two
  # replicas per policy, all four engines on GPU 0 (a fifth of its memory each), then the same
  # conversations through each deployment, alternated; hit rate from vLLM's own counters.
  export MODELYARD_URL=http://127.0.0.1:$FIELD_PORT MODELYARD_DATA_DIR=$FIELD_DATA
  PREFIX_ARGS="${VLLM_ARGS/--gpu-memory-utilization 0.5/--gpu-memory-utilization 0.2}"
  for pair in vllm-lo:least-outstanding vllm-px:prefix; do
    python3 -m modelyard.cli.main deploy qwen3-field --name "${pair%%:*}" --routing "${pair##*:}" \
      --backend vllm --version 0.25.0 --replicas 2 --gpus 1 --args="$PREFIX_ARGS" --timeout 900 || exit 6
  done
  mkdir -p "$FIELD_RESULTS/prefix-routing"
  BENCH_API_KEY=$(cat "$FIELD_DATA/field-key") python3 benchmarks/prefix_routing.py --no-platform \
    --url "$MODELYARD_URL" --metrics-token-file "$FIELD_DATA/metrics-token" --deployments vllm-lo,vllm-px \
    --conversations 32 --turns 8 --system-words 1500 --rounds 2 \
    --json "$FIELD_RESULTS/prefix-routing/result.json" | tee "$FIELD_RESULTS/prefix-routing/summary.txt"
  for name in vllm-lo vllm-px; do python3 -m modelyard.cli.main rm "$name" --wait; done
  ;;
kill-abba)
  # SIGKILL of vLLM while 32 streams are mid-answer, then (once it is back) the two paths one
  # after the other, alternated, with a fixed amount of work per point.
  run kill-during-bench vllm --bench-s 140 --kill-after-s 15
  if [ "${FIELD_ABBA:-1}" = 1 ]; then
    FIELD_CONCURRENCY=64,256 FIELD_NUM_REQUESTS=1536 run bench vllm --paths gateway,direct,direct,gateway --suffix -abba
  fi
  ;;
tp2)
  run remove transformers
  run remove vllm
  run deploy vllm-tp2 --backend vllm --version 0.25.0 --gpus 2 --args="$VLLM_ARGS --tensor-parallel-size 2"
  FIELD_POINT_S=15 FIELD_CONCURRENCY=1,64,256 run bench vllm-tp2 --paths gateway
  run remove vllm-tp2
  run deploy sglang-tp2 --backend sglang --version 0.5.17 --gpus 2 --args="$SGLANG_ARGS --tp-size 2" \
    --env PYTHONPATH=$SGLANG_PYTHONPATH
  FIELD_POINT_S=15 FIELD_CONCURRENCY=1,64,256 run bench sglang-tp2 --paths gateway
  run remove sglang-tp2
  ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
finish
