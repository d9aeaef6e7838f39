"""The verification suite run on every new instance before it takes traffic.

An engine can answer ``/health`` and still be useless: the model is served under another name,
answers are empty, reasoning is mixed into the content because no reasoning parser is active,
tool calls come back as text because no tool-call parser is active, streaming breaks, metrics are
off. Each check sends one small request (a few tokens, bounded by a timeout) and says what it
saw:

- ``verify.models-listed``: ``/v1/models`` lists the expected model id (skipped for engines
  that list their cache instead, as transformers serve 5.17 does);
- ``verify.chat-answer``: a chat request gets a non-empty answer;
- ``verify.reasoning-separated``: reasoning comes back in the reasoning field, not in the content
  (only for models whose chat template supports thinking);
- ``verify.tool-call``: a tool request comes back as parsed ``tool_calls`` (only for models whose
  chat template supports tools);
- ``verify.streaming``: a streamed request delivers tokens and ends;
- ``verify.metrics``: the metrics endpoint answers in Prometheus text format.

Usage (the controller, after readiness)::

    async with httpx.AsyncClient() as client:
        results = await verify_instance(
            base_url="http://127.0.0.1:8001", served_model_name="qwen", expected_model_id="qwen",
            reasoning_field="reasoning", metrics_path="/metrics",
            model_supports_tools=True, model_supports_thinking=True, client=client)
    if any(result.failed for result in results): keep the instance out of rotation
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

logger = logging.getLogger(__name__)

VerificationStatus = Literal["passed", "failed", "skipped"]

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_TOKENS = 32
# Thinking models think before they answer; give the reasoning and tool checks more room.
REASONING_MAX_TOKENS = 128

# The tool the tool-call check offers (the test models are trained to call it: testing/).
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
_REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass(frozen=True)
class VerificationResult:
    """The outcome of one check on one instance; stored on the instance and shown with it."""

    check_id: str
    status: VerificationStatus
    message: str
    duration_ms: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def to_json(self) -> dict[str, Any]:
        return {
            "check_id": self.check_id,
            "status": self.status,
            "message": self.message,
            "duration_ms": round(self.duration_ms, 1),
            "details": self.details,
        }


class _NotApplicable(Exception):
    """A check that cannot judge this engine (raised inside a check): reported as skipped, with why."""


class _CheckFailed(Exception):
    """A check's verdict "failed", with the message that says why (raised inside a check)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


