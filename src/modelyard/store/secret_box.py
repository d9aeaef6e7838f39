"""Secret values at rest: sealed with a key kept in the data directory, opened only to launch.

A secret (an ``HF_TOKEN`` in a deployment's environment, the value of ``--api-key``) is stored
as ``modelyard-secret:v1:<Fernet token>`` (AES-128-CBC with an HMAC-SHA256, from the
``cryptography`` package), so the database, its backups and its dumps never hold it in clear.
The key is ``<data-dir>/secret-key`` (mode 0600), made at first start; the controller opens the
values when it renders an engine's command line and environment. Without the key file, sealed
values cannot be opened: keep it with the database (a PostgreSQL shared by several data
directories needs the same key file in each).

Usage::

    box = SecretBox.for_data_dir(settings.data_dir)
    stored = box.seal("hf_abc")        # 'modelyard-secret:v1:gAAAA...'
    box.reveal(stored)                 # 'hf_abc'; a value that is not sealed comes back as is
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from modelyard.errors import InvalidInput

SEALED_PREFIX = "modelyard-secret:v1:"
KEY_FILE_NAME = "secret-key"


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def _read_or_create_key(key_file: Path) -> bytes:
    try:
        return key_file.read_bytes().strip()
    except FileNotFoundError:
        pass
    key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Fernet.generate_key()
    try:
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it meanwhile: use theirs
        return key_file.read_bytes().strip()
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    return key


@dataclass(frozen=True)
class SecretBox:
    """Seals and reveals secret values with one key."""

    key_file: Path
    _fernet: Fernet

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> SecretBox:
        """The box of a data directory; its key file is created (0600) when missing."""
        key_file = data_dir / KEY_FILE_NAME
        return cls(key_file, Fernet(_read_or_create_key(key_file)))

    def seal(self, value: str) -> str:
        if is_sealed(value):
            return value
        return SEALED_PREFIX + self._fernet.encrypt(value.encode()).decode("ascii")

    def reveal(self, value: str) -> str:
        """The clear value of a sealed one (``InvalidInput`` when this key did not seal it)."""
        if not is_sealed(value):
            return value
        try:
            return self._fernet.decrypt(value.removeprefix(SEALED_PREFIX).encode("ascii")).decode()
        except (InvalidToken, UnicodeError) as error:
            raise InvalidInput(
                f"a secret value cannot be opened with the key in {self.key_file}",
                hint="the database was sealed with another data directory's secret-key: copy that "
                "file here, or remove the deployment and create it again with its secrets",
            ) from error

    def reveal_env(self, env: dict[str, str]) -> dict[str, str]:
        return {name: self.reveal(value) for name, value in env.items()}

    def reveal_arguments(self, arguments: list[str]) -> list[str]:
        """Arguments with sealed values opened (whole arguments, and the value of ``--flag=value``)."""
        revealed: list[str] = []
        for argument in arguments:
            flag, equals, value = argument.partition("=")
            if equals and is_sealed(value) and argument.startswith("-"):
                revealed.append(flag + "=" + self.reveal(value))
            else:
                revealed.append(self.reveal(argument))
        return revealed
