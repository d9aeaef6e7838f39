"""An engine DOUBLE that starts like vLLM or SGLang up to a stage, then stops making progress.

It prints the engine's own start lines up to the stage asked (vLLM 0.2x V1 engine, SGLang 0.5.x
forms, as ``doctor/signatures/stall.py`` reads them) and then waits, alive, silent and never
answering, until it is stopped: a start hung in NCCL initialisation, weight loading, torch.compile
or CUDA graph capture, as the controller's stall watch and the doctor see one. With
``--repeat-every SECONDS`` it goes on printing, while stuck, the line a stuck vLLM repeats (its API
server waiting for the engine core, its shared-memory broadcast warning), which is no progress.
The engine's own arguments that follow are ignored.

Usage (a custom backend's command line)::

    python3 -m modelyard.testing.stalling_engine --flavor vllm --stall-at collective-init \\
        serve /models/tiny --port 8000
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Literal, get_args

Flavor = Literal["vllm", "sglang"]
StallAt = Literal["collective-init", "weights", "compile", "graph-capture"]

_VLLM_PREFIX = "(EngineCore_DP0 pid=80) INFO {stamp} "
_VLLM: dict[str, list[str]] = {
    "collective-init": [
        "(Worker_TP0 pid=301) DEBUG {stamp} [parallel_state.py:1011] world_size=2 rank=0 local_rank=0 "
        "distributed_init_method=tcp://127.0.0.1:41595 backend=nccl",
        "(Worker_TP0 pid=301) INFO {stamp} [utils.py:960] Found nccl from library libnccl.so.2",
        "(Worker_TP0 pid=301) INFO {stamp} [pynccl.py:69] vLLM is using nccl==2.27.3",
    ],
    "weights": [
        _VLLM_PREFIX + "[parallel_state.py:1208] rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, "
        "TP rank 0, EP rank 0",
        _VLLM_PREFIX + "[gpu_model_runner.py:2602] Starting to load model {model}...",
        "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]",
    ],
    "compile": [
        _VLLM_PREFIX + "[gpu_model_runner.py:2653] Model loading took 14.25 GiB and 5.10 seconds",
        _VLLM_PREFIX + "[backends.py:548] Using cache directory: /root/.cache/vllm/torch_compile_cache/"
        "597cba1e1f/rank_0_0/backbone for vLLM's torch.compile",
        _VLLM_PREFIX + "[backends.py:559] Dynamo bytecode transform time: 3.29 s",
    ],
    "graph-capture": [
        _VLLM_PREFIX + "[monitor.py:34] torch.compile takes 13.29 s in total",
        _VLLM_PREFIX + "[kv_cache_utils.py:1087] GPU KV cache size: 100,752 tokens",
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  61%|██████    | 41/67 "
        "[00:06<00:04,  6.30it/s]",
    ],
}
_SGLANG: dict[str, list[str]] = {
    "collective-init": ["[{date} TP0] Init torch distributed begin."],
    "weights": [
        "[{date} TP0] Init torch distributed ends. mem usage=0.37 GB",
        "[{date} TP0] Load weight begin. avail mem=78.81 GB",
    ],
    "compile": [
        "[{date} TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=44.12 GB, "
        "mem usage=16.03 GB.",
        "[{date} TP0] Capture piecewise CUDA graph begin. avail mem=10.38 GB",
    ],
    "graph-capture": [
        "[{date} TP0] Memory pool end. avail mem=11.87 GB",
        "[{date} TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=11.82 GB",
    ],
}
_STAGE_ORDER: tuple[StallAt, ...] = get_args(StallAt)
# What a stuck start repeats (vLLM 0.8's API server polling its engine core; vLLM's shm_broadcast.py
# warning while a rank does not read its queue; SGLang launchers polling the health path).
_REPEATED: dict[Flavor, tuple[str, ...]] = {
    "vllm": (
        "(APIServer pid=1) DEBUG {stamp} [core_client.py:425] Waiting for 1 core engine proc(s) to start: "
        "{{0}}",
        "(Worker_TP0 pid=301) WARNING {stamp} [shm_broadcast.py:466] No available shared memory broadcast "
        "block found in 60 second. This typically happens when some processes are hanging or doing some "
        "time-consuming work (e.g. compilation)",
    ),
    "sglang": ('[{date}] INFO:     127.0.0.1:50000 - "GET /health HTTP/1.1" 503 Service Unavailable',),
}


def start_lines(flavor: Flavor, stall_at: StallAt, model: str) -> list[str]:
    """The lines the engine prints up to (and into) ``stall_at``."""
    table = _VLLM if flavor == "vllm" else _SGLANG
    stamp = time.strftime("%m-%d %H:%M:%S")
    date = time.strftime("%Y-%m-%d %H:%M:%S")
    lines: list[str] = []
    if flavor == "vllm":
        lines.append(
            f"(APIServer pid=1) INFO {stamp} [api_utils.py:273] non-default args: {{'model': {model!r}}}"
        )
    else:
        lines.append(f"[{date}] server_args=ServerArgs(model_path={model!r})")
    for stage in _STAGE_ORDER[: _STAGE_ORDER.index(stall_at) + 1]:
        lines.extend(line.format(stamp=stamp, date=date, model=model) for line in table[stage])
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="An engine double that stops mid-start (a test double).")
    parser.add_argument("--flavor", choices=get_args(Flavor), default="vllm")
    parser.add_argument("--stall-at", choices=_STAGE_ORDER, default="collective-init")
    parser.add_argument("--repeat-every", type=float, default=0.0, metavar="SECONDS")
    known, rest = parser.parse_known_args(argv)
    model = next((word for word in rest if word.startswith("/")), "model")
    for line in start_lines(known.flavor, known.stall_at, model):
        print(line, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if known.repeat_every <= 0:
        while True:
            signal.pause()
    repeated = _REPEATED[known.flavor]
    count = 0
    while True:
        time.sleep(known.repeat_every)
        stamp, date = time.strftime("%m-%d %H:%M:%S"), time.strftime("%Y-%m-%d %H:%M:%S")
        print(repeated[count % len(repeated)].format(stamp=stamp, date=date), flush=True)
        count += 1


if __name__ == "__main__":
    main()
