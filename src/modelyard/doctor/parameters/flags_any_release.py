"""Flags no release of the engine has, for plans that do not say which release they run.

Without a version there is no one flag table to check against (``flags.check_flags`` needs it),
but a word that no release from the oldest to the newest table ever accepted is refused by every
one of them: argparse stops with "unrecognized arguments" (vLLM's ``FlexibleArgumentParser``,
SGLang's ``ServerArgs.add_cli_args``). The rule reads the engine's flag history
(``backends.flag_tables.load_engine_history``): the spelling as vLLM normalises it
(``--max_model_len``), or any unique prefix of a known spelling (argparse's abbreviations), is
accepted; anything else is ``param.unknown-flag``, an error, with the other engine's equivalent
when it is that engine's flag (``equivalents.EQUIVALENTS``). Launcher options are
``launcher.check_launcher_options``'s.

A word before the first flag is refused by every release too: ``vllm serve`` takes one positional
argument, the model, which modelyard gives itself, and SGLang's ``launch_server`` takes none. It is
``param.unexpected-value``, an error, as ``flags.check_flags`` says it with a table; a Python keyword
typed as a word (``trust_remote_code=True``) names the flag it stands for (``keyword_flag``).
"""

from __future__ import annotations

import bisect

from modelyard.backends.flag_tables import EngineHistory, load_engine_history
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext, engine_label
from modelyard.doctor.parameters.equivalents import EQUIVALENTS
from modelyard.doctor.parameters.launcher import IMAGE_REFERENCE, launcher_option
from modelyard.doctor.parameters.text import ENGINE_COMMANDS, ENV_ASSIGNMENT

ENGINES = ("vllm", "sglang")
MAX_EXPLAINED = 9


def keyword_flag(word: str, known: frozenset[str]) -> str | None:
    """The flag a ``snake_case=value`` word stands for (a Python keyword of the engine's API typed on the
    command line), when ``--snake-case`` is a known spelling; the fix to write for it."""
    name, equals, value = word.partition("=")
    if not equals or not name.replace("_", "").isalnum() or not name[:1].isalpha():
        return None
    flag = "--" + name.lower().replace("_", "-")
    if flag not in known:
        return None
    if value.strip().lower() in {"true", "1", "yes"}:
        return flag
    if value.strip().lower() in {"false", "0", "no"}:
        return f"--no-{flag[2:]}" if f"--no-{flag[2:]}" in known else f"(leave {flag} out)"
    return f"{flag} {value}"


def _leading_strays(context: ParameterContext, known: frozenset[str]) -> list[Finding]:
    """Words before the first flag: every release refuses them (the model is modelyard's to give)."""
    arguments = context.parameters.arguments
    pasted = bool(arguments) and arguments[0].text.rsplit("/", 1)[-1] in ENGINE_COMMANDS
    findings: list[Finding] = []
    for argument in context.parameters.strays:
        text = argument.text
        if ENV_ASSIGNMENT.match(text) or IMAGE_REFERENCE.match(text):
            continue  # param.env-in-args and param.launcher-option name them
        if pasted and argument.line_number == arguments[0].line_number:
            continue  # param.command-in-args names it
        flag = keyword_flag(text, known)
        fix = (
            f"write it as the flag {flag}: {text!r} is the Python keyword of the engine's API, which the "
            "command line does not read"
            if flag
            else "remove it, or put the flag it belongs to before it (modelyard gives the model path itself)"
        )
        findings.append(
            Finding(
                "param.unexpected-value",
                Severity.ERROR,
                f"line {argument.line_number}: {text!r} follows no flag; every release of "
                f'{engine_label(context.engine)} refuses it ("unrecognized arguments")',
                fix=fix,
                details={"line": argument.line_number, "argument": text, "any_release": True},
            )
        )
    return findings


def check_flags_any_release(context: ParameterContext) -> list[Finding]:
    if context.table is not None or context.engine not in ENGINES:
        return []
    history = load_engine_history(context.engine)
    if history is None:
        return []
    spellings = sorted(history.known_spellings())
    findings: list[Finding] = _leading_strays(context, history.known_spellings())
    releases = f"{history.releases[0]} to {history.releases[-1]}"
    unknown = [
        option
        for option in context.parameters.options
        if "." not in option.typed
        and option.typed.startswith("--")
        and not launcher_option(context.engine, option.typed)
        and not _accepted(history, spellings, option.typed)
    ]
    for option in unknown[:MAX_EXPLAINED]:
        typed = option.typed
        equivalent = EQUIVALENTS.get(context.engine, {}).get(typed)
        other = "SGLang" if context.engine == "vllm" else "vLLM"
        if equivalent is not None:
            fix = (
                f"{typed} is {other}'s flag; use {equivalent.flag}"
                if equivalent.flag
                else f"{typed} is {other}'s flag: {equivalent.note}"
            )
        else:
            fix = f"remove it, or look it up in {engine_label(context.engine)}'s --help"
        findings.append(
            Finding(
                "param.unknown-flag",
                Severity.ERROR,
                f"line {option.line_number}: no release of {engine_label(context.engine)} ({releases}) "
                f'has a flag {typed}; whichever release runs refuses it ("unrecognized arguments")',
                fix=fix,
                details={"flag": typed, "line": option.line_number, "any_release": True},
            )
        )
    if len(unknown) > MAX_EXPLAINED:
        rest = unknown[MAX_EXPLAINED:]
        findings.append(
            Finding(
                "param.unknown-flag",
                Severity.ERROR,
                f"{len(rest):,} more flags no release of {engine_label(context.engine)} has, from line "
                f"{rest[0].line_number} on (first: {rest[0].typed[:80]})",
                fix="remove them",
                details={"count": len(rest), "line": rest[0].line_number, "any_release": True},
            )
        )
    return findings


def _accepted(history: EngineHistory, spellings: list[str], typed: str) -> bool:
    if history.flag(typed) is not None:
        return True
    normalized = history.normalize(typed)
    position = bisect.bisect_left(spellings, normalized)
    return position < len(spellings) and spellings[position].startswith(normalized)
