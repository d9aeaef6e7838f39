"""Backend parameters, parsed once: which words are flags, the values each took, where each came from.

Every reader of a deployment's engine flags uses this one form: the deployment service (the argv
it stores and launches), doctor's parameter checks, the memory estimator and the log diagnosis.
The rules are the engine's own, read from its flag table (``backends.flag_tables``):

- each line (of a text, or each item of a list) is split into words by POSIX shell rules
  (``shell_words.split_words``, linear time), so ``--chat-template '{{ x }}'`` stays one word;
- a word starting with ``-`` (and not a negative number) is a flag; ``--flag=value`` carries its
  value inline; otherwise the flag takes as many following words as its table entry says
  (none for a switch, one, an optional one, or many), and without a table one if one follows;
- vLLM's spellings: ``--max_model_len`` is ``--max-model-len``, ``-O3`` is
  ``--optimization-level 3``, ``--compilation-config.mode 3`` sets a key of a JSON flag;
  argparse's unique prefixes (``--max-model`` for ``--max-model-len``) resolve, marked abbreviated;
- ``--no-X`` turns the boolean flag ``X`` off (``Option.negated``);
- a flag given twice is two ``Option``s; ``find`` returns the last one, the one argparse keeps;
- a word no flag took is a stray (what argparse calls "unrecognized arguments").

Usage::

    parsed = parse_backend_parameters("--tp 2 --max-model-len 32k\\n--no-enable-prefix-caching", table)
    parsed.argv                              # ['--tp', '2', '--max-model-len', '32k', ...]
    parsed.value_of("--tensor-parallel-size")  # '2' (the table knows --tp is an alias)
    parsed.integer("--max-model-len")        # 32000 (vLLM's human-readable numbers)
    parsed.switch("--enable-prefix-caching") # False
    parse_arguments(["--max-model-len", "8192"], table)   # words already split (a stored argv)
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from modelyard.backends.flag_tables import FlagSpec, FlagTable, TakesValue
from modelyard.backends.shell_words import UnbalancedQuoting, split_words
from modelyard.errors import InvalidInput

NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d+)?$")
# vLLM's integer flags read "32k" (x 1000) and "32K" (x 1024); SGLang's read plain numbers.
_HUMAN_INTEGER = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")
_DECIMAL_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True, slots=True)
class SourceLine:
    """One non-empty, non-comment line as typed. ``number`` counts every line from 1, blank ones
    included; ``where`` names it for messages (``line 3``, ``item 2``, ``item 2, line 1``)."""

    number: int
    where: str
    text: str
    # The line's words; None when it cannot be split (a quote left open).
    tokens: tuple[str, ...] | None
    split_error: str | None = None


@dataclass(frozen=True, slots=True)
class Argument:
    """One word. ``line_number`` is its ``SourceLine.number`` (for an argv: its position, from 1)."""

    text: str
    line_number: int


@dataclass(slots=True)
class Option:
    """One flag as given and the values it took. ``typed`` is the spelling before any ``=``."""

    typed: str
    line_number: int
    spec: FlagSpec | None
    values: list[str] = field(default_factory=list)
    inline_value: bool = False
    # True when ``typed`` is a unique prefix of ``spec.name`` (argparse's abbreviations).
    abbreviated: bool = False

    @property
    def name(self) -> str:
        """The flag's documented name (``--tensor-parallel-size`` for ``-tp``), else as typed."""
        return self.spec.name if self.spec is not None else self.typed

    @property
    def negated(self) -> bool:
        """``--no-enable-prefix-caching``: the boolean flag turned off."""
        return self.spec is not None and self.typed in self.spec.negations

    @property
    def json_key(self) -> str | None:
        """``mode`` for vLLM's ``--compilation-config.mode 3``."""
        head, dot, key = self.typed.partition(".")
        return key if dot and head.startswith("--") else None

    @property
    def takes(self) -> TakesValue:
        if self.spec is None:
            return "optional"
        return "none" if self.negated else self.spec.takes_value


