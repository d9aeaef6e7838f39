"""The memory sweep: start a real engine once per case of a plan, keep what it logs of memory.

Runs on the GPU machine, with the standard library and PyYAML only. Each case names a model's
config.json (weights are never needed: vLLM starts with ``--load-format dummy``, random weights of
the config's shapes), the engine's arguments, and how often to start it (a second start of the
same case runs on a warm compile cache). For each start it writes one case file in the format of
``tests/estimate/evaluation/*.yaml`` (name, engine, version, GPU, arguments, the logged lines the
estimator is judged on), with what else was seen (seconds to ready, nvidia-smi's memory used,
how it ended), and the whole log beside it.

The plan's ``engine`` picks the server: ``vllm`` (``vllm.entrypoints.openai.api_server``) or
``sglang`` (``sglang.launch_server --model-path DIR``); ``common_arguments`` are given to every
start (for SGLang the sweep kit's ``--attention-backend triton --sampling-backend pytorch``) and
kept in each case's arguments, so the case holds every input of the start.

Usage (on the GPU machine, the engine importable from PYTHONPATH)::

    python3 scripts/field/memory_sweep.py PLAN.yaml OUT_DIR [--only NAME ...] [--budget-s 540]

The plan (YAML)::

    engine: vllm
    engine_version: 0.25.0
    source: "modelyard memory sweep, 2026-12-06"
    cases:
      - name: qwen3-8b-8k
        config: tests/estimate/sweep/configs/qwen3-8b.json
        family: dense
        arguments: [--max-model-len, "8192"]
        starts: 2          # cold, then warm compile cache
        tokenizer: false   # true: carry the Qwen3 tokenizer beside the config (multimodal models)
        until: ready       # or pool: stop once the KV pool is sized (SGLang: before graph capture)

Cases run in plan order; one whose start would pass ``--budget-s`` is left for the next call, and
a case already in OUT_DIR is skipped, so the same command can be given again to go on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

# The lines the estimator and its evaluation read (estimate/startup_logs.py), and the ones that
# say why a start failed: vLLM's, then SGLang's (memory at each step, the KV and state pools, the
# scheduler's summary and the server arguments it resolved).
KEPT = re.compile(
    r"non-default args|memory snapshot|Model loading took|CUDA graph|KV cache|Free memory on device"
    r"|Maximum concurrency|torch.compile|Compil|profil|Available KV|GPU blocks|num_gpu_blocks"
    r"|Error|error:|Traceback|OutOfMemory|out of memory|ValueError|RuntimeError|Application startup"
    r"|Loading weights took|Memory profiling|Initial free memory|activation|non[-_]torch"
    r"|avail mem=|mem usage=|KV Cache is allocated|Mamba Cache is allocated|max_total_num_tokens="
    r"|Memory pool end|Capture cuda graph|mem_fraction_static|server_args=|fired up",
)
READY = re.compile(r"Application startup complete|The server is fired up and ready to roll")
# A case with ``until: pool`` ends once the engine has sized its pools (SGLang allocates the KV and
# state pools before it captures CUDA graphs, so the capture adds nothing to what is measured).
POOL_SIZED = re.compile(r"Memory pool end|GPU KV cache size:")
# What each engine logs as its KV pool's size in tokens (the sweep's one-line progress).
TOKENS = {
    "vllm": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "sglang": re.compile(r"max_total_num_tokens=(\d+)"),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gpu_facts() -> dict[str, Any]:
    query = "name,memory.total,memory.used,driver_version"
    output = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[0]
    name, total, used, driver = (part.strip() for part in output.split(","))
    return {"name": name, "memory_total_mib": int(total), "memory_used_mib": int(used), "driver": driver}


def gpu_label(name: str) -> str:
    for known in ("H200", "H100", "A100", "L40S", "L4"):
        if known in name:
            return f"1x{known}"
    return "1x" + name.replace(" ", "-")


def model_folder(case: dict[str, Any], root: Path, tokenizer: Path | None) -> Path:
    folder = root / case["name"]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(case["config"], folder / "config.json")
    for extra_name, extra_path in (case.get("files") or {}).items():
        shutil.copy(extra_path, folder / extra_name)
    if case.get("tokenizer"):
        if tokenizer is None:
            raise SystemExit(f"case {case['name']} needs --tokenizer DIR")
        for item in tokenizer.iterdir():
            shutil.copy(item, folder / item.name)
    return folder


def case_arguments(plan: dict[str, Any], case: dict[str, Any]) -> list[str]:
    """The engine arguments of one case: the plan's common ones, then the case's own."""
    common = [str(argument) for argument in plan.get("common_arguments") or []]
    return common + [str(argument) for argument in case.get("arguments", [])]


def engine_argv(plan: dict[str, Any], case: dict[str, Any], folder: Path, port: int) -> list[str]:
    """The command line of one start, dummy weights, on loopback."""
    engine = plan.get("engine", "vllm")
    if engine == "vllm":
        argv = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(folder), "--served-model-name", case["name"],
        ]  # fmt: skip
    elif engine == "sglang":
        argv = [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", str(folder), "--served-model-name", case["name"],
        ]  # fmt: skip
    else:
        raise SystemExit(f"plan engine {engine!r}: the sweep starts vllm or sglang")
    argv += ["--port", str(port), "--host", "127.0.0.1", "--load-format", "dummy"]
    if not case.get("tokenizer"):
        argv.append("--skip-tokenizer-init")
    return argv + case_arguments(plan, case)


def start_once(
    plan: dict[str, Any], case: dict[str, Any], folder: Path, log_path: Path, timeout_s: float
) -> dict[str, Any]:
    engine = plan.get("engine", "vllm")
    argv = engine_argv(plan, case, folder, free_port())
    environment = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    if engine == "vllm":
        environment["VLLM_LOGGING_LEVEL"] = "DEBUG"
    environment.update({key: str(value) for key, value in (case.get("env") or {}).items()})
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
    outcome, used_at_ready = "timeout", None
    until_pool = case.get("until", "ready") == "pool"
    while time.monotonic() - started < timeout_s:
        if process.poll() is not None:
            outcome = f"exited {process.returncode}"
            break
        text = log_path.read_text(errors="replace")
        if READY.search(text):
            outcome = "ready"
            used_at_ready = gpu_facts()["memory_used_mib"]
            break
        if until_pool and POOL_SIZED.search(text):
            time.sleep(1.0)  # the lines logged right after the pool's
            outcome = "pool sized"
            used_at_ready = gpu_facts()["memory_used_mib"]
            break
        time.sleep(0.5)
    seconds = round(time.monotonic() - started, 1)
    stop(process, group_first=engine == "vllm")
    return {
        "argv": argv[1:],
        "outcome": outcome,
        "seconds": seconds,
        "gpu_used_at_ready_mib": used_at_ready,
    }


def stop(process: subprocess.Popen[bytes], *, group_first: bool = True) -> None:
    """Ends one start: SIGTERM to the group (vLLM) or to the launcher alone (SGLang, whose
    scheduler logs a crash on the group signal), then SIGKILL to what is left of the group."""
    if process.poll() is None:
        if group_first:
            os.killpg(process.pid, signal.SIGTERM)
        else:
            process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for _ in range(60):  # the GPU's memory is given back a little after the group is gone
        if gpu_facts()["memory_used_mib"] < 2048:
            return
        time.sleep(0.5)


def kept_lines(log: str) -> str:
    """The lines of a start's log that a case keeps (``KEPT``), progress bars left out."""
    lines = (line.rsplit("\r", 1)[-1] for line in log.splitlines())
    return "\n".join(line for line in lines if KEPT.search(line) and "Capturing" not in line) + "\n"


