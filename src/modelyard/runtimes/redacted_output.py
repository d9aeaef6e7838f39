"""Starting the log redactor (``log_redactor.py``) between a process engine and its log file.

Usage (``process.py``)::

    redactor = start_redactor(log_file, spec.secrets)
    child = subprocess.Popen(argv, stdout=redactor.engine_output, stderr=subprocess.STDOUT, ...)
    redactor.release()   # only the engine holds the pipe's writing end now

The relay gets the secrets through a pipe of their own (never its argv or environment) and the
log file as its standard output; it ends when the engine's last process closes the pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

from modelyard.errors import EngineStartFailed

RELAY_MODULE = "modelyard.runtimes.log_redactor"


@dataclass
class RedactedOutput:
    """The relay, and the pipe's writing end that the engine is given as its output."""

    relay: subprocess.Popen[bytes]
    engine_output: int
    _released: bool = False

    def release(self) -> None:
        """Close this process's copy of the writing end (once the engine has its own, or failed)."""
        if not self._released:
            self._released = True
            os.close(self.engine_output)


def start_redactor(log_file: BinaryIO, secrets: Iterable[str]) -> RedactedOutput:
    """Start the relay writing to ``log_file``; ``EngineStartFailed`` when it cannot start."""
    output_read, output_write = os.pipe()
    secrets_read, secrets_write = os.pipe()
    try:
        relay = subprocess.Popen(
            [sys.executable, "-m", RELAY_MODULE, str(secrets_read)],
            stdin=output_read,
            stdout=log_file,
            stderr=log_file,
            pass_fds=(secrets_read,),
            start_new_session=True,
        )
    except OSError as error:
        for descriptor in (output_write, secrets_write):
            os.close(descriptor)
        raise EngineStartFailed(
            f"cannot start the log redactor ({sys.executable} -m {RELAY_MODULE}): {error.strerror or error}",
            hint="the engine's launch has secrets to keep out of its log; check the server's Python",
        ) from error
    finally:
        os.close(output_read)
        os.close(secrets_read)
    with contextlib.suppress(BrokenPipeError), os.fdopen(secrets_write, "wb") as sink:
        sink.write(json.dumps(sorted(set(secrets))).encode())
    return RedactedOutput(relay=relay, engine_output=output_write)
