"""Log signatures of the collectives a multi-GPU start sets up: Gloo's TCP mesh and the custom
all-reduce of vLLM and SGLang.

Both fail with words that do not say what to change: Gloo's ``connectFullMesh failed`` (its
``pair.cc`` could not reach a peer on the interface it picked) and a traceback through the custom
all-reduce (``custom_all_reduce.py``), most often while CUDA graphs are captured and its buffers
are registered (``register_graph_buffers``) on GPUs without working peer-to-peer access.
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature


def _explain_gloo(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "Gloo (torch.distributed's CPU backend, which the engine uses beside NCCL) could not connect its "
        "ranks to each other (connectFullMesh): it picked a network interface the other node cannot reach",
        "set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the interface the nodes reach each other on "
        "(see `ip addr`; e.g. eth0 or ib0) on every node, and check that the nodes' firewalls let "
        "their ports through",
    )


def _explain_custom_all_reduce(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    stage = " while capturing CUDA graphs" if match.groupdict().get("graph") else ""
    switch = "--disable-custom-all-reduce"
    return (
        f"the engine's custom all-reduce (its own GPU-to-GPU kernel, used instead of NCCL for small "
        f"tensors) failed{stage}; it needs peer-to-peer access between the GPUs of the group",
        f"start with {switch} (the engine falls back to NCCL), or --disable-cuda-graph / --enforce-eager "
        "where only graph capture fails; check `nvidia-smi topo -m` for peer-to-peer between the GPUs",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.gloo-connect-failed",
        Severity.ERROR,
        re.compile(r"Gloo connectFullMesh failed[^\n]*"),
        _explain_gloo,
        "gloo/transport/tcp/pair.cc (torch.distributed's Gloo process group, ProcessGroupGloo)",
    ),
    LogSignature(
        "log.custom-all-reduce-failed",
        Severity.ERROR,
        re.compile(
            r'File "[^"\n]*device_communicators/custom_all_reduce\.py", line \d+, in '
            r"(?:(?P<graph>register_graph_buffers|capture)|\w+)"
        ),
        _explain_custom_all_reduce,
        "vllm/distributed/device_communicators/custom_all_reduce.py, "
        "sglang/srt/distributed/device_communicators/custom_all_reduce.py (register_graph_buffers)",
    ),
)