def case_record(
    plan: dict[str, Any],
    case: dict[str, Any],
    start: int,
    seen: dict[str, Any],
    log: str,
    gpu: dict[str, Any],
) -> dict[str, Any]:
    """One start as a case of ``tests/estimate/sweep/cases`` (``startup_logs.load_case`` reads it):
    named ``case_prefix`` + name + start, its config beside the cases in ``../configs``."""
    return {
        "name": f"{plan.get('case_prefix', '')}{case['name']}-start{start}",
        "source_url": f"field run: {plan['source']}",
        "source": plan["source"],
        "engine": plan["engine"],
        "engine_version": plan["engine_version"],
        "family": case.get("family", ""),
        "model": Path(case["config"]).stem,
        "config": "../configs/" + Path(case["config"]).name,
        "gpu": gpu_label(gpu["name"]),
        "gpu_name": gpu["name"],
        "driver": gpu["driver"],
        "arguments": case_arguments(plan, case),
        "env": case.get("env") or {},
        "compile_cache": "cold" if start == 1 else "warm",
        "predict_available_memory": True,
        **seen,
        "log": kept_lines(log),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--timeout-s", type=float, default=240.0)
    parser.add_argument("--tokenizer", type=Path, default=None)
    options = parser.parse_args()
    plan = yaml.safe_load(options.plan.read_text())
    options.out.mkdir(parents=True, exist_ok=True)
    models = Path("/tmp/sweep-models")
    began = time.monotonic()
    for case in plan["cases"]:
        if options.only and case["name"] not in options.only:
            continue
        for start in range(1, int(case.get("starts", 1)) + 1):
            record_path = options.out / f"{plan.get('case_prefix', '')}{case['name']}-start{start}.yaml"
            if record_path.exists():
                continue
            left_s = options.budget_s - (time.monotonic() - began)
            if left_s < float(case.get("expected_s", 90)):
                print(f"budget: {case['name']} start {start} left for the next call", flush=True)
                return 0
            folder = model_folder(case, models, options.tokenizer)
            log_path = record_path.with_suffix(".log")
            seen = start_once(plan, case, folder, log_path, min(options.timeout_s, left_s))
            log = log_path.read_text(errors="replace")
            record = case_record(plan, case, start, seen, log, gpu_facts())
            record_path.write_text(yaml.safe_dump(record, sort_keys=False, width=10_000))
            tokens = TOKENS[plan.get("engine", "vllm")].findall(log)
            print(
                json.dumps({"case": record["name"], "outcome": seen["outcome"],
                            "seconds": seen["seconds"], "kv_tokens": tokens[-1:] }),
                flush=True,
            )  # fmt: skip
    print("plan done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
