"""What every CLI command can reach: the global options (``--url``, ``--data-dir``) and the consoles."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from modelyard.settings import DEFAULT_URL, default_data_dir

# Data goes to stdout, messages and errors to stderr.
stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


@dataclass
class CliContext:
    url: str = DEFAULT_URL
    data_dir: Path | None = None

    @property
    def resolved_data_dir(self) -> Path:
        return self.data_dir if self.data_dir is not None else default_data_dir()


def cli_context(ctx: typer.Context) -> CliContext:
    """The global options, from the root command's context."""
    root = ctx.find_root()
    if isinstance(root.obj, CliContext):
        return root.obj
    return CliContext()
