"""``modelyard models pull|export|import|push``: model files from hubs, as offline bundles, and
copied to the cluster's workers.

The server does the work (a task it owns, resumed after a restart); these commands ask for it,
print the plan, and follow the task with a progress display until it ends (``--no-wait`` returns
at once). Paths are made absolute here and are read on the server's host, as ``models add``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr, stdout
from modelyard.cli.output import format_bytes, print_json, print_table
from modelyard.cli.task_progress import follow_task


def _announce(task: dict[str, Any]) -> None:
    options = task.get("options") or {}
    revision = options.get("commit") or options.get("revision")
    where = f" at {str(revision)[:12]}" if revision else ""
    stderr.print(
        f"{task['kind']} task {task['id']}: {task['source']}{where} -> {task['target']}: "
        f"{len(task['files'])} files, {format_bytes(task['total_bytes'])}",
        highlight=False,
    )


def _finish(client: ApiClient, task: dict[str, Any], no_wait: bool, as_json: bool) -> None:
    _announce(task)
    if not no_wait:
        task = follow_task(client, task["id"])
    elif not as_json:
        stderr.print(f"follow it with: modelyard tasks wait {task['id']}", highlight=False)
    if as_json:
        print_json(task)


def _hash_shown(file: dict[str, Any]) -> str:
    if file.get("sha256"):
        return "sha256"
    return "git blob id" if file.get("git_blob_id") else "none: size only (unverified)"


def _print_plan(plan: dict[str, Any]) -> None:
    print_table(
        ["FILE", "SIZE", "HASH"],
        [[file["path"], format_bytes(file["size"]), _hash_shown(file)] for file in plan["files"]],
    )
    stdout.print(
        f"{plan['source']} at {plan['commit'] or plan['revision']}: {len(plan['files'])} files, "
        f"{format_bytes(plan['total_bytes'])} -> {plan['target']} "
        f"({format_bytes(plan['needed_bytes'])} to download, {format_bytes(plan['free_bytes'])} free)",
        highlight=False,
    )
    if plan["skipped"]:
        stdout.print(f"left out by the patterns: {', '.join(plan['skipped'])}", highlight=False)


def pull(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="hf://ORG/NAME[@REVISION] or ms://ORG/NAME[@REVISION]."),
    name: str | None = typer.Option(
        None, "--name", help="Register it under this name (default: the repo's)."
    ),
    include: list[str] | None = typer.Option(
        None, "--include", help="Only files matching this pattern, e.g. '*.safetensors' (repeatable)."
    ),
    exclude: list[str] | None = typer.Option(
        None, "--exclude", help="Leave out files matching this pattern, e.g. '*.gguf' (repeatable)."
    ),
    quantization: str | None = typer.Option(
        None,
        "--quantization",
        help="Of a repository's GGUF files, take only this quantisation (e.g. Q4_K_M).",
    ),
    to: Path | None = typer.Option(None, "--to", help="The model directory (default: <models root>/<name>)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show the files, sizes, target and disk check only."
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the task is queued."),
    as_json: bool = typer.Option(False, "--json", help="Print the task (or the plan) as JSON."),
) -> None:
    """Download a model from Hugging Face or ModelScope, each file checked against the hub's hash.

    A file the hub gives no hash for is checked by size only, and the model is then unverified.
    """
    client = ApiClient.from_context(ctx)
    body = {
        "source": source,
        "name": name,
        "include": include or [],
        "exclude": exclude or [],
        "quantization": quantization,
        "target_dir": str(to.expanduser().absolute()) if to is not None else None,
        "dry_run": dry_run,
    }
    answer: dict[str, Any] = client.post("/models/pull", body)
    if dry_run:
        if as_json:
            print_json(answer)
        else:
            _print_plan(answer)
        return
    _finish(client, answer, no_wait, as_json)
    if not no_wait and not as_json:
        model = answer["model"]
        stdout.print(f"deploy it with: modelyard deploy {model}", highlight=False)


def export(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The model to export."),
    file: Path = typer.Argument(
        ..., help="The archive to write (on the server's host), e.g. qwen3-8b.modelyard.tar."
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the task is queued."),
    as_json: bool = typer.Option(False, "--json", help="Print the task as JSON."),
) -> None:
    """Write a model's files and their manifest (sizes, SHA-256, facts) into one archive."""
    client = ApiClient.from_context(ctx)
    task: dict[str, Any] = client.post(f"/models/{name}/export", {"path": str(file.expanduser().absolute())})
    _finish(client, task, no_wait, as_json)


