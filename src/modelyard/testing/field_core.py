"""The FIELD TEST model's core: a tiny Qwen3 trained on CPU to answer a few test conversations.

``train_field_core`` trains it over a compact vocabulary (only the token ids its conversations
use) and writes ``core.json`` and ``core.safetensors``; ``load_field_core`` reads them back.
``modelyard.testing.field_model`` plants it into a full-size model (its docstring says how and
why). The shapes, names and tokenizer checks both steps share live here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

FIELD_MODEL_NOTE = (
    "modelyard FIELD TEST MODEL: Qwen3-1.7B's shape and tokenizer, random weights with a small "
    "planted trained core that only answers a few test conversations. Not a real model."
)
CORE_FORMAT = "modelyard-field-core/1"

# The core's shape; head_dim must equal the big model's (RoPE and the q/k norms depend on it).
CORE_SHAPE: dict[str, int] = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "intermediate_size": 384,
}
# Qwen3-1.7B's shape, and a small one for CPU tests (its norm ratio 512/128 = 4 is a power of 4).
FULL_SHAPE: dict[str, float] = {
    "hidden_size": 2048,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
}
SMALL_SHAPE: dict[str, float] = {
    **FULL_SHAPE,
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 1024,
}
SHAPES = {"full": FULL_SHAPE, "small": SMALL_SHAPE}
END_TOKENS = ("<|im_end|>", "<|endoftext|>")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
OPTIONAL_TOKENIZER_FILES = ("chat_template.jinja", "vocab.json", "merges.txt", "special_tokens_map.json")
UNUSED_LOGIT_MARGIN = 60.0
RANDOM_STD = 0.02


class FieldModelError(Exception):
    """An input is missing or does not fit; the message names the path or value and what to do."""


@dataclass(frozen=True)
class CoreReport:
    """What ``train_field_core`` did: loss with the bf16 weights as planted, steps, time, size."""

    core_dir: Path
    final_loss: float
    steps: int
    seconds: float
    used_token_count: int
    size_bytes: int


def check_tokenizer_dir(tokenizer_dir: Path) -> None:
    missing = [name for name in TOKENIZER_FILES if not (tokenizer_dir / name).is_file()]
    if missing:
        raise FieldModelError(
            f"tokenizer directory {tokenizer_dir} lacks {', '.join(missing)}: give a Qwen-style "
            "tokenizer directory (scripts/field/fetch-qwen3-tokenizer.sh DIR fetches the real Qwen3 one)"
        )


def special_token_ids(tokenizer_dir: Path) -> dict[str, int]:
    """Look up the end tokens' ids in tokenizer.json's added tokens (no tokenizer library needed)."""
    added = json.loads((tokenizer_dir / "tokenizer.json").read_text()).get("added_tokens", [])
    ids = {entry["content"]: int(entry["id"]) for entry in added}
    missing = [token for token in END_TOKENS if token not in ids]
    if missing:
        raise FieldModelError(
            f"{tokenizer_dir / 'tokenizer.json'} has no {', '.join(missing)} special token: "
            "the field model needs a Qwen-style (ChatML) tokenizer"
        )
    return {token: ids[token] for token in END_TOKENS}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def qwen3_config(shape: dict[str, float], *, bos_id: int, eos_id: int) -> dict[str, Any]:
    """A config.json dict in the form of Qwen3's published checkpoints (every engine reads it)."""
    layers = int(shape["num_hidden_layers"])
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "head_dim": int(shape["head_dim"]),
        "hidden_act": "silu",
        "hidden_size": int(shape["hidden_size"]),
        "initializer_range": RANDOM_STD,
        "intermediate_size": int(shape["intermediate_size"]),
        "max_position_embeddings": int(shape["max_position_embeddings"]),
        "max_window_layers": layers,
        "num_attention_heads": int(shape["num_attention_heads"]),
        "num_hidden_layers": layers,
        "num_key_value_heads": int(shape["num_key_value_heads"]),
        "rms_norm_eps": float(shape["rms_norm_eps"]),
        "rope_scaling": None,
        "rope_theta": float(shape["rope_theta"]),
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": int(shape["vocab_size"]),
    }


