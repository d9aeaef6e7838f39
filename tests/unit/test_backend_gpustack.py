"""GPUStack backend YAML: what a GPUStack user pastes, the errors they get, and export."""

from __future__ import annotations

import pytest

from modelyard.backends.catalog import load_builtin_backends
from modelyard.backends.gpustack import parse_gpustack_yaml, to_gpustack_yaml
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.errors import InvalidYaml

TENSORRT_LLM = """\
backend_name: TensorRT-LLM-custom
default_version: 1.2.0rc0
version_configs:
  1.2.0rc0:
    image_name: nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc0
    run_command: 'trtllm-serve {{model_path}} --host 0.0.0.0 --port {{port}}'
    custom_framework: cuda
"""


def test_gpustack_container_backend_is_imported() -> None:
    spec = parse_gpustack_yaml(TENSORRT_LLM)
    version = spec.versions["1.2.0rc0"]
    assert (spec.name, spec.default_version, spec.builtin, spec.family) == (
        "TensorRT-LLM-custom",
        "1.2.0rc0",
        False,
        "custom",
    )
    assert version.image == "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc0"
    assert version.run_command == "trtllm-serve {{model_path}} --host 0.0.0.0 --port {{port}}"
    assert version.health_path == "/v1/models"  # GPUStack's default health check
    assert version.served_model_name == "model_path"  # the command never passes {{model_name}}


def test_command_without_image_makes_its_first_word_the_executable() -> None:
    spec = parse_gpustack_yaml(
        """
backend_name: llama-box-custom
health_check_path: /health
version_configs:
  v1:
    run_command: llama-server -m {{model_path}} --host {{worker_ip}} --port {{port}} --alias {{model_name}}
"""
    )
    version = spec.versions["v1"]
    assert version.executable == "llama-server"
    assert (
        version.run_command == "-m {{model_path}} --host {{worker_ip}} --port {{port}} --alias {{model_name}}"
    )
    assert version.served_model_name == "model_name"
    assert version.health_path == "/health"
    assert spec.default_version == "v1"