@dataclass(frozen=True)
class ParsedParameters:
    """Backend parameters in parsed form; see the module doc for the rules."""

    lines: tuple[SourceLine, ...]
    arguments: tuple[Argument, ...]
    options: tuple[Option, ...]
    # Words no flag took: what argparse would call "unrecognized arguments".
    strays: tuple[Argument, ...]
    table: FlagTable | None = None

    @property
    def argv(self) -> list[str]:
        """The words the engine receives, in order."""
        return [argument.text for argument in self.arguments]

    @property
    def split_errors(self) -> list[SourceLine]:
        return [line for line in self.lines if line.tokens is None]

    def require_split(self) -> ParsedParameters:
        """Self, or ``InvalidInput`` naming the first line that cannot be split."""
        for line in self.split_errors:
            raise InvalidInput(
                f"backend parameters {line.where} cannot be split ({line.split_error}): "
                f"{line.text.strip()!r}",
                hint="close the quote, or escape a literal quote with a backslash; "
                "each line is split with shell quoting rules and a quote cannot span lines",
            )
        return self

    def _wanted(self, names: Sequence[str]) -> set[str]:
        """The documented names ``names`` denote in this table, plus the names themselves."""
        wanted = set(names)
        if self.table is not None:
            for name in names:
                spec = self.table.lookup(name)
                if spec is not None:
                    wanted.add(spec.name)
        return wanted

    def find_all(self, *names: str) -> list[Option]:
        """Every occurrence of the flag(s) ``names`` denote, in order (aliases and ``--no-`` forms
        included; dotted JSON keys only when asked for by their dotted name)."""
        wanted = self._wanted(names)
        return [
            option
            for option in self.options
            if option.typed in wanted or (option.json_key is None and option.name in wanted)
        ]

    def find(self, *names: str) -> Option | None:
        """The last occurrence (the one argparse keeps) of the flag(s) ``names`` denote."""
        found = self.find_all(*names)
        return found[-1] if found else None

    def given(self, *names: str) -> bool:
        return self.find(*names) is not None

    def value_of(self, *names: str) -> str | None:
        """The value of the last occurrence; ``""`` when it has none; None when not given."""
        option = self.find(*names)
        return None if option is None else (option.values[-1] if option.values else "")

    def switch(self, *names: str) -> bool | None:
        """True when the boolean flag is given (``--x``, ``--x true``), False when turned off
        (``--no-x``, ``--x false``), None when not given."""
        option = self.find(*names)
        if option is None:
            return None
        if option.negated:
            return False
        if option.values:
            return option.values[-1].strip().lower() not in {"false", "0", "no", "off"}
        return True

    def integer(self, *names: str) -> int | None:
        """The value as a whole number (vLLM's ``32k``/``32K`` forms too); None when not given;
        ``InvalidInput`` naming the flag when it is not a number."""
        option = self.find(*names)
        if option is None:
            return None
        value = option.values[-1] if option.values else ""
        number = read_integer(value)
        if number is None:
            raise InvalidInput(
                f"{option.name} needs a whole number, got {value!r}", hint=f"write e.g. {option.name} 2"
            )
        return number

    def number(self, *names: str) -> float | None:
        """The value as a number; None when not given; ``InvalidInput`` when it is not one."""
        option = self.find(*names)
        if option is None:
            return None
        value = option.values[-1] if option.values else ""
        try:
            return float(value)
        except ValueError:
            raise InvalidInput(
                f"{option.name} needs a number, got {value!r}", hint=f"write e.g. {option.name} 0.9"
            ) from None


def read_integer(text: str) -> int | None:
    """``8192``, ``32k`` (32,000), ``32K`` (32,768), ``1.5m``; None when it is none of these."""
    value = text.strip()
    match = _HUMAN_INTEGER.match(value)
    if match is not None:
        number, suffix = match.groups()
        if suffix in _DECIMAL_SUFFIXES:
            return int(float(number) * _DECIMAL_SUFFIXES[suffix])
        if "." in number:
            return None  # vLLM refuses decimals with binary suffixes
        return int(number) * _BINARY_SUFFIXES[suffix]
    try:
        return int(value)
    except ValueError:
        return None


def is_option(text: str) -> bool:
    """A word argparse treats as a flag: starts with ``-``, is not ``-`` alone or a negative number."""
    return text.startswith("-") and len(text) > 1 and not NEGATIVE_NUMBER.match(text)


_SORTED_SPELLINGS: dict[tuple[str, str], list[str]] = {}


def _sorted_spellings(table: FlagTable) -> list[str]:
    key = (table.engine, table.version)
    spellings = _SORTED_SPELLINGS.get(key)
    if spellings is None:
        spellings = _SORTED_SPELLINGS[key] = sorted(table.spellings())
    return spellings


