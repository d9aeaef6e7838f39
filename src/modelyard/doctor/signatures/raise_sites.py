"""Causes decided from what the log's facts are (``doctor.log_facts``), not from its words.

Each rule reads an exception's class and the frame that raised it, a CUDA error's name, an NCCL
result code, an exit status or an argument a command line refused, and names the same check ids as
the wording signatures do, so that a new phrasing of the same raise is still caught. The raise sites
come from the engines' own code (read in the vLLM 0.19-0.30 and SGLang 0.5.17 wheels):

- vLLM ``v1/worker/gpu_model_runner.py``: ``_dummy_sampler_run`` and ``_dummy_pooler_run_task``
  turn an out-of-memory ``RuntimeError`` of the warm-up into a ``RuntimeError`` of their own (the
  only one they raise); ``load_model`` re-raises ``torch.cuda.OutOfMemoryError``;
- vLLM ``v1/core/kv_cache_utils.py`` ``_check_enough_kv_cache_memory`` (and V0's
  ``worker/worker.py`` ``raise_if_cache_size_invalid``): ``ValueError``, no memory at all for the
  cache, or less than one request at --max-model-len needs;
- vLLM ``v1/worker/utils.py`` ``request_memory`` (``gpu_worker.py`` before): ``ValueError``, less
  free memory at start than --gpu-memory-utilization asks;
- vLLM's configuration classes (``ModelConfig``, ``CacheConfig``, ... pydantic dataclasses since
  0.10): ``pydantic_core.ValidationError`` naming the class, the field and what it expected;
- SGLang ``srt/model_executor/pool_configurator.py`` (``model_runner.py`` before): ``RuntimeError``
  when no KV pool is left; ``srt/entrypoints/engine.py`` and the diffusion launcher write a dead
  child's exit status (-9: "a common cause is the OS OOM killer", in SGLang's own words);
- CUDA's error names (``cudaErrorMemoryAllocation``, ggml's ``cudaMalloc failed: out of memory``,
  ``cudaErrorNoKernelImageForDevice``, ``cudaErrorInsufficientDriver``), NCCL's ``ncclResult_t``;
- argument parsers: argparse, llama.cpp ``common/arg.cpp``, llama-box, llamafile;
- exception classes that are one cause anywhere (``huggingface_hub``'s ``GatedRepoError``,
  ``RepositoryNotFoundError``, ``LocalEntryNotFoundError``; safetensors' ``SafetensorError``; the
  OS's errno 28 and 98), and vLLM's ``config/model.py`` (``_get_and_verify_max_len``,
  ``verify_with_parallel_config``), ``models/registry.py`` and transformers' ``configuration_auto.py``;
- Python's own ``ImportError`` / ``AttributeError`` naming a ``vllm.*`` / ``sglang.*`` module, and
  ``TypeError``'s "got an unexpected keyword argument" from outside the engine: a launcher of
  another release.

A rule adds its finding only where no wording signature named that cause already; the two generic
ones (a SIGKILL written in the log, an exception with no known cause) only where nothing else is
an error. Severity follows the engine: these are raises and refusals the start does not survive.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.log_facts import LogFacts
from modelyard.doctor.signatures.base import LogContext, lower_utilization_text
from modelyard.doctor.signatures.exception_causes import known_exception
from modelyard.doctor.signatures.fact_findings import fact_finding, where
from modelyard.doctor.signatures.stall import stage_reached

# One rule: the facts, the whole text and the context in; the finding (or None) out.
FactRule = Callable[[LogFacts, str, LogContext], Finding | None]

_SAMPLER_WARMUPS = ("_dummy_sampler_run", "_dummy_pooler_run_task")
_KV_CHECKS = ("_check_enough_kv_cache_memory", "check_enough_kv_cache_memory", "raise_if_cache_size_invalid")
_VALIDATION = re.compile(r"(?P<count>\d+) validation errors? for (?P<config>\w+)")
_INPUT_NONE = re.compile(r"input_value=None|input_type=NoneType")
_SHARED_MEMORY = re.compile(
    r"/dev/shm[^\n]*?(?:exceed|insufficient|not enough|no space left|too small|is full)"
    r"|(?:exceed|insufficient|not enough|no space left)[^\n]*?/dev/shm",
    re.IGNORECASE,
)
_AVAILABLE_BYTES = re.compile(
    r"request is for (?P<wanted>\d+) bytes, and the amount available is (?P<free>\d+) bytes"
)
_SIGKILL_STATUSES = frozenset({-9, 137})


def _oom_fix(context: LogContext, line: str, sampler: bool) -> str:
    if "cudaMalloc failed" in line or "ggml" in line or "CUDA0 buffer" in line:
        return (
            "offload fewer layers to the GPU (-ngl / --n-gpu-layers), a smaller context (-c) or a smaller "
            "quantization, or split the model across GPUs (--tensor-split); check that no other process "
            "holds GPU memory"
        )
    if context.is_sglang:
        return (
            "lower --mem-fraction-static by 0.05-0.1, or --cuda-graph-max-bs / --chunked-prefill-size, "
            "or add GPUs"
        )
    if sampler:
        return (
            f"lower --max-num-seqs (the warm-up samples that many dummy requests at once), or "
            f"{lower_utilization_text(context)} to leave room outside the KV cache"
        )
    return (
        f"{lower_utilization_text(context)}, or lower --max-num-seqs / --max-model-len, or add GPUs "
        "(--tensor-parallel-size); check that no other process holds GPU memory"
    )


def out_of_memory(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """torch's ``OutOfMemoryError`` (any module), vLLM's warm-up ``RuntimeError`` (its message may be
    cut or reworded), or CUDA's out-of-memory error by any of its names."""
    for exception in facts.exceptions:
        sampler = exception.class_name == "RuntimeError" and exception.raised_at(
            "gpu_model_runner.py", *_SAMPLER_WARMUPS
        )
        if exception.class_name == "OutOfMemoryError" or sampler:
            stage = " while warming up the sampler with dummy requests" if sampler else ""
            return _oom_graph_or_plain(
                text,
                f"the engine ran out of GPU memory{stage} ({where(exception)})",
                _oom_fix(context, exception.line, sampler),
                exception.line,
            )
    line = facts.cuda_errors.get("out of memory")
    if line is None:
        return None
    return _oom_graph_or_plain(
        text, f"CUDA ran out of GPU memory: {line[:200]}", _oom_fix(context, line, False), line
    )


