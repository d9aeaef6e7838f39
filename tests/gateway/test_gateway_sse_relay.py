"""SseRelay: the engine's SSE bytes in, the client's out, without a network."""

from __future__ import annotations

import json
from typing import Any

from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.streaming import SseRelay
from modelyard.server.gateway.usage import TokenUsage


def chunk(delta: dict[str, Any], *, model: str = "m", finish_reason: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> bytes:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    payload = {"id": "chatcmpl-1", "model": "m", "choices": [], "usage": usage}
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n") or raw == b""
    return [event for event in raw.split(b"\n\n") if event]


def payloads(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(event[len(b"data: ") :]) for event in events(raw) if not event.endswith(b"[DONE]")]


def relay(*, rewrite: ModelNameRewrite | None = None, client_wants_usage: bool = False) -> SseRelay:
    return SseRelay(model_rewrite=rewrite, client_wants_usage=client_wants_usage)


def test_content_chunk_passes_through_byte_for_byte() -> None:
    data = chunk({"content": "Hello"})
    assert relay().feed(data) == data


def test_an_event_split_across_reads_is_sent_once_complete() -> None:
    data = chunk({"content": "Hello"}) + chunk({"content": " world"})
    sse = relay()
    first_half = sse.feed(data[:30])
    rest = sse.feed(data[30:])
    assert first_half == b""
    assert rest == data


def test_each_complete_event_is_sent_as_soon_as_it_arrives() -> None:
    first, second = chunk({"content": "a"}), chunk({"content": "b"})
    sse = relay()
    assert sse.feed(first + second[:10]) == first
    assert sse.feed(second[10:]) == second


def test_crlf_line_endings_are_understood() -> None:
    sse = relay()
    out = sse.feed(chunk({"content": "a"}).replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n")
    assert events(out)[-1] == b"data: [DONE]"
    assert sse.saw_done


def test_done_is_added_when_the_engine_omits_it() -> None:
    sse = relay()
    sse.feed(chunk({"content": "a"}) + chunk({}, finish_reason="stop"))
    assert sse.end() == b"data: [DONE]\n\n"
    assert not sse.interrupted


def test_done_is_not_doubled_when_the_engine_sends_it() -> None:
    sse = relay()
    out = sse.feed(chunk({"content": "a"}, finish_reason="stop") + b"data: [DONE]\n\n")
    assert out.count(b"[DONE]") == 1
    assert sse.end() == b""


def test_a_last_event_without_its_blank_line_is_still_delivered() -> None:
    sse = relay()
    sse.feed(chunk({"content": "a"}, finish_reason="stop").rstrip(b"\n"))
    tail = sse.end()
    assert events(tail)[-1] == b"data: [DONE]"
    assert payloads(tail)[0]["choices"][0]["finish_reason"] == "stop"


def test_stream_ending_before_any_choice_finished_gets_an_error_event_then_done() -> None:
    sse = relay()
    sse.feed(chunk({"content": "a"}))
    tail = events(sse.end())
    assert sse.interrupted
    error = json.loads(tail[0][len(b"data: ") :])["error"]
    assert error["code"] == "stream_interrupted"
    assert set(error) == {"message", "type", "param", "code"}
    assert tail[1] == b"data: [DONE]"


def test_cut_sends_an_openai_error_event_then_done() -> None:
    sse = relay()
    sse.feed(chunk({"content": "a"}) + b'data: {"id":"chatcmpl-1","cho')
    out = events(sse.cut("the engine stopped"))
    assert json.loads(out[0][len(b"data: ") :])["error"]["message"] == "the engine stopped"
    assert out[1] == b"data: [DONE]"


def test_usage_is_kept_and_the_usage_chunk_dropped_when_the_client_did_not_ask() -> None:
    sse = relay(client_wants_usage=False)
    out = sse.feed(chunk({}, finish_reason="stop") + usage_chunk(7, 3) + b"data: [DONE]\n\n")
    assert sse.usage == TokenUsage(prompt_tokens=7, completion_tokens=3)
    assert b'"usage"' not in out
    assert events(out)[-1] == b"data: [DONE]"


def test_usage_chunk_reaches_a_client_that_asked_for_it() -> None:
    sse = relay(client_wants_usage=True)
    out = sse.feed(usage_chunk(7, 3))
    assert out == usage_chunk(7, 3)
    assert sse.usage == TokenUsage(prompt_tokens=7, completion_tokens=3)


def test_no_usage_is_none_never_a_guess() -> None:
    sse = relay()
    sse.feed(chunk({"content": "a"}, finish_reason="stop") + b"data: [DONE]\n\n")
    assert sse.usage is None


def test_vllm_reasoning_is_also_sent_as_reasoning_content() -> None:
    out = payloads(relay().feed(chunk({"reasoning": "think"})))
    assert out[0]["choices"][0]["delta"] == {"reasoning": "think", "reasoning_content": "think"}


def test_sglang_reasoning_content_is_also_sent_as_reasoning() -> None:
    out = payloads(relay().feed(chunk({"reasoning_content": "think"})))
    assert out[0]["choices"][0]["delta"] == {"reasoning_content": "think", "reasoning": "think"}


def test_model_name_is_rewritten_to_the_deployment_name() -> None:
    rewrite = ModelNameRewrite.between("/models/Qwen3-0.6B", "qwen")
    out = payloads(relay(rewrite=rewrite).feed(chunk({"content": "a"}, model="/models/Qwen3-0.6B")))
    assert out[0]["model"] == "qwen"


def test_model_rewrite_leaves_content_mentioning_the_path_alone() -> None:
    rewrite = ModelNameRewrite.between("/models/q", "qwen")
    out = payloads(
        relay(rewrite=rewrite).feed(chunk({"content": 'the "model":"/models/q" key'}, model="/models/q"))
    )
    assert out[0]["model"] == "qwen"
    assert out[0]["choices"][0]["delta"]["content"] == 'the "model":"/models/q" key'


def test_model_rewrite_handles_spaced_json() -> None:
    rewrite = ModelNameRewrite.between("/m", "demo")
    assert rewrite is not None
    assert rewrite.apply(b'{"model": "/m", "x": 1}') == b'{"model": "demo", "x": 1}'


def test_equal_names_need_no_rewrite() -> None:
    assert ModelNameRewrite.between("demo", "demo") is None


def test_transformers_string_error_event_is_reshaped_and_ends_the_stream_cleanly() -> None:
    sse = relay()
    out = sse.feed(chunk({"content": "a"}) + b'data: {"error": "CUDA out of memory"}\n\n')
    error = payloads(out)[-1]["error"]
    assert error["message"] == "CUDA out of memory"
    assert set(error) == {"message", "type", "param", "code"}
    assert sse.end() == b"data: [DONE]\n\n"


def test_comments_pass_through() -> None:
    assert relay().feed(b": ping\n\n") == b": ping\n\n"
