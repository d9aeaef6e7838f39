"""Counting prompt tokens the way the engine will: a local tokenizer directory, or the engine's
``/tokenize`` endpoint (vLLM; SGLang where it has one).

Both count a completions prompt with the tokenizer's special tokens added (as the engines do) and a
chat prompt through the chat template with the generation prompt added, so that a count here is
the ``usage.prompt_tokens`` the engine will report.

Usage::

    counter = LocalTokenizer.from_directory(Path("/models/qwen3"))
    counter.count_text("Hello")                                    # completions endpoint
    counter.count_chat([{"role": "user", "content": "Hello"}])     # chat endpoint
    counter = RemoteTokenizer("http://127.0.0.1:8000", model="qwen3")  # vLLM's /tokenize
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Protocol

import httpx

from modelyard.errors import InvalidInput, NotFound

logger = logging.getLogger(__name__)

_WORD = re.compile(r"^ [a-z]{2,12}$")

# Common English words: the filler vocabulary when the tokenizer's own cannot be listed (remote).
FALLBACK_WORDS: tuple[str, ...] = tuple(
    [
        "time",
        "year",
        "people",
        "way",
        "day",
        "man",
        "thing",
        "woman",
        "life",
        "child",
        "world",
        "school",
        "state",
        "family",
        "student",
        "group",
        "country",
        "problem",
        "hand",
        "part",
        "place",
        "case",
        "week",
        "company",
        "system",
        "program",
        "question",
        "work",
        "government",
        "number",
        "night",
        "point",
        "home",
        "water",
        "room",
        "mother",
        "area",
        "money",
        "story",
        "fact",
        "month",
        "lot",
        "right",
        "study",
        "book",
        "eye",
        "job",
        "word",
        "business",
        "issue",
        "side",
        "kind",
        "head",
        "house",
        "service",
        "friend",
        "father",
        "power",
        "hour",
        "game",
        "line",
        "end",
        "member",
        "law",
        "car",
        "city",
        "community",
        "name",
        "president",
        "team",
        "minute",
        "idea",
        "kid",
        "body",
        "information",
        "back",
        "parent",
        "face",
        "others",
        "level",
        "office",
        "door",
        "health",
        "person",
        "art",
        "war",
        "history",
        "party",
        "result",
        "change",
        "morning",
        "reason",
        "research",
        "girl",
        "guy",
        "moment",
        "air",
        "teacher",
        "force",
        "education",
        "river",
        "stone",
        "garden",
        "window",
        "market",
        "table",
        "paper",
        "light",
        "music",
        "river",
        "field",
        "letter",
        "animal",
        "paint",
        "bridge",
        "forest",
    ]
)


class TokenCounter(Protocol):
    """What the datasets need from a tokenizer."""

    description: str

    def count_text(self, text: str) -> int:
        """Tokens of a completions prompt, special tokens (BOS) included."""

    def count_chat(self, messages: list[dict[str, str]]) -> int:
        """Tokens of a chat prompt after the chat template, generation prompt included."""

    def count_plain(self, text: str) -> int:
        """Tokens of a piece of text alone, no special tokens (for outputs and prompt pieces)."""

    def word_pool(self) -> list[str]:
        """Words (each with a leading space) that are one token each, to build prompts from."""


class LocalTokenizer:
    """A tokenizer directory (``tokenizer.json`` and ``tokenizer_config.json``), loaded with
    transformers when it is installed (the engines' own tokenizer code), else with ``tokenizers``
    and the chat template rendered with jinja2."""

    def __init__(
        self,
        directory: Path,
        backend: Any,
        raw: Any,
        chat_template: str | None,
        config: dict[str, Any],
        *,
        fallback_reason: str | None = None,
    ):
        self.directory = directory
        self._backend = backend  # a transformers tokenizer, or None
        self._raw = raw  # a tokenizers.Tokenizer
        self._chat_template = chat_template
        self._config = config
        self._words: list[str] | None = None
        self._compiled: Any = None  # the chat template, compiled once (the fallback path)
        # How many times the chat template was compiled (once at most; a benchmark checks it).
        self.template_compilations = 0
        if backend is not None:
            self.description = f"local tokenizer {directory} (transformers)"
        else:
            why = f": {fallback_reason}" if fallback_reason else ""
            self.description = (
                f"local tokenizer {directory} (fallback: tokenizers + the chat template in jinja2, compiled "
                f"once{why})"
            )

    @classmethod
    def from_directory(cls, directory: Path) -> LocalTokenizer:
        """Load the tokenizer files of a model directory; raises ``NotFound`` when there are none."""
        tokenizer_file = directory / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise NotFound(
                f"no tokenizer.json in {directory}",
                hint="pass --tokenizer with the served model's directory, or omit it to use /tokenize",
            )
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(str(tokenizer_file))
        config_file = directory / "tokenizer_config.json"
        config: dict[str, Any] = json.loads(config_file.read_text()) if config_file.is_file() else {}
        chat_template = config.get("chat_template")
        template_file = directory / "chat_template.jinja"
        if template_file.is_file():
            chat_template = template_file.read_text()
        backend: Any = None
        fallback_reason: str | None = None
        try:
            from transformers import AutoTokenizer

            backend = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except ImportError as error:
            # Not installed, or installed beside a huggingface_hub it refuses (the GPU field kit).
            fallback_reason = f"transformers cannot be imported ({_first_line(error)})"
        except (OSError, ValueError) as error:
            fallback_reason = f"transformers could not load the directory ({_first_line(error)})"
        template = chat_template if isinstance(chat_template, str) else None
        counter = cls(directory, backend, raw, template, config, fallback_reason=fallback_reason)
        if fallback_reason is not None:
            _say_once(f"counting prompt tokens with the {counter.description}")
        return counter

    def count_plain(self, text: str) -> int:
        return len(self._raw.encode(text, add_special_tokens=False).ids)

    def count_text(self, text: str) -> int:
        if self._backend is not None:
            return len(self._backend.encode(text, add_special_tokens=True))
        return len(self._raw.encode(text, add_special_tokens=True).ids)

    def count_chat(self, messages: list[dict[str, str]]) -> int:
        if self._backend is not None and getattr(self._backend, "chat_template", None):
            rendered = self._backend.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return len(self._backend.encode(rendered, add_special_tokens=False))
        if not self._chat_template:
            raise InvalidInput(
                f"the tokenizer in {self.directory} has no chat template, so chat prompts cannot be counted",
                hint="use --endpoint completions, or a tokenizer directory with a chat template",
            )
        return self.count_plain(self._render_chat(messages))

    def _template(self) -> Any:
        """The chat template, compiled at its first use and kept (compiling costs far more than
        rendering: once per prompt, it was most of a benchmark's start)."""
        if self._compiled is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise InvalidInput(f"chat template refused the messages: {message}")

            environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            environment.globals["raise_exception"] = raise_exception
            self._compiled = environment.from_string(self._chat_template or "")
            self.template_compilations += 1
        return self._compiled

    def _render_chat(self, messages: list[dict[str, str]]) -> str:
        return str(
            self._template().render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=_token_text(self._config.get("bos_token")),
                eos_token=_token_text(self._config.get("eos_token")),
            )
        )

    def word_pool(self) -> list[str]:
        if self._words is None:
            self._words = _single_token_words(self._raw)
        return self._words


_said: set[str] = set()


def _say_once(message: str) -> None:
    """A warning (on stderr through the CLI's logging) once per process, however many loads."""
    if message not in _said:
        _said.add(message)
        logger.warning("%s", message)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _token_text(token: Any) -> str:
    if isinstance(token, dict):
        return str(token.get("content", ""))
    return "" if token is None else str(token)


def _single_token_words(raw: Any, limit: int = 4000) -> list[str]:
    """Vocabulary entries that decode to `` word`` and re-encode to themselves alone."""
    words: list[str] = []
    vocabulary: dict[str, int] = raw.get_vocab()
    for token_id in sorted(vocabulary.values()):
        text = raw.decode([token_id])
        if not _WORD.match(text):
            continue
        if raw.encode(text, add_special_tokens=False).ids != [token_id]:
            continue
        words.append(text)
        if len(words) >= limit:
            break
    if len(words) < 20:
        return [f" {word}" for word in FALLBACK_WORDS]
    return words


class RemoteTokenizer:
    """The engine's own tokenizer through ``POST /tokenize`` (vLLM's contract:
    ``{"model", "prompt" | "messages"}`` -> ``{"count", "tokens", "max_model_len"}``)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        root = base_url.rstrip("/")
        self._root = root[: -len("/v1")] if root.endswith("/v1") else root
        self._model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)
        self.description = f"{self._root}/tokenize"

    def close(self) -> None:
        self._client.close()

    def available(self) -> bool:
        """Whether the engine has a working ``/tokenize`` (vLLM yes; transformers serve no)."""
        try:
            self.count_plain("hello")
        except (NotFound, InvalidInput):
            return False
        return True

    def _count(self, body: dict[str, Any]) -> int:
        url = f"{self._root}/tokenize"
        try:
            response = self._client.post(url, json={"model": self._model, **body})
        except httpx.HTTPError as error:
            raise InvalidInput(f"cannot reach {url}: {error}", hint="check --base-url") from error
        if response.status_code == 404:
            raise NotFound(
                f"{url} answered 404: this engine has no /tokenize",
                hint="pass --tokenizer with the model's tokenizer directory",
            )
        if response.status_code != 200:
            raise InvalidInput(f"{url} answered {response.status_code}: {response.text[:200]}")
        payload = response.json()
        count = payload.get("count")
        if isinstance(count, list):  # some forks answer a list of counts
            count = sum(count)
        if not isinstance(count, int):
            tokens = payload.get("tokens")
            if not isinstance(tokens, list):
                raise InvalidInput(f"{url} answered without a count: {str(payload)[:200]}")
            count = len(tokens)
        return count

    def count_text(self, text: str) -> int:
        return self._count({"prompt": text, "add_special_tokens": True})

    def count_plain(self, text: str) -> int:
        return self._count({"prompt": text, "add_special_tokens": False})

    def count_chat(self, messages: list[dict[str, str]]) -> int:
        return self._count({"messages": messages, "add_generation_prompt": True})

    def word_pool(self) -> list[str]:
        return [f" {word}" for word in FALLBACK_WORDS]
