"""The per-start engine log file every runtime writes, and the command line shown in it.

Each start has its own file (``<data-dir>/instances/<instance uid>/start-<n>.log``); the first
line is the command as run, with secret values masked (``secret_names.MASK``). A log that cannot
be written (a full disk, a read-only folder) is a reason the engine cannot be launched.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from modelyard.errors import EngineStartFailed
from modelyard.secret_names import MASK, mask_arguments

LOG_FILE_MODE = 0o600


def shown_command(argv: Iterable[str], secrets: Iterable[str] = ()) -> str:
    """The argv as one quoted line: secret flags' values (``--api-key X``) and every value in
    ``secrets`` replaced by ``MASK``."""
    hidden = [secret for secret in secrets if secret]
    shown = []
    for argument in mask_arguments(list(argv)):
        for secret in hidden:
            argument = argument.replace(secret, MASK)
        shown.append(argument)
    return shlex.join(shown)


def open_engine_log(log_path: Path) -> BinaryIO:
    """Open (append) one start's log file, creating its folder; ``EngineStartFailed`` if it cannot."""
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_FILE_MODE)
    except OSError as error:
        raise EngineStartFailed(
            f"cannot write the engine log {log_path}: {error.strerror or error}",
            hint="check the data directory's disk space and permissions",
        ) from error
    return os.fdopen(descriptor, "ab")
