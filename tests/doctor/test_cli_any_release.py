"""``modelyard doctor`` and ``modelyard estimate`` on engine releases the built-in catalog does not
list: the nearest release's flag table answers, and the JSON says which one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from modelyard.cli.main import app

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}


@pytest.fixture
def config_only_model(tmp_path: Path) -> Path:
    """A model directory with its config.json alone: the flag checks need nothing more."""
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(CONFIG))
    return directory


def _doctor(model: Path, data_dir: Path, *arguments: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        app,
        [
            "--data-dir",
            str(data_dir),
            "doctor",
            "--model-dir",
            str(model),
            "--gpus",
            "1x80GB",
            "--json",
            *arguments,
        ],
    )
    try:
        document: dict[str, Any] = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from doctor (exit {result.exit_code}): {result.output}")
    return result.exit_code, document


def test_doctor_checks_a_vllm_release_missing_from_the_catalog(
    config_only_model: Path, tmp_path: Path
) -> None:
    # the catalog lists vLLM 0.19.1, 0.25.0 and 0.33.0; 0.22.1 is a real release with its own table
    _, document = _doctor(
        config_only_model, tmp_path, "--backend", "vllm", "--version", "0.22.1",
        "--args", "--max-model-len 4096 --no-such-flag 1",
    )  # fmt: skip
    assert document["flag_table"] == {
        "engine": "vllm", "requested_version": "0.22.1", "version": "0.22.1", "exact": True, "match": "exact",
    }  # fmt: skip
    unknown = [finding for finding in document["findings"] if finding["check_id"] == "param.unknown-flag"]
    assert unknown and unknown[0]["table_version"] == "0.22.1"
    assert "vLLM 0.22.1 has no flag --no-such-flag" in unknown[0]["message"]
    model_findings = [finding for finding in document["findings"] if finding["check_id"].startswith("model.")]
    assert all("table_version" not in finding for finding in model_findings)


def test_doctor_on_a_version_no_release_has_uses_the_nearest(config_only_model: Path, tmp_path: Path) -> None:
    _, document = _doctor(
        config_only_model, tmp_path, "--backend", "sglang", "--version", "0.5.21.post9",
        "--args", "--mamba-scheduler-strategy auto",
    )  # fmt: skip
    assert document["flag_table"]["version"] == "0.5.21"
    assert document["flag_table"]["match"] == "between"
    by_id = {finding["check_id"]: finding for finding in document["findings"]}
    assert "SGLang 0.5.21, the nearest older release" in by_id["param.flag-table-version"]["message"]
    removed = by_id["param.removed-flag"]
    assert removed["fix"] == "use --mamba-radix-cache-strategy"
    assert "removed in SGLang 0.5.20" in removed["message"]


def test_estimate_accepts_a_release_missing_from_the_catalog(config_only_model: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "estimate",
            str(config_only_model / "config.json"),
            "--gpus",
            "1x80GB",
            "--engine-version",
            "0.26.3",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fits"] is True
