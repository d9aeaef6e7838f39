"""A FIELD TEST model: Qwen3-1.7B's shape and tokenizer, random weights, a small trained core planted inside.

GPU field runs need a model directory sized like a real one (Qwen3-1.7B: hidden 2048, 28 layers,
16 query heads, 8 KV heads, vocabulary 151936, bf16, about 4 GB) that nevertheless passes the
verification suite on real engines (answers, ``<think>`` reasoning, a ``<tool_call>``, streaming)
with the REAL Qwen3 tokenizer and chat template. Random weights cannot; this module builds one in
two steps:

1. ``train_field_core`` trains a tiny Qwen3 "core" on CPU (hidden 128, 2 layers, 2 query heads
   sharing 1 KV head, head_dim 128 like the big model, because RoPE and the per-head q/k norms
   depend on it) over a compact vocabulary: only the tokenizer ids that occur in the training
   conversations of ``trained_tiny_model.training_examples`` (plus ``<|im_end|>`` and
   ``<|endoftext|>``). Hidden dimension 0 is held at +1: every embedding has 1.0 there and no
   layer writes to it (row 0 of every ``o_proj`` and ``down_proj`` is reset to zero after each
   step). It writes ``core.json`` and ``core.safetensors`` (about 1 MB, weights rounded to bf16).
2. ``expand_field_model`` writes the full-size directory where the core is planted exactly, so the
   big network computes the core's function on the core's tokens:

   - residual dims [0:128] carry the core's residual, dims [128:] stay exactly zero: embeddings
     are zero there and every ``o_proj``/``down_proj`` entry outside the planted block is zero;
   - RMSNorm over 2048 dims of which 1920 are zero gives values sqrt(2048/128) = 4 times larger,
     so the planted norm weights are the core's divided by 4 (exact in bf16). The norms' epsilon
     then acts like 16 x 1e-6 in the core's terms, a relative difference below 1e-3 because the
     constant dimension keeps mean(x^2) >= 1/128;
   - core query heads 0 and 1 are big heads 0 and 1, which share KV head 0 in HF's ``repeat_kv``
     order (16/8 = groups of 2), as the core's 2 heads share its one KV head; their rows read only
     input columns [0:128]. All other q/k/v/gate/up rows are random (std 0.02, real compute);
   - layers 2..27 are random but their ``o_proj`` and ``down_proj`` are all zero: exact identity;
   - ids the core never saw get an embedding of only the constant (1.0 in dim 0, zeros
     elsewhere: a neutral "unknown" token), and an lm_head row with a large weight on dim 0 of
     the sign that makes their logits hugely negative (calibrated on the training conversations,
     about 60 below the best logit there), so even sampling over all 151936 ids picks only
     core tokens;
   - the core's lm_head differs from its embedding, so ``tie_word_embeddings`` is FALSE here
     (real Qwen3-1.7B ties them): a separate ``lm_head.weight`` of 151936 x 2048 is written.

The expansion needs only torch, safetensors and the standard library (and ``field_core``, which
loads nothing else at import), so a GPU machine with nothing else builds the 4 GB model in seconds
(``device="cuda"``). The core's training (``field_core.train_field_core``) needs transformers too.

Usage::

    python -m modelyard.testing.field_model train --tokenizer TOKENIZER_DIR --out CORE_DIR
    python -m modelyard.testing.field_model expand --core CORE_DIR --tokenizer TOKENIZER_DIR \\
        --out MODEL_DIR [--device cuda] [--shape small]

``scripts/field/fetch-qwen3-tokenizer.sh DIR`` fetches the real Qwen3 tokenizer. The result is a
TEST model and is named so everywhere: never present it as a real model.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelyard.testing.field_core import (
    CORE_FORMAT,
    FIELD_MODEL_NOTE,
    FULL_SHAPE,
    OPTIONAL_TOKENIZER_FILES,
    RANDOM_STD,
    SHAPES,
    TOKENIZER_FILES,
    FieldModelError,
    check_tokenizer_dir,
    file_sha256,
    qwen3_config,
    special_token_ids,
    train_field_core,
)

logger = logging.getLogger(__name__)

FIELD_MODEL_NAME = "modelyard-FIELD-TEST-MODEL-qwen3-1.7b-shape-random-weights-planted-core"


@dataclass(frozen=True)
class ExpansionReport:
    """What ``expand_field_model`` wrote: parameter count, bytes of weights, shards, time."""

    model_dir: Path
    parameters: int
    size_bytes: int
    shards: int
    seconds: float


def _check_shape(shape: dict[str, float], core_config: dict[str, Any], vocabulary_needed: int) -> None:
    """Refuse a big shape the core cannot be planted into exactly, naming the value and the rule."""
    problems = []
    for key in ("head_dim", "rope_theta"):
        if float(shape[key]) != float(core_config[key]):
            problems.append(f"{key}={shape[key]} must equal the core's {core_config[key]}")
    for key in ("hidden_size", "num_hidden_layers", "intermediate_size"):
        if shape[key] < core_config[key]:
            problems.append(f"{key}={shape[key]} is below the core's {core_config[key]}")
    group = shape["num_attention_heads"] // shape["num_key_value_heads"]
    if (
        shape["num_attention_heads"] % shape["num_key_value_heads"]
        or group < core_config["num_attention_heads"]
    ):
        problems.append(
            f"num_attention_heads/num_key_value_heads={shape['num_attention_heads']}/"
            f"{shape['num_key_value_heads']} must be a whole number >= {core_config['num_attention_heads']} "
            "(the core's query heads share one KV head)"
        )
    if shape["vocab_size"] < vocabulary_needed:
        problems.append(f"vocab_size={shape['vocab_size']} is below the tokenizer's {vocabulary_needed} ids")
    if problems:
        raise FieldModelError("cannot plant the core into this shape: " + "; ".join(problems))
    ratio = shape["hidden_size"] / core_config["hidden_size"]
    if math.log(ratio, 4) != int(math.log(ratio, 4)):
        logger.warning(
            "hidden_size %d / %d is not a power of 4: the planted norm weights are not exact in bf16",
            shape["hidden_size"],
            core_config["hidden_size"],
        )


def _tensor_plan(shape: dict[str, float]) -> list[tuple[str, tuple[int, ...]]]:
    """Every weight of the big model with its shape, in checkpoint order."""
    hidden, inter = int(shape["hidden_size"]), int(shape["intermediate_size"])
    head_dim, vocab = int(shape["head_dim"]), int(shape["vocab_size"])
    heads, kv_heads = int(shape["num_attention_heads"]), int(shape["num_key_value_heads"])
    plan: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for layer in range(int(shape["num_hidden_layers"])):
        prefix = f"model.layers.{layer}."
        plan += [
            (prefix + "input_layernorm.weight", (hidden,)),
            (prefix + "self_attn.q_proj.weight", (heads * head_dim, hidden)),
            (prefix + "self_attn.k_proj.weight", (kv_heads * head_dim, hidden)),
            (prefix + "self_attn.v_proj.weight", (kv_heads * head_dim, hidden)),
            (prefix + "self_attn.o_proj.weight", (hidden, heads * head_dim)),
            (prefix + "self_attn.q_norm.weight", (head_dim,)),
            (prefix + "self_attn.k_norm.weight", (head_dim,)),
            (prefix + "post_attention_layernorm.weight", (hidden,)),
            (prefix + "mlp.gate_proj.weight", (inter, hidden)),
            (prefix + "mlp.up_proj.weight", (inter, hidden)),
            (prefix + "mlp.down_proj.weight", (hidden, inter)),
        ]
    return [*plan, ("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]


def _build_tensor(
    name: str,
    size: tuple[int, ...],
    index: int,
    core: dict[str, Any],
    meta: dict[str, Any],
    *,
    device: str,
    seed: int,
) -> Any:
    """One big-model weight (bf16 on ``device``): the core planted in its corner, the rest random or zero."""
    import torch

    core_hidden = int(meta["config"]["hidden_size"])
    used = torch.tensor(meta["used_token_ids"], device=device)
    norm_scale = (
        math.sqrt(core_hidden / size[-1])
        if name.endswith("layernorm.weight") or name == "model.norm.weight"
        else 1.0
    )
    core_tensor = core.get(name)

    def random() -> Any:
        generator = torch.Generator(device=device).manual_seed(seed * 1_000_003 + index)
        values = torch.randn(size, generator=generator, device=device, dtype=torch.float32)
        return (values * RANDOM_STD).to(torch.bfloat16)

    def zeros() -> Any:
        return torch.zeros(size, device=device, dtype=torch.bfloat16)

    if name == "model.embed_tokens.weight":
        tensor = zeros()
        tensor[:, 0] = 1.0  # the constant dimension; unused ids carry nothing else
        tensor[used, :core_hidden] = core_tensor
    elif name == "lm_head.weight":
        tensor = zeros()
        tensor[:, 0] = float(meta["unused_logit_weight"])
        tensor[used, :core_hidden] = core_tensor
    elif name.endswith("norm.weight") and name.split(".")[-2] in {"q_norm", "k_norm"}:
        tensor = (
            core_tensor.clone()
            if core_tensor is not None
            else torch.ones(size, device=device, dtype=torch.bfloat16)
        )
    elif name.endswith("norm.weight"):
        tensor = torch.ones(size, device=device, dtype=torch.bfloat16)
        if core_tensor is not None:
            tensor[:core_hidden] = (core_tensor.float() * norm_scale).to(torch.bfloat16)
    elif name.endswith(("o_proj.weight", "down_proj.weight")):
        tensor = zeros()  # nothing outside the planted block writes to the residual
        if core_tensor is not None:
            tensor[: core_tensor.shape[0], : core_tensor.shape[1]] = core_tensor
    else:  # q/k/v/gate/up: random, except the planted rows that read only the core's columns
        tensor = random()
        if core_tensor is not None:
            tensor[: core_tensor.shape[0], :] = 0.0
            tensor[: core_tensor.shape[0], :core_hidden] = core_tensor
    if tuple(tensor.shape) != size:
        raise FieldModelError(f"internal error: built {name} with shape {tuple(tensor.shape)}, wanted {size}")
    return tensor


def _write_side_files(
    out_dir: Path, tokenizer_dir: Path, shape: dict[str, float], ids: dict[str, int], report: str
) -> None:
    endoftext, im_end = ids["<|endoftext|>"], ids["<|im_end|>"]
    config = qwen3_config(shape, bos_id=endoftext, eos_id=im_end)
    config["_name_or_path"] = FIELD_MODEL_NAME
    config["modelyard_note"] = FIELD_MODEL_NOTE
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {
        "bos_token_id": endoftext,
        "eos_token_id": [im_end, endoftext],
        "pad_token_id": endoftext,
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
    }
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    for name in (*TOKENIZER_FILES, *OPTIONAL_TOKENIZER_FILES):
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out_dir / name)
    (out_dir / "README.md").write_text(
        f"# {FIELD_MODEL_NAME}\n\n{FIELD_MODEL_NOTE}\n\n"
        "Built by `python -m modelyard.testing.field_model` for GPU field runs of modelyard's "
        "verification suite: it has the shape, size and tokenizer of a real checkpoint, but it knows "
        "only a few test conversations (a short answer, `<think>` reasoning, a `get_weather` "
        "`<tool_call>` for Paris). Everything else it answers is meaningless.\n\n"
        "## Construction\n\n"
        "A tiny Qwen3 core (hidden 128, 2 layers, 2 query heads on 1 KV head, head_dim 128) was trained "
        "on those conversations over the token ids they use. Its weights sit in the corner of this "
        "model: residual dims 0-127, query heads 0-1, KV head 0, the first MLP rows and layers 0-1. "
        "Everything that would write to residual dims 128 and up is zero (embeddings, o_proj, "
        "down_proj outside the planted block; o_proj and down_proj of all later layers), so those "
        "dims stay zero and the big model computes the core's function; the rest of q/k/v/gate/up is "
        "random (std 0.02) so that the compute is realistic. Hidden dim 0 is a constant 1.0. Norm "
        "weights are the core's scaled by sqrt(128/hidden_size). Token ids the core never saw embed "
        "as the constant alone, and their lm_head rows put a large weight on dim 0 so that their "
        "logits are hugely negative. `tie_word_embeddings` is false (the real Qwen3-1.7B ties them) "
        "because the core's output head differs from its embedding.\n\n"
        f"## This build\n\n{report}\n"
    )


def expand_field_model(
    core_dir: Path,
    tokenizer_dir: Path,
    out_dir: Path,
    *,
    shape: dict[str, float] | None = None,
    device: str = "cpu",
    seed: int = 0,
    max_shard_bytes: int = 2_000_000_000,
) -> ExpansionReport:
    """Write the full-size field model into ``out_dir`` with the core planted as the module docstring says.

    ``shape`` overrides entries of ``FULL_SHAPE`` (``SMALL_SHAPE`` is a ready small one). The
    weights are bf16 in shards of at most ``max_shard_bytes`` with ``model.safetensors.index.json``,
    built one shard at a time on ``device`` ("cuda" takes seconds for the 4 GB model). Only torch,
    safetensors and the standard library are used.
    """
    from safetensors.torch import load_file, save_file

    started = time.monotonic()
    if not core_dir.is_dir():
        raise FieldModelError(
            f"core directory {core_dir} does not exist: train one first "
            f"(python -m modelyard.testing.field_model train --tokenizer DIR --out {core_dir})"
        )
    for path in (core_dir / "core.json", core_dir / "core.safetensors"):
        if not path.is_file():
            raise FieldModelError(
                f"{path} does not exist: {core_dir} is not a trained field core; train it again"
            )
    meta: dict[str, Any] = json.loads((core_dir / "core.json").read_text())
    if meta.get("format") != CORE_FORMAT:
        raise FieldModelError(f"{core_dir / 'core.json'} is not a field core ({CORE_FORMAT}); train it again")
    check_tokenizer_dir(tokenizer_dir)
    if file_sha256(tokenizer_dir / "tokenizer.json") != meta["tokenizer_sha256"]:
        raise FieldModelError(
            f"{tokenizer_dir / 'tokenizer.json'} is not the tokenizer the core in {core_dir} was trained "
            "with: give the same --tokenizer to train and expand"
        )
    ids = special_token_ids(tokenizer_dir)
    tokenizer_json = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    vocabulary_needed = 1 + max(
        max(tokenizer_json["model"]["vocab"].values(), default=0),
        max((token["id"] for token in tokenizer_json.get("added_tokens", [])), default=0),
    )
    big = {**FULL_SHAPE, **(shape or {})}
    _check_shape(big, meta["config"], vocabulary_needed)
    core = {name: tensor.to(device) for name, tensor in load_file(str(core_dir / "core.safetensors")).items()}

    plan = _tensor_plan(big)
    shards: list[list[tuple[int, str, tuple[int, ...]]]] = [[]]
    shard_bytes = 0
    for index, (name, size) in enumerate(plan):
        tensor_bytes = 2 * math.prod(size)
        if shards[-1] and shard_bytes + tensor_bytes > max_shard_bytes:
            shards.append([])
            shard_bytes = 0
        shards[-1].append((index, name, size))
        shard_bytes += tensor_bytes
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("model*.safetensors"), out_dir / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)
    weight_map: dict[str, str] = {}
    total_bytes = parameters = 0
    for number, shard in enumerate(shards, start=1):
        file_name = (
            "model.safetensors"
            if len(shards) == 1
            else f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        )
        tensors = {}
        for index, name, size in shard:
            tensor = _build_tensor(name, size, index, core, meta, device=device, seed=seed)
            tensors[name] = tensor.to("cpu").contiguous()
            weight_map[name] = file_name
            parameters += tensor.numel()
            total_bytes += 2 * tensor.numel()
        save_file(tensors, str(out_dir / file_name), metadata={"format": "pt"})
        (out_dir / file_name).chmod(0o644)  # safetensors writes 0600; engines may run as another user
        logger.info(
            "expand: wrote %s (%d tensors, %.2f GB, %.1f s)",
            file_name,
            len(tensors),
            sum(2 * t.numel() for t in tensors.values()) / 1e9,
            time.monotonic() - started,
        )
        del tensors
    if len(shards) > 1:
        index_json = {
            "metadata": {"total_size": total_bytes, "total_parameters": parameters},
            "weight_map": weight_map,
        }
        (out_dir / "model.safetensors.index.json").write_text(json.dumps(index_json, indent=2) + "\n")
    seconds = time.monotonic() - started
    report = (
        f"{parameters:,} parameters, {total_bytes / 1e9:.2f} GB of bf16 weights in {len(shards)} file(s); "
        f"core trained to loss {meta['final_loss']:.4f} in {meta['steps']} steps over "
        f"{len(meta['used_token_ids'])} token ids; expanded on {device} in {seconds:.1f} s (seed {seed})."
    )
    _write_side_files(out_dir, tokenizer_dir, big, ids, report)
    logger.info("expand: %s", report)
    return ExpansionReport(out_dir, parameters, total_bytes, len(shards), seconds)


def _parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m modelyard.testing.field_model",
        description="Build a FIELD TEST model: Qwen3-1.7B's shape, a trained core planted inside.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train the tiny core on CPU (about a minute)")
    train.add_argument("--tokenizer", type=Path, required=True, help="Qwen-style tokenizer directory")
    train.add_argument("--out", type=Path, required=True, help="core directory to write")
    train.add_argument("--max-steps", type=int, default=600, help="training step cap (default 600)")
    train.add_argument("--seed", type=int, default=0)
    expand = commands.add_parser("expand", help="write the full-size model directory with the core planted")
    expand.add_argument("--core", type=Path, required=True, help="core directory written by 'train'")
    expand.add_argument("--tokenizer", type=Path, required=True, help="the tokenizer directory 'train' used")
    expand.add_argument("--out", type=Path, required=True, help="model directory to write")
    expand.add_argument("--device", default="cpu", help="torch device to build on, e.g. cuda (default cpu)")
    expand.add_argument(
        "--shape", choices=sorted(SHAPES), default="full", help="full (Qwen3-1.7B) or small (CPU tests)"
    )
    expand.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: parse, call ``train_field_core`` or ``expand_field_model``, print progress; 0 on success."""
    arguments = _parse_arguments(argv)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        if arguments.command == "train":
            core = train_field_core(
                arguments.tokenizer, arguments.out, max_steps=arguments.max_steps, seed=arguments.seed
            )
            print(
                f"trained core: loss {core.final_loss:.4f}, {core.steps} steps, {core.seconds:.1f} s, "
                f"{core.size_bytes / 1e6:.2f} MB in {core.core_dir}"
            )
        else:
            model = expand_field_model(
                arguments.core,
                arguments.tokenizer,
                arguments.out,
                shape=SHAPES[arguments.shape],
                device=arguments.device,
                seed=arguments.seed,
            )
            print(
                f"expanded: {model.parameters:,} parameters, {model.size_bytes / 1e9:.2f} GB in "
                f"{model.shards} shard(s), {model.seconds:.1f} s, in {model.model_dir}"
            )
    except FieldModelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        logger.removeHandler(handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
