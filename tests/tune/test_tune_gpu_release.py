"""A removed candidate's GPU memory is waited for before the next candidate starts.

On an H100 (2026-12-07) the driver still held 71-75 GiB of a removed engine 0.5 s after its
deployment was gone, so the next candidate's preflight refused it. Here the NVML double's file
plays that moment: after the removal the GPUs still show memory used, and the deployer's ``stop``
must not return until the file (and so the server's inventory) shows it back.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from modelyard.testing.nvml_double.pynvml import DOUBLE_FILE_VARIABLE
from modelyard.tune.server_deployer import ServerDeployer
from modelyard.tune.space import Candidate, EngineChoice

from .conftest import BACKEND, MODEL_NAME, TunePlatform

CANDIDATE = Candidate(EngineChoice(BACKEND, "vllm", "1.0", engine_version="0.25.0"), tensor_parallel=2)
HELD_BYTES = 12 * 2**30


def _set_used(nvml_file: Path, used_bytes: int) -> None:
    document = json.loads(nvml_file.read_text())
    for gpu in document["gpus"]:
        gpu["memory_used_bytes"] = used_bytes
    nvml_file.write_text(json.dumps(document))


def _inventory_used(platform: TunePlatform) -> list[int]:
    return [gpu["memory_used_bytes"] for gpu in platform.served.api("GET", "/api/v1/gpus").json()["gpus"]]


def test_stop_returns_only_once_the_gpus_memory_is_back(tune_platform: TunePlatform) -> None:
    nvml_file = Path(tune_platform.served.environment[DOUBLE_FILE_VARIABLE])
    api = tune_platform.api()
    stopped, polled = threading.Event(), threading.Event()
    try:
        deployer = ServerDeployer(api, "gpurelease", MODEL_NAME, start_timeout_s=120, release_timeout_s=90)
        with deployer:
            deployer.start(CANDIDATE)
            name = deployer.deployment_name(CANDIDATE)
            # The engine's memory as the driver reports it while it runs and just after it exits.
            _set_used(nvml_file, HELD_BYTES)
            while not all(used == HELD_BYTES for used in _inventory_used(tune_platform)):
                polled.wait(0.2)  # the server reads NVML every few seconds; nothing to await

            def stop() -> None:
                deployer.stop(CANDIDATE)
                stopped.set()

            stopper = threading.Thread(target=stop)
            stopper.start()
            while tune_platform.served.api("GET", f"/api/v1/deployments/{name}").status_code != 404:
                polled.wait(0.2)
            # Gone from the server, its memory not yet back: stop goes on waiting.
            assert not stopped.wait(2.0), "stop returned while the GPUs still held the engine's memory"
            _set_used(nvml_file, 0)  # the driver gives it back
            assert stopped.wait(60), "stop did not return once the memory was back"
            stopper.join()
    finally:
        _set_used(nvml_file, 0)
        api.close()
    assert tune_platform.deployments() == []
