"""Speculative decoding's memory in the estimate: a draft model's weights and KV cache (vLLM's
``--speculative-config`` model, SGLang's ``--speculative-draft-model-path``), the KV of the
model's own MTP layers, shown by ``modelyard estimate`` and booked by the placement.

The draft is Qwen3-0.6B's public config.json (no weights: computed from the config), beside
the Qwen3-8B stand-in (its real per-layer bytes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from modelyard.control.memory_demand import memory_demand
from modelyard.errors import InvalidInput
from modelyard.estimate import MemoryEstimate, estimate_memory, parse_gpu_specs
from modelyard.modeldir import read_model_facts
from modelyard.testing.stand_ins import build_stand_in

GIB = 1 << 30
# Qwen3-0.6B's config.json as published (the fields the estimator reads).
QWEN3_0_6B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
# 28 layers x 8 KV heads x 128 x (K + V) x 2 bytes.
DRAFT_KV_BYTES_PER_TOKEN = 28 * 8 * 128 * 2 * 2


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_stand_in("qwen3-8b", tmp_path_factory.mktemp("target") / "Qwen3-8B")


@pytest.fixture(scope="module")
def draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("draft") / "Qwen3-0.6B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_0_6B))
    return folder


def vllm_draft_arguments(draft: Path) -> list[str]:
    config = json.dumps({"model": str(draft), "num_speculative_tokens": 4})
    return ["--max-model-len", "8192", f"--speculative-config '{config}'"]


def estimate(target: Path, engine: str, parameters: list[str]) -> MemoryEstimate:
    version = "0.25.0" if engine == "vllm" else "0.5.17"
    return estimate_memory(
        read_model_facts(target), engine, parse_gpu_specs("1xH100"), parameters, engine_version=version
    )


def test_a_vllm_draft_model_adds_its_weights_and_its_kv_per_token(target: Path, draft: Path) -> None:
    alone = estimate(target, "vllm", ["--max-model-len", "8192"])
    with_draft = estimate(target, "vllm", vllm_draft_arguments(draft))

    assert with_draft.speculative is not None and with_draft.speculative.kind == "draft model"
    # 0.6 B parameters in bf16, the embeddings tied to the head: 1.1 GiB.
    assert 1.0 * GIB < with_draft.speculative.weights_bytes < 1.3 * GIB
    assert with_draft.weights_bytes == alone.weights_bytes + with_draft.speculative.weights_bytes
    assert with_draft.speculative.kv_bytes_per_token == DRAFT_KV_BYTES_PER_TOKEN
    assert with_draft.cache.kv_bytes_per_token == alone.cache.kv_bytes_per_token + DRAFT_KV_BYTES_PER_TOKEN
    # The same knob holds fewer tokens: the draft's weights and its KV of every token.
    assert with_draft.plan_on_total.kv_cache_tokens < alone.plan_on_total.kv_cache_tokens * 0.6


def test_an_sglang_draft_path_counts_the_same_draft(target: Path, draft: Path) -> None:
    parameters = [
        "--context-length 8192",
        "--speculative-algorithm STANDALONE",
        f"--speculative-draft-model-path {draft}",
        "--speculative-num-steps 3",
    ]
    with_draft = estimate(target, "sglang", parameters)
    alone = estimate(target, "sglang", ["--context-length 8192"])
    assert with_draft.speculative is not None
    assert with_draft.speculative.kv_bytes_per_token == DRAFT_KV_BYTES_PER_TOKEN
    assert with_draft.weights_bytes > alone.weights_bytes + GIB
    assert with_draft.plan_on_total.kv_cache_tokens < alone.plan_on_total.kv_cache_tokens


def test_mtp_adds_the_kv_of_the_models_own_mtp_layer(tmp_path: Path) -> None:
    model = build_stand_in("qwen3.6-27b", tmp_path / "Qwen3.6-27B")
    base = ["--max-model-len", "32768", "--limit-mm-per-prompt", '{"image":0,"video":0}']
    alone = estimate(model, "vllm", base)
    mtp = estimate(
        model, "vllm", [*base, "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']
    )
    assert mtp.speculative is not None and mtp.speculative.kind == "MTP layers"
    assert mtp.speculative.layers == 1 and mtp.speculative.weights_bytes == 0
    assert (
        mtp.cache.kv_bytes_per_token
        == alone.cache.kv_bytes_per_token + alone.cache.kv_bytes_per_token_per_layer
    )


def test_ngram_holds_nothing_on_the_gpu(target: Path) -> None:
    ngram = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
    assert (
        estimate(target, "vllm", ["--max-model-len", "8192", f"--speculative-config '{ngram}'"]).speculative
        is None
    )


def test_a_draft_that_is_not_here_is_an_error_naming_the_flag(target: Path, tmp_path: Path) -> None:
    with pytest.raises(
        InvalidInput, match=r"draft model of --speculative-draft-model-path .* cannot be read"
    ):
        estimate(target, "sglang", [f"--speculative-draft-model-path {tmp_path / 'missing'}"])


def test_a_placement_by_memory_books_the_draft(target: Path, draft: Path) -> None:
    common = {
        "engine": "vllm",
        "engine_version": "0.25.0",
        "model_path": str(target),
        "env": {},
        "gpu_memory": "auto",
        "gpu_count": 1,
        "gpu": parse_gpu_specs("1xH100")[0],
    }
    alone = memory_demand(parameters=["--max-model-len", "8192", "--max-num-seqs", "8"], **common)  # type: ignore[arg-type]
    with_draft = memory_demand(parameters=[*vllm_draft_arguments(draft), "--max-num-seqs", "8"], **common)  # type: ignore[arg-type]
    draft_kv = 8 * 8192 * DRAFT_KV_BYTES_PER_TOKEN
    assert with_draft.weights_bytes > alone.weights_bytes + GIB
    assert with_draft.kv_cache_bytes == alone.kv_cache_bytes + draft_kv
    assert with_draft.bytes_per_gpu - alone.bytes_per_gpu >= GIB + draft_kv


def test_the_cli_shows_the_draft(target: Path, draft: Path) -> None:
    config = json.dumps({"model": str(draft), "num_speculative_tokens": 4})
    command = [sys.executable, "-m", "modelyard.cli.main", "estimate", str(target), "--gpus", "1xH100"]
    result = subprocess.run(
        [*command, "--args", f"--max-model-len 8192 --speculative-config '{config}'"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    shown = " ".join(result.stdout.split())
    assert (
        f"speculative decoding draft model {draft} (28 layers, Qwen3ForCausalLM): 1.11 GiB of weights"
        in shown
    )
    assert "112.0 KiB of KV per token (in the figures above)" in shown
