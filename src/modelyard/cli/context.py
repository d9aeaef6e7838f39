"""What every CLI command can reach: the global options (``--url``, ``--data-dir``) and the consoles.

``stdout`` and ``stderr`` are rich Consoles, made when first imported (importing rich costs a
command that prints nothing, like ``--version``, more than Python's own start): import them in
command modules, not in ``main.py``, ``lazy.py`` or ``errors.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from modelyard.settings import DEFAULT_URL, default_data_dir

if TYPE_CHECKING:
    from rich.console import Console


_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    """``stdout`` and ``stderr``, made when a module first imports them (PEP 562)."""
    if name not in ("stdout", "stderr"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _consoles:
        from rich.console import Console

        # Data goes to stdout, messages and errors to stderr.
        _consoles[name] = Console(stderr=name == "stderr", soft_wrap=True)
    return _consoles[name]


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
