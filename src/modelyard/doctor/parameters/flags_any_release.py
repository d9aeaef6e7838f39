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
"""

from __future__ import annotations

import bisect

from modelyard.backends.flag_tables import EngineHistory, load_engine_history
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext, engine_label
from modelyard.doctor.parameters.equivalents import EQUIVALENTS
from modelyard.doctor.parameters.launcher import launcher_option

ENGINES = ("vllm", "sglang")
MAX_EXPLAINED = 9


def check_flags_any_release(context: ParameterContext) -> list[Finding]:
    if context.table is not None or context.engine not in ENGINES:
        return []
    history = load_engine_history(context.engine)
    if history is None:
        return []
    spellings = sorted(history.known_spellings())
    findings: list[Finding] = []
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
