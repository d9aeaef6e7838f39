"""The root command group: command modules are imported only when one of their commands runs.

``modelyard --help`` lists every command from a table (name, module, one-line help) without
importing any of them; ``modelyard ps`` imports ``modelyard.cli.deployments`` and nothing of
``serve``, ``bench`` or ``doctor``. A command module keeps the shape every module has: a
``register(app)`` function that adds its commands (or a sub-app) to a Typer app.

The group also makes errors look alike everywhere (``modelyard.cli.errors``): a
``ModelyardError`` from any command is one line (or, with ``--json``, one JSON object on stdout)
and exit status 1; a usage error under ``--json`` is a JSON object with exit status 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

from modelyard.cli.errors import errors_as_json, fail, set_errors_as_json
from modelyard.errors import ModelyardError

if TYPE_CHECKING:
    # typer's own copy of click (typer exports its Context subclass, not the base it overrides).
    from typer._click.core import Context as ClickContext

# typer vendors click and exports only BadParameter of its exceptions; its base is click's UsageError.
UsageError: type[Exception] = typer.BadParameter.__bases__[0]
assert UsageError.__name__ == "UsageError"


@dataclass(frozen=True)
class CommandEntry:
    """Where a command lives and what ``modelyard --help`` says of it (its docstring's first line)."""

    # The modules whose ``register(app)`` together add the command (a group may be extended by a
    # second module, as ``models`` is by ``model_transfers``).
    modules: tuple[str, ...]
    help: str
    # Shown under this heading in --help.
    panel: str = "Commands"


# Loaded once per process: registering a module twice would add its commands twice.
_loaded: dict[tuple[str, ...], dict[str, Any]] = {}


def load_module_commands(modules: tuple[str, ...]) -> dict[str, Any]:
    """The click commands the modules' ``register(app)`` functions add, by name."""
    if modules not in _loaded:
        holder = typer.Typer()
        for name in modules:
            importlib.import_module(name).register(holder)
        _loaded[modules] = dict(typer.main.get_group(holder).commands)
    return _loaded[modules]


def _wants_json(arguments: Sequence[str]) -> bool:
    head = list(arguments)
    if "--" in head:
        head = head[: head.index("--")]
    return "--json" in head


class LazyGroup(TyperGroup):
    """A TyperGroup whose commands come from ``entries`` and are loaded on first use."""

    entries: ClassVar[Mapping[str, CommandEntry]] = {}

    def __init__(self, **attributes: Any) -> None:
        super().__init__(**attributes)
        self._listing_only = False

    def list_commands(self, ctx: ClickContext) -> list[str]:
        own = [name for name in self.commands if name not in self.entries]
        return [*own, *self.entries]

    def get_command(self, ctx: ClickContext, cmd_name: str) -> Any:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = self.entries.get(cmd_name)
        if entry is None:
            return None
        if self._listing_only:
            # For the command list of --help: the entry's line, no import.
            return TyperCommand(name=cmd_name, help=entry.help, rich_help_panel=entry.panel)
        command = load_module_commands(entry.modules).get(cmd_name)
        if command is None:
            raise LookupError(f"register() of {', '.join(entry.modules)} adds no command {cmd_name!r}")
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: ClickContext, formatter: Any) -> None:
        self._listing_only = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing_only = False

    def resolve_command(self, ctx: ClickContext, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            matches = get_close_matches(name, self.list_commands(ctx))
            suggestion = f" Did you mean {', '.join(repr(match) for match in matches)}?" if matches else ""
            ctx.fail(f"No such command {name!r}.{suggestion}")
        return super().resolve_command(ctx, args)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        set_errors_as_json(_wants_json(args))
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as error:
            self._usage_error(error)
            raise

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except ModelyardError as error:
            fail(error.message, error.hint, code=error.code)
        except UsageError as error:
            self._usage_error(error)
            raise

    @staticmethod
    def _usage_error(error: Any) -> None:
        """Under --json, a usage error is a JSON object too (exit status 2, as click's)."""
        if errors_as_json() and type(error).__name__ != "NoArgsIsHelpError":
            fail(error.format_message(), "see --help", code="usage_error", exit_status=error.exit_code)
