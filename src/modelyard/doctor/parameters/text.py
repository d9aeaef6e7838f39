"""Checks of the raw text, for every engine: stray characters, broken lines, env in args, JSON.

Ids: ``param.command-in-args``, ``param.stray-whitespace``, ``param.invisible-character``,
``param.typographic-dash``, ``param.typographic-quote``, ``param.split-flag``, ``param.unbalanced-quote``,
``param.line-continuation``, ``param.env-in-args``, ``param.invalid-json``.
"""

from __future__ import annotations

import json
import re
import unicodedata

from modelyard.backends.parameters import SourceLine, is_option, resolve_option
from modelyard.backends.shell_words import UnbalancedQuoting, split_words
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.json_mangling import (
    ALWAYS_JSON,
    EXPLANATIONS,
    OBJECT_FLAGS,
    diagnose,
    json_flag_in_history,
)

DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"
TYPOGRAPHIC_QUOTES = "\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
ENV_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")


def _invisible(character: str) -> bool:
    if character in ZERO_WIDTH:
        return True
    return unicodedata.category(character) in {"Zs", "Cc", "Cf"} and character not in " \t\n\r"


def _character_name(character: str) -> str:
    return f"U+{ord(character):04X} {unicodedata.name(character, 'unnamed character')}"


def check_characters(context: ParameterContext) -> list[Finding]:
    findings: list[Finding] = []
    for line in context.parameters.lines:
        text = line.text
        if text != text.rstrip(" \t"):
            findings.append(
                Finding(
                    "param.stray-whitespace",
                    Severity.WARNING,
                    f"line {line.number} ends with whitespace: {text!r}",
                    fix=f"delete it: {text.rstrip()!r}. modelyard drops it when splitting the line, "
                    "but tools that pass each line as one argument hand the engine the value with the space, "
                    "and parser names with a space are silently ignored",
                    details={"line": line.number},
                )
            )
        for token in line.tokens or ():
            if token != token.strip():
                findings.append(
                    Finding(
                        "param.stray-whitespace",
                        Severity.ERROR,
                        f"line {line.number}: the quoted argument {token!r} starts or ends with whitespace, "
                        "which the engine receives as part of the value",
                        fix=f"write {token.strip()!r} without the surrounding spaces",
                        details={"line": line.number, "argument": token},
                    )
                )
        findings.extend(_odd_characters(line))
    return findings


def _odd_characters(line: SourceLine) -> list[Finding]:
    findings: list[Finding] = []
    hidden = sorted({character for character in line.text if _invisible(character)})
    if hidden:
        cleaned = "".join(
            " " if unicodedata.category(c) == "Zs" else "" if _invisible(c) else c for c in line.text
        )
        findings.append(
            Finding(
                "param.invisible-character",
                Severity.ERROR,
                f"line {line.number} contains {', '.join(_character_name(c) for c in hidden)}: {line.text!r}",
                fix=f"retype the line, or use {cleaned.strip()!r}; invisible characters usually come from "
                "copying out of a web page or chat",
                details={"line": line.number},
            )
        )
    dashes = sorted({character for character in line.text if character in DASHES})
    if dashes:
        fixed = re.sub(
            f"(^|\\s)[-{DASHES}]*[{DASHES}][-{DASHES}]*", lambda match: match.group(1) + "--", line.text
        )
        findings.append(
            Finding(
                "param.typographic-dash",
                Severity.ERROR,
                f"line {line.number} has a typographic dash "
                f"({', '.join(_character_name(c) for c in dashes)}) "
                f"where a flag needs '-' or '--': {line.text!r}",
                fix=f"use ASCII hyphens: {fixed.strip()!r}",
                details={"line": line.number},
            )
        )
    quotes = sorted({character for character in line.text if character in TYPOGRAPHIC_QUOTES})
    if quotes:
        findings.append(
            Finding(
                "param.typographic-quote",
                Severity.ERROR,
                f"line {line.number} has typographic quotes ({''.join(quotes)}) that the shell rules "
                f"and JSON do not treat as quotes: {line.text!r}",
                fix="replace them with straight quotes: ' or \"",
                details={"line": line.number},
            )
        )
    return findings


def check_broken_lines(context: ParameterContext) -> list[Finding]:
    """A flag or a quoted value broken over two lines, or a shell line continuation."""
    findings: list[Finding] = []
    lines = context.parameters.lines
    for position, line in enumerate(lines):
        following = lines[position + 1] if position + 1 < len(lines) else None
        if line.text.rstrip().endswith("\\"):
            findings.append(
                Finding(
                    "param.line-continuation",
                    Severity.ERROR,
                    f"line {line.number} ends with a shell line continuation '\\': {line.text.strip()!r}",
                    fix="delete the trailing backslash; each line is split on its own, "
                    "no continuation needed",
                    details={"line": line.number},
                )
            )
            continue
        if line.tokens is None:
            joined = f"{line.text} {following.text}" if following else None
            if joined is not None and _splits(joined):
                findings.append(_split_finding(line, following, joined, "a quoted value"))
            else:
                findings.append(
                    Finding(
                        "param.unbalanced-quote",
                        Severity.ERROR,
                        f"line {line.number} cannot be split ({line.split_error}): {line.text.strip()!r}",
                        fix="close the quote, or escape a literal quote with a backslash",
                        details={"line": line.number},
                    )
                )
            continue
        if following is None or not line.tokens or not following.tokens:
            continue
        findings.extend(_broken_flag(context, line, following))
    return findings


def _splits(text: str) -> bool:
    try:
        split_words(text)
    except UnbalancedQuoting:
        return False
    return True