def _build_core_model(config_dict: dict[str, Any]) -> Any:
    """A float32 ``Qwen3ForCausalLM`` for a core config; checks that RoPE's theta came through."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{key: value for key, value in config_dict.items() if key != "architectures"})
    rope = getattr(config, "rope_parameters", None) or {"rope_theta": getattr(config, "rope_theta", None)}
    if float(rope.get("rope_theta") or 0.0) != float(config_dict["rope_theta"]):
        raise FieldModelError(f"transformers ignored rope_theta={config_dict['rope_theta']} (got {rope})")
    model: Any = Qwen3ForCausalLM(config)
    return model.to(torch.float32)


def _hold_constant_dimension(model: Any) -> None:
    """Dimension 0 of the residual is +1 everywhere: embeddings have 1.0 there, no layer writes it."""
    import torch

    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0


def _length_batches(
    sequences: list[tuple[list[int], list[int]]], compact: dict[int, int], *, padding: int
) -> list[tuple[Any, Any, Any]]:
    """(input_ids, attention_mask, labels) batches of similar length, in compact ids, right-padded.

    Prompts with the tools block are several times longer than the others; padding everything to
    the longest would double the work.
    """
    import torch

    ordered = sorted(sequences, key=lambda sequence: len(sequence[0]))
    groups: list[list[tuple[list[int], list[int]]]] = []
    for sequence in ordered:
        if groups and len(sequence[0]) <= 1.3 * len(groups[-1][0][0]):
            groups[-1].append(sequence)
        else:
            groups.append([sequence])
    batches = []
    for group in groups:
        width = max(len(ids) for ids, _ in group)
        input_ids = torch.tensor(
            [[compact[t] for t in ids] + [padding] * (width - len(ids)) for ids, _ in group]
        )
        attention_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in group])
        labels = torch.tensor(
            [
                [compact[t] if t >= 0 else -100 for t in wanted] + [-100] * (width - len(wanted))
                for _, wanted in group
            ]
        )
        batches.append((input_ids, attention_mask, labels))
    return batches


def _summed_loss(model: Any, batch: tuple[Any, Any, Any]) -> Any:
    """Cross-entropy summed over the batch's answer tokens (next-token prediction)."""
    import torch

    input_ids, attention_mask, labels = batch
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100, reduction="sum"
    )


def load_field_core(core_dir: Path) -> tuple[Any, list[int], dict[str, Any]]:
    """Load a trained core as a float32 ``Qwen3ForCausalLM``; return it, its used token ids and core.json."""
    from safetensors.torch import load_file

    meta_path, weights_path = core_dir / "core.json", core_dir / "core.safetensors"
    for path in (meta_path, weights_path):
        if not path.is_file():
            raise FieldModelError(
                f"{path} does not exist: train a core first "
                f"(python -m modelyard.testing.field_model train --tokenizer DIR --out {core_dir})"
            )
    meta: dict[str, Any] = json.loads(meta_path.read_text())
    if meta.get("format") != CORE_FORMAT:
        raise FieldModelError(f"{meta_path} is not a field core ({CORE_FORMAT}); train it again")
    model = _build_core_model(meta["config"])
    state = {name: tensor.float() for name, tensor in load_file(str(weights_path)).items()}
    model.load_state_dict(state)
    model.eval()
    return model, [int(token_id) for token_id in meta["used_token_ids"]], meta


