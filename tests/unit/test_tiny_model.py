"""The tiny TEST model builder: directories that validate and that transformers serve answers from."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from modelyard.modeldir import inspect_model_directory
from modelyard.testing.http_clients import shared_tls_context
from tiny_engine import TinyEngine

pytest.importorskip("torch")
pytest.importorskip("transformers")

from modelyard.testing.tiny_model import (
    SPECIAL_TOKENS,
    TEST_MODEL_NAME,
    build_sharded_model,
)


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir: Path) -> Path:
    """What ``build_tiny_qwen3`` wrote (the session's cached build, see ``tests/model_cache.py``)."""
    return tiny_model_dir


def test_tiny_model_validates_as_a_qwen3_directory(tiny_model: Path) -> None:
    report = inspect_model_directory(tiny_model)
    assert report.valid, report.reasons
    assert report.architecture == "Qwen3ForCausalLM"
    assert report.dtype == "bfloat16"
    assert report.parameter_count is not None and report.parameter_count > 0
    assert report.facts is not None
    assert report.facts.chat_template.supports_tools and report.facts.chat_template.supports_thinking


def test_tiny_model_has_two_eos_ids_that_are_its_end_tokens(tiny_model: Path) -> None:
    report = inspect_model_directory(tiny_model)
    assert report.facts is not None
    tokens = [report.facts.added_tokens[token_id] for token_id in report.eos_token_ids]
    assert tokens == ["<|im_end|>", "<|endoftext|>"]
    assert set(SPECIAL_TOKENS) <= set(report.facts.added_tokens.values())


def test_tiny_model_is_named_as_a_test_model(tiny_model: Path) -> None:
    assert TEST_MODEL_NAME in (tiny_model / "README.md").read_text()
    assert "TEST" in TEST_MODEL_NAME


def test_tokenizer_renders_chatml_with_thinking_switched_off(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = tokenizer.encode("<|im_start|>user")
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_sharded_model_and_its_defects(tmp_path: Path) -> None:
    good = inspect_model_directory(build_sharded_model(tmp_path / "good"))
    assert good.valid and good.facts is not None and len(good.facts.weight_files) == 2
    missing = inspect_model_directory(build_sharded_model(tmp_path / "missing", defect="missing-shard"))
    assert not missing.valid and "model-00002-of-00002.safetensors" in missing.reasons[0]
    nested = inspect_model_directory(build_sharded_model(tmp_path / "nested", defect="nested"))
    assert nested.suggestion == tmp_path / "nested" / TEST_MODEL_NAME


@pytest.mark.slow
def test_transformers_serve_answers_chat_streamed_and_not(tiny_engine: TinyEngine) -> None:
    messages = [{"role": "user", "content": "hi"}]
    request = {"model": tiny_engine.model_path, "messages": messages, "max_tokens": 8}
    answer = httpx.post(
        f"{tiny_engine.base_url}/v1/chat/completions", json=request, timeout=60, verify=shared_tls_context()
    ).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 8
    chunks = []
    with httpx.stream(
        "POST",
        f"{tiny_engine.base_url}/v1/chat/completions",
        json={**request, "stream": True},
        timeout=60,
        verify=shared_tls_context(),
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    assert len(chunks) >= 2
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
