"""Model directories and GPUs for the parameter-check tests (config, tokenizer side, no weights)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import ModelFacts, read_model_facts

STORIES = Path(__file__).parent / "fixtures" / "stories"
MODELS = STORIES / "models"
GIB = 1 << 30

# Special tokens of the fixtures (consistent among themselves, see models/README.md).
QWEN36_TOKENS = {248044: "<|endoftext|>", 248045: "<|im_start|>", 248046: "<|im_end|>", 248068: "<think>"}
QWEN3_TOKENS = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>", 151667: "<think>"}
KINDS = {
    "qwen3.6-27b": (
        "qwen3.6-27b.config.json",
        "qwen3.6.chat_template.jinja",
        QWEN36_TOKENS,
        [248046, 248044],
    ),
    "qwen3-8b": ("qwen3-8b.config.json", "qwen3.chat_template.jinja", QWEN3_TOKENS, [151645, 151643]),
}


def make_model_dir(
    root: Path,
    kind: str = "qwen3.6-27b",
    *,
    eos_token_ids: list[int] | None = None,
    config_changes: dict[str, object] | None = None,
    text_config_changes: dict[str, object] | None = None,
) -> Path:
    """A model directory of ``kind`` under ``root``: config, generation config, tokenizer, template."""
    config_name, template_name, tokens, eos = KINDS[kind]
    directory = root / kind
    directory.mkdir(parents=True, exist_ok=True)
    config = json.loads((MODELS / config_name).read_text())
    config.update(config_changes or {})
    if text_config_changes:
        config.setdefault("text_config", {}).update(text_config_changes)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos_token_ids if eos_token_ids is not None else eos})
    )
    added = [{"id": token_id, "content": text, "special": True} for token_id, text in tokens.items()]
    (directory / "tokenizer.json").write_text(json.dumps({"added_tokens": added, "model": {"vocab": {}}}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    shutil.copy(MODELS / template_name, directory / "chat_template.jinja")
    return directory


def model_facts(root: Path, kind: str = "qwen3.6-27b", **changes: dict[str, object]) -> ModelFacts:
    return read_model_facts(make_model_dir(root, kind, **changes))  # type: ignore[arg-type]


def gpu(index: int, name: str = "NVIDIA H100 80GB HBM3", memory_gib: float = 80.0) -> GpuInfo:
    """A GPU as NVML would describe it (a double of the hardware, not of modelyard code)."""
    total = int(memory_gib * GIB)
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index:08d}",
        name=name,
        memory_total_bytes=total,
        memory_free_bytes=total - GIB,
        memory_used_bytes=GIB,
    )
