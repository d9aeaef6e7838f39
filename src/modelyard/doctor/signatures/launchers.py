"""Log signature of a launcher and an engine of releases that do not fit each other.

Launchers that run the engine in their own Python process (Ray Serve LLM, Xinference, KServe's
Hugging Face server, verl, OpenRLHF, LLaMA-Factory) call the engine's internal API: its engine
classes, config objects and helpers, which change between releases without notice. When the
installed engine is not the release the launcher was written for, the start fails inside the
launcher's own code with Python's plain words for a changed API (``AttributeError: ... has no
attribute``, ``TypeError: ... got an unexpected keyword argument``, ``ImportError: cannot import
name ... from 'vllm...'``, or ``name '...' is not defined`` where the launcher's import of the helper
was guarded), not with an engine error. Those words alone mean little; next to a
launcher's frames or process names in the same log they mean the two releases disagree. The
engine's own ``EngineArgs`` keyword refusal is ``log.launcher-passed-unknown-argument``.
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature

# What each launcher's frames, actors or loggers look like in a log, and its name for the message.
_LAUNCHERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"ray\.llm\._internal|ray::_EngineBackgroundProcess|ServeReplica:[^\s]*LLM"),
        "Ray Serve LLM",
    ),
    (re.compile(r"xinference[./]model[./]llm|xinference\.core"), "Xinference"),
    (re.compile(r"huggingfaceserver"), "KServe's Hugging Face server"),
    (re.compile(r"\bverl[./]workers"), "verl"),
    (re.compile(r"\bopenrlhf[./]"), "OpenRLHF"),
    (re.compile(r"\bllamafactory[./]|SGLang server initialization failed"), "LLaMA-Factory"),
)

_CHANGED_API = re.compile(
    r"AttributeError: (?P<attribute>'[\w.]+' object has no attribute '\w+'"
    r"|module '[\w.]+' has no attribute '\w+')"
    r"|TypeError: (?P<keyword>[\w.]+\(\) got an unexpected keyword argument '\w+')"
    r"|ImportError: (?P<import>cannot import name '\w+' from '(?:vllm|sglang)[\w.]*')"
    # A launcher that imports an engine helper inside try/except meets the missing name later.
    r"|(?P<name>name '\w+' is not defined)"
)


def _launcher_in(text: str) -> str | None:
    for pattern, name in _LAUNCHERS:
        if pattern.search(text):
            return name
    return None


def _changed_api_under_launcher(match: re.Match[str], text: str) -> bool:
    if "EngineArgs" in match.group(0):
        return False  # the engine's own keyword refusal: log.launcher-passed-unknown-argument
    return _launcher_in(text) is not None


def _explain_launcher_engine_mismatch(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    launcher = _launcher_in(match.string) or "the launcher"
    engine = {"sglang": "SGLang"}.get(context.engine or "", "vLLM")
    error = match.group(0).strip()
    return (
        f"{launcher} and the installed {engine} are releases that do not fit each other: the launcher's "
        f"code calls an engine API this {engine} does not have ({error[:160]})",
        f"install the {engine} release this {launcher} release supports (its requirements pin it; "
        f"`pip show` both to compare), or upgrade {launcher} to a release made for your {engine}; where "
        "the launcher picks between the engine's old and new engine paths (vLLM V0 or V1), set that "
        "choice explicitly (VLLM_USE_V1=1 for vLLM 0.8 and later)",
    )


def _explain_version_guard(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    engine = {"sglang": "SGLang"}.get(match["engine"].lower(), "vLLM")
    return (
        f"the launcher refuses the installed {engine} {match['version']}: it checks the engine's version "
        "and supports only the releases it names",
        f"install one of the {engine} releases the launcher lists (its requirements pin them), or upgrade "
        f"the launcher to a release made for {engine} {match['version']}",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.launcher-engine-mismatch",
        Severity.ERROR,
        re.compile(
            r"(?P<engine>vllm|sglang) version (?P<version>[\w.+\-]+) (?:is )?not supported",
            re.IGNORECASE,
        ),
        _explain_version_guard,
        "a launcher's own check of the engine's version (verl/third_party/vllm/__init__.py: "
        '"vllm version {version} not supported. Currently supported versions are ...")',
    ),
    LogSignature(
        "log.launcher-engine-mismatch",
        Severity.ERROR,
        _CHANGED_API,
        _explain_launcher_engine_mismatch,
        "Python's AttributeError/TypeError/ImportError raised in a launcher's own frames (ray.llm, "
        "xinference, huggingfaceserver, verl, openrlhf, llamafactory)",
        when=_changed_api_under_launcher,
    ),
)
