"""Checks of each flag against the engine version's table (vLLM and SGLang).

Ids: ``param.flag-table-version``, ``param.unknown-flag``, ``param.removed-flag``,
``param.deprecated-flag``, ``param.abbreviated-flag``, ``param.invalid-choice``,
``param.invalid-number``, ``param.missing-value``, ``param.unexpected-value``,
``param.duplicate-flag``, ``param.auto-tool-choice-without-parser``.
"""

from __future__ import annotations

import difflib
import re

from modelyard.backends.flag_tables import FlagSpec, FlagTable
from modelyard.backends.parameters import Option
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext, engine_label
from modelyard.doctor.parameters.equivalents import EQUIVALENTS
from modelyard.doctor.parameters.flags_any_release import keyword_flag
from modelyard.doctor.parameters.launcher import IMAGE_REFERENCE, launcher_option
from modelyard.doctor.parameters.text import ENGINE_COMMANDS, ENV_ASSIGNMENT

# vLLM reads "32k", "1.5M" for token counts; both engines read plain numbers.
HUMAN_NUMBER = re.compile(r"^-?\d+(\.\d+)?([kKmMgGtT])?$")
# Unknown flags explained one by one (history, closest name); the rest are counted in one finding,
# so that a pasted wall of flags costs bounded work (with it, one id's 10 findings at most).
MAX_UNKNOWN_EXPLAINED = 9
# Names longer than any real flag get no "did you mean" (difflib is quadratic in the length).
MAX_SUGGESTED_LENGTH = 80


def check_flags(context: ParameterContext) -> list[Finding]:
    table = context.table
    if table is None:
        return []
    findings: list[Finding] = []
    if not table.exact:
        findings.append(_table_version(context, table))
    seen: dict[str, Option] = {}
    unknown: list[Option] = []
    for option in context.parameters.options:
        if option.spec is None:
            if launcher_option(context.engine, option.typed) is None:
                unknown.append(option)  # launcher options: param.launcher-option names them
            continue
        findings.extend(_known(context, option.spec, option))
        # vLLM merges dotted JSON keys (--compilation-config.mode, --compilation-config.level)
        key = option.typed if "." in option.typed else option.spec.name
        earlier = seen.get(key)
        if earlier is not None and option.spec.takes_value != "many":
            findings.append(
                Finding(
                    "param.duplicate-flag",
                    Severity.WARNING,
                    f"{option.spec.name} is given twice (lines {earlier.line_number} and "
                    f"{option.line_number}); "
                    f"{context.label} keeps only the last one",
                    fix="keep one of them",
                    details={"flag": option.spec.name},
                )
            )
        seen[key] = option
    findings.extend(_unknown(context, table, option) for option in unknown[:MAX_UNKNOWN_EXPLAINED])
    if len(unknown) > MAX_UNKNOWN_EXPLAINED:
        rest = unknown[MAX_UNKNOWN_EXPLAINED:]
        findings.append(
            Finding(
                "param.unknown-flag",
                Severity.ERROR,
                f"{len(rest):,} more flags {context.label} does not have, from line {rest[0].line_number} "
                f"on (first: {rest[0].typed[:MAX_SUGGESTED_LENGTH]})",
                fix=f"remove them; `vllm serve --help` or `python -m sglang.launch_server --help` of "
                f"{context.label} lists the flags it has",
                details={"count": len(rest), "line": rest[0].line_number},
            )
        )
    findings.extend(_strays(context))
    return context.answered_by_table(findings)


def _table_version(context: ParameterContext, table: FlagTable) -> Finding:
    """Which release's table stood in for a version that has none, and why."""
    nearest = engine_label(context.engine, table.version)
    history = context.history
    known = f"{history.releases[0]} to {history.releases[-1]}" if history else table.version
    asked = context.label
    if table.match == "newer":
        message = (
            f"no flag table for {asked}, newer than every release the tables know ({known}); "
            f"its flags were checked against {nearest}, the newest"
        )
        fix = (
            f"flags added after {table.version} show as unknown: a newer modelyard has their table "
            f"(from a checkout: python scripts/extract_engine_flags.py --engine {context.engine})"
        )
    elif table.match == "older":
        message = (
            f"no flag table for {asked}, older than every release the tables know ({known}); "
            f"its flags were checked against {nearest}, the oldest"
        )
        fix = f"deploy {nearest} or later, or expect findings about flags {table.version} does not have"
    elif table.match == "unparsable":
        message = (
            f"{context.version!r} is not a release number of {engine_label(context.engine)}; "
            f"its flags were checked against {nearest}"
        )
        newest = history.releases[-1] if history else table.version
        fix = f"give the engine's release as its version, e.g. {newest}"
    else:
        message = (
            f"no flag table for {asked}: PyPI had no such release when the tables were made ({known}); "
            f"its flags were checked against {nearest}, the nearest older release"
        )
        fix = f"check the version number; a build of your own may accept other flags than {table.version}"
    return Finding(
        "param.flag-table-version",
        Severity.INFO,
        message,
        fix=fix,
        details={"requested_version": context.version, "table_version": table.version, "match": table.match},
    )


