"""A flag and its value that reach the engine as one argument (``param.unknown-flag``,
``details.joined``).

Where a launcher hands each item of a list to the engine as one argument (a Compose or Kubernetes
command list, GPUStack's parameter list: ``ParameterContext.items_are_arguments``), an item
``--dtype auto`` is one word. argparse (vLLM, SGLang, transformers serve) finds no option of that
name, and a word with a space is taken for a positional (``_parse_optional``): "unrecognized
arguments: --dtype auto", and the start stops: an error. llama.cpp's ``common/arg.cpp`` looks every
argument up whole, so ``--ctx-size=16384`` is refused as well as ``--ctx-size 16384`` in one word
("error: invalid argument"; it exits): an error. llama-box prints "Unknown argument" and starts
with its defaults: a warning.
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext

ARGPARSE_ENGINES = ("vllm", "sglang", "transformers")
WHOLE_WORD_ENGINES = ("llama.cpp",)
CONTINUING_ENGINES = ("llama-box",)
_FLAG_WITH_VALUE = re.compile(r"^(?P<flag>--?[A-Za-z][\w.-]*)(?P<separator>[ =])(?P<value>.*)$", re.DOTALL)


def _words(context: ParameterContext) -> list[str]:
    raw = context.backend_parameters
    if context.items_are_arguments and not isinstance(raw, str):
        return [str(item) for item in raw]
    return context.parameters.argv


def check_joined_arguments(context: ParameterContext) -> list[Finding]:
    engine = context.engine
    if engine not in (*ARGPARSE_ENGINES, *WHOLE_WORD_ENGINES, *CONTINUING_ENGINES):
        return []
    findings: list[Finding] = []
    for word in _words(context):
        match = _FLAG_WITH_VALUE.match(word)
        if match is None:
            continue
        separator = match["separator"]
        if separator == "=" and engine not in WHOLE_WORD_ENGINES:
            continue  # argparse splits --flag=value itself
        findings.append(_finding(context, word, match["flag"], match["value"], separator))
    return findings


def _finding(context: ParameterContext, word: str, flag: str, value: str, separator: str) -> Finding:
    engine = context.engine
    joined = "its value after '='" if separator == "=" else "its value in one argument"
    split = f"'{flag}' and '{value}' as two arguments"
    if engine in CONTINUING_ENGINES:
        return Finding(
            "param.unknown-flag",
            Severity.WARNING,
            f"the argument {word!r} holds the flag {flag} and {joined}: llama-box reports it as an "
            "unknown argument and starts with its default instead",
            fix=f"give {split} (in a list: two items)",
            details={"argument": word, "flag": flag, "joined": True},
        )
    refusal = (
        "llama.cpp looks every argument up whole and exits ('error: invalid argument')"
        if engine in WHOLE_WORD_ENGINES
        else f"{context.label}'s argument parser finds no such option and stops ('unrecognized arguments')"
    )
    return Finding(
        "param.unknown-flag",
        Severity.ERROR,
        f"the argument {word!r} holds the flag {flag} and {joined}: {refusal}",
        fix=f"give {split} (in a Compose or Kubernetes command list: two items)",
        details={"argument": word, "flag": flag, "joined": True},
    )
