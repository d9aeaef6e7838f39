"""`modelyard deploy MODEL --preset NAME` and `modelyard presets`, against the real API."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from modelyard.presets import get_preset
from modelyard.testing.stand_ins import build_stand_in

from .conftest import StartServer, h100s


def test_presets_are_listed_for_a_model(start_server: StartServer, tmp_path: Path) -> None:
    server = start_server()
    model_dir = build_stand_in("qwen3.6-27b", tmp_path / "Qwen3.6-27B")
    assert server.cli("models", "add", str(model_dir), "--name", "qwen3.6-27b").exit_code == 0
    listed = json.loads(server.cli("presets", "list", "--model", "qwen3.6-27b", "--json").stdout)
    assert [preset["name"] for preset in listed] == [
        "qwen3.6-27b-vllm",
        "qwen3.6-27b-vllm-mtp",
        "qwen3.6-27b-vllm-1gpu",
        "qwen3.6-27b-sglang",
        "qwen3.6-27b-sglang-mtp",
    ]
    table = server.cli("presets", "list").stdout
    assert "qwen3.6-27b-vllm" in table and "2xL40S, 2xH100, 2xH200, 2xB200" in table


def test_deploy_with_a_preset_fills_backend_version_gpus_and_flags(
    start_server: StartServer, tmp_path: Path
) -> None:
    # Qwen3-8B's architecture with four of its layers: the server's host check (host.ram-low)
    # wants RAM for the weights, 3.9 GiB here rather than the whole model's 15.3 GiB.
    server = start_server(gpus=h100s(1))
    model_dir = build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B", config_changes={"num_hidden_layers": 4})
    assert server.cli("models", "add", str(model_dir), "--name", "qwen3-8b").exit_code == 0
    result = server.cli(
        "deploy", "qwen3-8b", "--preset", "qwen3-8b-vllm", "--args", "--max-model-len 16384", "--no-wait"
    )
    assert result.exit_code == 0, result.output
    deployment = server.api("GET", "/deployments/qwen3-8b").json()
    preset = get_preset("qwen3-8b-vllm")
    assert (deployment["backend"], deployment["backend_version"]) == ("vllm", "0.25.0")
    assert deployment["gpus_per_replica"] == 1
    # The user's --max-model-len replaced the preset's; every other flag of the preset is there.
    expected = [line for line in preset.parameters if not line.startswith("--max-model-len")]
    words = [word for line in [*expected, "--max-model-len 16384"] for word in shlex.split(line)]
    assert deployment["backend_parameters"] == words
    assert deployment["warnings"] == []


def test_a_preset_for_another_model_is_refused(start_server: StartServer, tiny_model: Path) -> None:
    server = start_server(gpus=h100s(2))
    assert server.cli("models", "add", str(tiny_model), "--name", "tiny").exit_code == 0
    result = server.cli("deploy", "tiny", "--preset", "qwen3.6-27b-vllm", "--no-wait")
    assert result.exit_code == 1
    assert "preset 'qwen3.6-27b-vllm' is for Qwen3_5ForConditionalGeneration" in result.stderr
    assert "model 'tiny' is Qwen3ForCausalLM" in result.stderr
    mismatched = server.cli("deploy", "tiny", "--preset", "qwen3-8b-vllm", "--backend", "sglang", "--no-wait")
    assert mismatched.exit_code == 1 and "--backend sglang disagrees with preset" in mismatched.stderr
    assert server.api("GET", "/deployments").json() == []
    unknown = server.cli("presets", "show", "qwen9")
    assert unknown.exit_code == 1 and "no preset named 'qwen9'" in unknown.stderr
