"""Convert the demo's GGUF file (a llama-architecture chat model) into a safetensors model directory.

Run as a child process, ``python -m modelyard.demo.convert_gguf GGUF_FILE OUT_DIR``, so that the
server stays responsive; it prints ``progress: PERCENT STAGE`` lines for the parent. Needs only
``gguf`` (the reader and its dequantizers), numpy, ``tokenizers`` and ``safetensors``: no torch.

Why not transformers' own GGUF loader: for this 135M model it took 57 s on a loaded 2-core machine
(it parses the file three times, for the config, the tokenizer and the weights, and rebuilds
gguf's tensor-name map once per module); reading the file once here takes a fraction of that.
What this writes is what that loader produces for a llama GGUF: float32 weights with the
attention Q/K rows put back in Hugging Face's order (llama.cpp's converter interleaves them for
its rotary kernel), a byte-level BPE ``tokenizer.json`` from the file's vocabulary and merges, the
special (control) tokens, the chat template, ``config.json`` and ``generation_config.json``.

Writes ``OUT_DIR`` atomically: into a temporary sibling, renamed when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Where the time goes on a 2-core machine (measured): opening the file (its 49k-token vocabulary
# is parsed field by field) about a third, dequantizing a third, writing the rest.
_OPENED_PERCENT = 35
_DEQUANTIZED_PERCENT = 75

# GGUF tensor name (per block: blk.N.<name>) -> Hugging Face llama parameter name.
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_CONTROL_TOKEN_TYPE = 3

Progress = Callable[[int, str], None]


class UnsupportedGguf(Exception):
    """The file is not a llama-architecture model with a byte-level BPE tokenizer."""


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def hugging_face_name(gguf_name: str) -> str | None:
    """The Hugging Face parameter a GGUF tensor becomes (None: not part of a llama checkpoint)."""
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    prefix, _, rest = gguf_name.partition(".")
    block, _, tensor = rest.partition(".")
    if prefix == "blk" and block.isdigit() and tensor in _BLOCK_TENSORS:
        return f"model.layers.{block}.{_BLOCK_TENSORS[tensor]}"
    return None


def unpermute_rotary_rows(weights: Any, heads: int) -> Any:
    """Undo llama.cpp's reordering of a Q or K projection: within each head, the rows of the two
    rotary halves were interleaved (row pairs); Hugging Face keeps each half contiguous."""
    rows = weights.shape[0]
    half = rows // heads // 2
    return weights.reshape(heads, half, 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def llama_config(reader: Any) -> dict[str, Any]:
    architecture = _field(reader, "general.architecture")
    if architecture != "llama":
        raise UnsupportedGguf(f"architecture {architecture!r}; only 'llama' is converted")
    hidden = int(_field(reader, "llama.embedding_length"))
    heads = int(_field(reader, "llama.attention.head_count"))
    vocabulary = _field(reader, "tokenizer.ggml.tokens")
    tied = all(tensor.name != "output.weight" for tensor in reader.tensors)
    rope_theta = float(_field(reader, "llama.rope.freq_base", 10000.0))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv", heads)),
        "head_dim": int(_field(reader, "llama.rope.dimension_count", hidden // heads)),
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "rms_norm_eps": float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "vocab_size": int(_field(reader, "llama.vocab_size", len(vocabulary))),
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token_id": _field(reader, "tokenizer.ggml.padding_token_id"),
        "unk_token_id": _field(reader, "tokenizer.ggml.unknown_token_id"),
        "dtype": "float32",
        "use_cache": True,
    }


def write_tokenizer(reader: Any, out_dir: Path) -> None:
    """``tokenizer.json`` (byte-level BPE), ``tokenizer_config.json`` and ``chat_template.jinja``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise UnsupportedGguf("only byte-level BPE tokenizers (tokenizer.ggml.model 'gpt2') are converted")
    tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
    types: list[int] = list(_field(reader, "tokenizer.ggml.token_type"))
    merges = [tuple(merge.split(" ", 1)) for merge in _field(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(
        models.BPE(
            vocab={token: index for index, token in enumerate(tokens)},
            merges=merges,
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    special = [token for token, kind in zip(tokens, types, strict=True) if kind == _CONTROL_TOKEN_TYPE]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special])
    tokenizer.save(str(out_dir / "tokenizer.json"))

    def token(key: str) -> str | None:
        index = _field(reader, key)
        return None if index is None else tokens[int(index)]

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
        "pad_token": token("tokenizer.ggml.padding_token_id"),
        "unk_token": token("tokenizer.ggml.unknown_token_id"),
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "model_max_length": int(_field(reader, "llama.context_length")),
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    template = _field(reader, "tokenizer.chat_template")
    if template:
        (out_dir / "chat_template.jinja").write_text(template)


def convert(gguf_file: Path, out_dir: Path, on_progress: Progress) -> None:
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    on_progress(1, "reading the GGUF file")
    reader = GGUFReader(gguf_file)
    on_progress(_OPENED_PERCENT, "writing the tokenizer and config")
    config = llama_config(reader)
    write_tokenizer(reader, staging)
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
    (staging / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")

    heads, key_value_heads = config["num_attention_heads"], config["num_key_value_heads"]
    total_bytes = sum(int(tensor.n_bytes) for tensor in reader.tensors) or 1
    done_bytes = 0
    reported = _OPENED_PERCENT
    weights: dict[str, Any] = {}
    for tensor in reader.tensors:
        name = hugging_face_name(tensor.name)
        if name is None:
            raise UnsupportedGguf(f"tensor {tensor.name!r} has no llama counterpart")
        array = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        if tensor.name.endswith("attn_q.weight"):
            array = unpermute_rotary_rows(array, heads)
        elif tensor.name.endswith("attn_k.weight"):
            array = unpermute_rotary_rows(array, key_value_heads)
        weights[name] = np.ascontiguousarray(array)
        done_bytes += int(tensor.n_bytes)
        percent = _OPENED_PERCENT + (_DEQUANTIZED_PERCENT - _OPENED_PERCENT) * done_bytes // total_bytes
        if percent >= reported + 5:
            on_progress(percent, "dequantizing the weights")
            reported = percent
    on_progress(_DEQUANTIZED_PERCENT, "writing safetensors")
    save_file(weights, str(staging / "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    on_progress(100, "done")


def _print_progress(percent: int, stage: str) -> None:
    print(f"progress: {percent} {stage}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m modelyard.demo.convert_gguf GGUF_FILE OUT_DIR", file=sys.stderr)
        sys.exit(2)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        convert(Path(sys.argv[1]), Path(sys.argv[2]), _print_progress)
    except UnsupportedGguf as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
