"""Which runtime runs a backend version: one rule (``RuntimeSet.for_version``), for every kind of
version a user can register (a built-in, a GPUStack YAML with an image or a command, a custom
version with an image) on every kind of server (one host, a cluster), and a clear refusal for a
version this server cannot run. The controller's start asks the same rule (``launch._runtime_for``).

The runtimes are the real ones (a Ray runtime needs no cluster until it starts something)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.backends.catalog import load_builtin_backends
from modelyard.backends.gpustack import parse_gpustack_yaml
from modelyard.backends.spec import BackendVersion
from modelyard.errors import EngineStartFailed
from modelyard.runtimes.ray_runtime import RayRuntime
from modelyard.runtimes.selection import RuntimeSet

GPUSTACK_IMAGE = """\
backend_name: TensorRT-LLM-custom
version_configs:
  1.2.0rc0:
    image_name: nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc0
    run_command: 'trtllm-serve {{model_path}} --host 0.0.0.0 --port {{port}}'
"""
GPUSTACK_COMMAND = """\
backend_name: llama-box-custom
version_configs:
  v1:
    run_command: llama-server -m {{model_path}} --host {{worker_ip}} --port {{port}}
"""


def builtin(name: str) -> BackendVersion:
    spec = next(spec for spec in load_builtin_backends() if spec.name == name)
    return spec.versions[spec.default_version]


def registered_versions() -> dict[str, BackendVersion]:
    """One version of each kind a user can register, by what it is."""
    return {
        "built-in vllm": builtin("vllm"),
        "built-in sglang": builtin("sglang"),
        "built-in transformers": builtin("transformers"),
        "GPUStack YAML, a command": parse_gpustack_yaml(GPUSTACK_COMMAND).versions["v1"],
        "GPUStack YAML, an image": parse_gpustack_yaml(GPUSTACK_IMAGE).versions["1.2.0rc0"],
        "custom, an image": BackendVersion(
            version="0.25.0", image="vllm/vllm-openai:v0.25.0", run_command="--model {{model_path}}"
        ),
    }


# (what it is, which server) -> the runtime that runs it.
EXPECTED = {
    ("built-in vllm", "one host"): "process",
    ("built-in sglang", "one host"): "process",
    ("built-in transformers", "one host"): "process",
    ("GPUStack YAML, a command", "one host"): "process",
    ("GPUStack YAML, an image", "one host"): "docker",
    ("custom, an image", "one host"): "docker",
    # On a cluster every engine goes through Ray, to the worker the scheduler chose.
    ("built-in vllm", "cluster"): "ray",
    ("built-in sglang", "cluster"): "ray",
    ("built-in transformers", "cluster"): "ray",
    ("GPUStack YAML, a command", "cluster"): "ray",
    ("GPUStack YAML, an image", "cluster"): "ray",
    ("custom, an image", "cluster"): "ray",
}


def server(kind: str) -> RuntimeSet:
    return RuntimeSet(ray=RayRuntime()) if kind == "cluster" else RuntimeSet()


@pytest.mark.parametrize(("what", "where"), sorted(EXPECTED))
def test_the_one_rule_picks_the_runtime_of_each_kind_of_version(what: str, where: str) -> None:
    version = registered_versions()[what]
    assert server(where).for_version(version).kind == EXPECTED[(what, where)]


@pytest.mark.parametrize("where", ["one host", "cluster"])
def test_a_container_sees_the_model_under_models_wherever_it_runs(where: str, tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-8B"
    versions = registered_versions()
    runtimes = server(where)
    image_view = runtimes.engine_view(versions["custom, an image"])
    assert image_view.engine_model_path(str(model)) == "/models/Qwen3-8B"
    mounts = image_view.mounts(str(model))
    assert [(mount.host_path, mount.engine_path, mount.read_only) for mount in mounts] == [
        (str(model), "/models/Qwen3-8B", True)
    ]
    process_view = runtimes.engine_view(versions["built-in vllm"])
    assert process_view.engine_model_path(str(model)) == str(model)
    assert process_view.mounts(str(model)) == []


def test_an_image_version_on_a_server_without_docker_is_refused_with_what_to_do() -> None:
    runtimes = RuntimeSet(docker=None)
    version = registered_versions()["custom, an image"]
    with pytest.raises(EngineStartFailed) as refused:
        runtimes.for_version(version)
    assert refused.value.message == (
        "backend version '0.25.0' runs the container image 'vllm/vllm-openai:v0.25.0', and this "
        "server has no Docker runtime (it has: process)"
    )
    assert refused.value.hint is not None and "names an executable" in refused.value.hint
    assert runtimes.for_version(registered_versions()["built-in vllm"]).kind == "process"


def test_an_instance_of_a_runtime_this_server_lacks_is_refused_at_re_adoption() -> None:
    with pytest.raises(EngineStartFailed, match="no ray runtime in this server") as refused:
        RuntimeSet().by_kind("ray")
    assert refused.value.hint is not None and "--cluster" in refused.value.hint
