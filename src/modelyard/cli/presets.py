"""``modelyard presets list|show`` and ``deploy --preset``: tested recipes per model and engine version."""

from __future__ import annotations

import re
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr, stdout
from modelyard.cli.output import print_fields, print_json, print_table

presets_app = typer.Typer(help="Tested deployment recipes: flags, parsers, memory knob, the GPUs they fit.")

_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9_-]*)")


@presets_app.command("list")
def list_presets(
    ctx: typer.Context,
    model: str | None = typer.Option(None, "--model", help="Only the presets for this registered model."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Every preset, with the GPU types it fits (per `modelyard estimate`)."""
    presets: list[dict[str, Any]] = ApiClient.from_context(ctx).get(
        "/presets", {"model": model} if model else None
    )
    if as_json:
        print_json(presets)
        return
    print_table(
        ["NAME", "MODEL", "ENGINE", "GPUS", "CONTEXT", "FITS"],
        [
            [
                preset["name"],
                preset["model"],
                f"{preset['backend']} {preset['version']}",
                preset["gpus"],
                f"{preset['context_tokens']:,}",
                ", ".join(preset["fits_as"]) or None,
            ]
            for preset in presets
        ],
    )


@presets_app.command("show")
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The preset's name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One preset: what it sets, and the command it amounts to."""
    preset: dict[str, Any] = ApiClient.from_context(ctx).get(f"/presets/{name}")
    if as_json:
        print_json(preset)
        return
    print_fields(
        [
            ("name", preset["name"]),
            ("recipe", preset["title"]),
            ("model", f"{preset['model']} ({', '.join(preset['architectures'])})"),
            ("engine", f"{preset['backend']} {preset['version']}"),
            ("GPUs per replica", preset["gpus"]),
            ("context", f"{preset['context_tokens']:,} tokens"),
            ("fits", ", ".join(preset["fits_as"])),
            ("flags", " ".join(preset["parameters"])),
        ]
    )
    stdout.print(f"deploy with: modelyard deploy MODEL --preset {preset['name']}", highlight=False)


def _flags(lines: list[str]) -> set[str]:
    return {flag for line in lines for flag in _FLAG.findall(line)}


def apply_preset(client: ApiClient, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Fill a deployment body from preset ``name`` (checked against its model by the server).

    What the user gave wins: an ``--args`` flag replaces the preset's line for that flag; a
    ``--backend`` or ``--version`` that differs from the preset's is refused (the flags are per version).
    """
    preset: dict[str, Any] = client.get(f"/presets/{name}", {"model": body["model"]})
    for key, option in (("backend", "--backend"), ("backend_version", "--version")):
        wanted = preset["backend"] if key == "backend" else preset["version"]
        if body.get(key) not in (None, wanted):
            fail(
                f"{option} {body[key]} disagrees with preset {name!r} "
                f"({preset['backend']} {preset['version']})",
                "leave it out, or choose the preset for that engine (modelyard presets list)",
            )
        body[key] = wanted
    if body.get("gpu_ids") is not None and len(body["gpu_ids"]) != preset["gpus"]:
        fail(f"preset {name!r} is for {preset['gpus']} GPU(s); --gpu-ids names {len(body['gpu_ids'])}")
    if body.get("gpus_per_replica") is None and body.get("gpu_ids") is None:
        body["gpus_per_replica"] = preset["gpus"]
    user_lines: list[str] = list(body.get("backend_parameters") or [])
    overridden = _flags(user_lines)
    kept = [line for line in preset["parameters"] if not (_flags([line]) & overridden)]
    body["backend_parameters"] = kept + user_lines
    env = [f"{key}={value}" for key, value in preset["env"].items()]
    body["env"] = env + list(body.get("env") or [])
    gpus = body.get("gpus_per_replica") or len(body["gpu_ids"])
    stderr.print(
        f"preset {name}: {preset['backend']} {preset['version']}, {gpus} GPU(s), "
        f"{' '.join(body['backend_parameters'])}",
        highlight=False,
    )
    return body


def register(app: typer.Typer) -> None:
    app.add_typer(presets_app, name="presets")