def _unknown(context: ParameterContext, table: FlagTable, option: Option) -> Finding:
    typed = option.typed
    history = _history(context, typed)
    if history is not None:
        return history
    suggestions: list[str] = []
    equivalent = EQUIVALENTS.get(context.engine, {}).get(typed)
    if equivalent is not None and (not equivalent.flag or table.lookup(equivalent.flag) is not None):
        other = "SGLang" if context.engine == "vllm" else "vLLM"
        if equivalent.flag:
            note = f" ({equivalent.note})" if equivalent.note else ""
            suggestions.append(
                f"{typed} is {other}'s flag; {context.label}'s equivalent is {equivalent.flag}{note}"
            )
        else:
            suggestions.append(f"{typed} is {other}'s flag: {equivalent.note}")
    names = [name for name in table.flags if not table.flags[name].deprecated]
    spelled = typed.replace("_", "-") if typed.startswith("--") else typed
    close = (
        difflib.get_close_matches(spelled, names, n=1, cutoff=0.6)
        if len(spelled) <= MAX_SUGGESTED_LENGTH
        else []
    )
    if close and not suggestions:
        suggestions.append(f"did you mean {close[0]}?")
    fix = "; ".join(suggestions) or f"remove it, or look it up in {context.label}'s --help"
    return Finding(
        "param.unknown-flag",
        Severity.ERROR,
        f"line {option.line_number}: {context.label} has no flag {typed}; it would refuse to start "
        "(unrecognized arguments)",
        fix=fix,
        details={"flag": typed, "line": option.line_number, "closest": close[0] if close else None},
    )


def _history(context: ParameterContext, typed: str) -> Finding | None:
    """A flag other releases of the engine know: removed (or renamed) before, or added after."""
    history, table = context.history, context.table
    assert table is not None
    flag = history.flag(typed) if history is not None else None
    if history is None or flag is None:
        return None
    status = history.status(flag, table.version)
    engine = context.engine
    if status.state == "not-yet":
        first = engine_label(engine, status.changed_in)
        return Finding(
            "param.unknown-flag",
            Severity.ERROR,
            f"{typed} does not exist in {context.label} yet; it appears in {first}",
            fix=f"remove it, or deploy {first} or later",
            details={"flag": typed, "first_release": status.changed_in},
        )
    if status.state != "removed":
        return None
    removed_in, last = status.changed_in, status.last_with_it
    details = {"flag": typed, "removed_in": removed_in, "last_release": last, "replacement": None}
    accepted = f"{engine_label(engine, last)} was the last to accept it"
    if flag.replacement:
        current = history.replacement_at(typed, table.version)
        renamed = f" in {engine_label(engine, flag.deprecated_in)}" if flag.deprecated_in else ""
        message = (
            f"{typed} was renamed to {flag.replacement}{renamed} and removed in "
            f"{engine_label(engine, removed_in)} ({accepted}); {context.label} refuses it"
        )
        if current is not None:
            fix = f"use {current}"
            details["replacement"] = current
        else:
            fix = f"remove it: {flag.replacement} is gone from {context.label} too"
        return Finding("param.removed-flag", Severity.ERROR, message, fix=fix, details=details)
    message = (
        f"{typed} was removed in {engine_label(engine, removed_in)} ({accepted}); {context.label} refuses it"
    )
    fix = f"remove it, or deploy {engine_label(engine, last)}"
    return Finding("param.removed-flag", Severity.ERROR, message, fix=fix, details=details)


def _known(context: ParameterContext, spec: FlagSpec, option: Option) -> list[Finding]:
    findings: list[Finding] = []
    where = f"line {option.line_number}"
    if option.abbreviated:
        findings.append(
            Finding(
                "param.abbreviated-flag",
                Severity.INFO,
                f"{where}: {option.typed} is accepted as an abbreviation of {spec.name}",
                fix=f"spell it out as {spec.name}; a later version can add a flag that makes it ambiguous",
                details={"flag": option.typed},
            )
        )
    if spec.deprecated:
        target = f"use {spec.renamed_to}" if spec.renamed_to else "remove it"
        flag = context.history.flag(option.typed) if context.history is not None else None
        removed_in = flag.removed_in if flag is not None else None
        later = (
            f"{engine_label(context.engine, removed_in)} rejects it"
            if removed_in
            else "a later version will reject it"
        )
        findings.append(
            Finding(
                "param.deprecated-flag",
                Severity.WARNING,
                f"{where}: {option.typed} is deprecated in {context.label}"
                + (f" ({spec.help})" if spec.help else ""),
                fix=f"{target}; {later}",
                details={"flag": option.typed, "renamed_to": spec.renamed_to, "removed_in": removed_in},
            )
        )
    findings.extend(_values(context, spec, option))
    return findings


