"""What a log signature is: the wording that recognises one failure, and how to explain it.

A ``LogSignature`` matches the exact wording of the program that fails (each names its source);
``when`` narrows a match by what else the log says (the same words can mean two things), and
``applies`` by that and the engine's arguments (Triton's fp8e4nv refusal is the KV cache's where
``--kv-cache-dtype fp8`` was asked, the checkpoint's FP8 weights where it was not);
``supersedes`` names the more generic signatures a match makes redundant. ``LogContext`` carries
what the diagnosis knows besides the text: the engine family and its parsed arguments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from modelyard.backends.flag_tables import FlagTable, available_versions, load_flag_table
from modelyard.backends.parameters import ParsedParameters
from modelyard.doctor.findings import Severity
from modelyard.errors import InvalidInput

# What the fix builder receives: the first match, and what is known about the engine.
FixBuilder = Callable[[re.Match[str], "LogContext"], tuple[str, str]]
# Whether a match counts, given the whole log text.
Condition = Callable[[re.Match[str], str], bool]
# Whether a match counts, given the whole log text and what is known of the engine's arguments.
ContextCondition = Callable[[re.Match[str], str, "LogContext"], bool]


@dataclass(frozen=True)
class LogContext:
    """What ``diagnose_log`` knows besides the text: the engine family and its parsed arguments."""

    engine: str | None
    parameters: ParsedParameters

    def flag_value(self, *names: str) -> str | None:
        """The value of the flag ``names`` denote (aliases, ``--flag=VALUE``; the last one wins)."""
        return self.parameters.value_of(*names)

    def float_flag(self, *names: str) -> float | None:
        try:
            return self.parameters.number(*names)
        except InvalidInput:
            return None

    @property
    def is_sglang(self) -> bool:
        return self.engine == "sglang"


@dataclass(frozen=True)
class LogSignature:
    """One known failure: the pattern that recognises it and how to explain it."""

    check_id: str
    severity: Severity
    pattern: re.Pattern[str]
    explain: FixBuilder
    # Where the wording comes from, for the reader of these files.
    source: str
    when: Condition | None = None
    supersedes: tuple[str, ...] = ()
    applies: ContextCondition | None = None


def engine_table(engine: str | None) -> FlagTable | None:
    """The newest flag table of ``engine``: the log does not say which version wrote it."""
    if engine not in ("vllm", "sglang"):
        return None
    versions = available_versions(engine)
    return load_flag_table(engine, versions[-1]) if versions else None


def first_group(match: re.Match[str], *names: str) -> str | None:
    """The first named group that matched (the alternatives of one pattern name their groups apart)."""
    for name in names:
        value = match.groupdict().get(name)
        if value:
            return value
    return None


def round_down(value: float, step: float = 0.01) -> float:
    return round(math.floor(value / step + 1e-9) * step, 2)


def lower_utilization_text(context: LogContext, fallback_from: float | None = None) -> str:
    current = context.float_flag("--gpu-memory-utilization") or fallback_from
    if current is None:
        return "lower --gpu-memory-utilization (vLLM's default is 0.9 or 0.92) by 0.05-0.1"
    return f"lower --gpu-memory-utilization from {current:g} to {max(round_down(current - 0.1), 0.05):g}"
