"""Engine logs turned into one-line diagnoses that name the fix.

An engine that fails to start leaves the reason somewhere in a few hundred lines of log. Each
``LogSignature`` below recognises one known failure by the exact wording vLLM, SGLang, PyTorch,
NCCL, uvicorn, Docker or the Linux kernel use (each pattern names its source), and turns it
into a ``Finding`` with the fix, filled in with the numbers read from the log.

Usage::

    findings = diagnose_log(log_text, exit_code=-9, engine_args=["--gpu-memory-utilization", "0.95"])
    for finding in findings:  # most relevant first
        print(finding.check_id, finding.message, finding.fix)

``modelyard ps``, ``modelyard logs`` and the console show the first finding next to the instance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from modelyard.backends.flag_tables import FlagTable, available_versions, load_flag_table
from modelyard.backends.parameters import ParsedParameters, parse_arguments
from modelyard.doctor.findings import Finding, Severity
from modelyard.errors import InvalidInput

# What the fix builder receives: the first match, and what is known about the engine.
FixBuilder = Callable[[re.Match[str], "LogContext"], tuple[str, str]]

_KILLED_BY_SIGKILL_EXIT_CODES = frozenset({-9, 137})
_MAX_EXCERPT_CHARS = 400


@dataclass(frozen=True)
class LogContext:
    """What ``diagnose_log`` knows besides the text: the engine family and its parsed arguments."""

    engine: str | None
    parameters: ParsedParameters

    def flag_value(self, *names: str) -> str | None:
        """The value of the flag ``names`` denote (aliases, ``--flag=VALUE``; the last one wins)."""
        return self.parameters.value_of(*names)

    def float_flag(self, *names: str) -> float | None:
        try:
            return self.parameters.number(*names)
        except InvalidInput:
            return None


def _engine_table(engine: str | None) -> FlagTable | None:
    """The newest flag table of ``engine``: the log does not say which version wrote it."""
    if engine not in ("vllm", "sglang"):
        return None
    versions = available_versions(engine)
    return load_flag_table(engine, versions[-1]) if versions else None


@dataclass(frozen=True)
class LogSignature:
    """One known failure: the pattern that recognises it and how to explain it."""

    check_id: str
    severity: Severity
    pattern: re.Pattern[str]
    explain: FixBuilder
    # Where the wording comes from, for the reader of this file.
    source: str


def _first_group(match: re.Match[str], *names: str) -> str | None:
    """The first named group that matched (the alternatives of one pattern name their groups apart)."""
    for name in names:
        value = match.group(name)
        if value:
            return value
    return None


def _round_down(value: float, step: float = 0.01) -> float:
    return round(math.floor(value / step + 1e-9) * step, 2)


def _lower_utilization_text(context: LogContext, fallback_from: float | None = None) -> str:
    current = context.float_flag("--gpu-memory-utilization") or fallback_from
    if current is None:
        return "lower --gpu-memory-utilization (vLLM's default is 0.9 or 0.92) by 0.05-0.1"
    return f"lower --gpu-memory-utilization from {current:g} to {max(_round_down(current - 0.1), 0.05):g}"


def _is_sglang(context: LogContext) -> bool:
    return context.engine == "sglang"


# -- explanations, one per signature -------------------------------------------------------------


def _explain_vllm_free_memory(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    free_gib, total_gib = float(match["free"]), float(match["total"])
    utilization = float(match["utilization"])
    usable = _round_down(max(free_gib / total_gib - 0.02, 0.0)) if total_gib else 0.0
    message = (
        f"vLLM refused to start: only {free_gib:g} of {total_gib:g} GiB are free on the GPU, but "
        f"--gpu-memory-utilization {utilization:g} asks for {utilization * total_gib:.2f} GiB; "
        "another process holds GPU memory"
    )
    fix = (
        f"stop the other process on that GPU (see nvidia-smi), or lower --gpu-memory-utilization "
        f"from {utilization:g} to {usable:g} or less"
    )
    return message, fix


def _explain_vllm_no_cache_blocks(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    message = (
        "vLLM found no memory left for the KV cache after loading the weights "
        '("No available memory for the cache blocks")'
    )
    current = context.float_flag("--gpu-memory-utilization")
    raise_text = (
        f"raise --gpu-memory-utilization from {current:g} to {min(_round_down(current + 0.05), 0.95):g}"
        if current is not None and current < 0.95
        else "raise --gpu-memory-utilization"
    )
    fix = (
        f"{raise_text}, or give the model more GPUs (--tensor-parallel-size), or a quantized "
        "checkpoint; check with `modelyard estimate` that the weights fit at all"
    )
    return message, fix


def _explain_vllm_max_len_too_large(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    groups = match.groupdict()
    max_len = groups.get("max_len") or groups.get("old_max_len")
    estimated = groups.get("estimated") or groups.get("old_capacity")
    if groups.get("needed_gib"):
        message = (
            f"vLLM: one request at --max-model-len {max_len} needs {groups['needed_gib']} GiB of KV "
            f"cache but only {groups['available_gib']} GiB are available"
        )
    else:
        message = (
            f"vLLM: --max-model-len {max_len} is larger than the {estimated} tokens the KV cache can hold"
        )
    lower = f"lower --max-model-len to {estimated}" if estimated else "lower --max-model-len"
    current = context.float_flag("--gpu-memory-utilization")
    raise_text = (
        f"raise --gpu-memory-utilization from {current:g} to {min(_round_down(current + 0.05), 0.95):g}"
        if current is not None and current < 0.95
        else "raise --gpu-memory-utilization"
    )
    fix = f"{lower}, or {raise_text}, or add GPUs (--tensor-parallel-size)"
    return message, fix


def _explain_sglang_not_enough_memory(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    current_text = match["current"] or context.flag_value("--mem-fraction-static")
    message = (
        'SGLang: no room for the KV cache pool after the weights ("Not enough memory. Please try '
        'to increase --mem-fraction-static")'
    )
    if current_text:
        current = float(current_text)
        raised = min(_round_down(current + 0.05), 0.93)
        fix = (
            f"raise --mem-fraction-static from {current:g} to {raised:g} (it covers weights + KV pool), "
            "or add GPUs (--tp-size), or lower --context-length; if a CUDA out of memory error then "
            "follows, the model does not fit these GPUs"
        )
    else:
        fix = (
            "raise --mem-fraction-static by 0.05 (it covers weights + KV pool), or add GPUs "
            "(--tp-size), or lower --context-length"
        )
    return message, fix


def _explain_cuda_oom(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    detail = ""
    if match.groupdict().get("tried"):
        detail = f" while allocating {match['tried']}"
        if match.groupdict().get("free"):
            detail += f" ({match['free']} free of {match['total']})"
    message = f"CUDA out of memory{detail}"
    if _is_sglang(context):
        current = context.float_flag("--mem-fraction-static")
        lowered = (
            f"lower --mem-fraction-static from {current:g} to {max(_round_down(current - 0.05), 0.1):g}"
            if current is not None
            else "lower --mem-fraction-static by 0.05"
        )
        fix = (
            f"{lowered} to leave room for activations and CUDA graphs, or lower "
            "--chunked-prefill-size / --cuda-graph-max-bs, or add GPUs (--tp-size)"
        )
    else:
        fix = (
            f"{_lower_utilization_text(context)}, or lower --max-num-seqs / --max-num-batched-tokens "
            "or --max-model-len, or add GPUs (--tensor-parallel-size); check that no other "
            "process holds GPU memory"
        )
    return message, fix


def _explain_unknown_architecture(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    architectures = match["architectures"]
    message = f"the engine does not support the model architecture {architectures}"
    fix = (
        "use an engine version that lists this architecture (a newer release), or the "
        "transformers backend; check `architectures` in the model's config.json"
    )
    return message, fix


def _explain_parser(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    kind = "tool-call" if "tool" in match.group(0).lower() else "reasoning"
    name = (_first_group(match, "name", "bare", "quoted", "sglang", "choice") or "").strip("'\"")
    message = f"the engine has no {kind} parser named {name!r}"
    if name != name.strip():
        message += " (note the whitespace: a trailing space or tab copied into the value)"
    flag = "--tool-call-parser" if kind == "tool-call" else "--reasoning-parser"
    fix = (
        f"set {flag} to a name this engine version lists (names differ between vLLM and SGLang, "
        "e.g. Qwen3.5/3.6 use qwen3_coder and qwen3); `modelyard doctor --args` checks them"
    )
    return message, fix


def _explain_auto_tool_choice(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "vLLM refused --enable-auto-tool-choice without --tool-call-parser",
        "add --tool-call-parser NAME for the model family (qwen3_coder for Qwen3.5/3.6, hermes for "
        "Qwen2.5/Qwen3), or remove --enable-auto-tool-choice",
    )


def _explain_unrecognized_arguments(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    arguments = match["arguments"].strip()
    return (
        f"the engine does not accept the argument(s) {arguments}",
        "remove or rename them: flags differ between engines and engine versions; "
        "`modelyard doctor --backend B --version V --args ...` names the valid spelling",
    )


def _explain_nccl(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"NCCL (the GPU-to-GPU communication library) failed: {match.group(0).strip()[:160]}",
        "run with NCCL_DEBUG=INFO to see the cause; in containers give shared memory "
        "(--ipc=host or --shm-size 16g); where GPUs cannot talk peer to peer set NCCL_P2P_DISABLE=1; "
        "check that every GPU of the group is visible (CUDA_VISIBLE_DEVICES)",
    )


def _explain_address_in_use(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    port = match.groupdict().get("port")
    where = f"port {port}" if port else "its port"
    return (
        f"the engine could not listen on {where}: another process already uses it",
        f"stop the process on {where} (`ss -ltnp | grep {port or 'PORT'}`) or let modelyard pick "
        "another port; a previous engine that was not stopped is the usual culprit",
    )


def _explain_executable_not_found(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    program = _first_group(match, "program", "docker", "shell") or "the engine's program"
    return (
        f"the engine program {program} was not found",
        "install the engine into the Python environment modelyard runs from (e.g. `pip install vllm`), "
        "or set the backend version's executable to the full path, or its image for a container",
    )


def _explain_driver_too_old(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"the NVIDIA driver is too old for the engine's CUDA build: {match.group(0).strip()[:160]}",
        "upgrade the NVIDIA driver (`modelyard doctor` names the minimum for each engine version), "
        "or use an engine build for an older CUDA",
    )


def _explain_host_oom(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    process = _first_group(match, "process", "cgroup")
    who = f" ({process})" if process else ""
    return (
        f"the host's OOM killer killed the engine{who}: the machine ran out of RAM while loading the model",
        "free host RAM or add swap; loading needs about the size of the weights in RAM (or of the "
        "largest shard with safetensors mmap); in a container raise its memory limit; lower "
        "--max-parallel-loading-workers where the engine has it",
    )


# -- the signatures, most specific first -----------------------------------------------------------

SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.free-memory-below-utilization",
        Severity.ERROR,
        re.compile(
            r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less "
            r"than desired GPU memory utilization \((?P<utilization>[\d.]+), [\d.]+ GiB\)"
        ),
        _explain_vllm_free_memory,
        "vllm/v1/worker/gpu_worker.py (init_device)",
    ),
    LogSignature(
        "log.kv-cache-no-memory",
        Severity.ERROR,
        re.compile(r"No available memory for the cache blocks"),
        _explain_vllm_no_cache_blocks,
        "vllm/v1/core/kv_cache_utils.py (_check_enough_kv_cache_memory); vllm/worker/worker.py (V0)",
    ),
    LogSignature(
        "log.max-model-len-exceeds-kv-cache",
        Severity.ERROR,
        re.compile(
            r"To serve at least one request with the models?'s max seq len \((?P<max_len>\d+)\), "
            r"\(?(?P<needed_gib>[\d.]+) GiB KV\s*cache is needed, which is larger than the available KV\s*"
            r"cache memory \((?P<available_gib>[\d.]+) GiB\)\.(?:\s*Based on the available memory, the "
            r"estimated maximum model length is (?P<estimated>\d+)\.)?"
            r"|The model's max seq len \((?P<old_max_len>\d+)\) is larger than the maximum number of tokens "
            r"that can be stored in KV cache \((?P<old_capacity>\d+)\)"
        ),
        _explain_vllm_max_len_too_large,
        "vllm/v1/core/kv_cache_utils.py (_check_enough_kv_cache_memory); vllm/worker/worker.py (V0)",
    ),
    LogSignature(
        "log.sglang-not-enough-memory",
        Severity.ERROR,
        re.compile(
            r"Not enough memory\. Please try to increase --mem-fraction-static\.?"
            r"(?: Current value: mem_fraction_static=(?P<current>[\d.]+))?"
        ),
        _explain_sglang_not_enough_memory,
        "sglang/srt/model_executor/model_runner.py, pool_configurator.py (MemoryPoolConfig)",
    ),
    LogSignature(
        "log.driver-too-old",
        Severity.ERROR,
        re.compile(
            r"The NVIDIA driver on your system is too old[^\n]*"
            r"|CUDA driver version is insufficient for CUDA runtime version"
            r"|cuda>=\d+\.\d+, please update your driver[^\n]*"
        ),
        _explain_driver_too_old,
        "torch/cuda/__init__.py (_check_driver); CUDA runtime error 35; nvidia-container-cli",
    ),
    LogSignature(
        "log.auto-tool-choice-without-parser",
        Severity.ERROR,
        re.compile(r"--enable-auto-tool-choice requires --tool-call-parser"),
        _explain_auto_tool_choice,
        "vllm/entrypoints/openai/cli_args.py (validate_parsed_serve_args)",
    ),
    LogSignature(
        "log.parser-not-found",
        Severity.ERROR,
        re.compile(
            r"invalid (?:tool call|reasoning) parser: (?P<name>[^\n{]+?) \(chose from"
            r"|invalid (?:tool call|reasoning) parser: (?P<bare>[\w.\-]+)"
            r"|Reasoning parser (?P<quoted>'[^']*') not found"
            r"|Unsupported (?:tool_call_parser|reasoning_parser|model type): (?P<sglang>'?[\w.\-]+)"
            r"|argument --(?:tool-call-parser|reasoning-parser): invalid choice: (?P<choice>'[^']*')"
        ),
        _explain_parser,
        "vllm/entrypoints/openai/api_server.py (validate_api_server_args); "
        "sglang/srt/function_call/function_call_parser.py; argparse",
    ),
    LogSignature(
        "log.unknown-architecture",
        Severity.ERROR,
        re.compile(
            r"Model architectures (?P<architectures>\[[^\]]*\]) (?:are not supported for now"
            r"|failed to be inspected)"
        ),
        _explain_unknown_architecture,
        "vllm/model_executor/models/registry.py (_raise_for_unsupported)",
    ),
    LogSignature(
        "log.unrecognized-arguments",
        Severity.ERROR,
        re.compile(r"error: unrecognized arguments: (?P<arguments>[^\n]+)"),
        _explain_unrecognized_arguments,
        "argparse (vllm serve, sglang.launch_server)",
    ),
    LogSignature(
        "log.address-in-use",
        Severity.ERROR,
        re.compile(
            r"error while attempting to bind on address \('[^']*', (?P<port>\d+)\)[^\n]*"
            r"|\[Errno 98\] Address already in use"
            r"|[Aa]ddress already in use"
        ),
        _explain_address_in_use,
        "uvicorn (server startup); OSError errno 98; zmq",
    ),
    LogSignature(
        "log.executable-not-found",
        Severity.ERROR,
        re.compile(
            r"No such file or directory: '(?P<program>[^'/]+|[^']*/bin/[^'/]+)'"
            r"|exec: \"(?P<docker>[^\"]+)\": executable file not found in \$PATH"
            r"|(?P<shell>\S+): command not found"
        ),
        _explain_executable_not_found,
        "Python subprocess (FileNotFoundError); Docker (OCI runtime create failed); shells",
    ),
    LogSignature(
        "log.cuda-out-of-memory",
        Severity.ERROR,
        re.compile(
            r"(?:torch\.(?:cuda\.)?OutOfMemoryError: )?CUDA out of memory\."
            r"(?: Tried to allocate (?P<tried>[\d.]+ [KMG]iB)\.?"
            r"(?: GPU \d+ has a total capacity of (?P<total>[\d.]+ [KMG]iB) of which "
            r"(?P<free>[\d.]+ (?:[KMG]iB|bytes))"
            r" is free)?)?"
            r"|CUDA error: out of memory"
            r"|torch\.OutOfMemoryError"
        ),
        _explain_cuda_oom,
        "torch/cuda (c10/cuda/CUDACachingAllocator.cpp), CUDA runtime error 2",
    ),
    LogSignature(
        "log.nccl-error",
        Severity.ERROR,
        re.compile(
            r"NCCL error[^\n]*|ncclUnhandledCudaError[^\n]*|ncclSystemError[^\n]*|ncclInternalError[^\n]*"
            r"|ncclRemoteError[^\n]*|DistBackendError[^\n]*"
        ),
        _explain_nccl,
        "torch.distributed (ProcessGroupNCCL), vllm/distributed/device_communicators/pynccl.py",
    ),
    LogSignature(
        "log.host-oom-killed",
        Severity.ERROR,
        re.compile(
            r"Out of memory: Killed process \d+ \((?P<process>[^)]+)\)"
            r"|Memory cgroup out of memory: Killed process \d+ \((?P<cgroup>[^)]+)\)"
            r"|oom-kill:constraint=[^\n]*"
        ),
        _explain_host_oom,
        "Linux kernel oom_kill.c (dmesg)",
    ),
)


def _guess_engine(text: str) -> str | None:
    lowered = text.lower()
    if "sglang" in lowered:
        return "sglang"
    if "vllm" in lowered or "enginecore" in lowered:
        return "vllm"
    return None


def _excerpt(text: str, start: int, end: int) -> tuple[str, int]:
    """The whole line(s) around a match, and the 1-based line number where it starts."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end == -1 else line_end
    line = text[line_start:line_end].strip()
    if len(line) > _MAX_EXCERPT_CHARS:
        line = line[: _MAX_EXCERPT_CHARS - 3] + "..."
    return line, text.count("\n", 0, start) + 1


