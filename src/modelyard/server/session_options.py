"""How long a console session lasts: idle and absolute lifetimes, read once from the environment.

- ``idle_seconds`` (``MODELYARD_SESSION_IDLE_S``, default 12 h): ended after this long without a request;
- ``lifetime_seconds`` (``MODELYARD_SESSION_LIFETIME_S``, default 7 days): ended this long after
  sign-in, however busy.

Usage::

    options = SessionOptions.from_environment(os.environ)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from modelyard.errors import InvalidInput

ENV_IDLE = "MODELYARD_SESSION_IDLE_S"
ENV_LIFETIME = "MODELYARD_SESSION_LIFETIME_S"
# Bounds: at least a minute; at most a year.
MINIMUM_SECONDS = 60
MAXIMUM_SECONDS = 366 * 24 * 3600


@dataclass(frozen=True)
class SessionOptions:
    idle_seconds: float = 12 * 3600.0
    lifetime_seconds: float = 7 * 24 * 3600.0
    # A session's "last seen" is written at most this often (one write per minute, not per
    # request), so the idle end is exact to this much.
    touch_interval_seconds: float = 60.0
    # Sessions one user may hold at once; opening one more ends that user's least recently used.
    maximum_per_user: int = 64

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> SessionOptions:
        idle = _seconds(environ, ENV_IDLE, cls.idle_seconds)
        lifetime = _seconds(environ, ENV_LIFETIME, cls.lifetime_seconds)
        if idle > lifetime:
            raise InvalidInput(
                f"{ENV_IDLE}={idle:.0f} is longer than {ENV_LIFETIME}={lifetime:.0f}",
                hint="a session cannot stay idle longer than it may live: lower the idle time or "
                "raise the lifetime",
            )
        return cls(idle_seconds=idle, lifetime_seconds=lifetime)


def _seconds(environ: Mapping[str, str], variable: str, default: float) -> float:
    text = environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if not MINIMUM_SECONDS <= value <= MAXIMUM_SECONDS:
        raise InvalidInput(
            f"{variable}={text!r} is not a whole number of seconds "
            f"from {MINIMUM_SECONDS} to {MAXIMUM_SECONDS}",
            hint=f"set {variable} to seconds, e.g. {int(default)}, or unset it for the default",
        )
    return float(value)
