"""The per-rank arguments of a multi-node replica, from the backend version's ``multi_node`` flags.

    extra = rank_arguments(version, rank=1, nnodes=2, master_addr="10.0.0.5", master_port=29500)
    # vLLM: ['--nnodes', '2', '--node-rank', '1', '--master-addr', '10.0.0.5',
    #        '--master-port', '29500', '--headless']

Every rank gets the same engine command (model, parallel sizes, the user's parameters) with
these appended; only rank 0 serves HTTP.
"""

from __future__ import annotations

import shlex

from modelyard.backends.spec import BackendVersion
from modelyard.errors import InvalidInput

RANK_PLACEHOLDERS = ("nnodes", "node_rank", "master_addr", "master_port")


def supports_multi_node(version: BackendVersion) -> bool:
    return version.multi_node is not None


def rank_arguments(
    version: BackendVersion, *, rank: int, nnodes: int, master_addr: str, master_port: int
) -> list[str]:
    """The arguments rank ``rank`` of ``nnodes`` adds (``InvalidInput`` without multi-node flags)."""
    flags = version.multi_node
    if flags is None:
        raise InvalidInput(
            f"backend version {version.version} has no multi-node flags, so a replica cannot span "
            f"{nnodes} nodes",
            hint="use vLLM or SGLang (their catalog versions have them), or add multi_node to the version",
        )
    values = {
        "nnodes": str(nnodes),
        "node_rank": str(rank),
        "master_addr": master_addr,
        "master_port": str(master_port),
    }
    template = flags.all_ranks + (" " + flags.worker_ranks if rank > 0 and flags.worker_ranks else "")
    arguments = []
    for token in shlex.split(template):
        for name, value in values.items():
            token = token.replace("{{" + name + "}}", value)
        if "{{" in token:
            raise InvalidInput(
                f"multi_node of version {version.version}: unknown placeholder in {token!r}",
                hint=f"use {', '.join('{{' + name + '}}' for name in RANK_PLACEHOLDERS)}",
            )
        arguments.append(token)
    return arguments
