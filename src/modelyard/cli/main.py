"""The ``modelyard`` command. Each command group lives in its own module and registers itself here."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer
from rich.markup import escape

from modelyard import __version__
from modelyard.cli import (
    account,
    backends,
    bench,
    deployments,
    doctor,
    estimate,
    keys,
    model_transfers,
    models,
    presets,
    serve,
    tasks,
)
from modelyard.cli.context import CliContext, stderr
from modelyard.errors import ModelyardError
from modelyard.settings import DEFAULT_URL, ENV_DATA_DIR, ENV_URL

app = typer.Typer(
    name="modelyard",
    help="Deploy, verify, benchmark and operate LLM inference engines behind one OpenAI-compatible gateway.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"modelyard {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: str = typer.Option(DEFAULT_URL, "--url", envvar=ENV_URL, help="The modelyard server to talk to."),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        envvar=ENV_DATA_DIR,
        help=(
            "The server's data directory (default ~/.local/share/modelyard); "
            "the CLI reads the admin password there."
        ),
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages to stderr."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(processName)s[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    ctx.obj = CliContext(url=url.rstrip("/"), data_dir=data_dir)


for module in (
    serve,
    models,
    model_transfers,
    tasks,
    presets,
    backends,
    deployments,
    keys,
    account,
    bench,
    doctor,
    estimate,
):
    module.register(app)


def main() -> None:
    """Console-script entry point: errors become one line on stderr and exit status 1."""
    try:
        app(standalone_mode=True)
    except ModelyardError as error:
        stderr.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
        sys.exit(1)


if __name__ == "__main__":
    main()
