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
#   stage-ray      keep Ray's wheels' pieces this call carries (.field/ray-N); installed to
#                  $RAY_SITE once all are there (the Ray runtime's phase needs them)
#   share-setup    (one GPU, 2026-12-02) setup without its deployments, then engines sharing GPU 0
#                  by the estimate (deploy --gpu-memory auto): `pair` (two replicas, started one after
#                  the other) and `solo`; each engine's knob, logged KV cache against the estimate
#   share-routing  prefix routing against least outstanding on `pair` (its routing switched per
#                  pass, benchmarks/prefix_routing.py); the gateway against direct on `solo` at 128
#                  streams each, with both A/A controls, twice
#   ray-runtime    a second server on the Ray runtime (one node; serve --cluster), vLLM deployed
#                  through it beside `solo`: a chat, and the same short benchmark through each
#                  server's gateway (the Ray runtime's added cost): Ray, then process
#   ray-runtime-2  its second half: process, then Ray again; ray-solo's KV cache against the estimate
#   gateway-saturation (issue 13) one client whose requests take gateway, direct-a or direct-b at
#                  random (benchmarks/gateway_saturation.py): gateway/direct and its A/A control in
#                  one run, at FIELD_SAT_STREAMS streams (256 512), FIELD_SAT_S measured seconds (120)
#   gateway-scaling vLLM removed and the server stopped (the CPUs quiet), then
#                  benchmarks/gateway_overhead.py with 1, 2 and 4 gateway workers (FIELD_SCALING_ARGS)
#   autoscale      (issue 29) software and server as setup (the server able to start SGLang too),
#                  then vLLM autoscaled on its waiting requests (1..2 replicas placed on GPU 0 by
#                  memory) under `modelyard bench run` through the gateway, then idle; the replicas
#                  sampled every second; kv-shared on it (the estimate for this card); removed
#   tune           (issue 28) `modelyard tune` on the field model over vLLM and SGLang
#                  (FIELD_TUNE_ARGS) in a session of its own; this call waits FIELD_TUNE_WAIT_S (540)
#   tune-wait      the next call: waits for it again (FIELD_TUNE_WAIT_S) and packs what it wrote
#   collect PHASE  pack what PHASE wrote (after a window that closed before PHASE could)
# Each phase leaves its new results in $OUT (or ./field-out) as results-PHASE.tar.gz, and exits 0
# when every step it ran passed (field_run.py's exit status), 1 otherwise, naming the failed steps.
# FIELD_GPUS overrides the GPU count (nvidia-smi -L); FIELD_RUN the step runner (field_run.py);
# FIELD_SOFTWARE=0 skips setup_software in share-setup (the software is there already: tests).
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
RAY_SITE=${RAY_SITE:-/tmp/ray-site}
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
  # What this phase wrote, packed for the trip back (requests.jsonl files included); cut in parts
  # of 15 MiB when larger (a file that comes back is at most 16 MiB): cat the parts to unpack.
  local packed=$OUT/results-$PHASE.tar.gz
  (cd $FIELD && find results -newer "$MARK" -type f -print0 | tar --null -czf "$packed" -T -)
  if [ "$(stat -c %s "$packed")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d -a 1 "$packed" "$packed.part-" && rm "$packed"
  fi
  ls -la "$OUT"
}
trap collect EXIT
trap 'exit 143' TERM
[ "$1" = collect ] && exit 0

# Engine arguments: the Qwen3 parsers (hermes-style tool calls), half the GPU, 8k context.
VLLM_ARGS="--gpu-memory-utilization 0.5 --max-model-len 8192 --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3"
# Engines sharing GPU 0 by the estimate: no knob here, the placement sets it. `pair`'s KV cache
# (16 x 4,096 tokens a replica) holds about two thirds of share-routing's conversations (32 of
# about 3,000 tokens each): all of them on each replica do not fit, half of them do. `solo` has
# room for 256 streams of 1,024 tokens.
PAIR_ARGS="--max-model-len 4096 --max-num-seqs 16 --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3"
SOLO_ARGS="--max-model-len 1024 --max-num-seqs 256 --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3"
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

