"""STAND-INS of real models for checks that read a model directory without loading it: the real
``config.json`` values (from the public configs, each file's ``_source`` says where), a
generation config with the family's two eos ids, a tokenizer with the family's special tokens, a
chat template of our own with the family's tool-call and thinking markers, and safetensors shards
whose headers declare the weights and whose files have the full length, as sparse files (no disk
is used). The doctor and the estimator read them as they would the real checkpoint.

The weights are one tensor per part (a decoder layer, the embeddings, the head, the vision
encoder, the MTP layer), each of the byte size the estimator computes for that part from the
config (``modelyard.estimate.weights.parts_from_config``): not the real tensor names and shapes,
but the real bytes where the engines place them. Never present a stand-in as a model: it has no
weights at all.

Usage::

    directory = build_stand_in("qwen3.6-27b", tmp_path / "Qwen3.6-27B")
    preflight_deployment(model_dir=directory, engine="vllm", ...)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelyard.estimate.architecture import read_model_shape
from modelyard.estimate.weights import parts_from_config
from modelyard.modeldir import write_safetensors_header_only

HERE = Path(__file__).parent
SHARD_BYTES = 5 * 10**9


@dataclass(frozen=True)
class Family:
    template: str
    special_tokens: dict[int, str]
    eos_token_ids: list[int]


QWEN3 = Family(
    template="qwen3.chat_template.jinja",
    special_tokens={151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>", 151667: "<think>"},
    eos_token_ids=[151645, 151643],
)
QWEN36 = Family(
    template="qwen3.6.chat_template.jinja",
    special_tokens={248044: "<|endoftext|>", 248045: "<|im_start|>", 248046: "<|im_end|>", 248068: "<think>"},
    eos_token_ids=[248046, 248044],
)
FAMILIES = {"qwen3": QWEN3, "qwen3.6": QWEN36}


def stand_in_names() -> list[str]:
    return sorted(path.stem for path in HERE.glob("*.json"))


def stand_in_config(name: str) -> dict[str, Any]:
    path = HERE / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"no stand-in {name!r}; there are: {', '.join(stand_in_names())}")
    config: dict[str, Any] = json.loads(path.read_text())
    return config


def family_of(config: dict[str, Any]) -> Family:
    text_type = str(config.get("text_config", {}).get("model_type", ""))
    return (
        QWEN36
        if str(config.get("model_type", "")).startswith("qwen3_5") or text_type.startswith("qwen3_5")
        else QWEN3
    )


def _weight_plan(config: dict[str, Any]) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(name, dtype, shape)`` of every stand-in tensor, in checkpoint order."""
    text = config.get("text_config") or config
    shape = read_model_shape(config)
    dtype = str(text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    parts = parts_from_config(shape, dtype, config.get("quantization_config"))
    prefix = "model.language_model" if "text_config" in config else "model"
    hidden, vocabulary = shape.hidden_size, shape.vocabulary_size
    plan: list[tuple[str, str, tuple[int, ...]]] = [
        (f"{prefix}.embed_tokens.weight", "BF16", (vocabulary, hidden))
    ]
    for index, size_bytes in sorted(parts.layer_bytes.items()):
        plan.append((f"{prefix}.layers.{index}.stand_in.weight", "BF16", (size_bytes // 2,)))
    if parts.encoder_bytes:
        plan.append(("model.visual.stand_in.weight", "BF16", (parts.encoder_bytes // 2,)))
    if parts.mtp_bytes:
        plan.append(("mtp.stand_in.weight", "BF16", (parts.mtp_bytes // 2,)))
    plan.append((f"{prefix}.norm.weight", "BF16", (hidden,)))
    if parts.head_bytes:
        plan.append(("lm_head.weight", "BF16", (vocabulary, hidden)))
    return plan


def _write_shards(directory: Path, plan: list[tuple[str, str, tuple[int, ...]]]) -> None:
    shards: list[list[tuple[str, str, tuple[int, ...]]]] = [[]]
    shard_bytes = 0
    for tensor in plan:
        size = 2
        for dimension in tensor[2]:
            size *= dimension
        if shards[-1] and shard_bytes + size > SHARD_BYTES:
            shards.append([])
            shard_bytes = 0
        shards[-1].append(tensor)
        shard_bytes += size
    weight_map: dict[str, str] = {}
    total = 0
    for number, tensors in enumerate(shards, start=1):
        name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        path = directory / name
        write_safetensors_header_only(path, {tensor: (dtype, dims) for tensor, dtype, dims in tensors})
        header_bytes = path.stat().st_size
        data_bytes = sum(2 * _count(dims) for _, _, dims in tensors)
        os.truncate(path, header_bytes + data_bytes)  # sparse: the full length, no blocks
        total += data_bytes
        weight_map.update({tensor: name for tensor, _, _ in tensors})
    index = {
        "metadata": {"total_size": total, "modelyard": "stand-in: headers only"},
        "weight_map": weight_map,
    }
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _count(dims: tuple[int, ...]) -> int:
    count = 1
    for dimension in dims:
        count *= dimension
    return count


def build_stand_in(name: str, path: Path, *, config_changes: dict[str, Any] | None = None) -> Path:
    """Write the stand-in ``name`` (see ``stand_in_names()``) into ``path`` (created); return it.
    ``config_changes`` alter its config.json (and so its weights), e.g. ``{"num_hidden_layers": 2}``
    for a smaller one; such a stand-in is no longer the real model's shape."""
    config = {**stand_in_config(name), **(config_changes or {})}
    family = family_of(config)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": family.eos_token_ids, "do_sample": True}, indent=2) + "\n"
    )
    added = [
        {"id": token_id, "content": text, "special": True} for token_id, text in family.special_tokens.items()
    ]
    (path / "tokenizer.json").write_text(json.dumps({"added_tokens": added, "model": {"vocab": {}}}))
    (path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "modelyard": "stand-in"}) + "\n"
    )
    (path / "chat_template.jinja").write_text((HERE / family.template).read_text())
    (path / "README.md").write_text(
        f"# STAND-IN for {name}\n\nWritten by modelyard.testing.stand_ins: the real config, headers only, "
        "sparse shards. It has no weights and cannot be served.\n"
    )
    _write_shards(path, _weight_plan(config))
    return path