def diagnose_log(
    text: str,
    *,
    exit_code: int | None = None,
    engine: str | None = None,
    engine_args: Sequence[str] = (),
) -> list[Finding]:
    """Every known failure found in an engine log, the most relevant first.

    ``exit_code`` is the engine's exit status as the runtime saw it (``-9`` or ``137``: killed by
    SIGKILL, which with no other finding points at the host's OOM killer). ``engine`` ("vllm",
    "sglang", ...) and ``engine_args`` make the fixes concrete ("lower --gpu-memory-utilization
    from 0.95 to 0.85"); the engine is guessed from the log when not given.
    """
    family = engine or _guess_engine(text)
    context = LogContext(engine=family, parameters=parse_arguments(list(engine_args), _engine_table(family)))
    findings: list[Finding] = []
    for signature in SIGNATURES:
        matches = list(signature.pattern.finditer(text))
        if not matches:
            continue
        first = matches[0]
        message, fix = signature.explain(first, context)
        line, line_number = _excerpt(text, first.start(), first.end())
        findings.append(
            Finding(
                check_id=signature.check_id,
                severity=signature.severity,
                message=message,
                fix=fix,
                details={"line": line, "line_number": line_number, "occurrences": len(matches)},
            )
        )
    if exit_code in _KILLED_BY_SIGKILL_EXIT_CODES and not any(
        finding.check_id == "log.host-oom-killed" for finding in findings
    ):
        findings.append(
            Finding(
                check_id="log.host-oom-killed",
                severity=Severity.WARNING if findings else Severity.ERROR,
                message=(
                    f"the engine was killed by SIGKILL (exit status {exit_code}) with no error of its own: "
                    "most often the host's OOM killer, while loading weights"
                ),
                fix=(
                    "check `dmesg | grep -i 'killed process'`; free host RAM or add swap, or raise the "
                    "container's memory limit"
                ),
                details={"exit_code": exit_code},
            )
        )
    return findings
