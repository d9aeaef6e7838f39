"""The verification suite against the reference server (the engine double) in its vLLM and SGLang
flavors, against small engine doubles for what the reference server does not play (tool calls,
reasoning left in the content), and (slow) against transformers serve on a tiny test model."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from modelyard.bench.reference import ReferenceConfig, ReferenceServer
from modelyard.doctor.verify import VerificationBudget, VerificationResult, verify_instance
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import refusing_port
from tiny_engine import TinyEngine

MODEL = "qwen-test"


@pytest.fixture
def reference() -> Iterator[Callable[..., ReferenceServer]]:
    servers: list[ReferenceServer] = []

    def start(**settings: Any) -> ReferenceServer:
        config = ReferenceConfig(ttft_ms=1, itl_ms=0, served_model_names=[MODEL], **settings)
        server = ReferenceServer(config)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


async def _verify(base_url: str, **overrides: Any) -> dict[str, VerificationResult]:
    arguments: dict[str, Any] = {
        "base_url": base_url,
        "served_model_name": MODEL,
        "expected_model_id": MODEL,
        "reasoning_field": "reasoning",
        "metrics_path": "/metrics",
        "model_supports_tools": False,
        "model_supports_thinking": True,
        "budget": VerificationBudget(floor_seconds=10.0, ceiling_seconds=60.0),
    }
    arguments.update(overrides)
    async with httpx.AsyncClient(verify=shared_tls_context()) as client:
        results = await verify_instance(client=client, **arguments)
    return {result.check_id: result for result in results}


def _statuses(results: dict[str, VerificationResult]) -> dict[str, str]:
    return {check_id: result.status for check_id, result in results.items()}


async def test_vllm_flavor_passes_every_applicable_check(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    results = await _verify(server.base_url)
    assert _statuses(results) == {
        "verify.speed": "passed",
        "verify.models-listed": "passed",
        "verify.chat-answer": "passed",
        "verify.reasoning-separated": "passed",
        "verify.tool-call": "skipped",
        "verify.streaming": "passed",
        "verify.metrics": "passed",
    }
    assert all(result.duration_ms >= 0 for result in results.values())
    assert results["verify.streaming"].message.endswith("[DONE]")


async def test_sglang_flavor_passes_with_reasoning_content(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="sglang", reasoning_tokens=4)
    results = await _verify(server.base_url, reasoning_field="reasoning_content")
    assert {status for status in _statuses(results).values()} == {"passed", "skipped"}


async def test_model_not_listed_under_the_expected_name(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    results = await _verify(server.base_url, expected_model_id="qwen-prod")
    assert results["verify.models-listed"].status == "failed"
    assert "qwen-test" in results["verify.models-listed"].message
    assert results["verify.chat-answer"].passed


async def test_an_engine_listing_its_cache_skips_the_listing_check(
    reference: Callable[..., ReferenceServer],
) -> None:
    # transformers serve 5.17 lists the Hugging Face cache in /v1/models, not the path it serves.
    server = reference(flavor="transformers")
    results = await _verify(
        server.base_url, expected_model_id="/models/local-dir", listing_names_the_model=False
    )
    listing = results["verify.models-listed"]
    assert listing.status == "skipped"
    assert "lists models from its cache" in listing.message
    # A listing that does name the model still passes under the same setting.
    results = await _verify(server.base_url, listing_names_the_model=False)
    assert results["verify.models-listed"].passed


async def test_wrong_served_name_fails_the_chat(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    results = await _verify(server.base_url, served_model_name="other")
    assert results["verify.chat-answer"].status == "failed"
    assert "HTTP 404" in results["verify.chat-answer"].message


async def test_all_tokens_spent_on_reasoning_is_an_empty_answer(
    reference: Callable[..., ReferenceServer],
) -> None:
    server = reference(flavor="vllm", reasoning_tokens=500)
    results = await _verify(server.base_url, max_tokens=16)
    assert results["verify.chat-answer"].status == "failed"
    assert "reasoning" in results["verify.chat-answer"].message


async def test_no_reasoning_from_a_thinking_model(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=0)
    results = await _verify(server.base_url)
    assert results["verify.reasoning-separated"].status == "failed"


async def test_reasoning_in_another_field_than_declared(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    results = await _verify(server.base_url, reasoning_field="reasoning_content")
    failure = results["verify.reasoning-separated"]
    assert failure.status == "failed"
    assert "'reasoning'" in failure.message


async def test_reasoning_check_skipped_for_a_model_without_thinking(
    reference: Callable[..., ReferenceServer],
) -> None:
    server = reference(flavor="vllm")
    results = await _verify(server.base_url, model_supports_thinking=False)
    assert results["verify.reasoning-separated"].status == "skipped"
    assert results["verify.chat-answer"].passed


async def test_tools_supported_but_no_tool_call(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    results = await _verify(server.base_url, model_supports_tools=True)
    assert results["verify.tool-call"].status == "failed"
    assert "without calling the tool" in results["verify.tool-call"].message


async def test_missing_metrics_endpoint(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="transformers", reasoning_tokens=4)
    results = await _verify(server.base_url, reasoning_field="reasoning_content")
    assert results["verify.metrics"].status == "failed"
    assert "404" in results["verify.metrics"].message
    no_metrics = await _verify(server.base_url, reasoning_field="reasoning_content", metrics_path=None)
    assert no_metrics["verify.metrics"].status == "skipped"


async def test_stream_without_done_but_with_finish_reason_passes(
    reference: Callable[..., ReferenceServer],
) -> None:
    server = reference(flavor="transformers", reasoning_tokens=4)
    results = await _verify(server.base_url, reasoning_field="reasoning_content", metrics_path=None)
    assert results["verify.streaming"].passed
    assert "finish_reason" in results["verify.streaming"].message


async def test_cut_stream_fails(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4, cut_after_chunks=2)
    results = await _verify(server.base_url)
    assert results["verify.streaming"].status == "failed"


async def test_slow_engine_fails_by_timeout(reference: Callable[..., ReferenceServer]) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    server.config.ttft_ms = 3_000.0
    results = await _verify(server.base_url, timeout_seconds=0.2)
    assert results["verify.chat-answer"].status == "failed"
    assert "no answer in time" in results["verify.chat-answer"].message
    assert results["verify.models-listed"].passed


async def test_unreachable_engine_fails_every_request_check() -> None:
    with refusing_port() as port:
        results = await _verify(f"http://127.0.0.1:{port}")
    assert results["verify.models-listed"].status == "failed"
    assert results["verify.streaming"].status == "failed"


# -- engine doubles for what the reference server does not play ----------------------------------


def _chat_engine_double(message: dict[str, Any]) -> httpx.MockTransport:
    """An OpenAI-compatible engine double that answers every chat request with ``message``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": MODEL}]})
        body = json.loads(request.content)
        if body.get("stream"):
            events = [
                {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            text = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        return httpx.Response(
            200, json={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )

    return httpx.MockTransport(handle)


async def _verify_double(message: dict[str, Any]) -> dict[str, VerificationResult]:
    return await _verify_transport(
        _chat_engine_double(message),
        served_model_name=MODEL,
        reasoning_field="reasoning",
        model_supports_tools=True,
        model_supports_thinking=True,
    )


async def _verify_transport(
    transport: httpx.MockTransport, *, served_model_name: str, **overrides: Any
) -> dict[str, VerificationResult]:
    """The suite against an in-process engine double (an httpx.MockTransport)."""
    arguments: dict[str, Any] = {
        "reasoning_field": "reasoning_content",
        "metrics_path": None,
        "model_supports_tools": False,
        "model_supports_thinking": False,
        **overrides,
    }
    async with httpx.AsyncClient(transport=transport) as client:
        results = await verify_instance(
            base_url="http://engine-double",
            served_model_name=served_model_name,
            expected_model_id=served_model_name,
            client=client,
            **arguments,
        )
    return {result.check_id: result for result in results}


async def test_parsed_tool_call_passes() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    results = await _verify_double(
        {"role": "assistant", "content": "ok", "reasoning": "x", "tool_calls": [call]}
    )
    assert results["verify.tool-call"].passed
    assert "get_weather" in results["verify.tool-call"].message


async def test_tool_call_left_in_the_content_names_the_parser_for_its_format() -> None:
    # JSON inside <tool_call> (Qwen3): what vLLM left in the content with qwen3_coder on the H200.
    content = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    results = await _verify_double({"role": "assistant", "content": content})
    assert results["verify.tool-call"].status == "failed"
    assert "--tool-call-parser hermes on vLLM" in results["verify.tool-call"].message
    assert "qwen25 on SGLang" in results["verify.tool-call"].message
    # XML (Qwen3.5/3.6): qwen3_coder reads it.
    xml = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
    results = await _verify_double({"role": "assistant", "content": xml})
    assert "--tool-call-parser qwen3_coder" in results["verify.tool-call"].message


async def test_reasoning_left_in_the_content_names_the_parser() -> None:
    results = await _verify_double({"role": "assistant", "content": "<think>2+3=5</think>5"})
    assert results["verify.reasoning-separated"].status == "failed"
    assert "--reasoning-parser" in results["verify.reasoning-separated"].message


async def test_tool_arguments_that_are_not_json_fail() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{city: Paris"}}
    results = await _verify_double({"role": "assistant", "content": "", "tool_calls": [call]})
    assert results["verify.tool-call"].status == "failed"


# -- transformers serve on a tiny test model (slow) ---------------------------------------------------


@pytest.mark.slow
async def test_transformers_serve_on_a_tiny_model(tiny_engine: TinyEngine) -> None:
    base_url, model_path = tiny_engine.base_url, tiny_engine.model_path
    async with httpx.AsyncClient(verify=shared_tls_context()) as client:
        results = await verify_instance(
            base_url=base_url,
            served_model_name=model_path,
            expected_model_id=model_path,
            reasoning_field="reasoning_content",
            metrics_path=None,
            model_supports_tools=False,
            model_supports_thinking=False,
            client=client,
            timeout_seconds=120.0,
            max_tokens=8,
        )
    by_id = {result.check_id: result for result in results}
    assert by_id["verify.models-listed"].passed, by_id["verify.models-listed"].message
    assert by_id["verify.chat-answer"].passed, by_id["verify.chat-answer"].message
    assert by_id["verify.streaming"].passed, by_id["verify.streaming"].message
    assert by_id["verify.metrics"].status == "skipped"


async def _verify_engine_double(
    handler: Callable[[httpx.Request], httpx.Response], *, served_model_name: str, **overrides: Any
) -> dict[str, VerificationResult]:
    """The suite against an engine double that answers as ``handler`` says."""
    return await _verify_transport(
        httpx.MockTransport(handler), served_model_name=served_model_name, **overrides
    )


def _chat_reply(content: str = "Hello there.") -> httpx.Response:
    message = {"role": "assistant", "content": content}
    return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}]})


