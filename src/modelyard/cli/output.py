"""How the CLI prints: rich tables for people, JSON (``--json``) for scripts, units spelled out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from modelyard.cli.context import stdout


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


UNBOUNDED_WIDTH = 100_000
# Columns whose long text wraps in a narrow terminal; every other column keeps one line.
WRAPPING_COLUMNS = frozenset({"REASON", "PATH", "VERSIONS", "DEPLOYMENTS"})


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    """A borderless table. Piped output is never wrapped (one line per row, for grep)."""
    table = Table(title=title, show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in columns:
        wraps = column in WRAPPING_COLUMNS
        table.add_column(
            column,
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
            min_width=16 if wraps else None,
        )
    for row in rows:
        # None: no value ("-"); "": nothing to repeat (continuation rows).
        table.add_row(*("-" if value is None else str(value) for value in row))
    if stdout.is_terminal:
        stdout.print(table)
    else:
        # Console.print clamps its width to the console's (80 when piped): use a console as wide as the table.
        unbounded = stdout.options.update(width=UNBOUNDED_WIDTH)
        needed = Measurement.get(stdout, unbounded, table).maximum
        Console(width=max(needed, stdout.width), no_color=True, highlight=False).print(table)


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """``label: value`` lines, labels aligned."""
    width = max((len(label) for label, _ in pairs), default=0)
    for label, value in pairs:
        shown = "-" if value is None or value == "" or value == [] else value
        stdout.print(f"[bold]{label.ljust(width)}[/bold]  {shown}", highlight=False)


def format_bytes(size_bytes: int | None) -> str:
    if size_bytes is None:
        return "-"
    value = float(size_bytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size_bytes} B"


def format_count(count: int | None) -> str:
    """A parameter count: 135M, 27.0B."""
    if count is None:
        return "-"
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f}B"
    if count >= 1_000_000:
        return f"{count / 1e6:.0f}M"
    if count >= 1_000:
        return f"{count / 1e3:.0f}K"
    return str(count)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600:02d}h"
