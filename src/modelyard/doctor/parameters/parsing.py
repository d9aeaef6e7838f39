"""Backend parameters as the user typed them, split the way modelyard splits them, with positions.

The checks need both views: the raw lines (a space at the end of a line, a flag broken across
two lines) and the arguments the engine will receive (``split_backend_parameters`` applies POSIX
shell rules to each line). ``parse_parameters`` gives both, plus each option matched against
the engine version's flag table.

Usage::

    parsed = parse_parameters(["--tensor-parallel-size 2", "--enable-prefix-caching"], table)
    for option in parsed.options:
        option.typed, option.spec, option.values, option.line_number
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from modelyard.backends.flag_tables import FlagSpec, FlagTable

NUMBER_PATTERN = re.compile(r"^-\d+(\.\d+)?$")


@dataclass(frozen=True)
class RawLine:
    """One non-empty line of backend parameters. ``number`` counts from 1 over all lines."""

    number: int
    text: str
    # The line split with shell rules; None when it cannot be split (a quote left open).
    tokens: tuple[str, ...] | None
    split_error: str | None = None


@dataclass(frozen=True)
class Argument:
    text: str
    line_number: int


@dataclass
class ParsedOption:
    """One option and the values it took. ``typed`` is the spelling before any ``=``."""

    typed: str
    line_number: int
    spec: FlagSpec | None
    values: list[str] = field(default_factory=list)
    inline_value: bool = False
    # True when ``typed`` is a unique prefix of ``spec.name`` (argparse's abbreviations).
    abbreviated: bool = False


@dataclass
class ParsedParameters:
    lines: list[RawLine]
    arguments: list[Argument]
    options: list[ParsedOption]
    # Arguments no option took: what argparse would call "unrecognized arguments".
    strays: list[Argument]

    def find(self, *names: str) -> ParsedOption | None:
        """The last occurrence (the one argparse keeps) of the flag ``names`` denote."""
        for option in reversed(self.options):
            if option.spec is not None and option.spec.name in names:
                return option
            if option.typed in names:
                return option
        return None

    def value_of(self, *names: str) -> str | None:
        option = self.find(*names)
        if option is None:
            return None
        return option.values[-1] if option.values else ""


def raw_lines(backend_parameters: list[str] | str) -> list[RawLine]:
    """Every non-empty, non-comment line, numbered, and split with shell rules when possible."""
    items = [backend_parameters] if isinstance(backend_parameters, str) else list(backend_parameters)
    lines: list[RawLine] = []
    number = 0
    for item in items:
        for text in str(item).splitlines() or [""]:
            number += 1
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            try:
                tokens: tuple[str, ...] | None = tuple(shlex.split(text, posix=True))
                error = None
            except ValueError as problem:
                tokens, error = None, str(problem)
            lines.append(RawLine(number=number, text=text, tokens=tokens, split_error=error))
    return lines


def is_option(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and not NUMBER_PATTERN.match(text)


def resolve_option(typed: str, table: FlagTable | None) -> tuple[FlagSpec | None, bool]:
    """(spec, abbreviated): the flag ``typed`` names, following argparse's unique prefixes."""
    if table is None:
        return None, False
    spec = table.lookup(typed)
    if spec is not None:
        return spec, False
    if typed.startswith("--") and len(typed) > 3:
        candidates = {table.lookup(spelling) for spelling in table.spellings() if spelling.startswith(typed)}
        candidates.discard(None)
        if len(candidates) == 1:
            return candidates.pop(), True
    return None, False


def parse_parameters(backend_parameters: list[str] | str, table: FlagTable | None) -> ParsedParameters:
    """Split and match the parameters. Without a table, an option takes the arguments after it."""
    lines = raw_lines(backend_parameters)
    arguments = [Argument(token, line.number) for line in lines for token in (line.tokens or ())]
    options: list[ParsedOption] = []
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
        option = ParsedOption(typed, argument.line_number, spec, abbreviated=abbreviated)
        options.append(option)
        if equals:
            option.values.append(inline)
            option.inline_value = True
            continue
        takes = spec.takes_value if spec is not None else ("many" if table is None else "optional")
        if spec is not None and typed in spec.negations:
            takes = "none"
        if takes == "none":
            continue
        while index < len(arguments) and not is_option(arguments[index].text):
            option.values.append(arguments[index].text)
            index += 1
            if takes in {"one", "optional"}:
                break
    return ParsedParameters(lines=lines, arguments=arguments, options=options, strays=strays)
