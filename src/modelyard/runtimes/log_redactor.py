"""Secrets kept out of engine logs: the engine's output passes through a redactor on its way to the
per-start log file.

Engines print their own arguments: vLLM logs ``non-default args: {..., 'api_key': ['...']}`` and
SGLang ``server_args=ServerArgs(..., api_key='...')``. The command line modelyard writes at the
top of the log is masked already; what the engine prints itself is masked here, line by line, with
the launch's secret values (``LaunchSpec.secrets``) replaced by ``MASK``.

``Redactor`` is the masking (bytes in, bytes out, a secret split across two reads still found);
run as a program it is the relay a process engine writes to when its launch has secrets::

    python -m modelyard.runtimes.log_redactor SECRETS_FD   < engine's output pipe   >> start-<n>.log

It reads the secrets (JSON, a list of strings) from descriptor ``SECRETS_FD`` once, then copies
its standard input to its standard output until end of file, which comes when the engine and
every process it spawned have exited. It runs in a session of its own, without the engine's
identity markers, so it outlives a killed server as the engine does and is never taken for an
engine. It imports only the standard library and ``secret_names`` (it starts in tens of ms).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterable

from modelyard.secret_names import MASK as SHOWN_MASK

MASK = SHOWN_MASK.encode()
# A line longer than this is written in pieces; the last bytes of a piece are held back so that a
# secret split across the cut is still found.
MAXIMUM_HELD_BYTES = 64 * 1024
READ_BYTES = 64 * 1024


class Redactor:
    """Masks ``secrets`` in a byte stream fed in arbitrary chunks; ``feed`` returns what may be
    written now, ``finish`` the rest."""

    def __init__(self, secrets: Iterable[str]) -> None:
        encoded = {secret.encode() for secret in secrets if secret}
        # Longest first, so a secret containing another is masked whole.
        self._secrets = sorted(encoded, key=len, reverse=True)
        self._overlap = max((len(secret) for secret in self._secrets), default=1) - 1
        self._held = b""

    @property
    def active(self) -> bool:
        return bool(self._secrets)

    def _mask(self, data: bytes) -> bytes:
        for secret in self._secrets:
            data = data.replace(secret, MASK)
        return data

    def feed(self, chunk: bytes) -> bytes:
        if not self._secrets:
            return chunk
        data = self._held + chunk
        # A progress bar ends its lines with a carriage return: cut there too, so it stays live.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0 and len(data) > MAXIMUM_HELD_BYTES:
            cut = len(data) - self._overlap
        ready, self._held = data[:cut], data[cut:]
        if len(self._held) > MAXIMUM_HELD_BYTES:  # a newline early in a huge chunk
            keep = len(self._held) - self._overlap
            ready, self._held = ready + self._held[:keep], self._held[keep:]
        return self._mask(ready) if ready else b""

    def finish(self) -> bytes:
        rest, self._held = self._held, b""
        return self._mask(rest)


def read_secrets(descriptor: int) -> list[str]:
    """The JSON list of secrets written to ``descriptor`` (closed after reading)."""
    with os.fdopen(descriptor, "rb") as source:
        loaded = json.loads(source.read() or b"[]")
    if not isinstance(loaded, list) or not all(isinstance(item, str) for item in loaded):
        raise ValueError("the secrets must be a JSON list of strings")
    return loaded


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


def relay(source: int, target: int, redactor: Redactor) -> None:
    """Copy ``source`` to ``target`` through ``redactor`` until end of file."""
    while chunk := os.read(source, READ_BYTES):
        if ready := redactor.feed(chunk):
            _write_all(target, ready)
    if rest := redactor.finish():
        _write_all(target, rest)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m modelyard.runtimes.log_redactor SECRETS_FD", file=sys.stderr)
        return 2
    # The engine is stopped by signals to its own process group; this relay ends at end of file.
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    redactor = Redactor(read_secrets(int(argv[0])))
    try:
        relay(sys.stdin.fileno(), sys.stdout.fileno(), redactor)
    except OSError as error:  # the log cannot be written (a full disk): drain, so the engine runs on
        print(f"modelyard log redactor: {error}", file=sys.stderr)
        while os.read(sys.stdin.fileno(), READ_BYTES):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
