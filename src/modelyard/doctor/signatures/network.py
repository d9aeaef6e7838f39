"""Log signatures of what the engine talks to: NCCL between GPUs, HTTP proxies, the model hub."""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature, first_group


def _explain_nccl(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    text = match.group(0).strip()
    if "system error" in text.lower():
        return (
            f"NCCL (the GPU-to-GPU communication library) failed with a system error: {text[:160]}; in a "
            "container this is most often /dev/shm too small (Docker's default 64 MiB)",
            "run the container with --ipc=host or --shm-size 16g; if the shared memory is large, run with "
            "NCCL_DEBUG=INFO to see the failing call (a network interface: set NCCL_SOCKET_IFNAME)",
        )
    return (
        f"NCCL (the GPU-to-GPU communication library) failed: {text[:160]}",
        "run with NCCL_DEBUG=INFO to see the cause; in containers give shared memory "
        "(--ipc=host or --shm-size 16g); where GPUs cannot talk peer to peer set NCCL_P2P_DISABLE=1; "
        "check that every GPU of the group is visible (CUDA_VISIBLE_DEVICES)",
    )


def _explain_proxy(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    status = first_group(match, "status", "code", "code2") or "an error"
    host = match.groupdict().get("host") or "its own address"
    return (
        f"the engine's request to itself ({host}) was answered {status} by an HTTP proxy, not by the engine: "
        "a proxy variable is set for the engine and NO_PROXY does not cover the address it listens on",
        "add the engine's host (127.0.0.1, localhost, and 0.0.0.0 or the --host you give) to NO_PROXY and "
        "no_proxy in the deployment env, or unset http_proxy/https_proxy for the engine",
    )


def _explain_hub_unreachable(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the engine tried to download from the Hugging Face Hub and could not reach it (no network, DNS, or "
        "a firewall)",
        "give the model (and --tokenizer, draft models) as local directories; on a host without internet "
        "download them elsewhere first, or set HF_ENDPOINT to a reachable mirror",
    )


def _explain_hub_offline(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "HF_HUB_OFFLINE is set and the engine still needed the Hub: a model or tokenizer was given by hub "
        "id and is not (fully) in the local cache",
        "give the local directory instead of the hub id, or download it into the cache first, or unset "
        "HF_HUB_OFFLINE",
    )


def _explain_hub_gated(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the model is gated on the Hugging Face Hub and the engine asked for it without a token that has "
        "access",
        "give the downloaded directory instead of the hub id (no token needed then), or set HF_TOKEN for the "
        "engine after accepting the model's licence",
    )


def _explain_nccl_shared_memory(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "NCCL could not create or attach its shared-memory segment in /dev/shm: the container (or host) "
        "gives too little shared memory (Docker's default is 64 MiB), or the ranks do not share one /dev/shm",
        "run the container with --ipc=host or --shm-size 16g (modelyard's container runtime uses "
        "--ipc host); "
        "on a host, grow the /dev/shm tmpfs",
    )


_PROXY_STATUS = r"(?:403|407|502|503|504)"


# Specific causes, read before the generic NCCL error (``GENERIC``).
SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.proxy-intercepted-self-call",
        Severity.ERROR,
        re.compile(
            r'"(?:GET|POST) http://(?P<host>[^/:"]+):\d+/(?:get_model_info|generate|health|v1/[^" ]*) '
            rf'HTTP/1\.[01]" (?P<status>{_PROXY_STATUS})'
            rf"|warmup error[\s\S]{{0,600}}?Response \[(?P<code>{_PROXY_STATUS})\]"
            rf"|res: <Response \[(?P<code2>{_PROXY_STATUS})\]>"
        ),
        _explain_proxy,
        "sglang/srt/entrypoints/http_server.py (_execute_server_warmup / _wait_and_warmup); urllib3's "
        "debug line for a proxied request names the absolute URL",
    ),
    LogSignature(
        "log.hub-offline",
        Severity.ERROR,
        re.compile(
            r"OfflineModeIsEnabled|offline mode is enabled\. To disable it"
            r"|(?:on the local disk|in the disk cache) and outgoing traffic has been disabled"
        ),
        _explain_hub_offline,
        "huggingface_hub/utils/_http.py (OfflineModeIsEnabled); file_download.py / _snapshot_download.py "
        "(LocalEntryNotFoundError with HF_HUB_OFFLINE=1 or local_files_only)",
    ),
    LogSignature(
        "log.hub-gated",
        Severity.ERROR,
        re.compile(r"Cannot access gated repo for url|Access to model [^\n]* is restricted"),
        _explain_hub_gated,
        "huggingface_hub/utils/_http.py (GatedRepoError)",
    ),
    LogSignature(
        "log.hub-unreachable",
        Severity.ERROR,
        re.compile(
            r"HTTPSConnectionPool\(host=\\?'huggingface\.co\\?', port=443\): Max retries exceeded"
            r"|Failed to resolve \\?'?huggingface\.co"
            r"|We couldn't connect to 'https://huggingface\.co'"
        ),
        _explain_hub_unreachable,
        "requests / urllib3 (MaxRetryError, NameResolutionError); transformers (cached_file)",
    ),
    LogSignature(
        "log.nccl-shared-memory",
        Severity.ERROR,
        re.compile(
            r"Error while (?:creating|attaching to) shared memory segment /dev/shm/nccl[^\n]*"
            r"|ncclShmOpen[^\n]*"
        ),
        _explain_nccl_shared_memory,
        "NCCL src/misc/shmutils.cc (ncclShmOpen)",
        supersedes=("log.nccl-error",),
    ),
)


GENERIC: tuple[LogSignature, ...] = (
    LogSignature(
        "log.nccl-error",
        Severity.ERROR,
        re.compile(
            r"NCCL ?error[^\n]*|ncclUnhandledCudaError[^\n]*|ncclSystemError[^\n]*|ncclInternalError[^\n]*"
            r"|ncclRemoteError[^\n]*|DistBackendError[^\n]*"
        ),
        _explain_nccl,
        "torch.distributed (ProcessGroupNCCL), vllm/distributed/device_communicators/pynccl.py",
    ),
)
