"""What a GPU can run, from its name: compute capability and whether it is a data-center board.

NVML reports the name (``NVIDIA GeForce RTX 4090``, ``Tesla V100-SXM2-32GB``, ``NVIDIA H200``);
the capability decides the dtypes and kernels an engine has for it (bfloat16 needs 8.0, vLLM's
wheels carry kernels from 7.0, Blackwell's 10.0 and 12.0 need CUDA 12.8 builds), and data-center
boards can run a container's newer CUDA on an older driver (forward compatibility), consumer
boards cannot. Source: NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus).

Usage::

    compute_capability("NVIDIA GeForce RTX 3090")   # (8, 6)
    is_datacenter("Tesla T4")                       # True
"""

from __future__ import annotations

import re

# Name fragment -> compute capability, most specific first (matched on the upper-cased name with
# spaces and dashes removed).
_CAPABILITIES: tuple[tuple[str, tuple[int, int]], ...] = (
    ("RTXPRO6000", (12, 0)),
    ("RTX50", (12, 0)),
    ("5090", (12, 0)),
    ("5080", (12, 0)),
    ("5070", (12, 0)),
    ("5060", (12, 0)),
    ("B200", (10, 0)),
    ("B100", (10, 0)),
    ("GB200", (10, 0)),
    ("B300", (10, 3)),
    ("H200", (9, 0)),
    ("H100", (9, 0)),
    ("H800", (9, 0)),
    ("H20", (9, 0)),
    ("GH200", (9, 0)),
    ("L40S", (8, 9)),
    ("L40", (8, 9)),
    ("L20", (8, 9)),
    ("L4", (8, 9)),
    ("4090", (8, 9)),
    ("4080", (8, 9)),
    ("4070", (8, 9)),
    ("4060", (8, 9)),
    ("RTX6000ADA", (8, 9)),
    ("RTX5000ADA", (8, 9)),
    ("RTX4000ADA", (8, 9)),
    ("A100", (8, 0)),
    ("A800", (8, 0)),
    ("A30", (8, 0)),
    ("A6000", (8, 6)),
    ("A5000", (8, 6)),
    ("A4000", (8, 6)),
    ("A40", (8, 6)),
    ("A10", (8, 6)),
    ("A16", (8, 6)),
    ("A2", (8, 6)),
    ("3090", (8, 6)),
    ("3080", (8, 6)),
    ("3070", (8, 6)),
    ("3060", (8, 6)),
    ("T4", (7, 5)),
    ("2080", (7, 5)),
    ("2070", (7, 5)),
    ("2060", (7, 5)),
    ("TITANRTX", (7, 5)),
    ("QUADRORTX", (7, 5)),
    ("V100", (7, 0)),
    ("TITANV", (7, 0)),
    ("P100", (6, 0)),
    ("P40", (6, 1)),
    ("P4", (6, 1)),
    ("1080", (6, 1)),
    ("1070", (6, 1)),
)
# Boards NVIDIA sells for data centers: these take the CUDA forward-compatibility package.
_DATACENTER = re.compile(r"TESLA|^(NVIDIA)?(A|H|B|L|V|T|P)\d|GH200|GB200|A800|H800", re.IGNORECASE)


def _key(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name.upper()).removeprefix("NVIDIA").removeprefix("GEFORCE")


def compute_capability(name: str) -> tuple[int, int] | None:
    """The compute capability of the GPU called ``name``, when the name is known."""
    key = _key(name)
    for fragment, capability in _CAPABILITIES:
        if fragment in key:
            return capability
    return None


def is_datacenter(name: str) -> bool:
    """Tesla / A / H / B / L / V / T / P boards (not GeForce, not RTX workstation cards)."""
    upper = name.upper()
    if "GEFORCE" in upper or "RTX" in upper or "TITAN" in upper or "QUADRO" in upper:
        return False
    return bool(_DATACENTER.search(_key(name)) or "TESLA" in upper)
