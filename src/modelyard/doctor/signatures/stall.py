"""A start that makes no progress: which stage the log stopped in, and what unblocks that stage.

An engine that hangs prints no error. What it printed last says where it is stuck. Each ``Stage``
is recognised by the lines the engine prints when the stage begins or moves on (``begins``) and
when it is done (``ends``), in the wording of vLLM 0.2x (V1 engine) and SGLang 0.5.x:

- starting the engine's processes, after it read its arguments (vLLM's ``non-default args:`` or
  ``args: Namespace(``, SGLang's ``server_args=ServerArgs(``) and before any later stage says a
  word: the engine resolves the model's config and tokenizer (from the hub unless the model is a
  local directory) and starts its GPU processes, which with tensor parallel report only once their
  collective init begins;
- waiting for Ray to place the engine's GPUs (vLLM's Ray executor: ``Waiting for creating a placement
  group of specs for N seconds``, ``The number of required GPUs exceeds the total number of
  available GPUs in the placement group``; its repeats are no progress);
- initialising the GPUs' collective communication (vLLM: ``world_size=N rank=R ...
  backend=nccl``, ``Found nccl from library``, ``vLLM is using nccl==``, NCCL's own ``NCCL INFO``
  lines; done at ``rank R in world size N is assigned as DP rank ...``. SGLang: ``Init torch
  distributed begin.`` / ``Init torch distributed ends.``);
- downloading the model (huggingface_hub's ``Fetching N files`` / ``Downloading``; done at vLLM's
  ``Time spent downloading weights``);
- loading the weights (vLLM: ``Starting to load model``, ``Loading safetensors checkpoint shards``;
  done at ``Loading weights took`` / ``Model loading took``. SGLang: ``Load weight begin.`` /
  ``Load weight end.``);
- torch.compile (vLLM: ``Using cache directory: ... for vLLM's torch.compile``, ``Dynamo bytecode
  transform time``, ``Compiling a graph for ...``, ``Directly load the compiled graph(s) ...``; done
  at ``torch.compile takes N s in total``. SGLang: ``Capture piecewise CUDA graph begin``);
- CUDA graph capture (vLLM: ``Capturing CUDA graphs (...)``; done at ``Graph capturing finished
  in``. SGLang: ``Capture cuda graph begin.`` / ``Capture cuda graph end.``);
- the engine says it serves (vLLM ``Application startup complete.``, SGLang ``The server is fired
  up and ready to roll!``) but the caller still waits: the address or a proxy in between.

``stage_reached`` walks the lines in order and keeps the stage last begun and not ended (or the
one last ended); ``stalled_finding`` names it with the fix.

Usage::

    stalled_finding(log_text, seconds_without_output=900, engine="vllm").message
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from modelyard.doctor.findings import Finding, Severity

# No new line for this long while the engine starts is a finding (model loading prints progress;
# NCCL, compilation and graph capture print at least every few minutes).
STALL_SECONDS = 600.0

StageKey = Literal[
    "engine-start",
    "ray-placement",
    "collective-init",
    "download",
    "weights",
    "compile",
    "graph-capture",
    "serving",
]

# vLLM's Ray executor while its placement group waits for GPUs (executor/ray_utils.py,
# _wait_until_pg_ready; the wording varies between releases).
_PLACEMENT_WAIT = r"Waiting for creating a[\w ]*placement[\w ]* of specs"


@dataclass(frozen=True)
class Stage:
    key: StageKey
    name: str
    begins: re.Pattern[str]
    ends: re.Pattern[str] | None
    cause: str
    # The fix per engine family ("vllm", "sglang"); "" is for any engine.
    fixes: dict[str, str]

    def fix(self, engine: str | None) -> str:
        return self.fixes.get(engine or "", self.fixes[""])


_NCCL_FIX = (
    "retry with NCCL_P2P_DISABLE=1 (peer-to-peer the topology does not give: consumer boards, VMs, "
    "GPUs on different PCIe root complexes; check `nvidia-smi topo -m` and IOMMU/ACS); in a container "
    "give it --ipc=host or a larger /dev/shm (--shm-size 16g); set NCCL_SOCKET_IFNAME and "
    "GLOO_SOCKET_IFNAME to the interface the ranks reach each other on (not docker0, lo or a VPN); "
    "NCCL_DEBUG=INFO shows the step that hangs"
)

STAGES: tuple[Stage, ...] = (
    Stage(
        "engine-start",
        "starting the engine's processes (arguments read, no later stage begun)",
        re.compile(r"non-default args: \{|args: Namespace\(|server_args=ServerArgs\("),
        None,
        "after reading its arguments the engine resolves the model's config and tokenizer (from the hub "
        "unless the model is a local directory: a hub or proxy that does not answer hangs here) and starts "
        "its GPU processes (a GPU or driver that does not answer, or tensor-parallel ranks that wait for "
        "each other before their first line)",
        {
            "": "give a local model directory and set HF_HUB_OFFLINE=1 (or check the network and proxy "
            "variables); check that `nvidia-smi` answers; with tensor parallel run with NCCL_DEBUG=INFO to "
            "see whether the ranks are in NCCL's init (then: " + _NCCL_FIX + ")",
        },
    ),
    Stage(
        "ray-placement",
        "waiting for Ray to place the engine's GPUs (its placement group)",
        re.compile(
            _PLACEMENT_WAIT + r"|The number of required GPUs exceeds the total number of available GPUs"
            r"|Connecting to existing Ray cluster"
        ),
        None,
        "vLLM's Ray executor waits for a placement group the cluster cannot give: fewer free GPUs than "
        "the layout needs (a node that never joined, GPUs held by an earlier run's placement group), or "
        "nodes whose Ray addresses differ from VLLM_HOST_IP",
        {
            "": "run `ray status` (and `ray list nodes`): the cluster must show the GPUs TP x PP needs "
            "free; start Ray on every node with its GPUs (`ray start --num-gpus N`), release leaked "
            "placement groups (`ray stop` on every node), and set VLLM_HOST_IP to the address each node "
            "joined Ray with",
        },
    ),
    Stage(
        "collective-init",
        "initialising NCCL between the GPUs",
        re.compile(
            r"world_size=\d+ rank=\d+|Found nccl from library|vLLM is using nccl==|NCCL INFO|pynccl"
            r"|Init torch distributed begin|\[Gloo\] Rank \d+ is connected"
        ),
        re.compile(r"rank \d+ in world size \d+ is assigned as|Init torch distributed ends"),
        "the GPUs' processes wait for each other in NCCL or Gloo: peer-to-peer access the topology does "
        "not give, too little shared memory for NCCL, or a network interface the ranks cannot reach "
        "each other on (multi-node: a node that never joined)",
        {
            "": _NCCL_FIX,
            "sglang": _NCCL_FIX + "; on several nodes check that every node runs with the same "
            "--dist-init-addr and that the address is reachable",
        },
    ),
    Stage(
        "download",
        "downloading the model from the hub",
        re.compile(r"Fetching \d+ files|Downloading |hf_transfer|Downloading Model to"),
        re.compile(r"Time spent downloading weights"),
        "a download from the hub makes no progress",
        {
            "": "give a local model directory (modelyard serves local directories), or check the network, "
            "the proxy variables and HF_ENDPOINT; HF_HUB_ENABLE_HF_TRANSFER=0 if hf_transfer stalls",
        },
    ),
    Stage(
        "weights",
        "loading the weights",
        re.compile(
            r"Starting to load model|Loading (?:safetensors |pt )?checkpoint shards|Load weight begin"
            r"|Using model weights format"
        ),
        re.compile(r"Loading weights took|Model loading took|Load weight end"),
        "reading the weights is stuck or very slow (a network file system, a cold or slow disk, a "
        "bind mount from another OS), or the host is out of RAM and swapping",
        {
            "": "check the storage's read speed (copy the model to a local NVMe disk); check host RAM "
            "with `free -g`",
            "vllm": "check the storage's read speed (copy the model to a local NVMe disk); on a network "
            "file system try --safetensors-load-strategy eager; check host RAM with `free -g`",
        },
    ),
    Stage(
        "compile",
        "compiling (torch.compile)",
        re.compile(
            r"for vLLM's torch\.compile|Dynamo bytecode transform time|Compiling a graph for"
            r"|Directly load the compiled graph|Capture piecewise CUDA graph begin"
        ),
        re.compile(r"torch\.compile takes [\d.]+ s in total|Capture piecewise CUDA graph end"),
        "torch.compile takes minutes on a first start, and can hang on a broken or shared compile cache",
        {
            "": "wait for the first compile; if it hangs again, clear the compile cache and start "
            "without compilation",
            "vllm": "wait for the first compile; if it hangs, clear ~/.cache/vllm/torch_compile_cache and "
            "start with -O0 (or --enforce-eager) to skip compilation",
            "sglang": "start without --enable-torch-compile (and with --disable-piecewise-cuda-graph) to "
            "skip compilation; clear the torch inductor cache (/tmp/torchinductor_*) if it hangs again",
        },
    ),
    Stage(
        "graph-capture",
        "capturing CUDA graphs",
        re.compile(r"Capturing CUDA graphs|Capturing cudagraphs|Capture cuda graph begin"),
        re.compile(r"Graph capturing finished in|Capture cuda graph end"),
        "CUDA graph capture does not finish (a kernel that waits forever, the custom all-reduce, or "
        "another process competing for the GPU)",
        {
            "": "start without CUDA graphs to get past it, and check that no other process uses the GPU",
            "vllm": "start with --enforce-eager to skip capture (with tensor parallel also try "
            "--disable-custom-all-reduce), and check that no other process uses the GPU",
            "sglang": "start with --disable-cuda-graph to skip capture (with tensor parallel also try "
            "--disable-custom-all-reduce, or a lower --cuda-graph-max-bs)",
        },
    ),
    Stage(
        "serving",
        "serving, by its own log",
        re.compile(
            r"Application startup complete|The server is fired up and ready to roll|Uvicorn running on"
            r"|Starting vLLM API server"
        ),
        None,
        "the engine says it serves, but its caller still waits: it listens on another address or "
        "port than the one asked, or its own warm-up request goes through a proxy",
        {
            "": "check the host and port in its log against the ones given; set NO_PROXY=127.0.0.1,localhost "
            "(or unset http_proxy/https_proxy) for the engine",
        },
    ),
)


@dataclass(frozen=True)
class StageReached:
    """Where a log stopped: the stage under way (``stage``), or none with ``after`` the one last
    finished; ``line`` is the last line that told."""

    stage: Stage | None
    after: Stage | None
    line: str


def stage_reached(text: str) -> StageReached:
    """The stage the log is in at its end: the last one begun and not ended."""
    current: Stage | None = None
    after: Stage | None = None
    told = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if current is not None and current.ends is not None and current.ends.search(line):
            after, current, told = current, None, line
            continue
        for stage in STAGES:
            if stage.begins.search(line):
                current, told = stage, line
                break
            if stage.ends is not None and stage.ends.search(line):
                after, current, told = stage, None, line
                break
    return StageReached(stage=current, after=after, line=told[:300])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def stalled_finding(text: str, seconds_without_output: float, engine: str | None = None) -> Finding:
    """``log.stalled``: no progress for ``seconds_without_output``, in the stage the log shows."""
    reached = stage_reached(text)
    last_line = _last_line(text)
    quiet = _duration(seconds_without_output)
    details: dict[str, object] = {"seconds_without_output": seconds_without_output, "line": last_line}
    if reached.stage is not None:
        stage = reached.stage
        details.update(stage=stage.name, stage_key=stage.key, stage_line=reached.line)
        return Finding(
            "log.stalled",
            Severity.ERROR,
            f"the engine has made no progress for {quiet} while {stage.name}: {stage.cause}; "
            f"last line: {last_line!r}",
            fix=stage.fix(engine),
            details=details,
        )
    if reached.after is not None:
        details.update(after_stage=reached.after.name, stage_line=reached.line)
        return Finding(
            "log.stalled",
            Severity.ERROR,
            f"the engine has made no progress for {quiet} after {reached.after.name} finished "
            f"({reached.line!r}); last line: {last_line!r}",
            fix="look at what the engine does (py-spy dump --pid PID) and at the GPU (nvidia-smi); "
            "restart with the engine's debug logging (VLLM_LOGGING_LEVEL=DEBUG, --log-level debug)",
            details=details,
        )
    return Finding(
        "log.stalled",
        Severity.ERROR,
        f"the engine has printed nothing for {quiet} while starting"
        + (f"; last line: {last_line!r}" if last_line else " (the log is empty)"),
        fix="look at what the engine does (py-spy dump --pid PID) and at the GPU (nvidia-smi); restart "
        "with the engine's debug logging (VLLM_LOGGING_LEVEL=DEBUG, --log-level debug)",
        details=details,
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} minutes"


# Lines a stuck start goes on printing: vLLM's API server polling its engine core (DEBUG level;
# 0.8's "Waiting for 1 core engine proc(s) to start: {0}", 0.9+'s "N local, M remote"), vLLM's
# shared-memory broadcast queue warning every 60 s that a rank does not read it
# (``distributed/device_communicators/shm_broadcast.py``), a health check answered "not yet"
# (uvicorn's access line, launchers that poll: "Attempt 13: Please wait for sglang server to become
# ready", "Server is not up yet", "Still loading... (26m 2s)"), NCCL's warnings of a retried
# connect. New lines of only these kinds are no progress.
_NOT_PROGRESS = re.compile(
    r"Waiting for \d+ (?:local, \d+ remote )?core engine proc\(s\) to (?:start|connect)"
    r"|No available shared memory broadcast block found"
    r"|" + _PLACEMENT_WAIT + r"|\"GET /(?:health|v1/models)[^\"]*\" 50[23]|GET /health[^\n]* 50[23]|NCCL WARN"
    r"|[Pp]lease wait for [\w ]*server to (?:become ready|start)|[Ss]erver is not up yet"
    r"|[Ss]till loading\W|Loading model\W+\[\d+m \d+s elapsed\]"
)


def shows_progress(lines: str) -> bool:
    """Whether new log lines say the start moved on (anything but the lines a stuck start repeats)."""
    return any(line.strip() and not _NOT_PROGRESS.search(line) for line in lines.splitlines())
