"""Checks of the environment variables: how they are written, and whether the engine reads them.

Ids: ``param.env-spaces``, ``param.env-syntax``, ``param.env-quoted-value``, ``param.env-not-read``.
The env arrives as ``KEY=VALUE`` lines (a list or one text) or as a mapping.
"""

from __future__ import annotations

import difflib
import re

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters.context import ParameterContext, engine_label
from modelyard.doctor.parameters.env_replacements import ENGINE_PREFIXES, env_severity, replacement_of

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_lines(env: dict[str, str] | list[str] | str) -> list[tuple[int, str]]:
    """(line number, text) of each non-empty, non-comment line; a mapping becomes KEY=VALUE lines."""
    if isinstance(env, dict):
        return [(number, f"{key}={value}") for number, (key, value) in enumerate(env.items(), start=1)]
    items = [env] if isinstance(env, str) else list(env)
    lines: list[tuple[int, str]] = []
    number = 0
    for item in items:
        for text in str(item).splitlines() or [""]:
            number += 1
            if text.strip() and not text.lstrip().startswith("#"):
                lines.append((number, text))
    return lines


def check_env_syntax(context: ParameterContext) -> list[Finding]:
    findings: list[Finding] = []
    for number, text in env_lines(context.env):
        where = f"env line {number}"
        name, equals, value = text.partition("=")
        stripped = text.strip()
        if stripped.startswith("-"):
            findings.append(
                Finding(
                    "param.env-syntax",
                    Severity.ERROR,
                    f"{where}: {stripped!r} is a flag, not an environment variable",
                    fix=f"move {stripped!r} to the backend parameters",
                    details={"line": number},
                )
            )
            continue
        if not equals:
            findings.append(
                Finding(
                    "param.env-syntax",
                    Severity.ERROR,
                    f"{where}: {stripped!r} has no '='",
                    fix=f"write it as KEY=VALUE, e.g. {stripped.split()[0]}=1",
                    details={"line": number},
                )
            )
            continue
        if name != name.strip() or (value != value.lstrip() and value.strip()):
            findings.append(
                Finding(
                    "param.env-spaces",
                    Severity.ERROR,
                    f"{where}: {text!r} has spaces around '='; the variable would be named {name!r} "
                    f"or its value start with a space",
                    fix=f"write {name.strip()}={value.strip()}",
                    details={"line": number},
                )
            )
            continue
        if name.startswith("export "):
            findings.append(
                Finding(
                    "param.env-syntax",
                    Severity.ERROR,
                    f"{where}: {text!r} starts with 'export', which is shell syntax",
                    fix=f"write {name.removeprefix('export ').strip()}={value}",
                    details={"line": number},
                )
            )
            continue
        if not NAME_PATTERN.match(name):
            findings.append(
                Finding(
                    "param.env-syntax",
                    Severity.ERROR,
                    f"{where}: {name!r} is not a valid environment variable name",
                    fix="use letters, digits and '_', not starting with a digit",
                    details={"line": number},
                )
            )
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            findings.append(
                Finding(
                    "param.env-quoted-value",
                    Severity.WARNING,
                    f"{where}: the value of {name} is quoted ({value}); the quotes become part of the value",
                    fix=f"write {name}={value[1:-1]}",
                    details={"line": number, "variable": name},
                )
            )
        if value != value.rstrip():
            findings.append(
                Finding(
                    "param.stray-whitespace",
                    Severity.WARNING,
                    f"{where}: the value of {name} ends with whitespace ({value!r})",
                    fix=f"write {name}={value.strip()}",
                    details={"line": number, "variable": name},
                )
            )
    return findings


def check_env_read(context: ParameterContext) -> list[Finding]:
    """Engine variables (``VLLM_*``, ``SGLANG_*``) this engine version does not read."""
    table = context.table
    if table is None:
        return []
    findings: list[Finding] = []
    for name in context.deployment_environment:
        other = next(
            (engine for engine, prefixes in ENGINE_PREFIXES.items() if name.startswith(prefixes)), None
        )
        if other is None:
            continue
        if other != context.engine:
            findings.append(
                Finding(
                    "param.env-not-read",
                    Severity.WARNING,
                    f"{name} is a {engine_label(other)} variable; {context.label} does not read it",
                    fix=f"remove {name}, or find {context.label}'s own setting for it",
                    details={"variable": name},
                )
            )
            continue
        lookup = "SGLANG_" + name.removeprefix("SGL_") if name.startswith("SGL_") else name
        if name in table.deprecated_env_vars or lookup in table.deprecated_env_vars:
            note = table.deprecated_env_vars.get(name) or table.deprecated_env_vars.get(lookup, "")
            findings.append(
                Finding(
                    "param.env-not-read",
                    Severity.WARNING,
                    f"{name} is deprecated or removed in {context.label}: {note}",
                    fix=f"remove {name}",
                    details={"variable": name},
                )
            )
            continue
        if name in table.env_vars or lookup in table.env_vars:
            continue
        findings.append(_not_read(context, name))
    return context.answered_by_table(findings)


def _not_read(context: ParameterContext, name: str) -> Finding:
    """``name`` is not read by this version: say which older version last read it, or which newer one
    will, and what replaced it (``env_replacements``)."""
    assert context.table is not None
    replacement = replacement_of(context.engine, context.table, name)
    history = context.history
    presence = history.env_var(name) if history is not None else None
    status = history.status(presence, context.table.version) if history and presence else None
    last_read_by = status.last_with_it if status is not None and status.state == "removed" else None
    if status is not None and status.state == "removed":
        detail = (
            f" ({engine_label(context.engine, status.last_with_it)} was the last to read it; "
            f"{engine_label(context.engine, status.changed_in)} dropped it)"
        )
        fix = f"remove {name}; it was dropped"
        if replacement is not None:
            detail += f"; what it set is now {replacement.text}"
            fix = f"remove {name} and use {replacement.text}" + (
                f" ({replacement.note})" if replacement.note else ""
            )
    elif status is not None and status.state == "not-yet":
        first = engine_label(context.engine, status.changed_in)
        detail = f" (it appears in {first})"
        fix = f"remove {name}, or deploy {first} or later"
    else:
        close = difflib.get_close_matches(name, sorted(context.table.env_vars), n=1, cutoff=0.85)
        detail = ""
        fix = f"did you mean {close[0]}?" if close else f"remove {name}, or check its spelling"
    severity = env_severity(context.engine, context.parameters)
    consequence = (
        "it refuses to start with --fail-on-environ-validation"
        if severity is Severity.ERROR
        else "setting it changes nothing"
    )
    return Finding(
        "param.env-not-read",
        severity,
        f"{context.label} does not read {name}{detail}; {consequence}",
        fix=fix,
        details={
            "variable": name,
            "last_read_by": last_read_by,
            "replacement": replacement.flag or replacement.text if replacement is not None else None,
        },
    )
