"""The flags, parsers and environment variables of every engine release, as committed data.

``backends/flags/<engine>.json`` holds one engine's whole release history (vLLM from 0.6.0,
SGLang from 0.4.0): each flag, env var and parser name with the releases where it exists. It is
written by ``scripts/extract_engine_flags.py`` from the engines' real packages (read with
``ast``, never imported); ``scripts/engine_flags/history.py`` describes the format. Doctor's
parameter checks read it through this module; it is read once, when first asked.

Usage::

    table = load_flag_table("vllm", "0.26.3")
    if table is not None:
        table.version, table.exact                 # ("0.26.0", False): the nearest release stood in
        table.match                                # "between": 0.26.3 is no release PyPI has
        spec = table.lookup("--gpu_memory_utilization")   # vLLM accepts underscores too
        table.tool_call_parsers                    # ("deepseek_v3", ..., "qwen3_coder", ...)

    history = load_engine_history("sglang")
    flag = history.flag("--mamba-scheduler-strategy")
    flag.first, flag.last, flag.removed_in         # "0.5.7", "0.5.19", "0.5.20"
    flag.replacement, flag.deprecated_in           # "--mamba-radix-cache-strategy", "0.5.14"
    history.env_var("SGLANG_ENABLE_SPEC_V2").last  # "0.5.13.post1"
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

logger = logging.getLogger(__name__)

FlagType = Literal["bool", "int", "float", "str", "json"]
TakesValue = Literal["none", "one", "optional", "many"]
# How the table's release relates to the version asked for:
# exact: the same release (also "v0.25.0", "0.25.0+cu129", a release candidate of it);
# between: no such release; the newest older one stood in; newer: newer than every known release;
# older: older than every known release (the oldest stood in); unparsable: not a version number.
TableMatch = Literal["exact", "between", "newer", "older", "unparsable"]
TABLE_PACKAGE = "modelyard.backends.flags"
ENGINES_WITH_TABLES = ("vllm", "sglang")
_LEADING_NUMBER = re.compile(r"^v?(\d+(?:\.\d+)*)")


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
    """What one engine release accepts on its command line and in its environment.

    ``version`` is the release the table was read from; ``requested_version`` the one asked
    for. They differ (``exact`` is False) when no release of that number is known and the
    nearest stood in; ``match`` says how they relate.
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
    match: TableMatch = "exact"
    _by_spelling: dict[str, FlagSpec] = field(default_factory=dict, repr=False)

    @property
    def exact(self) -> bool:
        return self.match == "exact"

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


@dataclass(frozen=True)
class Presence:
    """The releases of an engine in which a flag, env var or parser name exists.

    ``ranges`` are (first, last) release pairs, oldest first; ``removed_in`` is the first
    known release after the last one that had it (None while the newest release has it).
    """

    ranges: tuple[tuple[str, str], ...]
    removed_in: str | None

    @property
    def first(self) -> str:
        return self.ranges[0][0]

    @property
    def last(self) -> str:
        return self.ranges[-1][1]


@dataclass(frozen=True)
class FlagHistory(Presence):
    """One spelling of a flag across releases (as its name, an alias or a ``--no-`` form).

    ``replacement`` is what the engine names instead, where it says so: the ``new_flag`` of a
    deprecated alias, or the flag that a removed alias belonged to. ``deprecated_in`` is the
    first release that accepted the spelling only as deprecated.
    """

    spelling: str = ""
    replacement: str | None = None
    deprecated_in: str | None = None


@dataclass(frozen=True)
class ReleaseStatus:
    """Where a spelling stands in one release: there, removed before it, or not there yet."""

    state: Literal["present", "removed", "not-yet"]
    # removed: the release that removed it and the last one that had it; not-yet: the first one.
    changed_in: str | None = None
    last_with_it: str | None = None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
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


def _contains(ranges: list[list[int]], index: int) -> bool:
    return any(first <= index <= last for first, last in ranges)


