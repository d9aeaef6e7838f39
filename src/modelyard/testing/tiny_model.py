"""Tiny, real, servable TEST models, built offline: a Qwen3-format directory with random weights.

``build_tiny_qwen3`` writes everything an engine needs (config.json, safetensors weights,
generation_config.json with two eos ids, a byte-level BPE tokenizer trained here on text of our
own, tokenizer_config.json and a ChatML chat template with tools and thinking). transformers
serve loads it in seconds and answers chat requests; the answers are random tokens and, by
construction, never stop by themselves (the eos logits are pinned far below the rest), so always
set ``max_tokens``. The model is named as a test model everywhere
(``name_or_path``, the tokenizer's metadata): never present it as a real model.

Usage::

    model_dir = build_tiny_qwen3(tmp_path / "tiny-qwen3")
    # transformers serve <model_dir> --device cpu --port 8123, then chat with "model": str(model_dir)

Needs torch, transformers and tokenizers (the ``engine`` extra).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

TEST_MODEL_NAME = "modelyard-tiny-qwen3-TEST-MODEL-random-weights"

# Qwen's special tokens, in Qwen's order (our ids are small; the real ones start at 151643).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)

# Qwen2/Qwen3's pre-tokenizer split pattern, so that every loader splits text the same way.
_QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Written for these tests: ChatML, a tools block in the system turn, <tool_call> JSON in assistant
# turns, <tool_response> in user turns, and <think> reasoning switched by enable_thinking.
CHAT_TEMPLATE = r"""
{%- set nl = '\n' -%}
{%- if tools -%}
{{- '<|im_start|>system' + nl -}}
{%- if messages[0].role == 'system' -%}{{- messages[0].content + nl + nl -}}{%- endif -%}
{{- '# Tools' + nl + nl + 'You may call one or more functions. ' -}}
{{- 'The functions you may call are listed in <tools></tools>:' + nl + '<tools>' -}}
{%- for tool in tools -%}{{- nl + (tool | tojson) -}}{%- endfor -%}
{{- nl + '</tools>' + nl + nl + 'To call a function, answer with a JSON object inside ' -}}
{{- '<tool_call></tool_call>:' + nl + '<tool_call>' + nl -}}
{{- '{"name": <function-name>, "arguments": <args-json-object>}' + nl + '</tool_call><|im_end|>' + nl -}}
{%- elif messages[0].role == 'system' -%}
{{- '<|im_start|>system' + nl + messages[0].content + '<|im_end|>' + nl -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and not loop.first -%}
{{- '<|im_start|>system' + nl + message.content + '<|im_end|>' + nl -}}
{%- elif message.role == 'user' -%}
{{- '<|im_start|>user' + nl + message.content + '<|im_end|>' + nl -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant' + nl -}}
{%- set reasoning = message.reasoning_content or message.reasoning -%}
{%- if reasoning and loop.last -%}
{{- '<think>' + nl + reasoning + nl + '</think>' + nl + nl -}}
{%- endif -%}
{%- if message.content -%}{{- message.content -}}{%- endif -%}
{%- for call in message.tool_calls or [] -%}
{%- set function = call.function if call.function is defined else call -%}
{%- if loop.first and message.content -%}{{- nl -}}{%- elif not loop.first -%}{{- nl -}}{%- endif -%}
{{- '<tool_call>' + nl + '{"name": "' + function.name + '", "arguments": ' -}}
{%- if function.arguments is string -%}{{- function.arguments -}}
{%- else -%}{{- function.arguments | tojson -}}{%- endif -%}
{{- '}' + nl + '</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>' + nl -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- nl + '<tool_response>' + nl + message.content + nl + '</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>' + nl -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant' + nl -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>' + nl + nl + '</think>' + nl + nl -}}
{%- endif -%}
{%- endif -%}
"""

# Training text for the tokenizer: a few KB of plain English, JSON and chat markup, ours.
_CORPUS_LINES = (
    "The quick brown fox jumps over the lazy dog while the model answers every question.",
    "modelyard deploys inference engines, verifies them, benchmarks them and serves them.",
    "A deployment has replicas; each replica runs one engine process on its own GPUs.",
    "What is the weather in Paris today? It is sunny, with a light wind from the west.",
    "Hello! How can I help you? Please tell me more about what you need.",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}',
    "Let me think step by step. First, add two and three; the result is five. Then double it.",
    "def add(first: int, second: int) -> int:\n    return first + second\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2026 3.14 -1 1e6",
    "user assistant system tool function arguments content reasoning thinking answer",
)


def _train_tokenizer(vocabulary_size: int) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [line for _ in range(8) for line in _CORPUS_LINES]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def write_test_tokenizer(path: Path, vocabulary_size: int = 640) -> dict[str, int]:
    """Write tokenizer.json, tokenizer_config.json and chat_template.jinja into ``path``; return special ids.

    A small Qwen-style TEST tokenizer (byte-level BPE trained here, Qwen's special tokens, a
    ChatML template with tools and thinking): tests that need a tokenizer directory but not the
    real Qwen3 vocabulary use it, offline and in well under a second. ``path`` must exist.
    """
    tokenizer = _train_tokenizer(vocabulary_size)
    tokenizer.save(str(path / "tokenizer.json"))
    ids = {token: int(tokenizer.token_to_id(token)) for token in SPECIAL_TOKENS}
    tokenizer_config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 4096,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(ids[token]): {
                "content": token,
                "special": token in {"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for token in SPECIAL_TOKENS
        },
        "modelyard_note": f"{TEST_MODEL_NAME}: tokenizer trained locally for tests",
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return ids


def _never_stop(model: Any, eos_ids: list[int]) -> None:
    """Make the eos tokens' logits hugely negative for every input, so the model never stops.

    Hidden dimension 0 of the residual stream is held at +1: every embedding has 1 there and no
    layer writes to it (row 0 of each output projection is zero). After the final RMSNorm it is
    therefore always positive, and a -100 weight on it in the eos rows of the head outweighs the
    rest of their logit. Tests get a model whose answers always run to ``max_tokens``.
    """
    import torch

    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[eos_ids, 0] = -100.0


def build_tiny_qwen3(
    path: Path,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    seed: int = 0,
    dtype: Literal["bfloat16", "float32"] = "bfloat16",
    vocabulary_size: int = 640,
    max_shard_bytes: int | None = None,
) -> Path:
    """Write a tiny random-weight ``Qwen3ForCausalLM`` TEST model into ``path`` (created) and return it.

    ``vocabulary_size`` is the tokenizer's target size (the model's embedding matches what was
    trained). ``max_shard_bytes`` splits the weights into shards with a
    ``model.safetensors.index.json`` (as real checkpoints are).
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    special_ids = write_test_tokenizer(path, vocabulary_size)
    trained_size = 1 + max(special_ids.values(), default=0)
    trained_size = max(trained_size, len(json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]))
    heads = max(2, hidden_size // 16)
    config_arguments: dict[str, Any] = dict(
        vocab_size=trained_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden_size // heads,
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
        bos_token_id=special_ids["<|endoftext|>"],
        eos_token_id=special_ids["<|im_end|>"],
        pad_token_id=special_ids["<|endoftext|>"],
    )
    config = Qwen3Config(**config_arguments)
    config.name_or_path = TEST_MODEL_NAME
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    _never_stop(model, [special_ids["<|im_end|>"], special_ids["<|endoftext|>"]])
    model = model.to(getattr(torch, dtype))
    model.config.dtype = dtype
    save_arguments: dict[str, Any] = {"safe_serialization": True}
    if max_shard_bytes is not None:
        save_arguments["max_shard_size"] = max_shard_bytes
    model.save_pretrained(path, **save_arguments)
    generation_arguments: dict[str, Any] = dict(
        bos_token_id=special_ids["<|endoftext|>"],
        eos_token_id=[special_ids["<|im_end|>"], special_ids["<|endoftext|>"]],
        pad_token_id=special_ids["<|endoftext|>"],
        do_sample=True,
        temperature=0.6,
        top_p=0.95,
        top_k=20,
    )
    generation = GenerationConfig(**generation_arguments)  # type: ignore[no-untyped-call]
    generation.save_pretrained(path)
    (path / "README.md").write_text(
        f"# {TEST_MODEL_NAME}\n\nA TEST model built by modelyard.testing.tiny_model: random weights, "
        "a tokenizer trained on a few KB of text. It answers noise and never stops by itself "
        "(set max_tokens). Not a real model.\n"
    )
    logger.info("built tiny test model in %s", path)
    return path


ModelDefect = Literal["none", "missing-shard", "nested", "no-tokenizer"]


def build_sharded_model(path: Path, *, defect: ModelDefect = "none", seed: int = 0) -> Path:
    """A tiny TEST model in two shards with ``model.safetensors.index.json``, optionally broken.

    ``defect``: ``missing-shard`` deletes the second shard; ``nested`` puts the model in
    ``path/<name>/`` (the "weights one folder too deep" mistake); ``no-tokenizer`` deletes the
    tokenizer files. Returns the path a user would give: ``path`` itself, even when nested.
    """
    model_dir = path / TEST_MODEL_NAME if defect == "nested" else path
    # About 300 kB of bf16 weights at hidden size 64: 200 kB shards make two files.
    build_tiny_qwen3(model_dir, seed=seed, max_shard_bytes=200_000)
    index = json.loads((model_dir / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2:
        raise RuntimeError(f"expected 2 shards in {model_dir}, got {shards}")
    if defect == "missing-shard":
        (model_dir / shards[-1]).unlink()
    elif defect == "no-tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (model_dir / name).unlink()
    return path