@dataclass
class _Verifier:
    base_url: str
    served_model_name: str
    expected_model_id: str
    reasoning_field: str
    client: httpx.AsyncClient
    timeout_seconds: float
    max_tokens: int
    headers: dict[str, str]
    listing_names_the_model: bool = True

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + "/" + path.lstrip("/")

    async def post_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        body = {"model": self.served_model_name, **body}
        response = await self.client.post(
            self.url("/v1/chat/completions"), json=body, headers=self.headers, timeout=self.timeout_seconds
        )
        if response.status_code in (400, 422) and "chat_template_kwargs" in body:
            # Engines that refuse unknown fields (transformers serve): ask again without them.
            body = {key: value for key, value in body.items() if key != "chat_template_kwargs"}
            response = await self.client.post(
                self.url("/v1/chat/completions"),
                json=body,
                headers=self.headers,
                timeout=self.timeout_seconds,
            )
        _raise_for_status(response, "POST /v1/chat/completions")
        data = response.json()
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _CheckFailed("the chat answer has no choices", body=_short(response.text))
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise _CheckFailed("the chat answer has no message", body=_short(response.text))
        return {"message": message, "finish_reason": choices[0].get("finish_reason")}

    # -- the checks ----------------------------------------------------------------------------

    async def models_listed(self) -> str:
        response = await self.client.get(
            self.url("/v1/models"), headers=self.headers, timeout=self.timeout_seconds
        )
        if response.status_code >= 500 and not self.listing_names_the_model:
            # transformers serve 5.17 answers 500 when the Hugging Face cache folder is missing.
            raise _NotApplicable(
                f"GET /v1/models answered HTTP {response.status_code} ({_short(response.text, 80)}): this "
                "engine lists models from its cache, which it could not read; modelyard's gateway lists "
                "the deployment itself"
            )
        _raise_for_status(response, "GET /v1/models")
        body = response.json()
        data = body.get("data") if isinstance(body, dict) else None
        ids = [str(entry.get("id")) for entry in data or [] if isinstance(entry, dict)]
        if self.expected_model_id not in ids and not self.listing_names_the_model:
            raise _NotApplicable(
                f"/v1/models lists {ids or 'no model'}: this engine lists models from its cache, not the "
                f"one it serves; requests naming {self.expected_model_id!r} are checked by "
                "verify.chat-answer, and modelyard's gateway lists the deployment itself"
            )
        if self.expected_model_id not in ids:
            raise _CheckFailed(
                f"/v1/models lists {ids or 'no model'}, not {self.expected_model_id!r}: clients asking for "
                f"{self.expected_model_id!r} would get 'model not found'; set --served-model-name",
                listed=ids,
            )
        return f"/v1/models lists {self.expected_model_id!r}"

    async def chat_answer(self, thinking_off: bool) -> str:
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
            "max_tokens": self.max_tokens,
        }
        if thinking_off:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        answer = await self.post_chat(body)
        message = answer["message"]
        content = message.get("content") or ""
        if isinstance(content, str) and content.strip():
            return f"answered {len(content)} characters (finish_reason {answer['finish_reason']})"
        reasoning = _reasoning_text(message)
        if reasoning:
            raise _CheckFailed(
                f"the answer's content is empty; all {self.max_tokens} tokens went to reasoning",
                finish_reason=answer["finish_reason"],
            )
        raise _CheckFailed(
            "the answer is empty: check the chat template and the reasoning/tool-call parser flags "
            "(a parser name with a trailing space silently disables it)",
            finish_reason=answer["finish_reason"],
        )

    async def reasoning_separated(self) -> str:
        answer = await self.post_chat(
            {
                "messages": [{"role": "user", "content": "What is 2 + 3? Think, then answer briefly."}],
                "max_tokens": REASONING_MAX_TOKENS,
                "chat_template_kwargs": {"enable_thinking": True},
            }
        )
        message = answer["message"]
        content = message.get("content") or ""
        expected = message.get(self.reasoning_field)
        if isinstance(expected, str) and expected.strip():
            return f"reasoning returned in {self.reasoning_field!r} ({len(expected)} characters)"
        other = next(
            (name for name in _REASONING_FIELDS if name != self.reasoning_field and message.get(name)), None
        )
        if other is not None:
            raise _CheckFailed(
                f"reasoning came back in {other!r}, not in {self.reasoning_field!r} where this backend "
                "version says it is; correct the backend version's reasoning_field",
                field=other,
            )
        if isinstance(content, str) and ("<think>" in content or "</think>" in content):
            raise _CheckFailed(
                "reasoning is mixed into the content (<think> tags in 'content'): no reasoning parser is "
                "active; start the engine with --reasoning-parser (qwen3 for Qwen3/3.5/3.6)",
                content=_short(content),
            )
        raise _CheckFailed(
            f"no reasoning came back (neither {self.reasoning_field!r} nor <think> in the content): check "
            "--reasoning-parser and that the chat template enables thinking",
            content=_short(str(content)),
        )

    async def tool_call(self, thinking_off: bool) -> str:
        body: dict[str, Any] = {
            "messages": [
                {"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
            "max_tokens": REASONING_MAX_TOKENS,
        }
        if thinking_off:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        answer = await self.post_chat(body)
        message = answer["message"]
        calls = message.get("tool_calls") or []
        if isinstance(calls, list) and calls:
            function = calls[0].get("function") if isinstance(calls[0], dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            except json.JSONDecodeError:
                raise _CheckFailed(
                    f"the tool call's arguments are not JSON: {_short(str(arguments))}", name=name
                ) from None
            return f"parsed tool call {name!r} with arguments {_short(json.dumps(parsed))}"
        content = str(message.get("content") or "")
        if "<tool_call>" in content or '"arguments"' in content or "<function=" in content:
            raise _CheckFailed(
                "the tool call came back as text in 'content': no active tool-call parser read it "
                f"(none is set, or it expects another format); {_parser_for(content)}",
                content=_short(content),
            )
        raise _CheckFailed(
            "the model answered without calling the tool (no tool_calls): check --tool-call-parser and "
            "the chat template's tool support",
            content=_short(content),
        )

    async def streaming(self) -> str:
        body = {
            "model": self.served_model_name,
            "messages": [{"role": "user", "content": "Count from one to five."}],
            "max_tokens": min(self.max_tokens, 16),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        chunks = 0
        text_chunks = 0
        finished = False
        done = False
        async with self.client.stream(
            "POST",
            self.url("/v1/chat/completions"),
            json=body,
            headers=self.headers,
            timeout=self.timeout_seconds,
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                _raise_for_status(response, "POST /v1/chat/completions (stream)")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    done = True
                    break
                try:
                    event = json.loads(payload)
                except json.JSONDecodeError:
                    raise _CheckFailed(f"a stream event is not JSON: {_short(payload)}") from None
                chunks += 1
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if any(delta.get(name) for name in ("content", *_REASONING_FIELDS, "tool_calls")):
                        text_chunks += 1
                    if choice.get("finish_reason"):
                        finished = True
        if text_chunks == 0:
            raise _CheckFailed(f"the stream sent {chunks} event(s) but no token", events=chunks)
        if not (finished or done):
            raise _CheckFailed(
                f"the stream stopped after {text_chunks} token event(s) without a finish_reason or [DONE]",
                events=chunks,
            )
        ending = "[DONE]" if done else "a finish_reason"
        return f"streamed {text_chunks} token event(s), ended with {ending}"

    async def metrics(self, metrics_path: str) -> str:
        response = await self.client.get(
            self.url(metrics_path), headers=self.headers, timeout=self.timeout_seconds
        )
        _raise_for_status(response, f"GET {metrics_path}")
        if "# TYPE" not in response.text and "# HELP" not in response.text:
            raise _CheckFailed(
                f"{metrics_path} answered, but not in Prometheus text format", body=_short(response.text)
            )
        families = response.text.count("# TYPE")
        return f"{metrics_path} answers with {families} metric families"


def _parser_for(content: str) -> str:
    """Which parser reads the tool-call format the model wrote (the Qwen families' two formats)."""
    if "<function=" in content:
        return (
            "the model writes XML tool calls (<function=...>): use --tool-call-parser qwen3_coder "
            "(vLLM also needs --enable-auto-tool-choice)"
        )
    return (
        "the model writes JSON inside <tool_call>: use --tool-call-parser hermes on vLLM (with "
        "--enable-auto-tool-choice) or qwen25 on SGLang"
    )


def _raise_for_status(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise _CheckFailed(
            f"{what} answered HTTP {response.status_code}: {_short(response.text)}",
            status=response.status_code,
        )


def _reasoning_text(message: dict[str, Any]) -> str:
    for name in _REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _short(text: str, limit: int = 200) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _run(check_id: str, check: Callable[[], Awaitable[str]]) -> VerificationResult:
    started = time.perf_counter()
    try:
        try:
            message = await check()
        except (httpx.ReadError, httpx.RemoteProtocolError) as error:
            # A keep-alive connection the engine closed (uvicorn does after an error answer) is
            # no verdict on this check: ask once more, on a new connection.
            logger.info("%s: %s on a reused connection; asking again", check_id, type(error).__name__)
            message = await check()
    except _NotApplicable as reason:
        return VerificationResult(check_id, "skipped", str(reason), (time.perf_counter() - started) * 1000)
    except _CheckFailed as failure:
        return VerificationResult(
            check_id, "failed", failure.message, (time.perf_counter() - started) * 1000, failure.details
        )
    except httpx.TimeoutException as error:
        return VerificationResult(
            check_id,
            "failed",
            f"no answer in time ({type(error).__name__})",
            (time.perf_counter() - started) * 1000,
        )
    except httpx.HTTPError as error:
        return VerificationResult(
            check_id, "failed", f"request failed: {error!r}", (time.perf_counter() - started) * 1000
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # A body that is not the OpenAI shape (json.JSONDecodeError is a ValueError).
        return VerificationResult(
            check_id, "failed", f"unexpected answer: {error}", (time.perf_counter() - started) * 1000
        )
    return VerificationResult(check_id, "passed", message, (time.perf_counter() - started) * 1000)


def _skipped(check_id: str, reason: str) -> VerificationResult:
    return VerificationResult(check_id, "skipped", reason, 0.0)


async def verify_instance(
    *,
    base_url: str,
    served_model_name: str,
    expected_model_id: str,
    reasoning_field: str,
    metrics_path: str | None,
    model_supports_tools: bool,
    model_supports_thinking: bool,
    client: httpx.AsyncClient,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    api_key: str | None = None,
    listing_names_the_model: bool = True,
) -> list[VerificationResult]:
    """Run every verification check against one instance, in order; never raises for what it finds.

    ``base_url`` is the engine's root (``http://host:port``, no ``/v1``); ``served_model_name`` is
    what requests send as ``"model"``; ``expected_model_id`` is what ``/v1/models`` must list.
    Each request is bounded by ``timeout_seconds`` and asks at most ``max_tokens`` tokens (128 for
    the reasoning and tool checks). ``listing_names_the_model=False`` is for engines whose
    ``/v1/models`` lists something else than what they serve (transformers serve 5.17 lists the
    Hugging Face cache): a missing id is then reported as skipped, not failed.
    """
    verifier = _Verifier(
        base_url=base_url,
        served_model_name=served_model_name,
        expected_model_id=expected_model_id,
        reasoning_field=reasoning_field,
        client=client,
        timeout_seconds=timeout_seconds,
        max_tokens=max_tokens,
        headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        listing_names_the_model=listing_names_the_model,
    )
    results = [
        await _run("verify.models-listed", verifier.models_listed),
        await _run("verify.chat-answer", lambda: verifier.chat_answer(model_supports_thinking)),
    ]
    if model_supports_thinking:
        results.append(await _run("verify.reasoning-separated", verifier.reasoning_separated))
    else:
        results.append(
            _skipped("verify.reasoning-separated", "the model's chat template has no thinking mode")
        )
    if model_supports_tools:
        results.append(await _run("verify.tool-call", lambda: verifier.tool_call(model_supports_thinking)))
    else:
        results.append(_skipped("verify.tool-call", "the model's chat template does not support tools"))
    results.append(await _run("verify.streaming", verifier.streaming))
    if metrics_path:
        path = metrics_path
        results.append(await _run("verify.metrics", lambda: verifier.metrics(path)))
    else:
        results.append(_skipped("verify.metrics", "this backend version exposes no metrics endpoint"))
    for result in results:
        if result.failed:
            logger.warning("verification %s failed on %s: %s", result.check_id, base_url, result.message)
    return results
