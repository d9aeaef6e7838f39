"""The reference server (the engine double) plays each engine's observable contract.

Real HTTP on loopback; the server runs on a thread of the test process, or as a child process
where the test is about the program (its command line, its log lines, its exit status).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelyard.bench.reference import (
    ReferenceConfig,
    ReferenceServer,
    ReferenceServerProcess,
    parse_reference_argv,
)
from modelyard.errors import EngineStartFailed
from modelyard.testing.http_clients import shared_tls_context

MODEL = "double-model"


def _config(**changes: object) -> ReferenceConfig:
    base = ReferenceConfig(served_model_names=[MODEL], model_path="/models/double", ttft_ms=2, itl_ms=1)
    return base.replace(**changes)


@pytest.fixture(scope="module")
def vllm_server() -> Iterator[ReferenceServer]:
    with ReferenceServer(_config(flavor="vllm", reasoning_tokens=2, output_tokens=5)) as server:
        yield server


@pytest.fixture(scope="module")
def sglang_server() -> Iterator[ReferenceServer]:
    with ReferenceServer(_config(flavor="sglang", reasoning_tokens=2, output_tokens=5)) as server:
        yield server


def _events(response_text: str) -> list[str]:
    return [line[len("data: ") :] for line in response_text.splitlines() if line.startswith("data: ")]


def _chat(base_url: str, **body: object) -> httpx.Response:
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "one two three"}], **body}
    return httpx.post(
        base_url + "/v1/chat/completions", json=payload, timeout=10, verify=shared_tls_context()
    )


def test_vllm_flavor_streams_reasoning_in_reasoning_and_ends_with_done(vllm_server: ReferenceServer) -> None:
    events = _events(_chat(vllm_server.base_url, stream=True, max_tokens=4).text)
    assert events[-1] == "[DONE]"
    deltas = [
        json.loads(event)["choices"][0]["delta"] for event in events[:-1] if json.loads(event)["choices"]
    ]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [delta.get("reasoning") for delta in deltas[1:3]] == [" the", " of"]
    assert [delta.get("content") for delta in deltas[3:]] == [" and", " to"]
    assert not any("reasoning_content" in delta for delta in deltas)


def test_sglang_flavor_streams_reasoning_in_reasoning_content(sglang_server: ReferenceServer) -> None:
    events = _events(_chat(sglang_server.base_url, stream=True, max_tokens=3).text)
    deltas = [
        json.loads(event)["choices"][0]["delta"] for event in events[:-1] if json.loads(event)["choices"]
    ]
    assert deltas[1] == {"reasoning_content": " the"}
    assert events[-1] == "[DONE]"


def test_usage_comes_in_a_last_chunk_only_when_asked(vllm_server: ReferenceServer) -> None:
    without = [json.loads(event) for event in _events(_chat(vllm_server.base_url, stream=True).text)[:-1]]
    assert not any("usage" in event for event in without)
    options = {"include_usage": True}
    with_usage = [
        json.loads(e)
        for e in _events(_chat(vllm_server.base_url, stream=True, stream_options=options).text)[:-1]
    ]
    assert with_usage[-1]["choices"] == []
    assert with_usage[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def test_continuous_usage_counts_tokens_in_every_chunk() -> None:
    with ReferenceServer(_config(tokens_per_chunk=3, output_tokens=7)) as server:
        options = {"include_usage": True, "continuous_usage_stats": True}
        events = [
            json.loads(e)
            for e in _events(_chat(server.base_url, stream=True, stream_options=options).text)[:-1]
        ]
    generated = [
        event["usage"]["completion_tokens"] for event in events if event["choices"] and "usage" in event
    ]
    assert generated == [1, 4, 7]


def test_transformers_flavor_ends_without_done_and_always_sends_usage() -> None:
    with ReferenceServer(_config(flavor="transformers", reasoning_tokens=1, output_tokens=3)) as server:
        events = _events(_chat(server.base_url, stream=True).text)
        assert httpx.get(server.base_url + "/metrics", verify=shared_tls_context()).status_code == 404
    assert "[DONE]" not in events
    last = json.loads(events[-1])
    assert last["usage"]["completion_tokens"] == 3
    assert last["choices"][0]["finish_reason"] == "length"
    assert json.loads(events[0])["choices"][0]["delta"] == {"reasoning_content": " the"}


def test_unknown_model_is_a_404_in_the_engine_error_shape(
    vllm_server: ReferenceServer, sglang_server: ReferenceServer
) -> None:
    vllm_answer = httpx.post(
        vllm_server.base_url + "/v1/chat/completions",
        json={"model": "other", "messages": []},
        verify=shared_tls_context(),
    )
    assert vllm_answer.status_code == 404
    assert vllm_answer.json()["error"]["message"] == "The model `other` does not exist."
    sglang_answer = httpx.post(
        sglang_server.base_url + "/v1/completions",
        json={"model": "other", "prompt": "x"},
        verify=shared_tls_context(),
    )
    assert sglang_answer.status_code == 404
    assert sglang_answer.json()["object"] == "error"


def test_models_list_names_the_served_model_with_its_root(vllm_server: ReferenceServer) -> None:
    data = httpx.get(vllm_server.base_url + "/v1/models", verify=shared_tls_context()).json()["data"]
    assert [(entry["id"], entry["owned_by"], entry["root"]) for entry in data] == [
        (MODEL, "vllm", "/models/double")
    ]


def test_metrics_use_the_engines_prometheus_names(
    vllm_server: ReferenceServer, sglang_server: ReferenceServer
) -> None:
    vllm_text = httpx.get(vllm_server.base_url + "/metrics", verify=shared_tls_context()).text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:generation_tokens_total",
    ):
        assert name in vllm_text, name
    sglang_text = httpx.get(sglang_server.base_url + "/metrics", verify=shared_tls_context()).text
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
    ):
        assert name in sglang_text, name


def test_non_streamed_chat_completions_and_embeddings(vllm_server: ReferenceServer) -> None:
    whole = _chat(vllm_server.base_url, max_tokens=3).json()
    assert whole["choices"][0]["message"]["reasoning"] == " the of"
    assert whole["choices"][0]["message"]["content"] == " and"
    assert whole["usage"]["completion_tokens"] == 3
    completion = httpx.post(
        vllm_server.base_url + "/v1/completions",
        json={"model": MODEL, "prompt": "a b", "max_tokens": 2},
        verify=shared_tls_context(),
    ).json()
    assert completion["choices"][0]["text"] == " the of"
    first, second = (
        httpx.post(
            vllm_server.base_url + "/v1/embeddings",
            json={"model": MODEL, "input": "same"},
            verify=shared_tls_context(),
        ).json()
        for _ in range(2)
    )
    assert first["data"][0]["embedding"] == second["data"][0]["embedding"]
    assert len(first["data"][0]["embedding"]) == 16


def test_tokenize_counts_words_like_the_usage(vllm_server: ReferenceServer) -> None:
    answer = httpx.post(
        vllm_server.base_url + "/tokenize",
        json={"model": MODEL, "prompt": "a b c d"},
        verify=shared_tls_context(),
    ).json()
    assert answer["count"] == 4


def test_api_key_is_enforced_when_configured() -> None:
    with ReferenceServer(_config(api_key="secret")) as server:
        assert _chat(server.base_url).status_code == 401
        answer = httpx.post(
            server.base_url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
            headers={"Authorization": "Bearer secret"},
            verify=shared_tls_context(),
        )
        assert answer.status_code == 200


def test_sglang_flavor_listens_early_and_answers_503_until_warm() -> None:
    server = ReferenceServer(_config(flavor="sglang", startup_delay_s=0.5))
    server.start(wait_ready=False)
    try:
        deadline = time.monotonic() + 5
        statuses: list[int] = []
        while time.monotonic() < deadline and 200 not in statuses:
            with contextlib.suppress(httpx.ConnectError):
                statuses.append(
                    httpx.get(server.base_url + "/health", verify=shared_tls_context()).status_code
                )
            time.sleep(0.05)
        assert statuses[0] == 503
        assert statuses[-1] == 200
    finally:
        server.stop()


def test_vllm_flavor_refuses_connections_until_loaded() -> None:
    server = ReferenceServer(_config(flavor="vllm", startup_delay_s=0.5))
    server.start(wait_ready=False)
    try:
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.base_url + "/health", verify=shared_tls_context())
        deadline = time.monotonic() + 5
        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                status = httpx.get(server.base_url + "/health", verify=shared_tls_context()).status_code
            except httpx.ConnectError:
                time.sleep(0.05)
        assert status == 200
    finally:
        server.stop()


def test_engine_command_lines_are_accepted_and_other_flags_ignored() -> None:
    vllm = parse_reference_argv(
        [
            "vllm",
            "serve",
            "/models/q",
            "--port",
            "8123",
            "--served-model-name",
            "q",
            "q-alias",
            "--tensor-parallel-size",
            "2",
            "--ttft-ms",
            "7",
        ]
    )
    assert (vllm.flavor, vllm.port, vllm.served_model_names, vllm.ttft_ms) == (
        "vllm",
        8123,
        ["q", "q-alias"],
        7.0,
    )
    assert vllm.ignored_arguments == ["--tensor-parallel-size", "2"]
    sglang = parse_reference_argv(["sglang", "--model-path", "/models/q", "--mem-fraction-static", "0.8"])
    assert (sglang.flavor, sglang.port, sglang.served_model_names) == ("sglang", 30000, ["/models/q"])
    transformers = parse_reference_argv(
        ["transformers", "serve", "/models/q", "--device", "cpu", "--port", "9"]
    )
    assert (transformers.flavor, transformers.served_model_names) == ("transformers", ["/models/q"])


def test_the_program_prints_vllm_startup_lines(tmp_path: Path) -> None:
    log_path = tmp_path / "engine.log"
    with ReferenceServerProcess(_config(flavor="vllm"), log_path=log_path) as server:
        assert httpx.get(server.base_url + "/health", verify=shared_tls_context()).status_code == 200
    log = log_path.read_text()
    assert "GPU KV cache size: 262,144 tokens" in log
    assert "Application startup complete." in log


def test_fail_start_prints_an_engine_failure_line_and_exits_1() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelyard.bench.reference_server",
            "vllm",
            "serve",
            "/models/q",
            "--fail-start",
            "torch.OutOfMemoryError: CUDA out of memory.",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1
    assert "EngineCore failed to start." in completed.stdout
    assert "torch.OutOfMemoryError: CUDA out of memory." in completed.stdout
    with pytest.raises(EngineStartFailed, match="CUDA out of memory"):
        ReferenceServer(_config(fail_start="CUDA out of memory")).start()


def test_requests_beyond_max_concurrency_wait_in_the_queue() -> None:
    with ReferenceServer(_config(max_concurrency=1, ttft_ms=200, output_tokens=1)) as server:
        with httpx.Client(timeout=10, verify=shared_tls_context()) as client:
            import threading

            threads = [threading.Thread(target=_chat, args=(server.base_url,)) for _ in range(2)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 5
            waiting = 0.0
            while time.monotonic() < deadline and waiting < 1:
                text = client.get(server.base_url + "/metrics").text
                waiting = max(
                    (
                        float(line.split()[-1])
                        for line in text.splitlines()
                        if line.startswith("vllm:num_requests_waiting")
                    ),
                    default=0.0,
                )
            for thread in threads:
                thread.join()
        assert waiting == 1