def _split_finding(line: SourceLine, following: SourceLine | None, joined: str, what: str) -> Finding:
    next_number = following.number if following else line.number + 1
    return Finding(
        "param.split-flag",
        Severity.ERROR,
        f"{what} is split across lines {line.number} and {next_number}: {line.text.strip()!r} / "
        f"{following.text.strip() if following else ''!r}",
        fix=f"put it on one line: {joined.strip()!r}",
        details={"line": line.number},
    )


def _broken_flag(context: ParameterContext, line: SourceLine, following: SourceLine) -> list[Finding]:
    """``--tool-call-`` / ``parser x`` or ``--tool-call`` / ``-parser x``: a flag cut in two."""
    assert line.tokens is not None and following.tokens is not None
    last, first = line.tokens[-1], following.tokens[0]
    if not is_option(last):
        return []
    glued = (last + first).partition("=")[0]
    joined = f"{line.text.strip()}{following.text.strip()}"
    if context.table is not None:
        if context.table.lookup(last.partition("=")[0]) is not None:
            return []
        if context.table.lookup(glued) is not None:
            return [_split_finding(line, following, joined, "the flag")]
        spec_glued, _ = resolve_option(glued, context.table)
        if spec_glued is not None and not is_option(first):
            return [_split_finding(line, following, joined, "the flag")]
        return []
    if last.endswith(("-", "_")) and not is_option(first):
        return [_split_finding(line, following, joined, "the flag")]
    return []


def check_env_in_arguments(context: ParameterContext) -> list[Finding]:
    findings: list[Finding] = []
    parsed = context.parameters
    # Without a flag table an option seems to take what follows it, so look at every argument.
    candidates = parsed.strays if context.table is not None else parsed.arguments
    for argument in candidates:
        match = ENV_ASSIGNMENT.match(argument.text)
        if match is None:
            continue
        findings.append(
            Finding(
                "param.env-in-args",
                Severity.ERROR,
                f"line {argument.line_number}: {argument.text!r} is an environment variable assignment "
                f"in the backend parameters; {context.label} would receive it as an argument, not as "
                f"the variable {match.group(1)}",
                fix=f"move {argument.text!r} to the environment (env) of the deployment",
                details={"line": argument.line_number, "variable": match.group(1)},
            )
        )
    return findings


EXAMPLE_JSON = '{"method": "mtp", "num_speculative_tokens": 2}'


def check_json_values(context: ParameterContext) -> list[Finding]:
    """JSON flag values the engine cannot read, and how they were mangled (``json_mangling``)."""
    findings: list[Finding] = []
    strays = context.parameters.strays
    for option in context.parameters.options:
        if not option.values or "." in option.typed:
            continue
        known = option.spec.type == "json" if option.spec is not None else None
        if option.name in ALWAYS_JSON.get(context.engine, frozenset()):
            known = True
        if known is None and context.engine in OBJECT_FLAGS:
            known = json_flag_in_history(context.engine, option.typed) or None
        value = option.values[-1]
        stripped = value.lstrip()
        # Without a table or history, only a value that looks like JSON is read as JSON; a Jinja
        # template ("{{ messages }}", "{% for ... %}") or a path is not.
        if known is False or (
            known is None
            and (
                context.table is not None
                or not stripped.startswith(("{", "["))
                or stripped.startswith(("{{", "{%", "{#"))
            )
        ):
            continue
        following = [stray.text for stray in strays if stray.line_number >= option.line_number]
        must_be_object = option.name in OBJECT_FLAGS.get(context.engine, frozenset())
        mangling = diagnose(value, following=following, must_be_object=must_be_object)
        if mangling is None:
            continue
        shown = value if len(value) <= 120 else value[:117] + "..."
        fix = f"give valid JSON in single quotes, e.g. {option.typed} '{EXAMPLE_JSON}'"
        if mangling == "split-on-commas":
            fix = (
                f"pass {option.typed} and its whole JSON as one argument (one list item, or quoted on one "
                "line); launchers that split arguments at commas need the value escaped or given as "
                f"{option.typed}=VALUE in one item"
            )
        elif mangling == "quoted-twice":
            fix = f"give the object itself: {option.typed} '{json.loads(value)}'"
        findings.append(
            Finding(
                "param.invalid-json",
                # A table or the engine's history says JSON: the engine refuses it. Else a guess.
                Severity.ERROR if known else Severity.WARNING,
                f"line {option.line_number}: {option.typed} takes JSON but got {shown!r}: "
                f"{EXPLANATIONS[mangling]}",
                fix=fix,
                details={"line": option.line_number, "flag": option.typed, "mangled": mangling},
            )
        )
    return findings


ENGINE_COMMANDS = {
    "vllm", "sglang", "python", "python3", "transformers", "serve", "sglang.launch_server",
    # launchers whose command line is pasted whole: docker run ... IMAGE --flags, torchrun ...
    "docker", "podman", "nvidia-docker", "torchrun",
}  # fmt: skip


def check_command_in_arguments(context: ParameterContext) -> list[Finding]:
    """The engine's command line pasted whole (``vllm serve MODEL ...``) into the parameters."""
    arguments = context.parameters.arguments
    if not arguments or arguments[0].text.rsplit("/", 1)[-1] not in ENGINE_COMMANDS:
        return []
    command = []
    for argument in arguments:
        if argument.text.startswith("-") and argument.text != "-m":
            break
        command.append(argument.text)
    shown = " ".join(command)
    return [
        Finding(
            "param.command-in-args",
            Severity.ERROR,
            f"the backend parameters start with the command {shown!r}; modelyard runs the engine and "
            "passes the model path itself, so these words would reach the engine as stray arguments",
            fix=f"delete {shown!r} and keep only the flags that follow it",
            details={"command": command},
        )
    ]