setup_software() {  # vLLM's bundle unpacked, modelyard's wheels installed, the field model built
  mkdir -p $FIELD/site $FIELD/bin ~/.cache/huggingface/hub  # transformers serve 5.17's /v1/models needs the cache folder
  if [ -f .gpu/kit/SHA256SUMS ]; then
    # The offline vLLM bundle (the H200 image has no vLLM): join its pieces, check, unpack.
    if [ ! -f /tmp/site/.ok ]; then
      join_pieces vllm site.tar.xz .gpu/kit/SHA256SUMS || return 3
      mkdir -p /tmp/site && tar -xJf "$STAGE/vllm/site.tar.xz" -C /tmp/site && touch /tmp/site/.ok || return 3
      PYTHONPATH=/tmp/site python3 -c 'import vllm; from vllm.entrypoints.openai import api_server; print("vllm", vllm.__version__, "imports")' || return 3
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
    python3 -m pip install -q --no-index --no-deps --no-compile --target $FIELD/site .whl/field/*.whl || return 3
  fi
  started=$(date +%s.%N)
  mkdir -p $FIELD/tokenizer && cp "$MODEL_SOURCE/tokenizer/tokenizer_config.json" $FIELD/tokenizer/
  xz -dc "$MODEL_SOURCE/tokenizer/tokenizer.json.xz" > $FIELD/tokenizer/tokenizer.json
  python3 -m modelyard.testing.field_model expand --core "$MODEL_SOURCE/core" --tokenizer $FIELD/tokenizer \
    --out "$MODEL" --device cuda || return 4
  echo "model built in $(python3 -c "import time; print(round(time.time() - $started, 1))") s"; du -sh "$MODEL"
}

# The server starts SGLang as `python3 -m sglang.launch_server`, python3 taken next to the server's
# own Python first, then from PATH. So the server runs from a venv of its own whose bin/ holds only
# `python` (the image's packages through a .pth), and $FIELD/sgl-bin/python3 comes first on its
# PATH: the image's Python with the SGLang bundle on PYTHONPATH and the backends the bundle has (no
# FA3, no FlashInfer sampling module), as a user's SGLang install would be; other python3 calls go
# through unchanged. (The `vllm` program of setup_software does the same for vLLM.)
sglang_wrapper() {
  local real
  real=$(command -v python3)
  mkdir -p "$FIELD/sgl-bin"
  {
    echo '#!/bin/sh'
    echo 'if [ "$1" = -m ] && [ "$2" = sglang.launch_server ]; then'
    echo "  export PYTHONPATH=$SGLANG_PYTHONPATH"
    echo "  exec $real \"\$@\" --attention-backend triton --sampling-backend pytorch"
    echo 'fi'
    echo "exec $real \"\$@\""
  } > "$FIELD/sgl-bin/python3"
  chmod +x "$FIELD/sgl-bin/python3"
}

server_venv() {
  local real image_site venv_site
  real=$(command -v python3)
  [ -x "$FIELD/server-py/bin/python" ] && return 0
  "$real" -m venv --without-pip "$FIELD/server-py" || return 3
  local interpreter  # bin/python is a link to bin/python3: link it to the interpreter itself
  interpreter=$(readlink -f "$FIELD/server-py/bin/python")
  rm -f "$FIELD/server-py/bin/python" "$FIELD/server-py/bin/python3" "$FIELD"/server-py/bin/python3.*
  ln -s "$interpreter" "$FIELD/server-py/bin/python"
  image_site=$("$real" -c 'import site; print(site.getsitepackages()[0])') || return 3
  venv_site=$("$FIELD/server-py/bin/python" -c 'import site; print(site.getsitepackages()[0])') || return 3
  [ -n "$image_site" ] && [ -d "$venv_site" ] || return 3
  echo "import site; site.addsitedir('$image_site')" > "$venv_site/image-packages.pth"
  "$FIELD/server-py/bin/python" -c 'import sys, yaml; print("server python", sys.executable)' || return 3
}

serve_field() {  # modelyard serve (unless it answers already), able to start vLLM and SGLang
  if python3 -c "import urllib.request, urllib.error, sys
try: urllib.request.urlopen('http://127.0.0.1:$FIELD_PORT/api/v1/system', timeout=3)
except urllib.error.HTTPError: sys.exit(0)
except OSError: sys.exit(1)" 2>/dev/null; then
    echo "modelyard serve answers on port $FIELD_PORT already"; return 0
  fi
  sglang_wrapper
  # The server's own venv, unless the steps are a double (FIELD_RUN: tests).
  [ -n "${FIELD_RUN:-}" ] || server_venv || return 3
  PATH=$FIELD/sgl-bin:$PATH FIELD_RUN=${FIELD_RUN:-$FIELD/server-py/bin/python scripts/field/field_run.py} \
    run serve --model-dir "$MODEL"
  [ ${#FAILED[@]} -eq 0 ]
}

# Issue 29: replicas of at most 8 sequences each, so a load of 48 streams queues on one replica.
AUTO_ARGS="--max-model-len 2048 --max-num-seqs 8"
# Issue 28: both engines, each one's defaults and chunked prefill of 2,048 tokens, a chat load.
TUNE_ARGS="--workload chat --slo ttft_p95<=300ms,tpot_p50<=12ms --backends vllm,sglang --version vllm=0.25.0 --version sglang=0.5.17 --max-num-seqs default --batched-tokens default,2048 --rungs 2 --requests 64 --budget 9m --gpu-ids 0"

wait_tune() {  # up to FIELD_TUNE_WAIT_S for the tune's session; its exit status once it ended
  local waited=0 limit=${FIELD_TUNE_WAIT_S:-540}
  while [ ! -f "$FIELD/tune.rc" ] && [ "$waited" -lt "$limit" ]; do sleep 2; waited=$((waited + 2)); done
  tail -30 "$FIELD/results/tune.log" 2>/dev/null
  if [ ! -f "$FIELD/tune.rc" ]; then echo "the tune is still running after $waited s: call tune-wait next"; return 0; fi
  STEPS=$((STEPS + 1))
  [ "$(cat "$FIELD/tune.rc")" = 0 ] || FAILED+=("tune (exit $(cat "$FIELD/tune.rc"))")
}

case $PHASE in
autoscale)
  if [ "${FIELD_SOFTWARE:-1}" = 1 ]; then setup_software || exit $?; fi
  serve_field || { FAILED+=("serve"); finish; }
  run autoscale vllm-auto --backend vllm --version 0.25.0 --gpus 1 --gpu-memory auto --skip-verification \
    --args="${FIELD_AUTO_ARGS:-$AUTO_ARGS}" --min 1 --max "${FIELD_AUTO_MAX:-2}" --target 2 --stabilisation-s 10 \
    --scale-down-stabilisation-s 20 --cooldown-s 30 --concurrency "${FIELD_AUTO_STREAMS:-48}" \
    --load-s "${FIELD_AUTO_LOAD_S:-120}" --idle-s "${FIELD_AUTO_IDLE_S:-40}"
  run kv-shared vllm-auto
  run remove vllm-auto
  ;;
tune)
  serve_field || { FAILED+=("serve"); finish; }
  if [ -f "$FIELD/tune.pid" ]; then echo "a tune was started already (pid $(cat "$FIELD/tune.pid"))"; else
    # A session of its own: it outlives this call while the machine stays up (tune-wait goes on).
    # shellcheck disable=SC2086
    setsid bash -c '"$@" > "$0/results/tune.log" 2>&1; echo $? > "$0/tune.rc"' "$FIELD" \
      ${FIELD_RUN:-python3 scripts/field/field_run.py} tune field -- ${FIELD_TUNE_ARGS:-$TUNE_ARGS} &
    echo $! > "$FIELD/tune.pid"
  fi
  wait_tune
  ;;
tune-wait)
  wait_tune
  ;;
stage-vllm)
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count())'
  stage_pieces vllm || exit 3
  ;;
stage-ray)
  stage_pieces ray || exit 3
  # All pieces here: install the wheels (Ray and what it needs that the image lacks) to $RAY_SITE.
  if [ ! -f "$RAY_SITE/.ok" ] && join_pieces ray ray-wheels.tar .field/ray-kit/SHA256SUMS; then
    mkdir -p "$STAGE/ray/wheels" "$RAY_SITE" && tar -xf "$STAGE/ray/ray-wheels.tar" -C "$STAGE/ray/wheels" \
      && python3 -m pip install -q --no-index --no-deps --no-compile --target "$RAY_SITE" "$STAGE"/ray/wheels/*.whl \
      && touch "$RAY_SITE/.ok" || exit 3
    PYTHONPATH=$RAY_SITE python3 -c 'import ray; print("ray", ray.__version__)' || exit 3
  fi
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
  setup_software || exit $?
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
share-setup)
  # Two deployments on GPU 0, placed by memory: the knob of each engine comes from the estimate.
  # pair's second replica starts once the first runs: vLLM sizes its KV cache from the device's
  # free memory while it profiles, so two starting together would count each other's memory.
  if [ "${FIELD_SOFTWARE:-1}" = 1 ]; then setup_software || exit $?; fi
  run serve --model-dir "$MODEL"
  [ ${#FAILED[@]} -eq 0 ] || finish
  run deploy pair --backend vllm --version 0.25.0 --gpus 1 --gpu-memory auto --args="$PAIR_ARGS"
  run scale pair 2
  run deploy solo --backend vllm --version 0.25.0 --gpus 1 --gpu-memory auto --args="$SOLO_ARGS"
  run kv-shared pair solo
  ;;
share-routing)
  # Prefix routing against least outstanding on pair's two replicas (vLLM's own counters), then
  # the gateway against direct on solo at 128 streams each with both A/A controls, twice.
  FIELD_PREFIX_ARGS=${FIELD_PREFIX_ARGS:-"--conversations 32 --turns 6 --system-prompts 32 --system-words 2400 --rounds 3"} \
    run prefix-routing pair
  for repeat in 1 2; do
    for pair in gateway,direct direct,direct gateway,gateway; do
      FIELD_SIDE_PATHS=$pair FIELD_SIDE_CONCURRENCY=${FIELD_SIDE_CONCURRENCY:-128} run gateway-cost solo --suffix="-r$repeat"
    done
  done
  ;;
ray-runtime)
  # The Ray runtime with one node: a second server (port 8081, its own data) with --cluster starts
  # a Ray head on this host (docs/clusters.md) and deploys through it what solo is on the process
  # runtime (the same flags, placed by memory on GPU 0 beside the others); a chat through each
  # server's gateway, then the same short benchmark through each, alternated (Ray, process,
  # process, Ray), each pass with prompts of its own.
  [ -f "$RAY_SITE/.ok" ] || { echo "Ray is not installed here ($RAY_SITE): stage-ray first"; exit 3; }
  export PATH=$RAY_SITE/bin:$PATH PYTHONPATH=$FIELD/site:$RAY_SITE:$ROOT/src
  RAY_SERVER_PORT=${FIELD_RAY_SERVER_PORT:-8081}
  on_ray() { FIELD_PORT=$RAY_SERVER_PORT FIELD_DATA=$FIELD/data-ray "$@"; }
  on_ray run serve --model-dir "$MODEL" --serve-arg=--cluster --serve-arg=--ray-port="${FIELD_RAY_HEAD_PORT:-6379}"
  [ ${#FAILED[@]} -eq 0 ] || finish
  on_ray run deploy ray-solo --backend vllm --version 0.25.0 --gpus 1 --gpu-memory auto --args="$SOLO_ARGS"
  on_ray run chat ray-solo
  run chat solo
  # A pass of three points took about 120 s on the H200 (2026-12-02): two here, two in ray-runtime-2.
  export FIELD_CONCURRENCY=${FIELD_CONCURRENCY:-1,16,64} FIELD_POINT_S=${FIELD_POINT_S:-8}
  on_ray run bench ray-solo --paths gateway --suffix=-runtime
  run bench solo --paths gateway --suffix=-runtime
  ;;
ray-runtime-2)
  # The second half of ray-runtime (its servers and engines still up): process, then Ray again.
  export PATH=$RAY_SITE/bin:$PATH PYTHONPATH=$FIELD/site:$RAY_SITE:$ROOT/src
  RAY_SERVER_PORT=${FIELD_RAY_SERVER_PORT:-8081}
  on_ray() { FIELD_PORT=$RAY_SERVER_PORT FIELD_DATA=$FIELD/data-ray "$@"; }
  export FIELD_CONCURRENCY=${FIELD_CONCURRENCY:-1,16,64} FIELD_POINT_S=${FIELD_POINT_S:-8}
  run bench solo --paths gateway --suffix=-runtime --repeat-from 2
  on_ray run bench ray-solo --paths gateway --suffix=-runtime --repeat-from 2
  on_ray run kv-shared ray-solo
  MODELYARD_URL=http://127.0.0.1:$RAY_SERVER_PORT MODELYARD_DATA_DIR=$FIELD/data-ray python3 -m modelyard.cli.main workers \
    > "$FIELD_RESULTS/ray-workers.txt" 2>&1
  ;;
gateway-saturation)
  # Issue 13's H200 point: throughput through the gateway >= 0.98 of direct at saturation. Two
  # clients side by side split a saturated vLLM 0.77 to 1.20 even on the same path (2026-12-02),
  # so one client labels each request at random: gateway, direct-a, direct-b (the A/A control).
  run deploy vllm --backend vllm --version 0.25.0 --gpu-ids 0 --args="$VLLM_ARGS" --reuse
  seen=" "
  for streams in ${FIELD_SAT_STREAMS:-256 512}; do
    repeat=$(( $(grep -o " $streams " <<< "$seen" | wc -l) + 1 ))  # a load given twice: -r2, its own seed
    seen="$seen$streams "
    run gateway-saturation vllm --streams "$streams" --duration-s "${FIELD_SAT_S:-120}" \
      --warmup-s "${FIELD_SAT_WARMUP_S:-15}" --seed "$repeat" $([ "$repeat" -gt 1 ] && echo "--suffix=-r$repeat")
  done
  ;;
gateway-scaling)
  # "N gateway workers relay >= 0.8 N times one worker's chunks/s", on this host's quiet cores:
  # vLLM and the field server are stopped first, then the exact upstream stands in for an engine.
  run remove vllm
  run gateway-scaling
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
