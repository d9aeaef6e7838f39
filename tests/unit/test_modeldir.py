"""Model directory validation: what a user sees for good and broken directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from modelyard.errors import InvalidModelDirectory
from modelyard.modeldir import (
    inspect_model_directory,
    read_model_facts,
    read_safetensors_header,
    write_safetensors_header_only,
)

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 16,
    "torch_dtype": "float16",
    "eos_token_id": 2,
}


def _tensors() -> dict[str, np.ndarray]:
    tensors = {
        "model.embed_tokens.weight": np.zeros((16, 8), dtype=np.float16),
        "lm_head.weight": np.zeros((16, 8), dtype=np.float16),
        "model.norm.weight": np.ones((8,), dtype=np.float16),
    }
    for layer in range(2):
        tensors[f"model.layers.{layer}.self_attn.q_proj.weight"] = np.zeros((8, 8), dtype=np.float16)
        tensors[f"model.layers.{layer}.mlp.down_proj.weight"] = np.zeros((8, 16), dtype=np.float16)
    return tensors


def _write_model(directory: Path, *, sharded: bool = False) -> Path:
    """A small model written with the safetensors library itself (no torch needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 3]}))
    (directory / "tokenizer.json").write_text(
        json.dumps({"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"id": 2, "content": "</s>"}]})
    )
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    tensors = _tensors()
    if not sharded:
        save_file(tensors, str(directory / "model.safetensors"))
        return directory
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[:3], "model-00002-of-00002.safetensors": names[3:]}
    weight_map = {}
    for shard, shard_names in halves.items():
        save_file({name: tensors[name] for name in shard_names}, str(directory / shard))
        weight_map.update(dict.fromkeys(shard_names, shard))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return directory


def test_a_complete_directory_is_valid_with_its_facts(tmp_path: Path) -> None:
    report = inspect_model_directory(_write_model(tmp_path / "model"))
    assert report.valid, report.reasons
    assert report.architecture == "LlamaForCausalLM"
    assert report.dtype == "float16"
    expected_elements = sum(array.size for array in _tensors().values())
    assert report.parameter_count == expected_elements
    assert report.size_bytes == expected_elements * 2
    assert report.eos_token_ids == [2, 3]
    assert report.chat_template == "{{ messages }}"


def test_header_reader_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    from safetensors import safe_open

    model = _write_model(tmp_path / "model")
    header = read_safetensors_header(model / "model.safetensors")
    with safe_open(str(model / "model.safetensors"), framework="numpy") as handle:
        shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
    assert {name: tensor.shape for name, tensor in header.tensors.items()} == shapes
    assert header.expected_file_bytes == (model / "model.safetensors").stat().st_size


def test_weight_summary_splits_layers_embeddings_and_head(tmp_path: Path) -> None:
    facts = read_model_facts(_write_model(tmp_path / "model"))
    assert facts.weights is not None
    assert facts.weights.layer_bytes == {0: (64 + 128) * 2, 1: (64 + 128) * 2}
    assert facts.weights.embedding_bytes == 16 * 8 * 2
    assert facts.weights.head_bytes == 16 * 8 * 2
    assert facts.weights.other_bytes == 8 * 2


def test_sharded_directory_with_every_shard_is_valid(tmp_path: Path) -> None:
    report = inspect_model_directory(_write_model(tmp_path / "model", sharded=True))
    assert report.valid, report.reasons
    assert report.facts is not None and len(report.facts.weight_files) == 2


def test_missing_shard_is_named_in_the_reason(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model", sharded=True)
    (model / "model-00002-of-00002.safetensors").unlink()
    report = inspect_model_directory(model)
    assert not report.valid
    assert "model-00002-of-00002.safetensors" in report.reasons[0]


def test_truncated_shard_is_invalid(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model")
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[:-10])
    report = inspect_model_directory(model)
    assert not report.valid
    assert any("truncated" in reason for reason in report.reasons)


def test_model_one_level_deeper_gets_a_suggestion(tmp_path: Path) -> None:
    inner = _write_model(tmp_path / "download" / "Llama-Tiny")
    report = inspect_model_directory(tmp_path / "download")
    assert not report.valid
    assert report.suggestion == inner
    with pytest.raises(InvalidModelDirectory, match="did you mean"):
        report.raise_if_invalid()


def test_hugging_face_cache_layout_suggests_the_snapshot(tmp_path: Path) -> None:
    snapshot = _write_model(tmp_path / "models--org--tiny" / "snapshots" / "abc123")
    report = inspect_model_directory(tmp_path / "models--org--tiny")
    assert report.suggestion == snapshot


def test_directory_without_tokenizer_is_invalid(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model")
    (model / "tokenizer.json").unlink()
    report = inspect_model_directory(model)
    assert not report.valid
    assert "no tokenizer" in report.reasons[0]


def test_gguf_only_directory_says_convert(tmp_path: Path) -> None:
    (tmp_path / "model.Q4_K_M.gguf").write_bytes(b"GGUF")
    report = inspect_model_directory(tmp_path)
    assert not report.valid
    assert "GGUF" in report.reasons[0] and "convert" in report.reasons[0]


def test_bin_only_directory_is_valid_with_a_warning(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model")
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(b"\0" * 100)
    report = inspect_model_directory(model)
    assert report.valid, report.reasons
    assert report.weight_format == "bin"
    assert report.size_bytes == 100
    assert any(".bin" in warning for warning in report.warnings)


def test_directory_without_weights_is_invalid(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model")
    (model / "model.safetensors").unlink()
    report = inspect_model_directory(model)
    assert not report.valid
    assert "no weights" in report.reasons[0]


def test_config_that_is_not_json_is_named(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model")
    (model / "config.json").write_text("{not json")
    report = inspect_model_directory(model)
    assert not report.valid
    assert "config.json is not valid JSON" in report.reasons[0]


def test_missing_path_is_invalid(tmp_path: Path) -> None:
    report = inspect_model_directory(tmp_path / "nowhere")
    assert not report.valid
    assert "does not exist" in report.reasons[0]


def test_bare_config_with_header_only_weights_gives_facts(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    write_safetensors_header_only(
        tmp_path / "model.safetensors",
        {
            "model.layers.0.mlp.up_proj.weight": ("BF16", (1024, 512)),
            "visual.patch.weight": ("F32", (10, 10)),
        },
    )
    facts = read_model_facts(tmp_path / "config.json")
    assert facts.weights is not None
    assert facts.weights.layer_bytes == {0: 1024 * 512 * 2}
    assert facts.weights.encoder_bytes == 400
    assert facts.truncated_weight_files == ["model.safetensors"]


def test_chat_template_from_a_named_list(tmp_path: Path) -> None:
    model = _write_model(tmp_path / "model")
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D <think>"}]
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    report = inspect_model_directory(model)
    assert report.chat_template == "D <think>"
    assert report.facts is not None and report.facts.chat_template.supports_thinking


def test_report_json_is_serialisable(tmp_path: Path) -> None:
    report = inspect_model_directory(_write_model(tmp_path / "model"))
    data = json.loads(json.dumps(report.to_json()))
    assert data["valid"] is True and data["weight_format"] == "safetensors"
