"""How a command fails: one line on stderr, or with ``--json`` one JSON object on stdout.

Either way the exit status is the same (1 for an error of ours, 2 for a usage error), so a
script can test ``$?`` and, with ``--json``, read ``{"error": {"message", "hint", "code",
"details"}}`` instead of scraping stderr. The root command switches JSON errors on when
``--json`` is among the arguments (``errors_as_json``).

Usage::

    fail("no model named 'x'", "see `modelyard models list`")   # exits 1
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

_errors_as_json = False


def set_errors_as_json(enabled: bool) -> None:
    global _errors_as_json
    _errors_as_json = enabled


def errors_as_json() -> bool:
    return _errors_as_json


def report_error(
    message: str,
    hint: str | None = None,
    *,
    code: str | None = None,
    details: Any = None,
) -> None:
    """Print one error: a JSON object on stdout under ``--json``, else one line on stderr."""
    if _errors_as_json:
        error: dict[str, Any] = {"message": message, "hint": hint, "code": code}
        if details is not None:
            error["details"] = details
        typer.echo(json.dumps({"error": error}, indent=2))
        return
    from rich.markup import escape

    from modelyard.cli.context import stderr

    line = f"[red]error:[/red] {escape(message)}"
    if hint:
        line += f" ({escape(hint)})"
    stderr.print(line, highlight=False, markup=True, soft_wrap=True)


def fail(
    message: str,
    hint: str | None = None,
    *,
    code: str | None = None,
    details: Any = None,
    exit_status: int = 1,
) -> NoReturn:
    """Report one error (``report_error``) and end the command with ``exit_status``."""
    report_error(message, hint, code=code, details=details)
    sys.stdout.flush()
    raise typer.Exit(exit_status)
