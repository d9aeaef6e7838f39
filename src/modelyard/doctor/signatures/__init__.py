"""The log signatures doctor knows, in the order a diagnosis lists them (most specific first).

``memory.REFUSALS`` (the engines' own refusals), then what stops a start early
(``startup.MORE_SIGNATURES``, ``startup.SIGNATURES``), what the model needs (``model.SIGNATURES``:
context, dtype, quantization, remote code, heads, files, disk), what the engine talks to
(``network.SIGNATURES``: proxies, the hub, NCCL's shared memory), and the generic errors last
(``memory.RUNTIME``: CUDA and host out of memory; ``network.GENERIC``: any NCCL error).
"""

from __future__ import annotations

from modelyard.doctor.signatures import memory, model, network, startup
from modelyard.doctor.signatures.base import LogSignature

SIGNATURES: tuple[LogSignature, ...] = (
    *memory.REFUSALS,
    *startup.MORE_SIGNATURES,
    *startup.SIGNATURES,
    *model.SIGNATURES,
    *network.SIGNATURES,
    *memory.RUNTIME,
    *network.GENERIC,
)

__all__ = ["SIGNATURES", "LogSignature"]