def train_field_core(
    tokenizer_dir: Path,
    out_dir: Path,
    *,
    max_steps: int = 600,
    target_loss: float = 0.005,
    seed: int = 0,
    learning_rate: float = 3e-3,
) -> CoreReport:
    """Train the core on the test conversations rendered with ``tokenizer_dir``'s chat template.

    AdamW on all 36 conversations at once (full batch) until the loss is below ``target_loss``
    or ``max_steps``; about a minute on one CPU core with the real Qwen3 tokenizer. Writes
    ``core.json`` (config, used token ids, tokenizer hash, loss) and ``core.safetensors`` into
    ``out_dir`` and returns a report whose loss is measured with the weights rounded to bf16,
    exactly as they will be planted.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from modelyard.testing.trained_tiny_model import training_examples

    started = time.monotonic()
    check_tokenizer_dir(tokenizer_dir)
    end_ids = special_token_ids(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    sequences = []
    for prompt, answer in training_examples(tokenizer):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        sequences.append((prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids))
    used = sorted({*end_ids.values(), *(token for ids, _ in sequences for token in ids)})
    compact = {token: index for index, token in enumerate(used)}
    logger.info(
        "core: %d conversations, %d distinct token ids, longest %d tokens",
        len(sequences),
        len(used),
        max(len(ids) for ids, _ in sequences),
    )
    batches = _length_batches(sequences, compact, padding=compact[end_ids["<|endoftext|>"]])
    answer_tokens = sum(int((labels[:, 1:] != -100).sum()) for _, _, labels in batches)

    shape = {**FULL_SHAPE, **CORE_SHAPE, "vocab_size": len(used)}
    config = qwen3_config(
        shape, bos_id=compact[end_ids["<|endoftext|>"]], eos_id=compact[end_ids["<|im_end|>"]]
    )
    torch.manual_seed(seed)
    model = _build_core_model(config)
    _hold_constant_dimension(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    loss_value, steps = float("inf"), 0
    for steps in range(1, max_steps + 1):
        optimizer.zero_grad()
        loss_value = 0.0
        for batch in batches:  # full-batch gradient, accumulated over the length buckets
            loss = _summed_loss(model, batch) / answer_tokens
            loss.backward()
            loss_value += float(loss.item())
        optimizer.step()
        _hold_constant_dimension(model)
        if steps % 50 == 0:
            logger.info("core: step %d loss %.4f (%.0f s)", steps, loss_value, time.monotonic() - started)
        if loss_value < target_loss:
            break
    else:
        logger.warning(
            "core: stopped at loss %.4f after %d steps (target %g)", loss_value, max_steps, target_loss
        )

    # Round to bf16 as planted, then measure the loss and calibrate the unused tokens' head weight:
    # their logit is weight * (final-normed dim 0), which must sit UNUSED_LOGIT_MARGIN below the best.
    model.eval()
    needed, signs = 100.0, set()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
        planted_loss = sum(float(_summed_loss(model, batch)) for batch in batches) / answer_tokens
        for input_ids, attention_mask, _ in batches:
            hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            best = model.lm_head(hidden).max(dim=-1).values[attention_mask.bool()]
            constant = hidden[..., 0][attention_mask.bool()]
            signs |= {float(value) for value in constant.sign().unique()}
            needed = max(needed, float(((UNUSED_LOGIT_MARGIN - best) / constant.abs()).max()))
    if len(signs) != 1 or 0.0 in signs:
        raise FieldModelError(
            f"core: the constant dimension's sign varies after the final norm ({signs}); train again"
        )
    unused_weight = -signs.pop() * needed

    out_dir.mkdir(parents=True, exist_ok=True)
    state = {
        name: tensor.detach().to(torch.bfloat16).contiguous() for name, tensor in model.state_dict().items()
    }
    save_file(state, str(out_dir / "core.safetensors"), metadata={"format": "pt"})
    meta = {
        "format": CORE_FORMAT,
        "note": FIELD_MODEL_NOTE,
        "config": config,
        "used_token_ids": used,
        "special_token_ids": end_ids,
        "tokenizer_sha256": file_sha256(tokenizer_dir / "tokenizer.json"),
        "unused_logit_weight": unused_weight,
        "final_loss": planted_loss,
        "training_loss": loss_value,
        "steps": steps,
    }
    (out_dir / "core.json").write_text(json.dumps(meta, indent=1) + "\n")
    seconds = time.monotonic() - started
    size = sum(path.stat().st_size for path in (out_dir / "core.json", out_dir / "core.safetensors"))
    logger.info(
        "core: loss %.4f (bf16 %.4f) after %d steps in %.1f s; wrote %s (%.2f MB)",
        loss_value,
        planted_loss,
        steps,
        seconds,
        out_dir,
        size / 1e6,
    )
    return CoreReport(out_dir, planted_loss, steps, seconds, len(used), size)
