"""Log signatures of memory: the engine's own refusals, CUDA out of memory, the host's OOM killer."""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import (
    LogContext,
    LogSignature,
    first_group,
    lower_utilization_text,
    round_down,
)


def _explain_vllm_free_memory(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    free_gib, total_gib = float(match["free"]), float(match["total"])
    utilization = float(match["utilization"])
    usable = round_down(max(free_gib / total_gib - 0.02, 0.0)) if total_gib else 0.0
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
        f"raise --gpu-memory-utilization from {current:g} to {min(round_down(current + 0.05), 0.95):g}"
        if current is not None and current < 0.95
        else "raise --gpu-memory-utilization"
    )
    fix = (
        f"{raise_text}, or give the model more GPUs (--tensor-parallel-size), or a quantized "
        "checkpoint; check with `modelyard estimate` that the weights fit at all"
    )
    return message, fix


def _explain_vllm_negative_kv_budget(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    budget = match.groupdict().get("budget")
    left = f" ({budget} GiB)" if budget else " (0 GPU blocks)"
    message = (
        f"vLLM's memory profile left nothing for the KV cache{left}: the weights and the profile run's "
        "activations take the whole --gpu-memory-utilization budget, and the start fails with "
        '"No available memory for the cache blocks"'
    )
    _, fix = _explain_vllm_no_cache_blocks(match, context)
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
        f"raise --gpu-memory-utilization from {current:g} to {min(round_down(current + 0.05), 0.95):g}"
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
        raised = min(round_down(current + 0.05), 0.93)
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


def _explain_sglang_weights_leave_no_kv(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    current_text = match["current"] or context.flag_value("--mem-fraction-static")
    minimum = match["minimum"]
    message = (
        "SGLang: the loaded weights already take more than --mem-fraction-static"
        + (f"={current_text}" if current_text else "")
        + " of the GPU's memory, so the KV cache pool gets nothing"
    )
    if minimum:
        above = float(minimum)
        if above >= 0.95:
            fix = (
                f"SGLang needs --mem-fraction-static above {above:g} here, which leaves no room for "
                "activations and CUDA graphs: spread the weights over more GPUs (--tp-size), or use a "
                "smaller or more quantised model"
            )
        else:
            fix = (
                f"raise --mem-fraction-static above {above:g} (SGLang's own minimum for these weights; "
                f"{min(round_down(above + 0.03), 0.94):g} leaves a small KV pool), or spread the weights "
                "over more GPUs (--tp-size)"
            )
    else:
        fix = (
            "raise --mem-fraction-static (it covers weights + KV pool), or spread the weights over more "
            "GPUs (--tp-size)"
        )
    return message, fix


def _explain_cuda_oom(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    detail = ""
    if match.groupdict().get("tried"):
        detail = f" while allocating {match['tried']}"
        if match.groupdict().get("free"):
            detail += f" ({match['free']} free of {match['total']})"
    message = f"CUDA out of memory{detail}"
    if context.is_sglang:
        current = context.float_flag("--mem-fraction-static")
        lowered = (
            f"lower --mem-fraction-static from {current:g} to {max(round_down(current - 0.05), 0.1):g}"
            if current is not None
            else "lower --mem-fraction-static by 0.05"
        )
        fix = (
            f"{lowered} to leave room for activations and CUDA graphs, or lower "
            "--chunked-prefill-size / --cuda-graph-max-bs, or add GPUs (--tp-size)"
        )
    else:
        fix = (
            f"{lower_utilization_text(context)}, or lower --max-num-seqs / --max-num-batched-tokens "
            "or --max-model-len, or add GPUs (--tensor-parallel-size); check that no other "
            "process holds GPU memory"
        )
    return message, fix


def _explain_host_oom(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    process = first_group(match, "process", "cgroup")
    who = f" ({process})" if process else ""
    return (
        f"the host's OOM killer killed the engine{who}: the machine ran out of RAM while loading the model",
        "free host RAM or add swap; loading needs about the size of the weights in RAM (or of the "
        "largest shard with safetensors mmap); in a container raise its memory limit; lower "
        "--max-parallel-loading-workers where the engine has it",
    )


# -- the signatures, most specific first -----------------------------------------------------------


# The engines' own refusals, before any generic error they may also print.
REFUSALS: tuple[LogSignature, ...] = (
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
    # vLLM V0's profile line and block count, printed just before it raises the refusal above (an
    # excerpt often stops there).
    LogSignature(
        "log.kv-cache-no-memory",
        Severity.ERROR,
        re.compile(
            r"the rest of the memory reserved for KV Cache is (?P<budget>-[\d.]+) ?GiB"
            r"|# (?:cuda|GPU) blocks: 0,"
        ),
        _explain_vllm_negative_kv_budget,
        "vllm/worker/worker.py (determine_num_available_blocks); vllm/worker/worker_base.py "
        "(raise_if_cache_size_invalid)",
        when=lambda match, text: "No available memory for the cache blocks" not in text,
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
    # Newer SGLang names the case and the fraction the weights need (raised where the profiled
    # room for the KV pool is not positive).
    LogSignature(
        "log.sglang-not-enough-memory",
        Severity.ERROR,
        re.compile(
            r"Loaded weights leave no GPU memory for the KV cache under\s+--mem-fraction-static="
            r"(?P<current>[\d.]+)\.?(?:\s*Raise --mem-fraction-static above (?P<minimum>[\d.]+))?"
        ),
        _explain_sglang_weights_leave_no_kv,
        "sglang/srt/model_executor/model_runner_kv_cache_mixin.py (profile_max_num_token: 'minimum viable')",
    ),
)


def _during_graph_capture(match: re.Match[str], text: str) -> bool:
    """An out-of-memory error raised while CUDA graphs are captured (vLLM and SGLang say so before)."""
    before = text[max(0, match.start() - 20000) : match.start()].lower()
    return "capture cuda graph" in match.group(0).lower() or any(
        marker in before
        for marker in ("capturing cudagraph", "capturing cuda graph", "capture cuda graph begin")
    )


def _explain_graph_oom(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    detail = f" while allocating {match['tried']}" if match.groupdict().get("tried") else ""
    message = f"CUDA out of memory{detail} while capturing CUDA graphs, after the KV cache took its share"
    if context.is_sglang:
        current = context.float_flag("--mem-fraction-static")
        lowered = (
            f"lower --mem-fraction-static from {current:g} to {max(round_down(current - 0.05), 0.1):g}"
            if current is not None
            else "lower --mem-fraction-static by 0.05"
        )
        fix = f"{lowered}, or lower --cuda-graph-max-bs, or --disable-cuda-graph (slower decoding)"
    else:
        fix = (
            f"{lower_utilization_text(context)} (the graphs need memory outside it before vLLM 0.21), or "
            "lower --max-num-seqs (fewer graph sizes), or --enforce-eager (no graphs, slower decoding)"
        )
    return message, fix


# Failures while running: CUDA's and the kernel's out of memory.
RUNTIME: tuple[LogSignature, ...] = (
    LogSignature(
        "log.cuda-graph-capture-oom",
        Severity.ERROR,
        re.compile(
            r"Capture cuda graph failed: CUDA out of memory\."
            r"(?: Tried to allocate (?P<tried>[\d.]+ [KMG]iB))?"
            r"|(?:torch\.(?:cuda\.)?OutOfMemoryError: )?CUDA out of memory\."
            r"|CUDA error: out of memory|torch\.OutOfMemoryError"
        ),
        _explain_graph_oom,
        "sglang/srt/model_executor/cuda_graph_runner.py; vllm/worker/model_runner.py (capture_model)",
        when=_during_graph_capture,
        supersedes=("log.cuda-out-of-memory",),
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