def test_vllm_image_with_entrypoint_override_and_default_env() -> None:
    spec = parse_gpustack_yaml(
        """
backend_name: vllm-nightly-custom
default_env:
  HF_HUB_OFFLINE: "1"
  VLLM_LOGGING_LEVEL: INFO
default_entrypoint: vllm serve
default_run_command: "{{model_path}} --port {{port}} --served-model-name {{model_name}}"
default_backend_param: ["--max-model-len=8192"]
version_configs:
  nightly:
    image_name: vllm/vllm-openai:nightly
    custom_framework: cuda
    env:
      VLLM_LOGGING_LEVEL: DEBUG
"""
    )
    version = spec.versions["nightly"]
    assert version.entrypoint == ["vllm", "serve"]
    assert version.run_command == "{{model_path}} --port {{port}} --served-model-name {{model_name}}"
    assert version.env == {"HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert spec.default_backend_parameters == ["--max-model-len=8192"]


def test_gpustack_ui_fields_are_accepted_and_ignored() -> None:
    text = TENSORRT_LLM + "icon: trt.png\nenabled: true\nis_built_in: false\nparameter_format: space\n"
    assert parse_gpustack_yaml(text) == parse_gpustack_yaml(TENSORRT_LLM)


def test_cpu_framework_makes_a_cpu_only_version() -> None:
    spec = parse_gpustack_yaml(
        "backend_name: cpu-server\nversion_configs:\n  v1:\n    custom_framework: cpu\n    run_command: srv\n"
    )
    assert spec.versions["v1"].supports_gpu is False


def test_default_version_is_the_newest_when_not_given() -> None:
    spec = parse_gpustack_yaml(
        "backend_name: b\nversion_configs:\n"
        "  '1.9': {run_command: s}\n  '1.10': {run_command: s}\n  '1.2': {run_command: s}\n"
    )
    assert spec.default_version == "1.10"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "backend_name: b\nversion_configs:\n  v1:\n    image_name: [oops\n",
            r"line 5, column 1: not valid YAML",
            id="syntax-error",
        ),
        pytest.param(
            "backend_name: b\nversion_configs:\n  v1:\n    run_comand: srv\n",
            r"line 4, column 5: version_configs > v1 > run_comand: unknown key 'run_comand' "
            r"\(known keys here: image_name, run_command,",
            id="unknown-version-key",
        ),
        pytest.param(
            "backend_name: b\nbackend_version: 2\nversion_configs:\n  v1:\n    run_command: srv\n",
            r"line 2, column 1: backend_version: unknown key",
            id="unknown-top-level-key",
        ),
        pytest.param(
            "backend_name: b\nversion_configs:\n  v1:\n    run_command: srv\n    env:\n      WORKERS: 4\n",
            r"line 6, column 7: version_configs > v1 > env > WORKERS: "
            r"expected text, got int 4 \(quote it: '4'\)",
            id="env-value-not-text",
        ),
        pytest.param(
            "backend_name: b\nversion_configs:\n  1.10:\n    run_command: srv\n",
            r"line 3, column 3: version_configs > 1.10: the key 1.10 is read as float 1.1.*quote it: '1.10'",
            id="version-key-read-as-number",
        ),
        pytest.param(
            "backend_name: b\nversion_configs: [v1]\n",
            r"line 2, column 1: version_configs: expected a mapping of keys, got a list",
            id="wrong-type",
        ),
        pytest.param(
            "backend_name: b\nversion_configs:\n  v1:\n    custom_framework: cuda\n",
            r"line 3, column 3: version_configs > v1: version 'v1' has neither image_name nor a command",
            id="missing-run-command",
        ),
        pytest.param(
            "backend_name: b\ndefault_version: v2\nversion_configs:\n  v1:\n    run_command: srv\n",
            r"line 2, column 1: default_version: "
            r"default_version 'v2' is not one of the versions.*use one of: v1",
            id="unknown-default-version",
        ),
        pytest.param(
            "backend_name: b\nversion_configs:\n  v1:\n    run_command: srv\n  v1:\n    run_command: other\n",
            r"line 5, column 3: key 'v1' is given twice \(first on line 3\)",
            id="duplicate-version",
        ),
        pytest.param(
            "version_configs:\n  v1:\n    run_command: srv\n",
            r"line 1, column 1: backend_name is missing",
            id="missing-name",
        ),
        pytest.param(
            'backend_name: b\nversion_configs:\n  v1:\n    run_command: "srv --flag \'open"\n',
            r"line 4, column 5: version_configs > v1 > run_command: run_command cannot be split",
            id="unclosed-quote",
        ),
        pytest.param(
            "backend_name: b\nversion_configs:\n  v1:\n    run_command: srv\n    custom_framework: rocm\n",
            r"line 5, column 5: .*custom_framework 'rocm' is not supported",
            id="unsupported-framework",
        ),
        pytest.param("", r"backend YAML is empty", id="empty"),
    ],
)
def test_bad_yaml_names_the_line(text: str, expected: str) -> None:
    with pytest.raises(InvalidYaml, match=expected):
        parse_gpustack_yaml(text)


@pytest.mark.parametrize("spec", load_builtin_backends(), ids=lambda spec: spec.name)
def test_builtin_backends_round_trip_through_gpustack_yaml(spec: BackendSpec) -> None:
    assert parse_gpustack_yaml(to_gpustack_yaml(spec)) == spec.model_copy(update={"builtin": False})


def test_custom_container_backend_round_trips() -> None:
    versions = {
        "1.0": BackendVersion(
            version="1.0",
            image="ghcr.io/example/server:1.0",
            entrypoint=["python3", "-m", "server"],
            run_command="--model {{model_path}} --port {{port}} --name {{model_name}}",
            env={"TOKEN_PATH": "/run/secrets/token"},
            metrics_path="/metrics",
            health_path="/ready",
            reasoning_field="reasoning",
        ),
        "2.0": BackendVersion(
            version="2.0",
            executable="/opt/my server/bin/serve",
            run_command="{{model_path}} --port {{port}}",
            supports_gpu=False,
            stop_signal_target="launcher",
        ),
    }
    spec = BackendSpec(
        name="example-custom",
        family="vllm",
        description="an example",
        default_version="1.0",
        versions=versions,
        default_backend_parameters=["--max-model-len 4096"],
    )
    exported = to_gpustack_yaml(spec)
    assert "run_command: '''/opt/my server/bin/serve'' {{model_path}} --port {{port}}'" in exported
    assert parse_gpustack_yaml(exported) == spec


def test_export_uses_gpustack_keys() -> None:
    exported = to_gpustack_yaml(parse_gpustack_yaml(TENSORRT_LLM))
    assert exported.splitlines() == [
        "backend_name: TensorRT-LLM-custom",
        "default_version: 1.2.0rc0",
        "health_check_path: /v1/models",
        "version_configs:",
        "  1.2.0rc0:",
        "    image_name: nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc0",
        "    run_command: trtllm-serve {{model_path}} --host 0.0.0.0 --port {{port}}",
        "    custom_framework: cuda",
    ]
