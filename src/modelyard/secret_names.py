"""Which environment variables and engine flags carry secrets, and how they are shown.

By name: an environment variable is secret when one of its ``_``-separated words is ``TOKEN``,
``KEY``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``APIKEY`` or ``CREDENTIALS``, or its name ends in
``TOKEN``, ``KEY``, ``SECRET`` or ``PASSWORD`` or contains ``SECRET`` or ``PASSWORD``
(``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``); whole words, so
``TOKENIZERS_PARALLELISM`` is not. An engine flag is secret by the same words in its name
(``--api-key``, ``--hf-token``, ``--ssl-keyfile-password``; not ``--tokenizer`` or
``--max-num-batched-tokens``); its value is the next argument, or what follows ``=``. A user
may mark more variables secret by name (``secret_env`` of a deployment).

Secrets are shown as ``MASK`` wherever the server shows them: the REST API, the CLI, the engine
log's first line, the stored command of an instance, the server log.

Usage::

    is_secret_env_name("HF_TOKEN")                       # True
    mask_arguments(["--api-key", "sk-1", "--port", "8000"])  # ['--api-key', '********', '--port', '8000']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MASK = "********"
_SECRET_WORDS = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIALS"})
_SECRET_ENDINGS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
_SECRET_ANYWHERE = ("SECRET", "PASSWORD")
_WORD_SEPARATORS = re.compile(r"[-_.]+")


def _is_secret_words(name: str) -> bool:
    upper = name.upper()
    words = [word for word in _WORD_SEPARATORS.split(upper) if word]
    if any(word in _SECRET_WORDS for word in words):
        return True
    return upper.endswith(_SECRET_ENDINGS) or any(part in upper for part in _SECRET_ANYWHERE)


def is_secret_env_name(name: str) -> bool:
    return _is_secret_words(name)


def is_secret_flag(argument: str) -> bool:
    """Whether ``argument`` is a flag (``--api-key`` or ``--api-key=...``) whose value is secret."""
    if not argument.startswith("-"):
        return False
    name = argument.lstrip("-").split("=", 1)[0]
    return bool(name) and _is_secret_words(name)


def mask_arguments(arguments: Sequence[str]) -> list[str]:
    """``arguments`` with the values of secret flags replaced by ``MASK``."""
    masked: list[str] = []
    mask_next = False
    for argument in arguments:
        if mask_next and not argument.startswith("-"):
            masked.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if is_secret_flag(argument):
            if "=" in argument:
                masked.append(argument.split("=", 1)[0] + "=" + MASK)
                continue
            mask_next = True
        masked.append(argument)
    return masked


def secret_argument_indexes(arguments: Sequence[str]) -> list[int]:
    """The positions of secret values in ``arguments`` (a ``--flag=value`` counts as its own)."""
    return [
        index
        for index, (original, masked) in enumerate(zip(arguments, mask_arguments(arguments), strict=True))
        if original != masked
    ]