def _values(context: ParameterContext, spec: FlagSpec, option: Option) -> list[Finding]:
    where = f"line {option.line_number}"
    takes = "none" if option.typed in spec.negations else spec.takes_value
    if takes == "none":
        if option.inline_value:
            return [
                Finding(
                    "param.unexpected-value",
                    Severity.ERROR,
                    f"{where}: {option.typed} is a switch and takes no value, but "
                    f"'{option.typed}={option.values[-1]}' gives one",
                    fix=f"write {option.typed} alone"
                    + (f", or {spec.negations[0]} to turn it off" if spec.negations else ""),
                    details={"flag": option.typed},
                )
            ]
        return []
    if not option.values:
        if takes in {"one", "many"}:
            return [
                Finding(
                    "param.missing-value",
                    Severity.ERROR,
                    f"{where}: {option.typed} needs a value and none follows it",
                    fix=f"give it one: {option.typed} VALUE",
                    details={"flag": option.typed},
                )
            ]
        return []
    findings: list[Finding] = []
    for value in option.values:
        findings.extend(_one_value(context, spec, option, value))
    return findings


def _one_value(context: ParameterContext, spec: FlagSpec, option: Option, value: str) -> list[Finding]:
    where = f"line {option.line_number}"
    if value != value.strip() and spec.choices and value.strip() in [str(choice) for choice in spec.choices]:
        return []  # param.stray-whitespace names it
    if spec.choices and not _plugin_given(context, spec):
        allowed = [str(choice) for choice in spec.choices if choice is not None]
        if value not in allowed:
            close = difflib.get_close_matches(value, allowed, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            shown = ", ".join(allowed) if len(allowed) <= 40 else ", ".join(allowed[:40]) + ", ..."
            return [
                Finding(
                    "param.invalid-choice",
                    Severity.ERROR,
                    f"{where}: {value!r} is not a valid value of {spec.name} in {context.label}",
                    fix=f"{hint}valid values: {shown}",
                    details={"flag": spec.name, "value": value, "closest": close[0] if close else None},
                )
            ]
    if spec.type in {"int", "float"} and not HUMAN_NUMBER.match(value) and value.lower() != "auto":
        return [
            Finding(
                "param.invalid-number",
                Severity.ERROR,
                f"{where}: {spec.name} takes a number but got {value!r}",
                fix=f"give a number, e.g. {spec.name} {spec.default if spec.default is not None else 1}",
                details={"flag": spec.name, "value": value},
            )
        ]
    return []


def _plugin_given(context: ParameterContext, spec: FlagSpec) -> bool:
    """vLLM loads extra parser names from --tool-parser-plugin / --reasoning-parser-plugin."""
    plugins = {
        "--tool-call-parser": "--tool-parser-plugin",
        "--reasoning-parser": "--reasoning-parser-plugin",
    }
    plugin = plugins.get(spec.name)
    return bool(plugin and context.parameters.value_of(plugin))


def _table_spellings(context: ParameterContext) -> frozenset[str]:
    return frozenset(context.table.spellings()) if context.table is not None else frozenset()


def _strays(context: ParameterContext) -> list[Finding]:
    findings: list[Finding] = []
    arguments = context.parameters.arguments
    pasted = bool(arguments) and arguments[0].text.rsplit("/", 1)[-1] in ENGINE_COMMANDS
    for argument in context.parameters.strays:
        if ENV_ASSIGNMENT.match(argument.text):
            continue  # param.env-in-args names it
        if pasted and argument.line_number == arguments[0].line_number:
            continue  # param.command-in-args names it
        if IMAGE_REFERENCE.match(argument.text):
            continue  # param.launcher-option names it
        flag = keyword_flag(argument.text, _table_spellings(context))
        findings.append(
            Finding(
                "param.unexpected-value",
                Severity.ERROR,
                f"line {argument.line_number}: {argument.text!r} follows no flag that takes it; "
                f"{context.label} would refuse it as an unrecognized argument",
                fix=f"write it as the flag {flag}: {argument.text!r} is the Python keyword of the engine's "
                "API, which the command line does not read"
                if flag
                else "remove it, or put the flag it belongs to before it "
                "(modelyard gives the model path itself)",
                details={"line": argument.line_number, "argument": argument.text},
            )
        )
    return findings


def check_auto_tool_choice(context: ParameterContext) -> list[Finding]:
    """vLLM refuses to start with --enable-auto-tool-choice and no --tool-call-parser."""
    if context.engine != "vllm":
        return []
    parsed = context.parameters
    option = parsed.find("--enable-auto-tool-choice")
    if option is None or (option.spec is not None and option.typed in option.spec.negations):
        return []
    if parsed.value_of("--tool-call-parser"):
        return []
    return [
        Finding(
            "param.auto-tool-choice-without-parser",
            Severity.ERROR,
            f"line {option.line_number}: --enable-auto-tool-choice is given without --tool-call-parser; "
            "vLLM refuses to start",
            fix="add --tool-call-parser with the model's parser "
            "(Qwen3.5/3.6: qwen3_coder; Qwen3, Hermes: hermes)",
        )
    ]
