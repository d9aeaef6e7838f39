"""``modelyard models add|list|show|rm``: model directories registered with the server.

On a cluster, ``models add PATH --worker W`` registers a model that only worker W has, and
``models`` / ``models show`` say per worker whether each model is there and verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stdout
from modelyard.cli.output import format_bytes, format_count, print_fields, print_json, print_table

models_app = typer.Typer(help="Model directories the server can deploy.", no_args_is_help=True)


def _path(name: str) -> str:
    return f"/models/{name}"


@models_app.command("add")
def add(
    ctx: typer.Context,
    path: Path = typer.Argument(..., help="The model directory (config.json, weights, tokenizer)."),
    name: str | None = typer.Option(None, "--name", help="Name to register it under (default: folder name)."),
    worker: str | None = typer.Option(
        None,
        "--worker",
        help="A worker of the cluster that has the files (an absolute path there); checked on that "
        "worker, not on the server's host.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Validate a model directory and register it. Nothing is stored when it is not servable."""
    client = ApiClient.from_context(ctx)
    if worker is not None and not path.is_absolute():
        fail(f"model path {str(path)!r} is relative", "with --worker, give the absolute path on that worker")
    where = str(path) if worker is not None else str(path.expanduser().absolute())
    model = client.post("/models", {"path": where, "name": name, "worker": worker})
    if as_json:
        print_json(model)
        return
    stdout.print(
        f"added model [bold]{model['name']}[/bold]: {model['architecture'] or 'unknown architecture'}, "
        f"{format_count(model['parameter_count'])} parameters, {model['dtype'] or '?'}, "
        f"{format_bytes(model['size_bytes'])}",
        highlight=False,
    )
    if worker is not None:
        stdout.print(f"its files are on worker {worker} only; replicas go there", highlight=False)
    stdout.print(f"deploy it with: modelyard deploy {model['name']}", highlight=False)


@models_app.command("list")
def list_models(
    ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """The registered models."""
    models: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/models")
    if as_json:
        print_json(models)
        return
    on_workers = any(model.get("workers") for model in models)
    print_table(
        ["NAME", "STATE", "ARCHITECTURE", "PARAMETERS", "DTYPE", "SIZE", "DEPLOYMENTS", "PATH"]
        + (["WORKERS"] if on_workers else []),
        [
            [
                model["name"],
                model["state"],
                model["architecture"],
                format_count(model["parameter_count"]),
                model["dtype"],
                format_bytes(model["size_bytes"]),
                model.get("deployment_count", 0),
                model["path"] if model.get("on_server", True) else f"{model['path']} (workers only)",
            ]
            + ([copies_summary(model.get("workers") or [])] if on_workers else [])
            for model in models
        ],
    )


def copy_state(copy: dict[str, Any]) -> str:
    """A worker's copy in a word or two: ``verified``, ``missing``, ``present (worker lost)``."""
    return str(copy["state"]) + (" (worker lost)" if copy.get("worker_state") == "lost" else "")


def copies_summary(copies: list[dict[str, Any]]) -> str:
    """``gpu-1 verified, gpu-2 missing``; ``-`` when no worker was looked at."""
    return ", ".join(f"{copy['worker']} {copy_state(copy)}" for copy in copies) or "-"


@models_app.command("show")
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The model's name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One model's facts, read from its directory without loading weights."""
    model: dict[str, Any] = ApiClient.from_context(ctx).get(_path(name))
    if as_json:
        print_json(model)
        return
    details = model.get("details") or {}
    print_fields(
        [
            ("name", model["name"]),
            ("path", model["path"] + ("" if model.get("on_server", True) else " (on the workers only)")),
            ("state", model["state"]),
            (
                "source",
                f"{model['source']} {model.get('repo_id') or ''} {model.get('revision') or ''}".strip(),
            ),
            ("architecture", model["architecture"]),
            ("model type", model["model_type"]),
            ("dtype", model["dtype"]),
            ("parameters", format_count(model["parameter_count"])),
            ("size", format_bytes(model["size_bytes"])),
            ("weight files", len(details.get("weight_files", []))),
            ("eos token ids", details.get("eos_token_ids")),
            ("warnings", "; ".join(details.get("warnings", []))),
            ("deployments", ", ".join(model.get("deployments", []))),
            *_files_fields(model),
        ]
    )
    for problem in (model.get("files") or {}).get("problems", []):
        stdout.print(
            f"  [red]{problem['problem']}[/red] {problem['path']}: {problem['detail']}", highlight=False
        )
    copies = model.get("workers") or []
    if copies:
        stdout.print("on the workers:", highlight=False)
        print_table(
            ["WORKER", "STATE", "VERIFIED AT", "CHECKED AT", "REASON"],
            [
                [
                    copy["worker"],
                    copy_state(copy),
                    format_time(copy.get("verified_at")),
                    format_time(copy.get("checked_at")),
                    copy.get("reason") or "-",
                ]
                for copy in copies
            ],
        )
        lacking = [copy["worker"] for copy in copies if copy["state"] not in ("verified", "present")]
        if lacking and model.get("on_server", True):
            stdout.print(
                f"copy it there: modelyard models push {model['name']} "
                + " ".join(f"--worker {name}" for name in lacking),
                highlight=False,
            )


def format_time(text: str | None) -> str:
    """An ISO time from the API as ``2026-12-06 22:40:01 UTC``; ``-`` for none."""
    if not text:
        return "-"
    return text.replace("T", " ")[:19] + " UTC"


def _files_fields(model: dict[str, Any]) -> list[tuple[str, Any]]:
    """Pulled and imported models: the files their manifest lists, and the task that filled them."""
    files = model.get("files") or {}
    fields: list[tuple[str, Any]] = []
    if model.get("reasons"):
        fields.append(("reasons", "; ".join(model["reasons"])))
    if files.get("verified"):
        problems = files.get("problems", [])
        fields.append(
            (
                "files",
                f"{files['count']} in the manifest, "
                + (f"{len(problems)} missing or damaged" if problems else "all present with their sizes"),
            )
        )
    elif model.get("state") == "downloading":
        fields.append(
            ("files", f"{format_bytes(model.get('downloaded_bytes'))} of {format_bytes(model['size_bytes'])}")
        )
    verification = model.get("verification")
    if verification:
        fields.append(("checked", verification["summary"]))
    if files.get("task"):
        task = files["task"]
        fields.append(("task", f"{task['id']} ({task['kind']}, {task['state']}): {task['reason']}"))
    return fields


@models_app.command("rm")
def remove(ctx: typer.Context, name: str = typer.Argument(..., help="The model's name.")) -> None:
    """Forget a model (its files stay on disk). Refused while a deployment uses it."""
    ApiClient.from_context(ctx).delete(_path(name))
    stdout.print(f"removed model {name} (its files are untouched)", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard models ...`` to the root app."""
    app.add_typer(models_app, name="models")