def _oom_graph_or_plain(text: str, message: str, fix: str, line: str) -> Finding:
    reached = stage_reached(text).stage
    if reached is not None and reached.key == "graph-capture":
        return fact_finding(
            "log.cuda-graph-capture-oom",
            f"{message}, while capturing CUDA graphs (after the KV cache was sized)",
            "lower --max-num-seqs or the captured sizes (--cuda-graph-max-bs on SGLang), or lower the "
            "memory fraction by 0.05, or run without graphs (--enforce-eager / --disable-cuda-graph)",
            line,
        )
    return fact_finding("log.cuda-out-of-memory", message, fix, line)


def kv_cache_refused(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """vLLM's KV-cache check (V1 and V0) and SGLang's pool configurator, by their raise sites."""
    for exception in facts.exceptions:
        if exception.class_name == "ValueError" and any(
            exception.raised_at(path, *_KV_CHECKS) for path in ("kv_cache_utils.py", "worker.py")
        ):
            no_memory = (
                "no available memory" in exception.text.lower() or "0 gpu blocks" in exception.text.lower()
            )
            if no_memory:
                return fact_finding(
                    "log.kv-cache-no-memory",
                    f"vLLM has no memory left for the KV cache after the weights ({where(exception)})",
                    "raise --gpu-memory-utilization, add GPUs (--tensor-parallel-size) or use a quantized "
                    "checkpoint; check with `modelyard estimate` that the weights fit",
                    exception.line,
                )
            return fact_finding(
                "log.max-model-len-exceeds-kv-cache",
                f"vLLM's KV cache cannot hold one request at --max-model-len ({where(exception)}: "
                f"{exception.message[:200]})",
                f"lower --max-model-len, or {lower_utilization_text(context).replace('lower', 'raise', 1)}",
                exception.line,
            )
        sglang_pool = exception.raised_at("pool_configurator.py") or exception.raised_at(
            "model_runner.py", "init_memory_pool", "profile_max_num_token"
        )
        if exception.class_name == "RuntimeError" and sglang_pool and "memory" in exception.text.lower():
            return fact_finding(
                "log.sglang-not-enough-memory",
                f"SGLang has no memory left for its KV pool after the weights ({where(exception)})",
                "raise --mem-fraction-static (it is the share for weights and KV pool), add GPUs "
                "(--tp-size) or use a quantized checkpoint",
                exception.line,
            )
    return None


def free_memory_refused(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """vLLM's start-up check of free memory against --gpu-memory-utilization, by its raise site."""
    for exception in facts.exceptions:
        at_check = exception.raised_at("worker/utils.py", "request_memory") or exception.raised_at(
            "gpu_worker.py", "init_device", "determine_available_memory"
        )
        if exception.class_name == "ValueError" and at_check and "memory" in exception.text.lower():
            return fact_finding(
                "log.free-memory-below-utilization",
                f"vLLM refused to start: less GPU memory is free than --gpu-memory-utilization asks "
                f"({where(exception)})",
                f"stop the other process on that GPU (nvidia-smi), or {lower_utilization_text(context)}",
                exception.line,
            )
    return None


def configuration_refused(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """A pydantic ``ValidationError`` of the engine's configuration: the class, the field, the reason.
    ``None`` where the field wants a value is what a launcher written for another release passes."""
    for exception in facts.exceptions:
        if exception.class_name != "ValidationError":
            continue
        validation = _VALIDATION.search(exception.message)
        if validation is None:
            continue
        config = validation["config"]
        field = exception.detail[0] if exception.detail else "?"
        reason = exception.detail[1] if len(exception.detail) > 1 else ""
        if _INPUT_NONE.search(exception.text):
            return fact_finding(
                "log.launcher-engine-mismatch",
                f"{config}.{field} was given None, which this engine release refuses ({reason[:160]}): the "
                "program that builds the engine's arguments (a launcher, a training framework) was written "
                "for another release",
                "use the engine release the launcher names in its requirements, or a launcher release made "
                "for this engine; or set the field to a value explicitly",
                exception.line,
                field=field,
                config=config,
            )
        return fact_finding(
            "log.engine-config-invalid",
            f"the engine refused its configuration: {config}.{field}: {reason[:200]}",
            f"fix the value of the option behind {config}.{field} (`vllm serve --help=all` lists it with its "
            "type); a launcher that sets it may be written for another release",
            exception.line,
            field=field,
            config=config,
        )
    return None


_ENGINE_PACKAGES = ("vllm", "sglang")
# Python's own words for an API that is not there, with the engine's module named.
_IMPORT_MISSING = re.compile(
    r"cannot import name '(?P<name>\w+)' from '(?P<module>(?:vllm|sglang)(?:\.\w+)*)'"
    r"|No module named '(?P<submodule>(?:vllm|sglang)\.[\w.]+)'"
    r"|module '(?P<attr_module>(?:vllm|sglang)(?:\.\w+)*)' has no attribute '(?P<attribute>\w+)'"
)
_UNEXPECTED_KEYWORD = re.compile(
    r"(?P<callee>[\w.]+)\(\) got an unexpected keyword argument '(?P<keyword>\w+)'"
)


def _in_engine(path: str) -> bool:
    path = path.replace("\\", "/")
    return any(f"/{package}/" in path or path.startswith(f"{package}/") for package in _ENGINE_PACKAGES)


def engine_api_mismatch(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """A program imports or calls an engine API its installed release does not have: Python's
    ``ImportError`` / ``AttributeError`` naming a ``vllm.*`` or ``sglang.*`` module, or a
    ``TypeError`` for a keyword the engine's function does not take, raised from outside the engine."""
    match = _IMPORT_MISSING.search(text)
    if match is not None:
        module = match["module"] or match["submodule"] or match["attr_module"]
        name = match["name"] or match["attribute"]
        what = f"{module}.{name}" if name else module
        return fact_finding(
            "log.launcher-engine-mismatch",
            f"the program that drives the engine uses {what}, which the installed engine release does not "
            "have: the launcher and the engine are of releases that do not fit",
            "install the engine release the launcher names in its requirements (or the launcher release made "
            "for this engine); `pip show` both and compare with the launcher's changelog",
            _line_of(text, match.start()),
            missing=what,
        )
    match = _UNEXPECTED_KEYWORD.search(text)
    # A bare __init__ says nothing of whose class it is (EngineArgs' own wording is a signature of
    # launchers.py); outside an engine's log the words are any library's.
    if match is None or match["callee"].endswith("__init__") or context.engine not in _ENGINE_PACKAGES:
        return None
    raised = next((e for e in facts.exceptions if match[0] in e.text and e.frames), None)
    caller = raised.frames[-2] if raised is not None and len(raised.frames) > 1 else None
    if raised is not None and caller is not None and _in_engine(caller.path):
        return None  # the engine calling itself: its own bug, not a launcher's
    return fact_finding(
        "log.launcher-passed-unknown-argument",
        f"{match['callee']}() does not take the keyword {match['keyword']!r}: the caller (a launcher or a "
        "library) "
        "was written for another release of the engine",
        "use the engine release the launcher was written for, or a launcher release that matches this engine",
        _line_of(text, match.start()),
        keyword=match["keyword"],
    )


def _line_of(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start : len(text) if end == -1 else end].strip()


def arguments_refused(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """A command line's parser refused an argument (argparse, llama.cpp, llama-box, llamafile)."""
    if not facts.refused_arguments:
        return None
    argument, line = facts.refused_arguments[0]
    return fact_finding(
        "log.unrecognized-arguments",
        f"the engine's command line refused {argument[:120]!r}: the program does not know it (another "
        "release, another engine's flag, or a word a launcher put there)",
        "compare the arguments with the program's own `--help` of the release that runs (an older binary on "
        "the PATH is common); pass a flag and its value as two arguments; drop words the launcher adds",
        line,
        argument=argument,
    )


def cuda_named(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """CUDA errors by name other than out of memory: no kernel image, a driver too old, no device."""
    named = (
        (
            "no kernel image",
            "log.no-kernel-image",
            "the engine's CUDA kernels were not built for this GPU",
            "use an engine build (wheel or image) for this GPU's compute capability (Blackwell: CUDA 12.8+)",
        ),
        (
            "driver too old",
            "log.driver-too-old",
            "the NVIDIA driver is older than the engine's CUDA build",
            "upgrade the NVIDIA driver, or use an engine build for an older CUDA",
        ),
        (
            "no device",
            "log.no-cuda-gpus",
            "the engine's process sees no CUDA GPU",
            "check CUDA_VISIBLE_DEVICES, the container's GPU access (--gpus, NVIDIA runtime) and nvidia-smi",
        ),
    )
    for name, check_id, message, fix in named:
        line = facts.cuda_errors.get(name)
        if line is not None:
            return fact_finding(check_id, f"{message}: {line[:200]}", fix, line)
    return None


def nccl_failed(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """An NCCL result code other than success, by its enum name or its words."""
    if not facts.nccl_errors:
        return None
    name, line = next(iter(facts.nccl_errors.items()))
    return fact_finding(
        "log.nccl-error",
        f"NCCL failed between the GPUs ({name})",
        "run with NCCL_DEBUG=INFO to see the step; in a container give it --ipc=host or a larger /dev/shm; "
        "try NCCL_P2P_DISABLE=1 where peer-to-peer is not given; set NCCL_SOCKET_IFNAME for multi-node",
        line,
        nccl_error=name,
    )


def shared_memory_short(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """A program says /dev/shm is too small for it (Ray's object store, torch, NCCL): a host fact."""
    match = _SHARED_MEMORY.search(text)
    if match is None:
        return None
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start : len(text) if end == -1 else end].strip()
    amounts = _AVAILABLE_BYTES.search(text)
    size = (
        f" (it has {int(amounts['free']) / 2**30:.1f} GiB, {int(amounts['wanted']) / 2**30:.1f} GiB asked)"
        if amounts
        else ""
    )
    return fact_finding(
        "host.shared-memory-small",
        f"/dev/shm is too small for this start{size}: {line[:200]}",
        "give the container more shared memory (docker --shm-size 32g or --ipc=host; Kubernetes: an emptyDir "
        "of medium Memory at /dev/shm), or lower Ray's object store (--object-store-memory)",
        line,
    )


def killed(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """An exit status of SIGKILL written in the log (-9, 137): the host's OOM killer, most often."""
    for status, line in facts.exit_statuses:
        if status in _SIGKILL_STATUSES:
            return fact_finding(
                "log.host-oom-killed",
                f"a process of the engine was killed by SIGKILL ({line[:160]}) with no error of its own: "
                "most "
                "often the host's OOM killer, while loading weights",
                "check `dmesg | grep -i 'killed process'`; free host RAM or add swap, raise the container's "
                "memory limit, or load with less host memory (fewer parallel loaders)",
                line,
                exit_status=status,
            )
    return None


def uncaught_exception(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """The last exception of a traceback, where no rule knows its cause: where it was raised."""
    with_frames = [exception for exception in facts.exceptions if exception.frames]
    if not with_frames:
        return None
    exception = with_frames[-1]
    return Finding(
        check_id="log.engine-exception",
        severity=Severity.WARNING,
        message=f"the engine stopped on {where(exception)}: {exception.message[:200]}",
        fix="the frame above is where the engine gave up: search its tracker for the exception and the file, "
        "and compare the engine's release with the model's and the launcher's requirements",
        details={"line": exception.line[:400], "read_from": "facts"},
    )


# In order: the specific causes first; the generic ones are added only where nothing else is an error.
RULES: tuple[FactRule, ...] = (
    kv_cache_refused,
    free_memory_refused,
    out_of_memory,
    configuration_refused,
    engine_api_mismatch,
    known_exception,
    arguments_refused,
    cuda_named,
    shared_memory_short,
    nccl_failed,
)
GENERIC_RULES: tuple[FactRule, ...] = (killed, uncaught_exception)
