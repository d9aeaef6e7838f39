"""The log signatures doctor knows, in the order a diagnosis lists them (most specific first).

``memory.REFUSALS`` (the engines' own refusals), then what stops a start early
(``startup.MORE_SIGNATURES``, ``startup.SIGNATURES``, ``arguments.SIGNATURES``: llama.cpp's and
llama-box's unknown arguments, mangled JSON; ``launchers``: a launcher and an engine of releases
that do not fit; ``refusals``: a layout, an adapter or a pair of options the engine refuses),
the KV-cache dtype the kernels refuse
(``kv_cache_dtype``), what the model needs (``model.SIGNATURES``: context, dtype, quantization,
remote code, heads, chat template, files, disk), what the process finds of CUDA, its libraries,
its kernels and the weights (``runtime``), what the engine talks to (``network.SIGNATURES``:
proxies, the hub, NCCL's shared memory; ``collectives``: Gloo's mesh, the custom all-reduce), and
the generic errors last
(``memory.RUNTIME``: CUDA and host out of memory; ``network.GENERIC``: any NCCL error).
"""

from __future__ import annotations

from modelyard.doctor.signatures import (
    arguments,
    collectives,
    kv_cache_dtype,
    launchers,
    memory,
    model,
    network,
    refusals,
    runtime,
    startup,
)
from modelyard.doctor.signatures.base import LogSignature

SIGNATURES: tuple[LogSignature, ...] = (
    *memory.REFUSALS,
    *startup.MORE_SIGNATURES,
    *startup.SIGNATURES,
    *arguments.SIGNATURES,
    *launchers.SIGNATURES,
    *refusals.SIGNATURES,
    *kv_cache_dtype.SIGNATURES,
    *model.SIGNATURES,
    *runtime.SIGNATURES,
    *network.SIGNATURES,
    *collectives.SIGNATURES,
    *memory.RUNTIME,
    *network.GENERIC,
)

__all__ = ["SIGNATURES", "LogSignature"]
