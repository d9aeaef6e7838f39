"""The verification suite run on every new instance before it takes traffic.

An engine can answer ``/health`` and still be useless: the model is served under another name,
answers are empty, reasoning is mixed into the content because no reasoning parser is active,
tool calls come back as text because no tool-call parser is active, streaming breaks, metrics are
off. Each check sends one small request (a few tokens, bounded by a time limit) and says what it
saw:

- ``verify.speed``: an 8-token request, timed; each later check may then wait ``factor`` times
  what its tokens take at that speed, between a floor and a ceiling (``VerificationBudget``), so
  that a slow CPU engine is judged by its own speed, not by a fixed 30 s;
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
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx

logger = logging.getLogger(__name__)

VerificationStatus = Literal["passed", "failed", "skipped"]

DEFAULT_MAX_TOKENS = 32
# The speed check's request: a few tokens, timed, before the checks that are limited by it.
SPEED_PROBE_TOKENS = 8
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


@dataclass(frozen=True)
class VerificationBudget:
    """How long each check's request may wait for its answer.

    Measured (``fixed_seconds`` None): ``verify.speed`` times a short request first; a request
    asking for N tokens may then wait ``factor`` x N x the seconds a token took, at least
    ``floor_seconds`` and at most ``ceiling_seconds`` (requests with no tokens: the floor). With
    ``fixed_seconds`` every request gets that limit and nothing is measured::

        budget = VerificationBudget(factor=4.0, floor_seconds=30.0, ceiling_seconds=600.0)
        budget.measured(0.9).timeout_seconds(32)  # 4 x 32 x 0.9 s = 115.2 s
    """

    factor: float = 4.0
    floor_seconds: float = 30.0
    ceiling_seconds: float = 600.0
    fixed_seconds: float | None = None
    # Set by the speed check (``measured``); None before it, or when it failed: the floor then.
    seconds_per_token: float | None = None

    def measured(self, seconds_per_token: float) -> VerificationBudget:
        return replace(self, seconds_per_token=seconds_per_token)

    def timeout_seconds(self, max_tokens: int) -> float:
        if self.fixed_seconds is not None:
            return self.fixed_seconds
        if self.seconds_per_token is None:
            return self.floor_seconds
        wanted = self.factor * max_tokens * self.seconds_per_token
        return min(self.ceiling_seconds, max(self.floor_seconds, wanted))

    def describe(self) -> str:
        """How the limits were set, for a message: "4 x the 0.90 s a token took, 30-600 s"."""
        if self.fixed_seconds is not None:
            return f"a fixed limit of {self.fixed_seconds:g} s per request"
        if self.seconds_per_token is None:
            return f"the floor, {self.floor_seconds:g} s per request, as verify.speed measured no speed"
        return (
            f"{self.factor:g} x the {self.seconds_per_token:.2f} s a token took in verify.speed, "
            f"at least {self.floor_seconds:g} s, at most {self.ceiling_seconds:g} s"
        )


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
    budget: VerificationBudget
    max_tokens: int
    headers: dict[str, str]
    listing_names_the_model: bool = True

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + "/" + path.lstrip("/")

    def timeout_seconds(self, max_tokens: int = 0) -> float:
        return self.budget.timeout_seconds(max_tokens)

    async def post_chat(self, body: dict[str, Any], timeout_seconds: float | None = None) -> dict[str, Any]:
        body = {"model": self.served_model_name, **body}
        timeout = timeout_seconds or self.timeout_seconds(int(body.get("max_tokens") or 0))
        response = await self.client.post(
            self.url("/v1/chat/completions"), json=body, headers=self.headers, timeout=timeout
        )
        if response.status_code in (400, 422) and "chat_template_kwargs" in body:
            # Engines that refuse unknown fields (transformers serve): ask again without them.
            body = {key: value for key, value in body.items() if key != "chat_template_kwargs"}
            response = await self.client.post(
                self.url("/v1/chat/completions"),
                json=body,
                headers=self.headers,
                timeout=timeout,
            )
        _raise_for_status(response, "POST /v1/chat/completions")
        data = response.json()
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _CheckFailed("the chat answer has no choices", body=_short(response.text))
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise _CheckFailed("the chat answer has no message", body=_short(response.text))
        usage = data.get("usage")
        return {
            "message": message,
            "finish_reason": choices[0].get("finish_reason"),
            "completion_tokens": usage.get("completion_tokens") if isinstance(usage, dict) else None,
        }

    # -- the checks ----------------------------------------------------------------------------

    async def speed(self, thinking_off: bool) -> str:
        """Time a short request; the later checks' limits follow from it (``self.budget``)."""
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
            "max_tokens": SPEED_PROBE_TOKENS,
        }
        if thinking_off:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        # Nothing is measured yet: this request may take up to the ceiling.
        started = time.perf_counter()
        answer = await self.post_chat(body, timeout_seconds=self.budget.ceiling_seconds)
        elapsed_seconds = time.perf_counter() - started
        counted = answer["completion_tokens"]
        tokens = counted if isinstance(counted, int) and counted > 0 else SPEED_PROBE_TOKENS
        # Prefill is counted in: a generous per-token figure, never a tight one.
        self.budget = self.budget.measured(elapsed_seconds / tokens)
        return (
            f"{tokens} token(s) in {elapsed_seconds:.2f} s; each request may wait {self.budget.describe()} "
            f"(the {self.max_tokens}-token chat: {self.timeout_seconds(self.max_tokens):.0f} s)"
        )

    async def models_listed(self) -> str:
        response = await self.client.get(
            self.url("/v1/models"), headers=self.headers, timeout=self.timeout_seconds()
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
        stream_tokens = min(self.max_tokens, 16)
        body = {
            "model": self.served_model_name,
            "messages": [{"role": "user", "content": "Count from one to five."}],
            "max_tokens": stream_tokens,
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
            timeout=self.timeout_seconds(stream_tokens),
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
            self.url(metrics_path), headers=self.headers, timeout=self.timeout_seconds()
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


# Answers that say "not now" rather than "wrong": a later verification may pass.
_RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


async def _run(
    check_id: str, check: Callable[[], Awaitable[str]], verifier: _Verifier, max_tokens: int = 0
) -> VerificationResult:
    """Run one check; ``max_tokens`` is what its request asks for (its time limit follows)."""
    started = time.perf_counter()

    def elapsed_ms() -> float:
        return (time.perf_counter() - started) * 1000

    try:
        try:
            message = await check()
        except (httpx.ReadError, httpx.RemoteProtocolError) as error:
            # A keep-alive connection the engine closed (uvicorn does after an error answer) is
            # no verdict on this check: ask once more, on a new connection.
            logger.info("%s: %s on a reused connection; asking again", check_id, type(error).__name__)
            message = await check()
    except _NotApplicable as reason:
        return VerificationResult(check_id, "skipped", str(reason), elapsed_ms())
    except _CheckFailed as failure:
        details = dict(failure.details)
        if details.get("status") in _RETRYABLE_STATUSES:
            details["retryable"] = True
        return VerificationResult(check_id, "failed", failure.message, elapsed_ms(), details)
    except httpx.TimeoutException as error:
        if check_id == "verify.speed":
            limit_seconds = verifier.budget.ceiling_seconds
            limit = "the ceiling, as nothing is measured yet"
        else:
            limit_seconds = verifier.timeout_seconds(max_tokens)
            limit = verifier.budget.describe()
        return VerificationResult(
            check_id,
            "failed",
            f"no answer in time: none within {limit_seconds:.1f} s ({type(error).__name__}; "
            f"the limit: {limit})",
            elapsed_ms(),
            {"retryable": True, "limit_seconds": round(limit_seconds, 1)},
        )
    except httpx.HTTPError as error:
        return VerificationResult(
            check_id, "failed", f"request failed: {error!r}", elapsed_ms(), {"retryable": True}
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # A body that is not the OpenAI shape (json.JSONDecodeError is a ValueError).
        return VerificationResult(check_id, "failed", f"unexpected answer: {error}", elapsed_ms())
    return VerificationResult(check_id, "passed", message, elapsed_ms())


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
    budget: VerificationBudget | None = None,
    timeout_seconds: float | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    api_key: str | None = None,
    listing_names_the_model: bool = True,
) -> list[VerificationResult]:
    """Run every verification check against one instance, in order; never raises for what it finds.

    ``base_url`` is the engine's root (``http://host:port``, no ``/v1``); ``served_model_name`` is
    what requests send as ``"model"``; ``expected_model_id`` is what ``/v1/models`` must list.
    Each request asks at most ``max_tokens`` tokens (128 for the reasoning and tool checks) and
    may wait as ``budget`` says (by default: measured by ``verify.speed``, see
    ``VerificationBudget``); ``timeout_seconds`` instead gives every request that fixed limit.
    A failed result that a later run may pass (no answer in time, a refused connection, HTTP
    503) has ``details["retryable"]``. ``listing_names_the_model=False`` is for engines whose
    ``/v1/models`` lists something else than what they serve (transformers serve 5.17 lists the
    Hugging Face cache): a missing id is then reported as skipped, not failed.
    """
    if timeout_seconds is not None:
        budget = VerificationBudget(fixed_seconds=timeout_seconds)
    verifier = _Verifier(
        base_url=base_url,
        served_model_name=served_model_name,
        expected_model_id=expected_model_id,
        reasoning_field=reasoning_field,
        client=client,
        budget=budget or VerificationBudget(),
        max_tokens=max_tokens,
        headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        listing_names_the_model=listing_names_the_model,
    )
    if verifier.budget.fixed_seconds is None:
        speed = await _run("verify.speed", lambda: verifier.speed(model_supports_thinking), verifier)
    else:
        speed = _skipped("verify.speed", f"not measured: {verifier.budget.describe()}")
    results = [
        speed,
        await _run("verify.models-listed", verifier.models_listed, verifier),
        await _run(
            "verify.chat-answer", lambda: verifier.chat_answer(model_supports_thinking), verifier, max_tokens
        ),
    ]
    if model_supports_thinking:
        results.append(
            await _run(
                "verify.reasoning-separated", verifier.reasoning_separated, verifier, REASONING_MAX_TOKENS
            )
        )
    else:
        results.append(
            _skipped("verify.reasoning-separated", "the model's chat template has no thinking mode")
        )
    if model_supports_tools:
        results.append(
            await _run(
                "verify.tool-call",
                lambda: verifier.tool_call(model_supports_thinking),
                verifier,
                REASONING_MAX_TOKENS,
            )
        )
    else:
        results.append(_skipped("verify.tool-call", "the model's chat template does not support tools"))
    results.append(await _run("verify.streaming", verifier.streaming, verifier, min(max_tokens, 16)))
    if metrics_path:
        path = metrics_path
        results.append(await _run("verify.metrics", lambda: verifier.metrics(path), verifier))
    else:
        results.append(_skipped("verify.metrics", "this backend version exposes no metrics endpoint"))
    for result in results:
        if result.failed:
            logger.warning("verification %s failed on %s: %s", result.check_id, base_url, result.message)
    return results