async def test_a_500_from_a_cache_listing_engine_is_skipped_and_the_next_check_still_runs() -> None:
    # transformers serve 5.17 without a Hugging Face cache folder: /v1/models answers 500, and
    # uvicorn then closes the keep-alive connection, so the next request reads nothing once.
    closed_once: list[bool] = []

    def engine(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(500, text="Internal Server Error")
        if not closed_once:
            closed_once.append(True)
            raise httpx.ReadError("connection closed by the engine", request=request)
        return _chat_reply()

    by_id = await _verify_engine_double(
        engine, served_model_name="/models/local-dir", listing_names_the_model=False
    )
    assert by_id["verify.models-listed"].status == "skipped"
    assert "HTTP 500" in by_id["verify.models-listed"].message
    assert by_id["verify.chat-answer"].passed, by_id["verify.chat-answer"].message


async def test_a_500_from_an_engine_that_lists_what_it_serves_fails() -> None:
    def engine(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(500, text="boom")
        return _chat_reply()

    listing = (await _verify_engine_double(engine, served_model_name="qwen"))["verify.models-listed"]
    assert listing.status == "failed"
    assert "HTTP 500" in listing.message


def test_the_budget_follows_the_measured_speed_within_its_floor_and_ceiling() -> None:
    budget = VerificationBudget(factor=4.0, floor_seconds=30.0, ceiling_seconds=600.0)
    assert budget.timeout_seconds(32) == 30.0  # not measured yet: the floor
    assert budget.measured(0.9).timeout_seconds(32) == pytest.approx(115.2)  # 4 x 32 x 0.9 s
    assert budget.measured(0.01).timeout_seconds(32) == 30.0
    assert budget.measured(10.0).timeout_seconds(32) == 600.0
    assert VerificationBudget(fixed_seconds=5.0).measured(10.0).timeout_seconds(32) == 5.0


async def test_a_slow_engine_is_judged_by_its_own_speed(reference: Callable[..., ReferenceServer]) -> None:
    # 50 ms a token: the 32-token chat takes 1.6 s, past a fixed 0.5 s limit.
    server = reference(flavor="vllm", reasoning_tokens=4)
    server.config.itl_ms = 50.0
    fixed = await _verify(server.base_url, timeout_seconds=0.5)
    assert fixed["verify.chat-answer"].status == "failed"
    assert fixed["verify.speed"].status == "skipped"
    measured = await _verify(
        server.base_url, budget=VerificationBudget(factor=4.0, floor_seconds=0.5, ceiling_seconds=60.0)
    )
    assert measured["verify.chat-answer"].passed, measured["verify.chat-answer"].message
    speed = measured["verify.speed"]
    assert speed.passed and "8 token(s) in" in speed.message and "the 32-token chat:" in speed.message


async def test_a_missing_answer_is_retryable_and_a_wrong_one_is_not(
    reference: Callable[..., ReferenceServer],
) -> None:
    server = reference(flavor="vllm", reasoning_tokens=4)
    server.config.ttft_ms = 3_000.0
    results = await _verify(server.base_url, timeout_seconds=0.2, metrics_path="/no-such-metrics")
    timed_out = results["verify.chat-answer"]
    assert "no answer in time: none within 0.2 s" in timed_out.message and timed_out.details["retryable"]
    assert results["verify.metrics"].status == "failed"
    assert "retryable" not in results["verify.metrics"].details
