"""The cluster token: one secret shared by the head, every worker and the server (Ray's token
authentication). Made at the first ``serve --cluster`` in ``<data-dir>/cluster-token`` (0600),
never shown or logged (``serve`` prints how to copy the file to a worker: ``join_instructions``);
``MODELYARD_CLUSTER_TOKEN`` gives it instead (a server
that connects to a head started elsewhere, a worker that joins).

Usage::

    token, created = cluster_token(settings.cluster_token_file)
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from modelyard.errors import InvalidInput

ENV_CLUSTER_TOKEN = "MODELYARD_CLUSTER_TOKEN"
TOKEN_BYTES = 32
MINIMUM_TOKEN_CHARACTERS = 32


def join_instructions(address: str, token_file: Path) -> str:
    """How a worker joins, as ``serve --cluster`` prints it: copy the token file from this host
    (it stays 0600 there), then ``worker join --token-file`` (never the token on a command line)."""
    host = address.rpartition(":")[0] or address
    return (
        f"copy {token_file} to the worker (keep it 0600), then join from there:\n"
        f"                     scp {host}:{token_file} cluster-token && chmod 600 cluster-token\n"
        f"                     modelyard worker join {address} --token-file cluster-token"
    )


def check_token(token: str, where: str) -> str:
    """The token without surrounding blanks; refused (naming ``where`` it came from) when short."""
    token = token.strip()
    if len(token) < MINIMUM_TOKEN_CHARACTERS or any(character.isspace() for character in token):
        raise InvalidInput(
            f"the cluster token from {where} has {len(token)} characters (or blanks inside); a token "
            f"has at least {MINIMUM_TOKEN_CHARACTERS}, no blanks",
            hint="copy the file <data-dir>/cluster-token from the head's host and give it with --token-file "
            "(`modelyard serve --cluster` shows the command)",
        )
    return token


def read_token_file(path: Path) -> str | None:
    """The token in ``path``, None when there is no such file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InvalidInput(
            f"cannot read the cluster token file {path}: {error.strerror}",
            hint="run as the user that owns it (it is mode 0600)",
        ) from None
    return check_token(text, str(path)) if text.strip() else None


def cluster_token(path: Path) -> tuple[str, bool]:
    """The installation's cluster token and whether it was made now (``MODELYARD_CLUSTER_TOKEN``
    first, then ``path``, else a new one written to ``path`` with mode 0600)."""
    configured = os.environ.get(ENV_CLUSTER_TOKEN)
    if configured:
        return check_token(configured, ENV_CLUSTER_TOKEN), False
    existing = read_token_file(path)
    if existing:
        return existing, False
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(TOKEN_BYTES)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    return token, True
