"""``modelyard tasks list|show|wait|cancel|resume``: the server's model tasks (pulls, imports,
exports, pushes)."""

from __future__ import annotations

from typing import Any

import typer

from modelyard.cli.client import ApiClient
from modelyard.cli.context import stderr
from modelyard.cli.output import format_bytes, print_fields, print_json, print_table
from modelyard.cli.task_progress import follow_task, format_rate, task_line

tasks_app = typer.Typer(
    help="Model tasks: pulls from hubs, bundle imports and exports, pushes to workers.", no_args_is_help=True
)


@tasks_app.command("list")
def list_tasks(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every task, newest first."""
    tasks: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/tasks")
    if as_json:
        print_json(tasks)
        return
    print_table(
        ["ID", "KIND", "MODEL", "STATE", "DONE", "SIZE", "RATE", "REASON"],
        [
            [
                task["id"],
                task["kind"],
                task["model"],
                task["state"],
                f"{100 * task['fraction_done']:.0f}%",
                format_bytes(task["total_bytes"]),
                format_rate(task["rate_bytes_per_second"]) if task["state"] == "running" else None,
                task["reason"] or None,
            ]
            for task in tasks
        ],
    )


@tasks_app.command("show")
def show(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="The task's id."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One task with each file's progress, retries and last error."""
    task: dict[str, Any] = ApiClient.from_context(ctx).get(f"/tasks/{task_id}")
    if as_json:
        print_json(task)
        return
    print_fields(
        [
            ("task", f"{task['id']} ({task['kind']})"),
            ("model", task["model"]),
            ("state", task["state"]),
            ("reason", task["reason"]),
            ("source", task["source"]),
            ("target", task["target"]),
            ("progress", task_line(task)),
            ("runs", task["run_count"]),
        ]
    )
    print_table(
        ["FILE", "STATE", "BYTES", "SIZE", "RETRIES", "REFETCHES", "LAST ERROR"],
        [
            [
                entry["path"],
                entry["state"],
                format_bytes(entry["bytes"]),
                format_bytes(entry["size"]),
                entry["retries"],
                entry["restarts"],
                entry["error"],
            ]
            for entry in task["files"]
        ],
    )


@tasks_app.command("wait")
def wait(ctx: typer.Context, task_id: int = typer.Argument(..., help="The task's id.")) -> None:
    """Follow a task with a progress display until it ends (exit status 1 unless it completed)."""
    follow_task(ApiClient.from_context(ctx), task_id)


@tasks_app.command("cancel")
def cancel(ctx: typer.Context, task_id: int = typer.Argument(..., help="The task's id.")) -> None:
    """Stop a task; a cancelled pull or push keeps its partial files and can be resumed."""
    task: dict[str, Any] = ApiClient.from_context(ctx).post(f"/tasks/{task_id}/cancel")
    stderr.print(
        f"task {task['id']} {'cancelled' if task['state'] == 'cancelled' else 'stops at its next chunk'}",
        highlight=False,
    )


@tasks_app.command("resume")
def resume(
    ctx: typer.Context,
    task_id: int = typer.Argument(..., help="The task's id."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once it is queued."),
) -> None:
    """Queue a failed or cancelled task again; a pull continues from the bytes already on disk."""
    client = ApiClient.from_context(ctx)
    task: dict[str, Any] = client.post(f"/tasks/{task_id}/resume")
    stderr.print(f"task {task['id']} queued again", highlight=False)
    if not no_wait:
        follow_task(client, task_id)


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")
