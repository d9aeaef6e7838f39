"""A real ``modelyard serve`` whose vLLM backend is the engine double with a known performance
curve (``curve_engine.py``), on two 16 GiB GPUs of the NVML double, with a stand-in of Qwen3-8B
(its real config.json and tensor sizes, no weights) as the model: what ``modelyard tune`` needs.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import modelyard
from gateway.served import ServedPlatform
from modelyard.estimate import GpuSpec, parse_gpu_specs
from modelyard.modeldir import ModelFacts, read_model_facts
from modelyard.testing.nvml_double.pynvml import DOUBLE_FILE_VARIABLE
from modelyard.testing.stand_ins import build_stand_in
from modelyard.tune.server_deployer import HttpServerApi

CURVE_ENGINE = Path(__file__).resolve().parent / "curve_engine.py"
NVML_DOUBLE_FOLDER = str(Path(modelyard.__file__).resolve().parent / "testing" / "nvml_double")
GPU_BYTES = 16 * 2**30
GPUS_TEXT = "2x16GB"
MODEL_NAME = "qwen3-8b"
BACKEND = "vllm-double"
BACKEND_YAML = """\
backend_name: vllm-double
description: the vLLM engine double with a known performance curve (tests/tune/curve_engine.py)
health_check_path: /health
modelyard:
  family: vllm
version_configs:
  "1.0":
    run_command: {python} {curve} vllm serve {{{{model_path}}}} --host {{{{worker_ip}}}} \
--port {{{{port}}}} --served-model-name {{{{model_name}}}} --output-tokens 8
    modelyard:
      metrics_path: /metrics
      api_paths: [/v1/chat/completions, /v1/completions]
"""


@dataclass
class TunePlatform:
    served: ServedPlatform
    model_facts: ModelFacts
    gpus: list[GpuSpec]

    def api(self) -> HttpServerApi:
        return HttpServerApi(self.served.url, password=self.served.password)

    def deployments(self) -> list[str]:
        return [item["name"] for item in self.served.api("GET", "/api/v1/deployments").json()]


def two_gpu_environment(folder: Path) -> dict[str, str]:
    """The variables that give a ``modelyard serve`` (and the engines it starts) two 16 GiB GPUs of
    the NVML double, whose file is written into ``folder``."""
    gpus = [
        {
            "name": "NVIDIA double 16GB",
            "uuid": f"GPU-{index}{secrets.token_hex(4)}-0000-0000-0000-000000000000",
            "memory_total_bytes": GPU_BYTES,
            "memory_used_bytes": 0,
        }
        for index in range(2)
    ]
    nvml_file = folder / "nvml.json"
    nvml_file.write_text(json.dumps({"driver_version": "580.95.05", "gpus": gpus}))
    python_path = os.pathsep.join(filter(None, [NVML_DOUBLE_FOLDER, os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": python_path, DOUBLE_FILE_VARIABLE: str(nvml_file)}


def add_model_and_backend(post: Callable[..., httpx.Response], model_dir: Path) -> None:
    """The stand-in at ``model_dir`` as the model ``MODEL_NAME`` and the curve engine as the backend
    ``BACKEND``, added through the server's API (``post(path, **arguments)``)."""
    added = post("/api/v1/models", json={"path": str(model_dir), "name": MODEL_NAME})
    assert added.status_code == 201, added.text
    yaml_text = BACKEND_YAML.format(python=sys.executable, curve=CURVE_ENGINE)
    imported = post("/api/v1/backends/import", content=yaml_text.encode())
    assert imported.status_code == 201, imported.text


@pytest.fixture(scope="session")
def tune_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TunePlatform]:
    scratch = tmp_path_factory.mktemp("tune-served")
    served = ServedPlatform(scratch / "data", gateway_workers=1, environment=two_gpu_environment(scratch))
    served.start()
    try:
        model_dir = build_stand_in(MODEL_NAME, scratch / "models" / MODEL_NAME)
        add_model_and_backend(functools.partial(served.api, "POST"), model_dir)
        yield TunePlatform(served, read_model_facts(model_dir), parse_gpu_specs(GPUS_TEXT))
    finally:
        served.stop()
