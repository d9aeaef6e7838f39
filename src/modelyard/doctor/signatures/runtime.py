"""Log signatures of what the engine's process finds of CUDA, its libraries, its kernels and the
weights on disk, and of the engine's own config refusals about quantization.

Each pattern is the exact wording of the program that prints it (named in ``source``): torch's
CUDA initialisation in a forked child, the dynamic linker's missing CUDA library, CUDA's error 803
(the user-mode driver and the kernel module differ), Triton's shared-memory limit of a kernel
configuration, safetensors' refusal of a file that is not a safetensors file (a Git LFS pointer, a
cut-off download), and vLLM's ``ModelConfig._verify_quantization`` ("Unknown quantization method",
"Quantization method specified in the model config ... does not match").
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature


def _explain_forked_cuda(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "CUDA was initialised in the process before the engine forked its workers, and a forked child "
        "cannot use it: the launcher's code (or a notebook, a Ray actor, an import) touched the GPU before "
        "the engine started its tensor-parallel workers",
        "set VLLM_WORKER_MULTIPROC_METHOD=spawn (vLLM's workers then start fresh), or build the engine "
        "before anything calls torch.cuda in that process",
    )


def _explain_cuda_library(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    library = match["library"]
    if library.startswith("libcuda.so"):
        return (
            f"{library}, the driver's own library, is not in the engine's process: the container was "
            "started without the NVIDIA container runtime (or the host has no NVIDIA driver)",
            "run the container with --gpus all (Docker) or the nvidia runtime class (Kubernetes), with the "
            "NVIDIA Container Toolkit installed on the host",
        )
    return (
        f"the CUDA library {library} is missing where the engine runs: the engine (or torch) was installed "
        "for a CUDA release whose runtime libraries this environment does not have",
        "install the engine's wheels for the CUDA they were built with (pip pulls the nvidia-* runtime "
        "packages), or use the engine's container image; check that torch and the engine name the same "
        "CUDA (`python -c 'import torch; print(torch.version.cuda)'`)",
    )


def _explain_driver_mismatch(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the CUDA user-mode driver (libcuda) does not match the kernel driver: error 803, a driver upgraded "
        "without a reboot, or a container's cuda-compat libraries on a host driver they do not fit",
        "reboot after a driver upgrade (or reload the nvidia modules), and keep the image's compat "
        "libraries off LD_LIBRARY_PATH unless the GPU is a data-centre GPU on a supported older driver",
    )


def _explain_triton_shared_memory(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    required, limit = int(match["required"]), int(match["limit"])
    return (
        f"a Triton kernel's block configuration needs {required // 1024} KiB of shared memory per block and "
        f"this GPU has {limit // 1024} KiB: the kernel's tuned sizes are for a larger GPU (data-centre "
        "Hopper or Ampere) than this one",
        "use an attention backend or MoE kernel without this Triton kernel on this GPU (vLLM "
        "--attention-backend, SGLang --attention-backend), or an engine release with configurations for "
        "this GPU; --enforce-eager does not change the kernel's sizes",
    )


def _explain_weights_corrupt(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "a weight file is not the file it should be: safetensors cannot read its header, the mark of a Git "
        "LFS pointer (a clone without git-lfs) or a download cut short",
        "download the weights again with `huggingface-cli download` (or `git lfs pull` in a git clone) and "
        "compare the file sizes with the hub's; check the disk did not fill up during the download",
    )


def _explain_unknown_quantization(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    method = match["method"]
    return (
        f"this engine release does not know the quantization method {method!r} (the checkpoint's "
        "quantization_config or --quantization names it): the method came in a later release",
        f"use an engine release that lists {method} among its quantization methods, or a checkpoint "
        "quantized with a method this release knows",
    )


def _explain_quantization_mismatch(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    declared, asked = match["declared"], match["asked"]
    return (
        f"--quantization {asked} does not read this checkpoint: its config.json declares {declared}",
        f"remove --quantization (the engine reads {declared} from config.json), or serve a {asked} "
        "checkpoint",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.cuda-initialized-before-fork",
        Severity.ERROR,
        re.compile(r"Cannot re-initialize CUDA in forked subprocess"),
        _explain_forked_cuda,
        "torch/cuda/__init__.py (_lazy_init in a forked child)",
    ),
    LogSignature(
        "log.cuda-library-missing",
        Severity.ERROR,
        re.compile(
            r"(?P<library>lib(?:cuda|cudart|cublas|cublasLt|cudnn|nvrtc|cusparse|nccl)\.so[\d.]*): "
            r"cannot open shared object file"
        ),
        _explain_cuda_library,
        "the dynamic linker (ImportError / OSError: cannot open shared object file)",
    ),
    LogSignature(
        "log.cuda-driver-mismatch",
        Severity.ERROR,
        re.compile(r"system has unsupported display driver / cuda driver combination"),
        _explain_driver_mismatch,
        "CUDA error 803 (cudaErrorSystemDriverMismatch), as torch's cudaGetDeviceCount reports it",
    ),
    LogSignature(
        "log.triton-shared-memory",
        Severity.ERROR,
        re.compile(
            r"out of resource: shared memory, Required: (?P<required>\d+), Hardware limit: (?P<limit>\d+)"
        ),
        _explain_triton_shared_memory,
        "triton/runtime/errors.py (OutOfResources, raised by the CUDA driver's _init_handles)",
    ),
    LogSignature(
        "log.weights-corrupt",
        Severity.ERROR,
        re.compile(
            r"Error while deserializing header: (?:HeaderTooLarge|MetadataIncompleteBuffer|"
            r"InvalidHeaderDeserialization)"
        ),
        _explain_weights_corrupt,
        "safetensors (safe_open: the first 8 bytes of the file are the header's length)",
    ),
    LogSignature(
        "log.quantization-unknown",
        Severity.ERROR,
        re.compile(r"Unknown quantization method: (?P<method>[\w.\-]+)\. Must be one of"),
        _explain_unknown_quantization,
        "vllm/config (ModelConfig._verify_quantization)",
    ),
    LogSignature(
        "log.quantization-mismatch",
        Severity.ERROR,
        re.compile(
            r"Quantization method specified in the model config \((?P<declared>[\w.\-]+)\) does not match "
            r"the quantization method specified in the `quantization` argument \((?P<asked>[\w.\-]+)\)"
        ),
        _explain_quantization_mismatch,
        "vllm/config (ModelConfig._verify_quantization)",
    ),
)