class EngineHistory:
    """Every release of one engine that has a table, and what each flag, variable and parser did.

    Built from the engine's history file by ``load_engine_history``; tables of single releases
    come from ``table(version)``.
    """

    def __init__(self, engine: str, document: dict[str, Any]) -> None:
        self.engine = engine
        self.releases: tuple[str, ...] = tuple(version for version, _ in document["releases"])
        self.sources: dict[str, str] = {version: source for version, source in document["releases"]}
        self._document = document
        self._index = {version: position for position, version in enumerate(self.releases)}
        self._parsed = [_version(version) or Version("0") for version in self.releases]
        self._tables: dict[str, FlagTable] = {}

    # ------------------------------------------------------------------ versions

    def resolve(self, version: str) -> tuple[str, TableMatch]:
        """The release whose table answers for ``version``, and how it matches (see TableMatch)."""
        if version in self._index:
            return version, "exact"
        wanted = _version(version)
        match: TableMatch = "between"
        if wanted is None:
            leading = _LEADING_NUMBER.match(version.strip())
            wanted = _version(leading.group(1)) if leading else None
            if wanted is None:
                return self.releases[-1], "unparsable"
            match = "unparsable"
        for position, known in enumerate(self._parsed):
            if known == wanted or (match != "unparsable" and known.public == wanted.public):
                return self.releases[position], "exact" if match != "unparsable" else match
        if (wanted.is_prerelease or wanted.is_devrelease) and match != "unparsable":
            for position, known in enumerate(self._parsed):  # 0.27.0rc1 is nearly 0.27.0
                if known.base_version == wanted.base_version and not known.is_prerelease:
                    return self.releases[position], "between"
        older = [position for position, known in enumerate(self._parsed) if known < wanted]
        if not older:
            return self.releases[0], "older" if match != "unparsable" else match
        if older[-1] == len(self.releases) - 1 and match != "unparsable":
            match = "newer"
        return self.releases[older[-1]], match

    def table(self, version: str) -> FlagTable:
        """The table for ``version``: its own release's, else the nearest's (``match`` says which)."""
        chosen, match = self.resolve(version)
        if match != "exact":
            logger.info("no %s %s flag table; using %s's (%s)", self.engine, version, chosen, match)
        base = self._release_table(chosen)
        return FlagTable(
            engine=self.engine,
            version=chosen,
            requested_version=version,
            flags=base.flags,
            reasoning_parsers=base.reasoning_parsers,
            tool_call_parsers=base.tool_call_parsers,
            env_vars=base.env_vars,
            deprecated_env_vars=base.deprecated_env_vars,
            match=match,
            _by_spelling=base._by_spelling,
        )

    def _release_table(self, version: str) -> FlagTable:
        if version not in self._tables:
            self._tables[version] = self._read_release_table(version)
        return self._tables[version]

    def _read_release_table(self, version: str) -> FlagTable:
        index = self._index[version]
        document = self._document
        flags: dict[str, FlagSpec] = {}
        for name, forms in document["flags"].items():
            for spec, ranges in forms:
                if _contains(ranges, index):
                    flags[name] = _spec_from_json(name, spec)
                    break
        by_spelling: dict[str, FlagSpec] = {}
        for spec in flags.values():
            for spelling in spec.spellings:
                by_spelling.setdefault(spelling, spec)

        def names(kind: str) -> tuple[str, ...]:
            return tuple(name for name, ranges in document[kind].items() if _contains(ranges, index))

        deprecated = {
            name: note
            for name, notes in document["deprecated_env_vars"].items()
            for note, ranges in notes
            if _contains(ranges, index)
        }
        return FlagTable(
            engine=self.engine,
            version=version,
            requested_version=version,
            flags=flags,
            reasoning_parsers=names("reasoning_parsers"),
            tool_call_parsers=names("tool_call_parsers"),
            env_vars=frozenset(names("env_vars")),
            deprecated_env_vars=deprecated,
            _by_spelling=by_spelling,
        )

    # ------------------------------------------------------------------ history

    def _presence(self, ranges: list[list[int]]) -> Presence:
        last = max(end for _, end in ranges)
        return Presence(
            ranges=tuple((self.releases[first], self.releases[end]) for first, end in sorted(ranges)),
            removed_in=self.releases[last + 1] if last + 1 < len(self.releases) else None,
        )

    @cached_property
    def _spellings(self) -> dict[str, list[tuple[str, dict[str, Any], list[list[int]]]]]:
        """Every spelling -> (flag name, form, ranges) of each form that accepts it."""
        index: dict[str, list[tuple[str, dict[str, Any], list[list[int]]]]] = {}
        for name, forms in self._document["flags"].items():
            for spec, ranges in forms:
                for spelling in (name, *spec.get("aliases", ()), *spec.get("negations", ())):
                    index.setdefault(spelling, []).append((name, spec, ranges))
        return index

    def normalize(self, spelling: str) -> str:
        """The spelling the tables store: vLLM reads ``--max_model_len`` and ``--x-config.key`` too."""
        if self.engine != "vllm" or not spelling.startswith("--"):
            return spelling
        head = spelling.partition(".")[0].replace("_", "-")
        entries = self._spellings.get(head, [])
        if "." in spelling and not any(spec.get("type") == "json" for _, spec, _ in entries):
            return spelling
        return head

    def known_spellings(self) -> frozenset[str]:
        """Every spelling any release accepted (names, aliases, ``--no-`` forms)."""
        return frozenset(self._spellings)

    def flag(self, spelling: str) -> FlagHistory | None:
        """Where ``spelling`` was accepted, what replaced it; None when no release knew it."""
        entries = self._spellings.get(self.normalize(spelling))
        if not entries:
            return None
        indexes = sorted(
            {i for _, _, ranges in entries for first, last in ranges for i in range(first, last + 1)}
        )
        merged: list[list[int]] = []
        for i in indexes:
            if merged and merged[-1][1] == i - 1:
                merged[-1][1] = i
            else:
                merged.append([i, i])
        presence = self._presence(merged)
        newest = max(entries, key=lambda entry: max(last for _, last in entry[2]))
        name, spec, _ = newest
        replacement = spec.get("renamed_to")
        removed_alias = presence.removed_in is not None and self.normalize(spelling) not in {
            name,
            *spec.get("negations", ()),
        }
        if replacement is None and removed_alias:
            replacement = name  # a dropped alias of a flag that lives on under its own name
        deprecated = [
            min(first for first, _ in ranges) for _, form, ranges in entries if form.get("deprecated")
        ]
        return FlagHistory(
            ranges=presence.ranges,
            removed_in=presence.removed_in,
            spelling=spelling,
            replacement=replacement,
            deprecated_in=self.releases[min(deprecated)] if deprecated else None,
        )

    def replacement_at(self, spelling: str, version: str) -> str | None:
        """What to write instead of ``spelling`` in ``version``: its replacement, followed through
        later renames to one that ``version`` accepts (a replacement with a value or a brace,
        ``--cuda-graph-backend-{decode,prefill}=disabled``, is given as the engine wrote it)."""
        current = self.flag(spelling)
        seen = {self.normalize(spelling)}
        while current is not None and current.replacement and current.replacement not in seen:
            candidate = current.replacement
            seen.add(candidate)
            if "{" in candidate:
                return candidate
            found = self.flag(candidate.partition("=")[0])
            if found is None or self.status(found, version).state == "present":
                return candidate
            current = found
        return None

    def status(self, presence: Presence, version: str) -> ReleaseStatus:
        """Whether ``presence`` covers the release ``version`` resolves to, and if not, why."""
        index = self._index[self.resolve(version)[0]]
        spans = [(self._index[first], self._index[last]) for first, last in presence.ranges]
        if any(first <= index <= last for first, last in spans):
            return ReleaseStatus("present")
        before = [last for _, last in spans if last < index]
        if before:
            return ReleaseStatus("removed", self.releases[before[-1] + 1], self.releases[before[-1]])
        return ReleaseStatus("not-yet", self.releases[min(first for first, _ in spans)])

    def _named(self, kind: str, name: str) -> Presence | None:
        ranges = self._document[kind].get(name)
        return self._presence(ranges) if ranges else None

    def env_var(self, name: str) -> Presence | None:
        """Where the engine reads ``name`` (releases that only warn about it are not counted)."""
        return self._named("env_vars", name)

    def deprecated_env_var(self, name: str) -> list[tuple[str, Presence]]:
        """Each note the engine printed for ``name`` as deprecated or removed, with where."""
        notes = self._document["deprecated_env_vars"].get(name, [])
        return [(note, self._presence(ranges)) for note, ranges in notes]

    def reasoning_parser(self, name: str) -> Presence | None:
        return self._named("reasoning_parsers", name)

    def tool_call_parser(self, name: str) -> Presence | None:
        return self._named("tool_call_parsers", name)


@cache
def load_engine_history(engine: str) -> EngineHistory | None:
    """The release history of ``engine`` (``vllm``, ``sglang``); None for engines without one."""
    if engine not in ENGINES_WITH_TABLES:
        return None
    resource = resources.files(TABLE_PACKAGE).joinpath(f"{engine}.json")
    if not resource.is_file():
        return None
    document: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return EngineHistory(engine, document)


def available_versions(engine: str) -> tuple[str, ...]:
    """The releases of ``engine`` that have a table, oldest first."""
    history = load_engine_history(engine)
    return history.releases if history is not None else ()


def nearest_version(engine: str, version: str) -> str | None:
    """The release whose table answers for ``version`` (itself when known); None without tables."""
    history = load_engine_history(engine)
    return history.resolve(version)[0] if history is not None else None


def load_flag_table(engine: str, version: str) -> FlagTable | None:
    """The table of ``engine`` at ``version``; None when the engine has no tables.

    A version without its own table gets the nearest release's (``exact`` is False), which
    checks report so that users know the flags were checked against another release.
    """
    history = load_engine_history(engine)
    return history.table(version) if history is not None else None
