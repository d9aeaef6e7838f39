"""A model directory for engine doubles: valid to every check, built in a second, without torch.

The reference server (``modelyard.bench.reference``) answers as vLLM or SGLang would but never
reads weights, yet ``modelyard models add`` inspects the directory first. This writes what
inspection needs: a Qwen3-shaped ``config.json``, the test tokenizer, and one small float16
safetensors file of the right tensor names (zeros). Not a model: nothing can run it.

Usage::

    path = build_weightless_model(tmp_path / "double-model")
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from modelyard.testing.tiny_model import write_test_tokenizer

WEIGHTLESS_MODEL_NAME = "weightless-qwen3-for-engine-doubles"


def build_weightless_model(path: Path, *, hidden_size: int = 64, layers: int = 2) -> Path:
    """Write the directory into ``path`` (created) and return it."""
    path.mkdir(parents=True, exist_ok=True)
    special_ids = write_test_tokenizer(path)
    vocabulary = max(
        1 + max(special_ids.values(), default=0),
        len(json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]),
    )
    heads = max(2, hidden_size // 16)
    head_dim = hidden_size // heads
    kv_heads = max(1, heads // 2)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocabulary,
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "bos_token_id": special_ids["<|endoftext|>"],
        "eos_token_id": special_ids["<|im_end|>"],
        "name_or_path": WEIGHTLESS_MODEL_NAME,
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": [special_ids["<|im_end|>"]]}
    (path / "generation_config.json").write_text(json.dumps(generation))
    tensors = {
        "model.embed_tokens.weight": np.zeros((vocabulary, hidden_size), np.float16),
        "lm_head.weight": np.zeros((vocabulary, hidden_size), np.float16),
        "model.norm.weight": np.zeros((hidden_size,), np.float16),
    }
    for layer in range(layers):
        prefix = f"model.layers.{layer}"
        tensors[f"{prefix}.self_attn.q_proj.weight"] = np.zeros((heads * head_dim, hidden_size), np.float16)
        tensors[f"{prefix}.self_attn.k_proj.weight"] = np.zeros(
            (kv_heads * head_dim, hidden_size), np.float16
        )
        tensors[f"{prefix}.self_attn.v_proj.weight"] = np.zeros(
            (kv_heads * head_dim, hidden_size), np.float16
        )
        tensors[f"{prefix}.self_attn.o_proj.weight"] = np.zeros((hidden_size, heads * head_dim), np.float16)
        tensors[f"{prefix}.mlp.gate_proj.weight"] = np.zeros((hidden_size * 2, hidden_size), np.float16)
        tensors[f"{prefix}.mlp.up_proj.weight"] = np.zeros((hidden_size * 2, hidden_size), np.float16)
        tensors[f"{prefix}.mlp.down_proj.weight"] = np.zeros((hidden_size, hidden_size * 2), np.float16)
        tensors[f"{prefix}.input_layernorm.weight"] = np.zeros((hidden_size,), np.float16)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = np.zeros((hidden_size,), np.float16)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "README.md").write_text(
        f"# {WEIGHTLESS_MODEL_NAME}\n\nZeros in the shape of a tiny Qwen3, for engine doubles that "
        "never read weights (modelyard.testing.weightless_model). Not a model.\n"
    )
    return path
