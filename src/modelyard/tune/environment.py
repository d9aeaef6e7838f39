"""The environment a tune gives its candidates' engines: ``--env KEY=VALUE`` for every candidate,
``--env BACKEND:KEY=VALUE`` for the candidates of one backend (its name, e.g. ``sglang`` or
``vllm-double``, or its engine family), checked as a deployment's env is (a name of letters,
digits and ``_``, no spaces around ``=``, no NUL, each name once per scope).

Secret values (``secret_names.is_secret_env_name``: ``HF_TOKEN``, ``*_API_KEY``, ...) are given
to the engine (the server seals them when it stores the deployment) but never written by the
tune: ``tune.json``, the report, the candidate ids and the error messages hold ``MASK``, and the
report's deploy command takes them from the shell (``--env "HF_TOKEN=$HF_TOKEN"``).

    settings = parse_env_options(["PYTHONPATH=/opt/sgl", "sglang:SGLANG_LOG_LEVEL=info"], engines)
    environment_for(settings, EngineChoice("sglang", "sglang", "0.5.17"))
    # (('PYTHONPATH', '/opt/sgl'), ('SGLANG_LOG_LEVEL', 'info'))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelyard.backends.arguments import ENV_NAME_PATTERN
from modelyard.errors import InvalidInput
from modelyard.secret_names import MASK, is_secret_env_name

if TYPE_CHECKING:
    from modelyard.tune.space import EngineChoice

EXAMPLE = "--env VLLM_LOGGING_LEVEL=INFO --env sglang:PYTHONPATH=/opt/sglang"


@dataclass(frozen=True)
class EnvSetting:
    """One ``--env``: ``backend`` None for every candidate, else a backend name or engine family."""

    name: str
    value: str
    backend: str | None = None

    @property
    def secret(self) -> bool:
        return is_secret_env_name(self.name)

    @property
    def shown_value(self) -> str:
        return MASK if self.secret else self.value

    @property
    def option_text(self) -> str:
        """``--env`` as the user gave it, a secret's value masked (for tune.json and messages)."""
        scope = f"{self.backend}:" if self.backend else ""
        return f"{scope}{self.name}={self.shown_value}"

    def applies_to(self, engine: EngineChoice) -> bool:
        return self.backend is None or self.backend in (engine.backend, engine.family)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.shown_value, "backend": self.backend}


def _shown(item: str) -> str:
    """``item`` for an error message: a secret variable's value masked."""
    left, equals, _ = item.partition("=")
    name = left.rpartition(":")[2].strip()
    return f"{left}={MASK}" if equals and is_secret_env_name(name) else item


def parse_env_option(item: str) -> EnvSetting:
    """One ``--env [BACKEND:]KEY=VALUE``; ``InvalidInput`` naming what is wrong and how to write it."""
    left, equals, value = item.partition("=")
    shown = _shown(item)
    if not equals:
        raise InvalidInput(
            f"--env {shown!r} has no '='", hint=f"write it as [BACKEND:]KEY=VALUE, e.g. {EXAMPLE}"
        )
    scope, colon, name = left.rpartition(":")
    backend = scope.strip() if colon else None
    if colon and not backend:
        raise InvalidInput(f"--env {shown!r} names no backend before ':'", hint=f"e.g. {EXAMPLE}")
    if name != name.strip() or (backend is not None and backend != scope) or value != value.lstrip():
        raise InvalidInput(
            f"--env {shown!r} has spaces around its name or '='",
            hint="write it without them: "
            + _shown(f"{backend + ':' if backend else ''}{name.strip()}={value.strip()}"),
        )
    if not ENV_NAME_PATTERN.match(name):
        raise InvalidInput(
            f"--env {shown!r}: {name!r} is not a valid environment variable name",
            hint="use letters, digits and '_', not starting with a digit (e.g. VLLM_LOGGING_LEVEL)",
        )
    if "\0" in value:
        raise InvalidInput(f"--env {_shown(item)!r}: the value of {name} contains a NUL character")
    return EnvSetting(name, value, backend)


def parse_env_options(items: Sequence[str], engines: Sequence[EngineChoice]) -> tuple[EnvSetting, ...]:
    """Every ``--env`` of a tune over ``engines``: a scope must name one of them, a name is given
    once per scope (a backend's own value wins over the one for every candidate)."""
    settings: list[EnvSetting] = []
    seen: set[tuple[str | None, str]] = set()
    scopes = sorted({engine.backend for engine in engines} | {engine.family for engine in engines})
    for item in items:
        setting = parse_env_option(item)
        if setting.backend is not None and setting.backend not in scopes:
            raise InvalidInput(
                f"--env {setting.option_text!r}: {setting.backend!r} is not a backend of this tune",
                hint=f"scope it to one of {', '.join(scopes)} (--backends), or leave the scope out "
                "for every candidate",
            )
        key = (setting.backend, setting.name)
        if key in seen:
            where = f"for {setting.backend}" if setting.backend else "for every candidate"
            raise InvalidInput(
                f"--env sets {setting.name} twice {where}", hint="keep one of the two --env options"
            )
        seen.add(key)
        settings.append(setting)
    return tuple(settings)


def environment_for(settings: Sequence[EnvSetting], engine: EngineChoice) -> tuple[tuple[str, str], ...]:
    """The variables ``engine``'s candidates get, in the order given: the ones for every
    candidate, then the engine's own (which replace a variable of the same name)."""
    chosen: dict[str, str] = {}
    for setting in (s for s in settings if s.backend is None):
        chosen[setting.name] = setting.value
    for setting in (s for s in settings if s.backend is not None and s.applies_to(engine)):
        chosen[setting.name] = setting.value
    return tuple(chosen.items())


def shown_environment(env: Sequence[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """``env`` as the tune writes it anywhere: secret values masked."""
    pairs = env.items() if isinstance(env, Mapping) else env
    return {name: MASK if is_secret_env_name(name) else value for name, value in pairs}


def restore_secrets(stored: Sequence[str], given: Sequence[str]) -> list[str]:
    """The ``--env`` of a resumed tune: what ``tune.json`` kept, each masked secret taken from the
    ``--env`` given now (same scope and name); ``InvalidInput`` naming the ones missing."""
    fresh = {(s.backend, s.name): s for s in (parse_env_option(item) for item in given)}
    restored: list[str] = []
    missing: list[str] = []
    for item in stored:
        setting = parse_env_option(item)
        if setting.secret and setting.value == MASK:
            again = fresh.get((setting.backend, setting.name))
            if again is None:
                missing.append(setting.option_text.removesuffix(f"={MASK}"))
                continue
            item = f"{setting.backend + ':' if setting.backend else ''}{setting.name}={again.value}"
        restored.append(item)
    if missing:
        raise InvalidInput(
            f"the tune's secret --env {', '.join(missing)} is not stored; give it again",
            hint="modelyard tune --resume ID " + " ".join(f"--env {name}=..." for name in missing),
        )
    return restored
