"""How the CLI prints: rich tables for people, JSON (``--json``) for scripts, units spelled out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from modelyard.cli.context import stderr, stdout


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


UNBOUNDED_WIDTH = 100_000
# Columns whose long text wraps in a narrow terminal; every other column keeps one line.
WRAPPING_COLUMNS = frozenset({"REASON", "PATH", "VERSIONS", "DEPLOYMENTS", "MESSAGE", "FINDING", "ERROR"})
# The space rich puts between two columns of a borderless table.
COLUMN_GAP = 2
# A wrapping column narrower than this reads one word per line: drop optional columns first.
MINIMUM_WRAP_WIDTH = 24


@dataclass(frozen=True)
class Column:
    """One column of ``print_table``.

    ``wraps``: long text (a reason, a message) that wraps within the width the other columns
    leave; ``optional``: left out (rightmost first, with a note on stderr) when the terminal is
    too narrow for every column; ``max_width``: a longer value in a column that does not wrap is
    cut with an ellipsis (in a terminal only).
    """

    header: str
    wraps: bool = False
    optional: bool = False
    max_width: int = 32


def _as_column(column: str | Column) -> Column:
    return column if isinstance(column, Column) else Column(column, wraps=column in WRAPPING_COLUMNS)


def _cell(value: Any) -> Text:
    # None: no value ("-"); "": nothing to repeat (continuation rows). Text: never read as markup.
    if isinstance(value, Text):
        return value
    return Text("-" if value is None else str(value))


def _natural_width(column: Column, cells: Sequence[Text]) -> int:
    longest = max(
        (max((len(line) for line in cell.plain.splitlines()), default=0) for cell in cells), default=0
    )
    return max(len(column.header), longest)


def _fit(columns: list[Column], cells: list[list[Text]], width: int) -> tuple[list[int], dict[int, int]]:
    """Which columns to show in ``width`` (indices) and the width of each one that does not wrap."""
    natural = [_natural_width(column, [row[index] for row in cells]) for index, column in enumerate(columns)]
    shown = list(range(len(columns)))

    def needed() -> int:
        total = 0
        for index in shown:
            column = columns[index]
            if column.wraps:
                total += min(natural[index], MINIMUM_WRAP_WIDTH)
            else:
                total += min(natural[index], max(column.max_width, len(column.header)))
        return total + COLUMN_GAP * (len(shown) - 1)

    for index in reversed(range(len(columns))):
        if needed() <= width:
            break
        if columns[index].optional:
            shown.remove(index)
    fixed = {
        index: min(natural[index], max(columns[index].max_width, len(columns[index].header)))
        for index in shown
        if not columns[index].wraps
    }
    return shown, fixed


def print_table(
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    links: Sequence[str] = (),
) -> None:
    """A borderless table, readable at 80 columns; ``links`` are listed under it as ``[n] URL``.

    In a terminal: columns that do not wrap keep one line (a value past ``max_width`` ends in an
    ellipsis), wrapping columns share what is left, optional columns go first when that is too
    little. Piped: every column, never wrapped nor cut (one line per row, for grep).
    """
    specs = [_as_column(column) for column in columns]
    cells = [[_cell(value) for value in row] for row in rows]
    table = Table(title=title, show_edge=False, pad_edge=False, box=None, header_style="bold")
    if stdout.is_terminal:
        shown, fixed = _fit(specs, cells, stdout.width)
        for index in shown:
            column = specs[index]
            if column.wraps:
                table.add_column(
                    column.header, overflow="fold", ratio=1, min_width=min(MINIMUM_WRAP_WIDTH, 8)
                )
            else:
                table.add_column(column.header, no_wrap=True, overflow="ellipsis", max_width=fixed[index])
        for row in cells:
            table.add_row(*(row[index] for index in shown))
        stdout.print(table)
        hidden = [specs[index].header for index in range(len(specs)) if index not in shown]
        if hidden:
            stderr.print(
                f"[dim]({', '.join(hidden)} left out at {stdout.width} columns: widen the terminal, "
                "or use --json)[/dim]",
                highlight=False,
            )
    else:
        for column in specs:
            table.add_column(column.header, no_wrap=True)
        for row in cells:
            table.add_row(*row)
        # Console.print clamps its width to the console's (80 when piped): use a console as wide as the table.
        unbounded = stdout.options.update(width=UNBOUNDED_WIDTH)
        needed = Measurement.get(stdout, unbounded, table).maximum
        Console(width=max(needed, stdout.width), no_color=True, highlight=False).print(table)
    for number, link in enumerate(links, start=1):
        stdout.print(Text(f"[{number}] {link}"), soft_wrap=True)


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """``label: value`` lines, labels aligned."""
    width = max((len(label) for label, _ in pairs), default=0)
    for label, value in pairs:
        shown = "-" if value is None or value == "" or value == [] else value
        line = Text(label.ljust(width), style="bold")
        line.append(f"  {shown}", style="")
        stdout.print(line, highlight=False)


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
