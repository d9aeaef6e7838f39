"""The task that runs ON a worker node (a Ray task pinned to it): its GPUs through NVML (our
``hardware/`` code, run there). Whether a model directory is there: ``runtimes/ray_supervisor.py``
(``model_directory_problem``).

It is a plain function of this module, so Ray ships it by reference: every worker has
modelyard installed (it joined with ``modelyard worker join``).
"""

from __future__ import annotations

import socket
from typing import Any

from modelyard.hardware.gpus import read_gpu_inventory


def probe_gpus() -> dict[str, Any]:
    """This node's GPUs (``GpuInventory.to_json()``) and its host name."""
    inventory = read_gpu_inventory()
    return {"hostname": socket.gethostname(), **inventory.to_json()}
