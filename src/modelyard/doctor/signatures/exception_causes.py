"""Causes that an exception's class or its raise site names by itself, wherever it appears: the
hub's and safetensors' exception classes, the OS's errno of a full disk or a taken address, and
raise sites of vLLM's configuration and model registry and of transformers' ``AutoConfig`` (read in
the vLLM 0.19-0.30 wheels and transformers 4.5x-5.x). One of the rules of ``raise_sites.py``.
"""

from __future__ import annotations

from modelyard.doctor.findings import Finding
from modelyard.doctor.log_facts import LogFacts
from modelyard.doctor.signatures.base import LogContext
from modelyard.doctor.signatures.fact_findings import fact_finding, where

# Exception classes that are one cause wherever they are raised (huggingface_hub.errors,
# safetensors), with the finding's id, message and fix.
_CLASS_CAUSES: dict[str, tuple[str, str, str]] = {
    "GatedRepoError": (
        "log.hub-gated",
        "the model is gated on the Hugging Face Hub and the engine's process has no token with access",
        "accept the model's licence on its page and give the engine's process HF_TOKEN (in its own env), "
        "or download the model once and serve the local directory",
    ),
    "RepositoryNotFoundError": (
        "log.model-not-found",
        "the Hub has no repository of that name (or it is private to another account)",
        "check the model id's spelling and case, or give a local directory (a private one needs HF_TOKEN)",
    ),
    "LocalEntryNotFoundError": (
        "log.hub-offline",
        "the model's files are not in the local cache and the hub may not be asked (offline, or no network)",
        "download the model first (or mount the cache), or serve a local directory, or unset HF_HUB_OFFLINE",
    ),
    "OfflineModeIsEnabled": (
        "log.hub-offline",
        "HF_HUB_OFFLINE is set and the engine asked the hub for a file",
        "serve a local model directory, or fill the cache first",
    ),
    "SafetensorError": (
        "log.weights-corrupt",
        "a safetensors file of the model cannot be read (cut short, or not a safetensors file)",
        "download the shard again and compare its size and sha256 with the hub's (`modelyard doctor` on the "
        "model directory names the truncated shard)",
    ),
}
# (file, functions, exception class, a word the message holds or "", id, message, fix): raise sites
# read in vLLM 0.19-0.30 and transformers 4.5x-5.x.
_SITES: tuple[tuple[str, tuple[str, ...], str, str, str, str, str], ...] = (
    (
        "config/model.py",
        ("_get_and_verify_max_len",),
        "ValueError",
        "",
        "log.context-beyond-model",
        "vLLM refused --max-model-len: longer than the model's positions",
        "lower --max-model-len to the model's max_position_embeddings, or extend it with the model's own "
        "RoPE scaling (--hf-overrides), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 knowingly",
    ),
    (
        "config/model.py",
        ("verify_with_parallel_config",),
        "ValueError",
        "head",
        "log.tensor-parallel-heads",
        "vLLM refused the tensor-parallel size: the model's attention heads do not divide by it",
        "pick a --tensor-parallel-size that divides the number of attention heads, or add pipeline "
        "parallel (--pipeline-parallel-size) for the GPUs left",
    ),
    (
        "models/registry.py",
        ("_raise_for_unsupported", "inspect_model_cls", "resolve_model_cls", "_normalize_archs"),
        "ValueError",
        "",
        "log.unknown-architecture",
        "this engine release has no implementation of the model's architecture",
        "use an engine release that lists the architecture (its supported-models page), or "
        "--trust-remote-code "
        "where the model ships its code",
    ),
    (
        "models/auto/configuration_auto.py",
        ("from_pretrained", "__getitem__"),
        "",
        "",
        "log.transformers-too-old",
        "the installed transformers does not know the model's model_type",
        "upgrade transformers to a release that knows the model (or the engine release that pins one)",
    ),
)


def known_exception(facts: LogFacts, text: str, context: LogContext) -> Finding | None:
    """Exception classes that are one cause (the hub's errors, safetensors'), the OS's errno of a
    full disk or a taken address, and the engine's own raise sites in ``_SITES``."""
    for exception in facts.exceptions:
        cause = _CLASS_CAUSES.get(exception.class_name)
        if cause is not None:
            check_id, message, fix = cause
            return fact_finding(check_id, f"{message} ({where(exception)})", fix, exception.line)
        if "[Errno 28]" in exception.message or "No space left on device" in exception.message:
            return fact_finding(
                "log.disk-full",
                f"a disk is full ({where(exception)}: {exception.message[:160]})",
                "free the disk the model, the hub cache or /tmp is on (df -h), or point HF_HOME / the "
                "download "
                "directory at a larger one",
                exception.line,
            )
        if "[Errno 98]" in exception.message or "EADDRINUSE" in exception.text:
            return fact_finding(
                "log.address-in-use",
                f"the port is taken by another process ({where(exception)})",
                "stop what listens there (ss -ltnp), or give the engine another --port; two engines on one "
                "node also need different torch.distributed ports (VLLM_PORT / MASTER_PORT)",
                exception.line,
            )
        for path, functions, class_name, word, check_id, message, fix in _SITES:
            if class_name and exception.class_name != class_name:
                continue
            if exception.raised_at(path, *functions) and word in exception.text.lower():
                return fact_finding(
                    check_id,
                    f"{message} ({where(exception)}: {exception.message[:160]})",
                    fix,
                    exception.line,
                )
    return None
