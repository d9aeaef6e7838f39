"""The flags, parsers and environment variables each engine version accepts, as committed data.

The tables in ``backends/flags/<engine>-<version>.json`` are written by
``scripts/extract_engine_flags.py`` from the engines' real wheels (read with ``ast``, never
imported). Doctor's parameter checks read them through this module.

Usage::

    table = load_flag_table("vllm", "0.25.0")
    if table is not None:
        spec = table.lookup("--gpu_memory_utilization")   # vLLM accepts underscores too
        table.exact                                       # False when a nearby version stood in
        table.tool_call_parsers                           # ("deepseek_v3", ..., "qwen3_coder", ...)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

logger = logging.getLogger(__name__)

FlagType = Literal["bool", "int", "float", "str", "json"]
TakesValue = Literal["none", "one", "optional", "many"]
TABLE_PACKAGE = "modelyard.backends.flags"


@dataclass(frozen=True)
class FlagSpec:
    """One flag of one engine version. ``name`` is the spelling the engine documents."""

    name: str
    type: FlagType = "str"
    takes_value: TakesValue = "one"
    aliases: tuple[str, ...] = ()
    choices: tuple[Any, ...] | None = None
    default: Any = None
    # Spellings that turn a boolean flag off (``--no-enable-prefix-caching``).
    negations: tuple[str, ...] = ()
    deprecated: bool = False
    renamed_to: str | None = None
    help: str = ""

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases, *self.negations)


@dataclass(frozen=True)
class FlagTable:
    """What one engine version accepts on its command line and in its environment.

    ``version`` is the version the table was extracted from; ``requested_version`` the one asked
    for. They differ (``exact`` is False) when no table exists for the requested version and the
    nearest one stood in.
    """

    engine: str
    version: str
    requested_version: str
    flags: dict[str, FlagSpec]
    reasoning_parsers: tuple[str, ...] = ()
    tool_call_parsers: tuple[str, ...] = ()
    env_vars: frozenset[str] = frozenset()
    # Variables the version only reads to warn that they are gone or renamed -> its note.
    deprecated_env_vars: dict[str, str] = field(default_factory=dict)
    _by_spelling: dict[str, FlagSpec] = field(default_factory=dict, repr=False)

    @property
    def exact(self) -> bool:
        return self.version == self.requested_version

    @property
    def accepts_underscores(self) -> bool:
        """vLLM's parser turns ``--foo_bar`` into ``--foo-bar``; SGLang's does not."""
        return self.engine == "vllm"

    def spellings(self) -> list[str]:
        return sorted(self._by_spelling)

    def lookup(self, option: str) -> FlagSpec | None:
        """The flag ``option`` (``--x``, ``--x=1`` cut at ``=`` by the caller) names, else None.

        Follows aliases and ``--no-`` forms, and vLLM's own spellings: underscores
        (``--max_model_len``), dotted JSON keys (``--compilation-config.mode`` belongs to
        ``--compilation-config``) and ``-O`` for ``--optimization-level``.
        """
        found = self._by_spelling.get(option)
        if found is not None:
            return found
        if self.accepts_underscores and option == "-O":  # vLLM's shorthand: -O3, -O 3
            return self._by_spelling.get("--optimization-level")
        if self.accepts_underscores and option.startswith("-"):
            head, dot, _ = option.partition(".")
            normalized = head.replace("_", "-") if head.startswith("--") else head
            found = self._by_spelling.get(normalized)
            if found is not None and (not dot or found.type == "json"):
                return found
        return None


def _spec_from_json(name: str, data: dict[str, Any]) -> FlagSpec:
    choices = data.get("choices")
    return FlagSpec(
        name=name,
        type=data.get("type", "str"),
        takes_value=data.get("takes_value", "one"),
        aliases=tuple(data.get("aliases", ())),
        choices=tuple(choices) if choices else None,
        default=data.get("default"),
        negations=tuple(data.get("negations", ())),
        deprecated=bool(data.get("deprecated", False)),
        renamed_to=data.get("renamed_to"),
        help=data.get("help", ""),
    )


def _version_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


@cache
def available_versions(engine: str) -> tuple[str, ...]:
    """The versions of ``engine`` that have a table, oldest first."""
    prefix = f"{engine}-"
    names = [
        entry.name.removeprefix(prefix).removesuffix(".json")
        for entry in resources.files(TABLE_PACKAGE).iterdir()
        if entry.name.startswith(prefix) and entry.name.endswith(".json")
    ]
    return tuple(sorted(names, key=_version_key))


@cache
def _read_table(engine: str, version: str) -> dict[str, Any]:
    text = resources.files(TABLE_PACKAGE).joinpath(f"{engine}-{version}.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def nearest_version(engine: str, version: str) -> str | None:
    """The table version to use for ``version``: itself, else the newest older one, else the oldest."""
    versions = available_versions(engine)
    if not versions:
        return None
    if version in versions:
        return version
    wanted = _version_key(version)
    older = [candidate for candidate in versions if _version_key(candidate) <= wanted]
    return older[-1] if older else versions[0]


def load_flag_table(engine: str, version: str) -> FlagTable | None:
    """The table of ``engine`` (``vllm``, ``sglang``) at ``version``; None when the engine has none.

    A version without its own table gets the nearest one (``exact`` is False), which checks
    report so that users know the flags were checked against another release.
    """
    chosen = nearest_version(engine, version)
    if chosen is None:
        return None
    if chosen != version:
        logger.info("no %s %s flag table; using %s's", engine, version, chosen)
    data = _read_table(engine, chosen)
    flags = {name: _spec_from_json(name, item) for name, item in data["flags"].items()}
    by_spelling: dict[str, FlagSpec] = {}
    for spec in flags.values():
        for spelling in spec.spellings:
            by_spelling.setdefault(spelling, spec)
    return FlagTable(
        engine=engine,
        version=chosen,
        requested_version=version,
        flags=flags,
        reasoning_parsers=tuple(data.get("reasoning_parsers", ())),
        tool_call_parsers=tuple(data.get("tool_call_parsers", ())),
        env_vars=frozenset(data.get("env_vars", ())),
        deprecated_env_vars=dict(data.get("deprecated_env_vars", {})),
        _by_spelling=by_spelling,
    )


def load_all_flag_tables(engine: str) -> list[FlagTable]:
    """Every table of ``engine``, oldest first: the history that explains removed flags."""
    tables = [load_flag_table(engine, version) for version in available_versions(engine)]
    return [table for table in tables if table is not None]
