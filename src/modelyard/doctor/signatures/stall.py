"""A start that makes no progress: which stage the log stopped in, and what unblocks that stage.

An engine that hangs prints no error. What it printed last says where it is stuck: NCCL's
initialisation between the GPUs (peer-to-peer that does not work, the wrong network interface), a
download from the hub, reading the weights from slow storage, torch.compile, or CUDA graph
capture. ``stalled_finding`` names that stage from the last lines and the time without output.

Usage::

    stalled_finding(log_text, seconds_without_output=900).message
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from modelyard.doctor.findings import Finding, Severity

# No new line for this long while the engine starts is a finding (model loading prints progress;
# NCCL, compilation and graph capture print at least every few minutes).
STALL_SECONDS = 600.0
_TAIL_LINES = 40


@dataclass(frozen=True)
class Stage:
    name: str
    marker: re.Pattern[str]
    cause: str
    fix: str


STAGES: tuple[Stage, ...] = (
    Stage(
        "capturing CUDA graphs",
        re.compile(r"[Cc]apturing (?:CUDA graph|cudagraph)|Capture cuda graph begin", re.IGNORECASE),
        "CUDA graph capture does not finish",
        "start with --enforce-eager (vLLM) or --disable-cuda-graph (SGLang) to skip it, and check that "
        "no other process competes for the GPU",
    ),
    Stage(
        "compiling (torch.compile)",
        re.compile(r"torch\.compile|Compiling a graph|Dynamo bytecode transform|inductor", re.IGNORECASE),
        "torch.compile takes minutes on a first start and can hang on a broken compiler cache",
        "wait for the first compile, or start with -O0 / --enforce-eager (vLLM) to skip it; clear "
        "~/.cache/vllm/torch_compile_cache if it hangs again",
    ),
    Stage(
        "loading the weights",
        re.compile(
            r"Loading (?:safetensors )?(?:checkpoint shards|weights)|Load weight begin|Starting to load model"
        ),
        "reading the weights is stuck or very slow (network file system, cold disk)",
        "check the storage's read speed (a network file system is the usual cause); copy the model to a "
        "local disk",
    ),
    Stage(
        "downloading the model",
        re.compile(r"Downloading|hf_transfer|huggingface\.co", re.IGNORECASE),
        "a download from the hub makes no progress",
        "give a local model directory (modelyard serves local directories), or check the network and "
        "HF_ENDPOINT",
    ),
    Stage(
        "initialising NCCL between the GPUs",
        re.compile(
            r"NCCL INFO|pynccl|nccl==|Found nccl from library|backend=nccl|Init torch distributed begin"
            r"|world_size=\d+ rank=\d+"
        ),
        "NCCL's initialisation between the GPUs hangs: peer-to-peer access that the topology does not give "
        "(GPUs on different PCIe root complexes, virtual machines, some consumer boards) or a network "
        "interface the ranks cannot reach each other on",
        "retry with NCCL_P2P_DISABLE=1 (slower all-reduce), check `nvidia-smi topo -m` and the IOMMU/ACS "
        "settings, set NCCL_SOCKET_IFNAME to the interface the GPUs' host uses, and NCCL_DEBUG=INFO to see "
        "the step that hangs",
    ),
)


def stalled_finding(text: str, seconds_without_output: float) -> Finding:
    """``log.stalled``: no output for ``seconds_without_output``, in the stage the last lines show."""
    lines = [line for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
    last_line = lines[-1].strip()[:300] if lines else ""
    stage = next(
        (stage for line in reversed(lines) for stage in STAGES if stage.marker.search(line)),
        None,
    )
    minutes = seconds_without_output / 60
    if stage is None:
        return Finding(
            "log.stalled",
            Severity.ERROR,
            f"the engine has printed nothing for {minutes:.0f} minutes while starting; "
            f"last line: {last_line!r}",
            fix="look at what the engine does (py-spy dump --pid PID) and at the GPU (nvidia-smi); restart "
            "with the engine's debug logging (VLLM_LOGGING_LEVEL=DEBUG, --log-level debug)",
            details={"seconds_without_output": seconds_without_output, "line": last_line},
        )
    return Finding(
        "log.stalled",
        Severity.ERROR,
        f"the engine has made no progress for {minutes:.0f} minutes while {stage.name}: {stage.cause}; "
        f"last line: {last_line!r}",
        fix=stage.fix,
        details={"stage": stage.name, "seconds_without_output": seconds_without_output, "line": last_line},
    )
