"""Tasks that run ON a worker node (as Ray tasks pinned to it): its GPUs through NVML (our
``hardware/`` code, run there), and whether a model directory is there.

They are plain functions of this module, so Ray ships them by reference: every worker has
modelyard installed (it joined with ``modelyard worker join``).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from modelyard.hardware.gpus import read_gpu_inventory


def probe_gpus() -> dict[str, Any]:
    """This node's GPUs (``GpuInventory.to_json()``) and its host name."""
    inventory = read_gpu_inventory()
    return {"hostname": socket.gethostname(), **inventory.to_json()}


def probe_model_directory(path: str) -> dict[str, Any]:
    """Whether ``path`` is a model directory on this node: exists, has config.json, weights."""
    directory = Path(path)
    if not directory.is_dir():
        return {"present": False, "problem": f"{path} does not exist on this node"}
    if not (directory / "config.json").is_file():
        return {"present": False, "problem": f"{path} has no config.json on this node"}
    weights = [name.name for name in directory.glob("*.safetensors")]
    return {"present": True, "weights_files": len(weights), "problem": None}
