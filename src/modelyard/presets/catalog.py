"""The presets catalog (``catalog.yaml`` in this package), read and checked once.

Usage::

    preset = get_preset("qwen3.6-27b-vllm")
    preset.backend, preset.version, preset.gpus, preset.parameters
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modelyard.errors import InvalidYaml, NotFound

CATALOG = Path(__file__).with_name("catalog.yaml")
ENGINES = ("vllm", "sglang", "transformers")


@dataclass(frozen=True)
class Preset:
    """A tested deployment recipe for one model on one engine version."""

    name: str
    title: str
    # The hub repository the recipe was written for.
    model: str
    # ``architectures`` of the models it fits (config.json); a deploy with another model is refused.
    architectures: tuple[str, ...]
    backend: str
    version: str
    gpus: int
    context_tokens: int
    parameters: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    # GPU types (``modelyard estimate`` names) on which ``gpus`` of them fit, per the estimator.
    fits: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "model": self.model,
            "architectures": list(self.architectures),
            "backend": self.backend,
            "version": self.version,
            "gpus": self.gpus,
            "context_tokens": self.context_tokens,
            "parameters": list(self.parameters),
            "env": dict(self.env),
            "fits": list(self.fits),
            "fits_as": [f"{self.gpus}x{gpu}" for gpu in self.fits],
        }


def _strings(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise InvalidYaml(f"{where}: {key} must be a list of strings")
    return tuple(value)


def _preset(entry: object, where: str) -> Preset:
    if not isinstance(entry, dict):
        raise InvalidYaml(f"{where} is not a mapping")
    required = ("name", "title", "model", "backend", "version", "gpus", "context_tokens")
    missing = [key for key in required if key not in entry]
    if missing:
        raise InvalidYaml(f"{where} has no {', '.join(missing)}")
    unknown = set(entry) - {*required, "architectures", "parameters", "env", "fits"}
    if unknown:
        raise InvalidYaml(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if entry["backend"] not in ENGINES:
        raise InvalidYaml(f"{where}: backend {entry['backend']!r} is not one of {', '.join(ENGINES)}")
    for key in ("gpus", "context_tokens"):
        if not isinstance(entry[key], int) or entry[key] < 0:
            raise InvalidYaml(f"{where}: {key} must be a whole number >= 0")
    env = entry.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise InvalidYaml(f"{where}: env must map names to strings")
    return Preset(
        name=str(entry["name"]),
        title=str(entry["title"]),
        model=str(entry["model"]),
        architectures=_strings(entry, "architectures", where),
        backend=str(entry["backend"]),
        version=str(entry["version"]),
        gpus=int(entry["gpus"]),
        context_tokens=int(entry["context_tokens"]),
        parameters=_strings(entry, "parameters", where),
        env={str(key): str(value) for key, value in env.items()},
        fits=_strings(entry, "fits", where),
    )


@functools.cache
def load_presets(path: Path = CATALOG) -> tuple[Preset, ...]:
    document = yaml.safe_load(path.read_text())
    entries = document.get("presets") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise InvalidYaml(f"{path}: no 'presets' list")
    presets = tuple(
        _preset(entry, f"{path.name}: preset {number}") for number, entry in enumerate(entries, 1)
    )
    names = [preset.name for preset in presets]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidYaml(f"{path.name}: preset name(s) used twice: {', '.join(duplicates)}")
    return presets


def get_preset(name: str) -> Preset:
    for preset in load_presets():
        if preset.name == name:
            return preset
    raise NotFound(
        f"no preset named {name!r}",
        hint="list them with `modelyard presets list`: "
        + ", ".join(preset.name for preset in load_presets()),
    )


def presets_for(architecture: str | None) -> list[Preset]:
    """The presets written for models of ``architecture`` (config.json's first architecture)."""
    return [preset for preset in load_presets() if architecture in preset.architectures]
