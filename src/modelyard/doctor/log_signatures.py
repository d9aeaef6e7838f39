"""Engine logs turned into one-line diagnoses that name the fix.

An engine that fails to start leaves the reason somewhere in a few hundred lines of log. Each
``LogSignature`` (``doctor/signatures/``: memory, startup, network) recognises one known failure
by the exact wording vLLM, SGLang, PyTorch, NCCL, CUDA, huggingface_hub, uvicorn, Docker or the
Linux kernel use (each pattern names its source), and turns it into a ``Finding`` with the fix,
filled in with the numbers read from the log. A start that stopped making progress is a finding
too (``log.stalled``, from the last stage the log reached).

Usage::

    findings = diagnose_log(log_text, exit_code=-9, engine_args=["--gpu-memory-utilization", "0.95"])
    findings = diagnose_log(log_text, stalled_seconds=900)   # no new line for 15 minutes
    for finding in findings:  # most relevant first
        print(finding.check_id, finding.message, finding.fix)

``modelyard ps``, ``modelyard logs`` and the console show the first finding next to the instance.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from modelyard.backends.parameters import parse_arguments
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.log_facts import read_log_facts
from modelyard.doctor.signatures import SIGNATURES
from modelyard.doctor.signatures.base import LogContext, engine_table
from modelyard.doctor.signatures.raise_sites import GENERIC_RULES, RULES
from modelyard.doctor.signatures.stall import STALL_SECONDS, stalled_finding

_KILLED_BY_SIGKILL_EXIT_CODES = frozenset({-9, 137})
_MAX_EXCERPT_CHARS = 400
# Fact findings that name what failed, not why: added only where no other finding is an error.
_ONLY_WHEN_ALONE = frozenset({"log.engine-config-invalid"})
# Ids that name one cause: a finding of one makes a fact rule's finding of another redundant.
_SAME_CAUSE: tuple[frozenset[str], ...] = (
    frozenset({"log.cuda-out-of-memory", "log.cuda-graph-capture-oom"}),
    frozenset({"log.nccl-error", "log.nccl-shared-memory"}),
    frozenset(
        {"log.kv-cache-no-memory", "log.max-model-len-exceeds-kv-cache", "log.sglang-not-enough-memory"}
    ),
    frozenset({"log.unrecognized-arguments", "log.launcher-passed-unknown-argument"}),
)

__all__ = ["SIGNATURES", "STALL_SECONDS", "LogContext", "diagnose_log"]


# SGLang's own lines, where its name is not in the log: its scheduler's prefix
# ("[2025-10-16 09:06:22 TP0]") and the start's steps.
_SGLANG_LINES = re.compile(
    r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?: DP\d+)?(?: TP\d+)(?: EP\d+)?(?: PP\d+)?\]"
    r"|server_args=ServerArgs\(|Load weight begin\.|Capture cuda graph begin\."
    r"|Init torch distributed begin\.",
    re.MULTILINE,
)


def _guess_engine(text: str) -> str | None:
    lowered = text.lower()
    if "sglang" in lowered or _SGLANG_LINES.search(text):
        return "sglang"
    if "vllm" in lowered or "enginecore" in lowered:
        return "vllm"
    return None


def _excerpt(text: str, start: int, end: int) -> tuple[str, int]:
    """The whole line(s) around a match, and the 1-based line number where it starts."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end == -1 else line_end
    line = text[line_start:line_end].strip()
    if len(line) > _MAX_EXCERPT_CHARS:
        line = line[: _MAX_EXCERPT_CHARS - 3] + "..."
    return line, text.count("\n", 0, start) + 1


def diagnose_log(
    text: str,
    *,
    exit_code: int | None = None,
    engine: str | None = None,
    engine_args: Sequence[str] = (),
    stalled_seconds: float | None = None,
    stall_after_seconds: float = STALL_SECONDS,
) -> list[Finding]:
    """Every known failure found in an engine log, the most relevant first.

    ``exit_code`` is the engine's exit status as the runtime saw it (``-9`` or ``137``: killed by
    SIGKILL, which with no other finding points at the host's OOM killer). ``engine`` ("vllm",
    "sglang", ...) and ``engine_args`` make the fixes concrete ("lower --gpu-memory-utilization
    from 0.95 to 0.85"); the engine is guessed from the log when not given or not one of those two
    ("custom" backends often run them). ``stalled_seconds``:
    how long the log has had no new line while the engine is still starting; from
    ``stall_after_seconds`` on (``STALL_SECONDS`` unless the caller watches with its own limit),
    and with no error found, the stall is the finding, naming the stage the log stopped in.
    """
    # A custom backend ("custom") may well run vLLM or SGLang: its log says which.
    family = engine if engine in ("vllm", "sglang") else (_guess_engine(text) or engine)
    context = LogContext(engine=family, parameters=parse_arguments(list(engine_args), engine_table(family)))
    findings: list[Finding] = []
    superseded: set[str] = set()
    for signature in SIGNATURES:
        if signature.check_id in superseded:
            continue
        matches = [
            match
            for match in signature.pattern.finditer(text)
            if (signature.when is None or signature.when(match, text))
            and (signature.applies is None or signature.applies(match, text, context))
        ]
        if not matches:
            continue
        first = matches[0]
        message, fix = signature.explain(first, context)
        line, line_number = _excerpt(text, first.start(), first.end())
        findings.append(
            Finding(
                check_id=signature.check_id,
                severity=signature.severity,
                message=message,
                fix=fix,
                details={"line": line, "line_number": line_number, "occurrences": len(matches)},
            )
        )
        superseded.update(signature.supersedes)
    findings = [finding for finding in findings if finding.check_id not in superseded]
    findings.extend(_from_facts(text, context, findings, superseded))
    if exit_code in _KILLED_BY_SIGKILL_EXIT_CODES and not any(
        finding.check_id == "log.host-oom-killed" for finding in findings
    ):
        findings.append(
            Finding(
                check_id="log.host-oom-killed",
                severity=Severity.WARNING if findings else Severity.ERROR,
                message=(
                    f"the engine was killed by SIGKILL (exit status {exit_code}) with no error of its own: "
                    "most often the host's OOM killer, while loading weights"
                ),
                fix=(
                    "check `dmesg | grep -i 'killed process'`; free host RAM or add swap, or raise the "
                    "container's memory limit"
                ),
                details={"exit_code": exit_code},
            )
        )
    if (
        not [finding for finding in findings if finding.check_id != "log.engine-exception"]
        and stalled_seconds is not None
        and stalled_seconds >= stall_after_seconds
    ):
        findings.insert(0, stalled_finding(text, stalled_seconds, family))
    return findings


def _from_facts(
    text: str, context: LogContext, findings: list[Finding], superseded: set[str]
) -> list[Finding]:
    """The causes the log's facts show (``signatures/raise_sites.py``) that no wording named: the
    generic ones only where nothing else is an error."""
    facts = read_log_facts(text)
    named = {finding.check_id for finding in findings} | superseded
    for group in _SAME_CAUSE:
        if named & group:
            named |= group
    added: list[Finding] = []
    already_failed = any(finding.severity is Severity.ERROR for finding in findings)
    for rule in RULES:
        finding = rule(facts, text, context)
        if finding is None or (already_failed and finding.check_id in _ONLY_WHEN_ALONE):
            continue
        if finding.check_id not in named:
            added.append(finding)
            named.add(finding.check_id)
    if not any(finding.severity is Severity.ERROR for finding in (*findings, *added)):
        for rule in GENERIC_RULES:
            finding = rule(facts, text, context)
            if finding is not None and finding.check_id not in named:
                added.append(finding)
                break
    return added