def resolve_option(typed: str, table: FlagTable | None) -> tuple[FlagSpec | None, bool]:
    """(spec, abbreviated): the flag ``typed`` names, following argparse's unique prefixes.

    The prefix search is a binary search over the table's sorted spellings, so a long list of
    unknown flags costs O(log n) each, not a scan of the table each.
    """
    if table is None:
        return None, False
    spec = table.lookup(typed)
    if spec is not None:
        return spec, False
    if not typed.startswith("--") or len(typed) <= 3:
        return None, False
    spellings = _sorted_spellings(table)
    position = bisect.bisect_left(spellings, typed)
    found: FlagSpec | None = None
    while position < len(spellings) and spellings[position].startswith(typed):
        candidate = table.lookup(spellings[position])
        position += 1
        if candidate is None:
            continue
        if found is not None and candidate is not found:
            return None, False  # ambiguous, as argparse says
        found = candidate
    return (found, True) if found is not None else (None, False)


def _source_lines(raw: str | Sequence[str]) -> list[SourceLine]:
    items: Sequence[str] = [raw] if isinstance(raw, str) else raw
    lines: list[SourceLine] = []
    number = 0
    for item_index, item in enumerate(items, start=1):
        if not isinstance(item, str):
            raise InvalidInput(
                f"backend parameters item {item_index} is a {type(item).__name__} ({item!r}), not text",
                hint="give each item as a string",
            )
        texts = item.splitlines() or [""]
        for line_index, text in enumerate(texts, start=1):
            number += 1
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            if isinstance(raw, str):
                where = f"line {line_index}"
            elif len(texts) == 1:
                where = f"item {item_index}"
            else:
                where = f"item {item_index}, line {line_index}"
            try:
                tokens: tuple[str, ...] | None = tuple(split_words(text))
                error = None
            except UnbalancedQuoting as problem:
                tokens, error = None, str(problem)
            lines.append(SourceLine(number=number, where=where, text=text, tokens=tokens, split_error=error))
    return lines


def _options(arguments: Sequence[Argument], table: FlagTable | None) -> tuple[list[Option], list[Argument]]:
    options: list[Option] = []
    strays: list[Argument] = []
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        index += 1
        if not is_option(argument.text):
            strays.append(argument)
            continue
        typed, equals, inline = argument.text.partition("=")
        if table is not None and table.accepts_underscores and typed.startswith("-O") and len(typed) > 2:
            # vLLM reads -O3 and -O=3 as --optimization-level 3
            typed, equals, inline = "-O", "=", argument.text[2:].removeprefix("=")
        spec, abbreviated = resolve_option(typed, table)
        option = Option(typed, argument.line_number, spec, abbreviated=abbreviated)
        options.append(option)
        if equals:
            option.values.append(inline)
            option.inline_value = True
            continue
        takes = option.takes
        if takes == "none":
            continue
        while index < len(arguments) and not is_option(arguments[index].text):
            option.values.append(arguments[index].text)
            index += 1
            if takes in {"one", "optional"}:
                break
    return options, strays


def parse_backend_parameters(raw: str | Sequence[str], table: FlagTable | None = None) -> ParsedParameters:
    """Parse parameters as a user typed them: one text, or a list of lines (each split by shell rules).

    Lines that cannot be split are kept with their error (``split_errors``) and give no words;
    ``require_split()`` turns them into an ``InvalidInput``. A non-text item is an ``InvalidInput``.
    """
    lines = _source_lines(raw)
    arguments = [Argument(token, line.number) for line in lines for token in (line.tokens or ())]
    options, strays = _options(arguments, table)
    return ParsedParameters(
        lines=tuple(lines),
        arguments=tuple(arguments),
        options=tuple(options),
        strays=tuple(strays),
        table=table,
    )


def parse_arguments(argv: Sequence[str], table: FlagTable | None = None) -> ParsedParameters:
    """Parse words already split (a stored deployment's argv): each item is one word, as is."""
    arguments = [Argument(text, position) for position, text in enumerate(argv, start=1)]
    options, strays = _options(arguments, table)
    return ParsedParameters(
        lines=(), arguments=tuple(arguments), options=tuple(options), strays=tuple(strays), table=table
    )
