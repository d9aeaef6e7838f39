"""The tiny TEST model builder: directories that validate and that transformers serve answers from."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelyard.modeldir import inspect_model_directory

pytest.importorskip("torch")
pytest.importorskip("transformers")

from modelyard.testing.tiny_model import (
    SPECIAL_TOKENS,
    TEST_MODEL_NAME,
    build_sharded_model,
    build_tiny_qwen3,
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "tiny-qwen3")


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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served_tiny_model(tiny_model: Path) -> Iterator[str]:
    port = _free_port()
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    (Path.home() / ".cache" / "huggingface" / "hub").mkdir(parents=True, exist_ok=True)
    executable = Path(sys.executable).parent / "transformers"
    process = subprocess.Popen(
        [
            str(executable),
            "serve",
            str(tiny_model),
            "--device",
            "cpu",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, "transformers serve exited during start-up"
            try:
                if httpx.get(f"{base_url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("transformers serve did not answer /health within 60 s")
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.slow
def test_transformers_serve_answers_chat_streamed_and_not(tiny_model: Path, served_tiny_model: str) -> None:
    request = {"model": str(tiny_model), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    answer = httpx.post(f"{served_tiny_model}/v1/chat/completions", json=request, timeout=60).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 8
    chunks = []
    with httpx.stream(
        "POST", f"{served_tiny_model}/v1/chat/completions", json={**request, "stream": True}, timeout=60
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    assert len(chunks) >= 2
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
