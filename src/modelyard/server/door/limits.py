"""The request limits, each defined once: its default, its environment variable, what it bounds.

``modelyard serve`` reads the environment once (``RequestLimits.from_environment``); a value
that is not a positive integer stops the start with the variable's name. Errors that a limit
causes name the limit and its variable, so the user knows which knob to turn.

Usage::

    limits = RequestLimits.from_environment(os.environ)
    rule = limits.body_rule("/v1/chat/completions")   # BodyRule(limit_bytes=33554432, ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from modelyard.errors import InvalidInput

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class RequestLimits:
    """How much one request may send. Field metadata: the environment variable of each."""

    # The request line and every header together (uvicorn's parser holds them in memory).
    max_header_bytes: int = 64 * KIB
    max_header_count: int = 100
    # Bodies, per route group: the gateway's OpenAI requests (long prompts, images as base64),
    # the REST API's JSON, the backend YAML (import and check), and everything else (the console's forms).
    max_gateway_body_bytes: int = 32 * MIB
    max_api_body_bytes: int = 1 * MIB
    max_import_body_bytes: int = 1 * MIB
    max_other_body_bytes: int = 64 * KIB
    # How deep JSON may nest (objects and arrays): the REST API's bodies and the gateway's.
    max_json_depth: int = 64
    # How long a client may take to send a request's head (request line and headers), counted
    # from the connection's opening or, on a kept-alive connection, from the end of the previous
    # request (nginx's client_header_timeout is 60 s, Node's headersTimeout 60 s; uvicorn has
    # none: its timeout_keep_alive stops counting at the first byte).
    header_timeout_s: int = 20
    # How many connections of one process may be reading their head at once; a connection
    # opened past this must send its head within CROWDED_HEADER_TIMEOUT_S.
    max_slow_connections: int = 128

    @staticmethod
    def environment_variable(field_name: str) -> str:
        """``max_api_body_bytes`` -> ``MODELYARD_MAX_API_BODY_BYTES``."""
        return "MODELYARD_" + field_name.upper()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> RequestLimits:
        """The defaults, overridden by ``MODELYARD_MAX_...`` variables that are set."""
        values: dict[str, int] = {}
        for item in fields(cls):
            variable = cls.environment_variable(item.name)
            text = environ.get(variable)
            if text is None or not text.strip():
                continue
            try:
                value = int(text.strip().replace("_", ""))
            except ValueError:
                value = 0
            if value <= 0:
                raise InvalidInput(
                    f"{variable}={text!r} is not a positive whole number",
                    hint=f"set it to a number of {_unit_of(item.name)}"
                    f", or unset it for the default ({getattr(cls, item.name)})",
                )
            values[item.name] = value
        return cls(**values)

    def body_rule(self, path: str) -> BodyRule:
        """The body limit of a request path, and whether the door checks its JSON nesting."""
        if path.startswith("/v1/"):
            # The gateway checks nesting itself, after the key: an unknown client's body is not read.
            return BodyRule(self.max_gateway_body_bytes, "max_gateway_body_bytes", check_json=False)
        if path in ("/api/v1/backends/import", "/api/v1/backends/check"):
            return BodyRule(self.max_import_body_bytes, "max_import_body_bytes", check_json=False)
        if path.startswith("/api/"):
            return BodyRule(self.max_api_body_bytes, "max_api_body_bytes", check_json=True)
        return BodyRule(self.max_other_body_bytes, "max_other_body_bytes", check_json=False)


# A connection opened while max_slow_connections others are reading their head has this long.
CROWDED_HEADER_TIMEOUT_S = 1.0


def _unit_of(field_name: str) -> str:
    for ending, unit in (("_bytes", "bytes"), ("_count", "headers"), ("_depth", "levels"), ("_s", "seconds")):
        if field_name.endswith(ending):
            return unit
    return "connections"


@dataclass(frozen=True, slots=True)
class BodyRule:
    limit_bytes: int
    # The RequestLimits field that sets it (named in the 413, with its environment variable).
    setting: str
    check_json: bool

    @property
    def environment_variable(self) -> str:
        return RequestLimits.environment_variable(self.setting)


def describe_bytes(count: int) -> str:
    """``33554432`` -> ``32 MiB``; ``1500`` -> ``1500 bytes``."""
    for unit, size in (("MiB", MIB), ("KiB", KIB)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"
