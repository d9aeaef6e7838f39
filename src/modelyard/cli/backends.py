"""``modelyard backends list|show|import|export``: engines as data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stdout
from modelyard.cli.output import print_fields, print_json, print_table

backends_app = typer.Typer(help="Inference engines and their versions.", no_args_is_help=True)


@backends_app.command("list")
def list_backends(
    ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """Built-in and custom backends with their versions."""
    backends: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/backends")
    if as_json:
        print_json(backends)
        return
    print_table(
        ["NAME", "KIND", "DEFAULT", "VERSIONS", "DEPLOYMENTS"],
        [
            [
                backend["name"],
                "built-in" if backend["builtin"] else "custom",
                backend["default_version"],
                ", ".join(version["version"] for version in backend["versions"]),
                ", ".join(backend.get("deployments", [])),
            ]
            for backend in backends
        ],
    )


@backends_app.command("show")
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The backend's name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """How each version of a backend is launched."""
    backend: dict[str, Any] = ApiClient.from_context(ctx).get(f"/backends/{name}")
    if as_json:
        print_json(backend)
        return
    print_fields(
        [
            ("name", backend["name"]),
            ("family", backend["family"]),
            ("kind", "built-in" if backend["builtin"] else "custom"),
            ("default version", backend["default_version"]),
            ("description", backend.get("description")),
        ]
    )
    for version in backend["versions"]:
        stdout.print()
        launcher = version["executable"] or f"image {version['image']}"
        print_fields(
            [
                ("version", version["version"]),
                ("launch", f"{launcher} {version['run_command']}"),
                ("env", " ".join(f"{key}={value}" for key, value in version["env"].items())),
                ("health path", version["health_path"]),
                ("metrics path", version["metrics_path"]),
                ("reasoning field", version["reasoning_field"]),
                ("uses GPUs", "yes" if version["supports_gpu"] else "no"),
                *_pull_fields(version),
            ]
        )


def _pull_fields(version: dict[str, Any]) -> list[tuple[str, Any]]:
    """A container version's pull policy (and whether it is the default) and its credential."""
    if not version.get("image"):
        return []
    policy = version.get("effective_pull_policy")
    shown = policy if version.get("pull_policy") else f"{policy} (default for this image)"
    return [("pull policy", shown), ("registry credential", version.get("registry_credential") or "none")]


@backends_app.command("import")
def import_backend(
    ctx: typer.Context,
    file: Path = typer.Argument(
        ..., help="Backend YAML in GPUStack's shape (backend_name, version_configs)."
    ),
) -> None:
    """Add (or replace) custom backends from a YAML file."""
    try:
        content = file.read_bytes()
    except OSError as error:
        fail(f"cannot read {file}: {error.strerror}")
    imported: list[dict[str, Any]] = ApiClient.from_context(ctx).post("/backends/import", content=content)
    for backend in imported:
        versions = ", ".join(version["version"] for version in backend["versions"])
        stdout.print(f"imported backend {backend['name']} (versions {versions})", highlight=False)


@backends_app.command("export")
def export(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The backend's name."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Print a backend as GPUStack-shaped YAML (importable here or in GPUStack)."""
    text = ApiClient.from_context(ctx).get_text(f"/backends/{name}/export")
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        fail(f"cannot write {output}: {error.strerror}")
    stdout.print(f"wrote {output}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard backends ...`` to the root app."""
    app.add_typer(backends_app, name="backends")
