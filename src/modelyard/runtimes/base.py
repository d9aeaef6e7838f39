"""The Runtime contract: how the controller starts, watches, adopts and stops engine processes.

The controller is the only caller. It calls ``start`` when an instance is placed, ``exit_status``
on every reconcile tick for every instance it believes alive, ``adopt`` once per instance when
the server starts (to take back engines that outlived a previous server process), and ``stop``
when an instance must go. Implementations: ``ProcessRuntime`` (child processes on this host).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

SignalTarget = Literal["group", "launcher"]


@dataclass(frozen=True)
class LaunchSpec:
    """One engine start: the argv (never a shell string), extra environment and the log file."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    working_directory: Path | None = None


@dataclass(frozen=True)
class EngineProcess:
    """A running engine's launcher process. ``start_time`` (seconds since the epoch, as the
    kernel reports it) tells a re-used pid apart from the engine it once was."""

    pid: int
    start_time: float
    log_path: Path
    argv: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ExitStatus:
    """How an engine process ended: an exit code, or the signal that killed it."""

    exit_code: int | None
    signal_number: int | None

    def describe(self) -> str:
        if self.signal_number is not None:
            import signal

            try:
                name = signal.Signals(self.signal_number).name
            except ValueError:
                name = f"signal {self.signal_number}"
            return f"killed by {name}"
        if self.exit_code is None:
            return "exited (status unknown: not our child)"
        return f"exited with code {self.exit_code}"


class Runtime(Protocol):
    def start(self, spec: LaunchSpec) -> EngineProcess:
        """Launch the engine in its own process group; raise ``EngineStartFailed`` if it cannot run."""

    def exit_status(self, process: EngineProcess) -> ExitStatus | None:
        """None while the launcher is alive; how it ended otherwise. Reaps our own children."""

    def adopt(self, pid: int, start_time: float, log_path: Path) -> EngineProcess | None:
        """The engine with this pid and start time, if it is still alive; None otherwise."""

    async def stop(
        self, process: EngineProcess, *, signal_target: SignalTarget, grace_seconds: float
    ) -> None:
        """SIGTERM (to the group or the launcher), wait up to ``grace_seconds``, then SIGKILL
        whatever is left of the process group. Returns when no process of the group remains."""