def import_bundle(
    ctx: typer.Context,
    file: Path = typer.Argument(
        ..., help="A bundle written by `modelyard models export` (on the server's host)."
    ),
    to: Path | None = typer.Option(None, "--to", help="The model directory (default: <models root>/<name>)."),
    name: str | None = typer.Option(
        None, "--name", help="Register it under this name (default: the bundle's)."
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the task is queued."),
    as_json: bool = typer.Option(False, "--json", help="Print the task as JSON."),
) -> None:
    """Verify every file of a bundle against its manifest, then register the model."""
    client = ApiClient.from_context(ctx)
    body = {
        "path": str(file.expanduser().absolute()),
        "name": name,
        "target_dir": str(to.expanduser().absolute()) if to is not None else None,
    }
    task: dict[str, Any] = client.post("/models/import", body)
    _finish(client, task, no_wait, as_json)


def push(
    ctx: typer.Context,
    name: str | None = typer.Argument(
        None, help="The model to copy (its files on the server's host); with --bundle, the name to register."
    ),
    worker: list[str] | None = typer.Option(
        None, "--worker", help="A worker to copy it to (repeatable; names from `modelyard workers`)."
    ),
    every_worker: bool = typer.Option(
        False, "--all", help="Every ready worker that has no verified copy yet."
    ),
    bundle: Path | None = typer.Option(
        None,
        "--bundle",
        help="Push a bundle (`models export`, on the server's host) instead: its model is registered "
        "as on the workers only.",
    ),
    to: Path | None = typer.Option(
        None,
        "--to",
        help="With --bundle: the model directory on the workers (default: <models root>/<name>).",
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the tasks are queued."),
    as_json: bool = typer.Option(False, "--json", help="Print the tasks as JSON."),
) -> None:
    """Copy a model's files to workers of the cluster, each file checked by its SHA-256 there.

    One task per worker, in the background; an interrupted push resumes where each file stopped
    (`modelyard tasks resume ID`). The files go to the model's path on each worker.
    """
    client = ApiClient.from_context(ctx)
    tasks: list[dict[str, Any]]
    if bundle is not None:
        if every_worker:
            fail("--all pushes a registered model; a bundle goes to the workers named with --worker")
        tasks = client.post(
            "/models/push",
            {
                "bundle": str(bundle.expanduser().absolute()),
                "workers": worker or [],
                "name": name,
                "target_dir": str(to) if to is not None else None,
            },
        )
        name = str(tasks[0]["model"]) if tasks else name
    elif name is None:
        fail("name the model to push (modelyard models push NAME --worker W), or give --bundle FILE")
    else:
        tasks = client.post(f"/models/{name}/push", {"workers": worker or [], "all": every_worker})
    finished = []
    for task in tasks:
        stderr.print(
            f"push task {task['id']}: {name} -> worker {task['options']['worker']}:{task['target']}: "
            f"{len(task['files'])} files, {format_bytes(task['total_bytes'])}",
            highlight=False,
        )
    for task in tasks:
        finished.append(task if no_wait else follow_task(client, task["id"]))
    if no_wait and not as_json:
        for task in tasks:
            stderr.print(f"follow it with: modelyard tasks wait {task['id']}", highlight=False)
    if as_json:
        print_json(finished)


def register(app: typer.Typer) -> None:
    """Add ``pull``, ``export`` and ``import`` to ``modelyard models``."""
    from modelyard.cli.models import models_app

    models_app.command("pull")(pull)
    models_app.command("export")(export)
    models_app.command("import")(import_bundle)
    models_app.command("push")(push)
