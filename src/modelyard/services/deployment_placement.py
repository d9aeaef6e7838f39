"""Where a deployment's replicas may go on a cluster: selectors, checked before anything is stored.

- ``workers``: worker names (``modelyard workers``); the replica goes to one of them;
- ``worker_labels``: every label must match (``modelyard worker join --label zone=a``);
- ``gpu_model``: GPUs whose name contains this text ("H200", "L40S");
- ``nodes``: a replica over N hosts (a gang: one rank per host, the GPUs split evenly), for
  engines with multi-node flags (vLLM, SGLang).

They are stored in ``deployments.placement`` beside ``gpu_memory`` and read by the scheduler
(``control/placement.py``). Usage::

    selectors = placement_selectors(request, gpus_per_replica=2, version=version)
"""

from __future__ import annotations

from typing import Any

from modelyard.backends.multi_node import supports_multi_node
from modelyard.backends.spec import BackendVersion
from modelyard.errors import InvalidInput

MAXIMUM_NODES = 16
MAXIMUM_SELECTOR_CHARACTERS = 128


def _word(value: str, what: str) -> str:
    value = value.strip()
    if not value or len(value) > MAXIMUM_SELECTOR_CHARACTERS or any(c.isspace() or c == "," for c in value):
        raise InvalidInput(
            f"{what} {value!r} is empty, too long or has blanks or commas",
            hint="names and labels as `modelyard workers` shows them, e.g. --worker gpu-2 "
            "--worker-label zone=a",
        )
    return value


def placement_selectors(
    *,
    workers: list[str],
    worker_labels: dict[str, str],
    gpu_model: str | None,
    nodes: int,
    gpus_per_replica: int,
    version: BackendVersion,
) -> dict[str, Any]:
    """The selectors to store (only those given)."""
    selectors: dict[str, Any] = {}
    if workers:
        selectors["workers"] = [_word(name, "worker") for name in workers]
    if worker_labels:
        selectors["worker_labels"] = {
            _word(key, "label key"): _word(value, f"label {key!r} value")
            for key, value in worker_labels.items()
        }
    if gpu_model is not None and gpu_model.strip():
        selectors["gpu_model"] = gpu_model.strip()
    if nodes != 1:
        if not 1 <= nodes <= MAXIMUM_NODES:
            raise InvalidInput(
                f"nodes {nodes} is not from 1 to {MAXIMUM_NODES}", hint="--nodes 2 for two hosts"
            )
        if not supports_multi_node(version):
            raise InvalidInput(
                f"backend version {version.version} has no multi-node flags, so a replica cannot "
                f"span {nodes} hosts",
                hint="use vLLM or SGLang, or add multi_node to the version (docs/clusters.md)",
            )
        if gpus_per_replica < nodes or gpus_per_replica % nodes:
            raise InvalidInput(
                f"{gpus_per_replica} GPU(s) per replica do not split evenly over {nodes} hosts",
                hint=f"--gpus {nodes * max(1, gpus_per_replica // nodes)} --nodes {nodes} "
                "(the same GPUs on each host)",
            )
        selectors["nodes"] = nodes
    return selectors
