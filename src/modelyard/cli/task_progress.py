"""Following a model task from the CLI: a rich progress display fed by ``GET /api/v1/tasks/{id}``.

One bar for the whole task and one per file being transferred, each with bytes, the rate and the
time left as the server measures them; retries, restarts and failures are printed as lines as
they happen (so piped output and logs keep them). Returns the task once it ends.

Usage::

    task = follow_task(client, task_id)      # raises typer.Exit(1) when it failed or was cancelled
"""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.console import Console

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr
from modelyard.cli.output import format_bytes, format_duration

POLL_SECONDS = 0.5
FINAL_STATES = ("completed", "failed", "cancelled")


def format_rate(bytes_per_second: float | None) -> str:
    return "-" if bytes_per_second is None else f"{format_bytes(int(bytes_per_second))}/s"


def task_line(task: dict[str, Any]) -> str:
    """One line: ``pull task 3 Qwen3-8B: running 41% (6.7 GB of 16.4 GB), 112.0 MB/s, 1m27s left``."""
    share = f"{100 * task['fraction_done']:.0f}%"
    parts = [
        f"{task['kind']} task {task['id']} {task['model']}: {task['state']} {share} "
        f"({format_bytes(task['done_bytes'])} of {format_bytes(task['total_bytes'])})"
    ]
    if task.get("rate_bytes_per_second") is not None:
        parts.append(format_rate(task["rate_bytes_per_second"]))
    if task.get("seconds_left") is not None and task["state"] == "running":
        parts.append(f"{format_duration(task['seconds_left'])} left")
    return ", ".join(parts)


class _Display:
    """The rich ``Progress`` of one task: a total bar, and a bar per file while it transfers."""

    def __init__(self, task: dict[str, Any], console: Console) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.progress = Progress(
            TextColumn("{task.description}", justify="left"),
            BarColumn(bar_width=32),
            TextColumn("{task.fields[amount]:>21}", style="green"),
            TextColumn("{task.fields[rate]:>11}"),
            TextColumn("{task.fields[left]:>9}"),
            console=console,
            transient=False,
            auto_refresh=False,
        )
        self.total = self.progress.add_task(
            "total", total=task["total_bytes"] or 1, amount="", rate="", left=""
        )
        self.rows: dict[str, Any] = {}

    def update(self, task: dict[str, Any]) -> None:
        files = task["files"]
        verified = sum(1 for entry in files if entry["state"] == "verified")
        self.progress.update(
            self.total,
            description=f"[bold]{task['model']}[/bold] {verified}/{len(files)} files",
            completed=task["done_bytes"],
            amount=_amount(task["done_bytes"], task["total_bytes"]),
            rate=format_rate(task.get("rate_bytes_per_second")) if task["state"] == "running" else "",
            left=_left(task.get("seconds_left")) if task["state"] == "running" else task["state"],
        )
        for entry in files:
            row = self.rows.get(entry["path"])
            active = entry["state"] in ("downloading", "failed")
            if row is None and not active:
                continue
            if row is None:
                row = self.progress.add_task(
                    f"  {entry['path']}", total=entry["size"] or 1, amount="", rate="", left=""
                )
                self.rows[entry["path"]] = row
            done = entry["state"] == "verified"
            self.progress.update(
                row,
                completed=entry["bytes"],
                amount=_amount(entry["bytes"], entry["size"]),
                rate="" if done else format_rate(entry.get("rate_bytes_per_second")),
                left="verified"
                if done
                else (entry["state"] if entry["state"] == "failed" else _left(entry.get("seconds_left"))),
            )
        self.progress.refresh()


def _amount(done: int, total: int) -> str:
    return f"{format_bytes(done)} / {format_bytes(total)}"


def _left(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _report_events(
    task: dict[str, Any], seen: dict[str, tuple[int, int, str | None]], console: Console
) -> None:
    """Print a line for every new retry, restart or failure of a file."""
    for entry in task["files"]:
        key = (entry["retries"], entry["restarts"], entry["state"] if entry["state"] == "failed" else None)
        before = seen.get(entry["path"], (0, 0, None))
        seen[entry["path"]] = key
        if key == before or not entry.get("error"):
            continue
        if entry["state"] == "failed":
            console.print(f"[red]failed[/red] {entry['path']}: {entry['error']}", highlight=False)
        elif entry["restarts"] > before[1]:
            console.print(f"[yellow]refetch[/yellow] {entry['path']}: {entry['error']}", highlight=False)
        else:
            console.print(f"[yellow]retry[/yellow] {entry['path']}: {entry['error']}", highlight=False)


class TaskView:
    """What ``follow_task`` shows, frame by frame: event lines, then the progress bars."""

    def __init__(self, task: dict[str, Any], console: Console) -> None:
        self.console = console
        self.display = _Display(task, console)
        self._seen: dict[str, tuple[int, int, str | None]] = {}

    def show(self, task: dict[str, Any]) -> None:
        _report_events(task, self._seen, self.console)
        self.display.update(task)


def follow_task(
    client: ApiClient, task_id: int, *, poll_seconds: float = POLL_SECONDS, console: Console | None = None
) -> dict[str, Any]:
    """Show ``task_id``'s progress until it ends; ``fail`` (exit 1) unless it completed."""
    task: dict[str, Any] = client.get(f"/tasks/{task_id}")
    view = TaskView(task, console or stderr)
    display = view.display
    try:
        with display.progress:
            while True:
                view.show(task)
                if task["state"] in FINAL_STATES:
                    break
                time.sleep(poll_seconds)
                task = client.get(f"/tasks/{task_id}")
    except KeyboardInterrupt:
        stderr.print(
            f"stopped watching; task {task_id} goes on in the server "
            f"(modelyard tasks wait {task_id}, or cancel it: modelyard tasks cancel {task_id})",
            highlight=False,
        )
        raise typer.Exit(130) from None
    if task["state"] != "completed":
        hint = (
            f"resume it with `modelyard tasks resume {task_id}`" if task["kind"] in ("pull", "push") else None
        )
        fail(f"{task['kind']} task {task_id} {task['state']}: {task['reason']}", hint)
    stderr.print(f"[green]{task['kind']} task {task_id} completed[/green]: {task['reason']}", highlight=False)
    return task
