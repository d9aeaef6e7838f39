"""Log signatures of a start that stops early: arguments, parsers, architectures, the driver, the program."""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import (
    LogContext,
    LogSignature,
    first_group,
)


def _explain_driver_too_old(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"the NVIDIA driver is too old for the engine's CUDA build: {match.group(0).strip()[:160]}",
        "upgrade the NVIDIA driver (`modelyard doctor` names the minimum for each engine version), "
        "or use an engine build for an older CUDA",
    )


def _explain_auto_tool_choice(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "vLLM refused --enable-auto-tool-choice without --tool-call-parser",
        "add --tool-call-parser NAME for the model family (qwen3_coder for Qwen3.5/3.6, hermes for "
        "Qwen2.5/Qwen3), or remove --enable-auto-tool-choice",
    )


def _explain_parser(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    kind = "tool-call" if "tool" in match.group(0).lower() else "reasoning"
    name = (first_group(match, "name", "bare", "quoted", "sglang", "choice") or "").strip("'\"")
    message = f"the engine has no {kind} parser named {name!r}"
    if name != name.strip():
        message += " (note the whitespace: a trailing space or tab copied into the value)"
    flag = "--tool-call-parser" if kind == "tool-call" else "--reasoning-parser"
    fix = (
        f"set {flag} to a name this engine version lists (names differ between vLLM and SGLang, "
        "e.g. Qwen3.5/3.6 use qwen3_coder and qwen3); `modelyard doctor --args` checks them"
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


def _explain_no_implementation(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    architecture = match["architecture"]
    message = (
        f"vLLM has no implementation of the architecture {architecture}, and its Transformers fallback "
        "cannot run it"
    )
    if architecture.endswith("Model") and not architecture.endswith("ForCausalLM"):
        fix = (
            f"{architecture} is a bare model class without its task head, as a fine-tuning script may save "
            "it: set `architectures` in config.json to the class the base model's config names (for "
            "generation the ...ForCausalLM or ...ForConditionalGeneration class), or save the model with it"
        )
    else:
        fix = (
            "use a vLLM release that implements this architecture, or check `architectures` in the model's "
            "config.json against the base model's"
        )
    return message, fix


def _explain_unrecognized_arguments(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    arguments = match["arguments"].strip()
    return (
        f"the engine does not accept the argument(s) {arguments}",
        "remove or rename them: flags differ between engines and engine versions; "
        "`modelyard doctor --backend B --version V --args ...` names the valid spelling",
    )


def _explain_address_in_use(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    port = first_group(match, "port", "socket_port")
    where = f"port {port}" if port else "its port"
    collective = match.groupdict().get("socket_port") or match.groupdict().get("errno_name")
    also = (
        "; for torch.distributed / NCCL setup that is the rendezvous port (MASTER_PORT, VLLM_PORT, or "
        "the launcher's group port), often held by an earlier run's process"
        if collective
        else ""
    )
    return (
        f"the engine could not listen on {where}: another process already uses it{also}",
        f"stop the process on {where} (`ss -ltnp | grep {port or 'PORT'}`) or let modelyard pick "
        "another port; a previous engine that was not stopped is the usual culprit",
    )


def _explain_executable_not_found(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    program = first_group(match, "program", "docker", "shell") or "the engine's program"
    return (
        f"the engine program {program} was not found",
        "install the engine into the Python environment modelyard runs from (e.g. `pip install vllm`), "
        "or set the backend version's executable to the full path, or its image for a container",
    )


def _supported_list_names_it(match: re.Match[str], text: str) -> bool:
    """The architecture is in the very list of supported ones the engine printed."""
    named = re.findall(r"'([\w.]+)'", match.group("architectures"))
    listed = text[match.end() : match.end() + 20000]
    head = listed.split("\n", 1)[0]
    return bool(named) and "Supported architectures" in head and all(f"'{name}'" in head for name in named)


def _not_in_the_list(match: re.Match[str], text: str) -> bool:
    return not _supported_list_names_it(match, text)


def _explain_registry_import(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"the engine lists {match['architectures']} among its supported architectures yet says it is not "
        "supported: its model registry could not import the model classes (a broken or mixed install, "
        "usually after an upgrade)",
        "reinstall the engine in a clean environment (its pinned torch and transformers), then read the "
        'first traceback above this line ("Error in inspecting model architecture"): it names the import',
    )


def _explain_transformers_too_old(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    tokenizer = match.groupdict().get("tokenizer")
    if tokenizer:
        newer = (
            " (TokenizersBackend is the class transformers 5 writes when it saves a tokenizer)"
            if tokenizer == "TokenizersBackend"
            else ""
        )
        return (
            f"the model's tokenizer_config.json names tokenizer class {tokenizer!r}, which the transformers "
            f"inside the engine does not have: the tokenizer was saved by a newer transformers{newer}, or "
            "the class is custom code the engine was not allowed to run",
            "run the engine with the transformers that saved the model (an engine release or image built on "
            "it), or set tokenizer_class in tokenizer_config.json to a class this transformers has (for "
            "a fast tokenizer.json: PreTrainedTokenizerFast, or the base model's class); for custom code, "
            "--trust-remote-code",
        )
    model_type = first_group(match, "model_type", "key") or "?"
    if match["gguf"]:
        return (
            f"the transformers library inside the engine cannot read GGUF files of architecture "
            f"{match['gguf']!r}: its GGUF loader predates this model",
            "upgrade transformers (or the engine image) to a release whose GGUF loader lists the "
            "architecture, or serve the model's safetensors checkpoint instead of the GGUF file",
        )
    return (
        f"the transformers library inside the engine does not know model type {model_type!r}: the engine "
        "release predates this model",
        f"deploy an engine release that supports {model_type} (and the transformers it pins); check the "
        "engine's supported-models list",
    )


def _explain_transformers_too_new(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"the engine registers its own copy of a model class ({match['registered'][:120]}) that the "
        "installed transformers now ships itself: transformers is newer than this engine release supports",
        "install the transformers version the engine release pins (`pip show` the engine for its "
        "requirement), or upgrade the engine to a release made for this transformers",
    )


def _explain_forward_compatibility(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "CUDA error 804, forward compatibility on unsupported hardware: the engine's CUDA (its container "
        "image) is newer than the host driver, and this GPU (not a data-center board) cannot run it",
        "upgrade the host's NVIDIA driver to the one the image's CUDA needs, or use an engine image built "
        "for the driver's CUDA; `modelyard doctor` names the minimum driver per engine version",
    )


def _explain_no_kernel_image(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the engine's CUDA kernels are not built for this GPU's architecture (\"no kernel image is "
        'available for execution on the device")',
        "use an engine release built for this GPU (RTX 50xx / B200 need CUDA 12.8 builds: vLLM 0.9+, "
        "SGLang 0.5+), or a GPU the build supports",
    )


def _explain_no_cuda_gpus(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the engine sees no GPU: none is visible to its process (vLLM detected no CUDA platform, or torch "
        "found no device)",
        "run the container with --gpus (and the NVIDIA container runtime, which also mounts libcuda), check "
        "CUDA_VISIBLE_DEVICES is not empty or wrong, and that the host driver supports the image's CUDA "
        "(`nvidia-smi` inside it)",
    )


def _gpu_not_visible(match: re.Match[str], text: str) -> bool:
    visible = [item for item in (match.groupdict().get("visible") or "").split(",") if item.strip()]
    gpu_id = match.groupdict().get("gpu_id")
    if gpu_id is None:
        return True
    return bool(visible) and int(gpu_id) >= len(visible)


def _explain_gpu_not_visible(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    gpu_id, visible = match.groupdict().get("gpu_id"), match.groupdict().get("visible")
    if gpu_id is not None and visible is not None:
        message = (
            f"a rank wants GPU {gpu_id} but CUDA_VISIBLE_DEVICES={visible} shows the engine only "
            f"{len(visible.split(','))}: the layout needs more GPUs than the replica was given"
        )
    else:
        message = "a rank asked for a GPU index that is not visible to the engine (invalid device ordinal)"
    return (
        message,
        "give the replica as many GPUs as TP x PP (x DP) asks, or lower the parallel sizes",
    )


def _explain_world_size(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    world, local = first_group(match, "world", "world2"), first_group(match, "local", "local2")
    return (
        f"the layout has {world} ranks but this node has {local} GPU(s), and the engine runs all ranks "
        "locally",
        "give the replica that many GPUs, or, to spread the ranks over a Ray cluster, add "
        "--distributed-executor-backend ray (and start the engine on the Ray head)",
    )


def _explain_unexpected_keyword(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    name = first_group(match, "name", "name2")
    what = f"'{name}'" if name else "an argument"
    return (
        f"the launcher passed {what} to the engine's Python API (EngineArgs), which does not take it: it is "
        "an option of the engine's server command line, or of another engine version",
        "pass that option where the launcher forwards server flags, or drop it; check the launcher's list of "
        "the engine options it supports for this engine version",
    )


def _explain_no_c_compiler(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "Triton could not build its CUDA helpers: there is no C compiler where the engine runs",
        "install a compiler (`apt-get install build-essential`, or gcc in the image), or set CC to one; "
        "runtime-only container images lack it",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.driver-too-old",
        Severity.ERROR,
        re.compile(
            r"The NVIDIA driver on your system is too old[^\n]*"
            r"|the provided PTX was compiled with an unsupported toolchain"
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
        when=_not_in_the_list,
    ),
    LogSignature(
        "log.unknown-architecture",
        Severity.ERROR,
        re.compile(
            r"(?P<architecture>\w+) has no vLLM implementation and the Transformers implementation is not "
            r"compatible with vLLM"
        ),
        _explain_no_implementation,
        "vllm/model_executor/model_loader/utils.py (resolve_transformers_arch)",
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
            r"|port: (?P<socket_port>\d+), useIpv6: \w+, code: -98, name: EADDRINUSE"
            r"|\[Errno 98\] Address already in use"
            r"|[Aa]ddress already in use"
            r"|(?P<errno_name>\bEADDRINUSE\b)"
        ),
        _explain_address_in_use,
        "uvicorn (server startup); OSError errno 98; zmq; torch/csrc/distributed/c10d/socket.cpp "
        "(the TCPStore of torch.distributed and of vLLM's stateless process groups: EADDRINUSE, -98)",
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
)


# Failures of a start, read after the memory refusals (``REFUSALS``) and before generic errors.
MORE_SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.model-registry-import-failed",
        Severity.ERROR,
        re.compile(r"Model architectures (?P<architectures>\[[^\]]*\]) are not supported for now"),
        _explain_registry_import,
        "vllm/model_executor/models/registry.py (_raise_for_unsupported after _try_inspect_model_cls)",
        when=_supported_list_names_it,
        supersedes=("log.unknown-architecture",),
    ),
    LogSignature(
        "log.transformers-too-old",
        Severity.ERROR,
        re.compile(
            r"checkpoint you are trying to load has model type `?(?P<model_type>[\w.\-]+)`? but Transformers "
            r"does not recognize this architecture"
            r"|GGUF model with architecture (?P<gguf>[\w.\-]+) is not supported yet"
            r"|configuration_auto\.py\S*, line \d+, in __getitem__\s+raise KeyError\(key\)\s+"
            r"KeyError: '(?P<key>[\w.\-]+)'"
            r"|Tokenizer class (?P<tokenizer>[\w.]+) does not exist or is not currently imported"
        ),
        _explain_transformers_too_old,
        "transformers/models/auto/configuration_auto.py (AutoConfig.from_pretrained; CONFIG_MAPPING "
        "lookup of model_type); transformers/modeling_gguf_pytorch_utils.py (load_gguf_checkpoint); "
        "transformers/models/auto/tokenization_auto.py (AutoTokenizer.from_pretrained: tokenizer_class of "
        "tokenizer_config.json not found)",
    ),
    LogSignature(
        "log.transformers-version-mismatch",
        Severity.ERROR,
        re.compile(r"(?P<registered>'[^\n]{1,200}?') is already used by a Transformers (?:model|config)"),
        _explain_transformers_too_new,
        "transformers/models/auto/auto_factory.py (_LazyAutoMapping.register), configuration_auto.py "
        "(_LazyConfigMapping.register)",
    ),
    LogSignature(
        "log.cuda-forward-compatibility",
        Severity.ERROR,
        re.compile(r"forward compatibility was attempted on non supported HW"),
        _explain_forward_compatibility,
        "CUDA runtime error 804 (cudaErrorCompatNotSupportedOnDevice), as torch reports it",
        supersedes=("log.driver-too-old",),
    ),
    LogSignature(
        "log.no-kernel-image",
        Severity.ERROR,
        re.compile(
            r"no kernel image is available for execution on the device"
            r"|with CUDA capability sm_\d+ is not compatible with the current PyTorch installation"
        ),
        _explain_no_kernel_image,
        "CUDA error 209 (cudaErrorNoKernelImageForDevice); torch/cuda/__init__.py (_check_capability)",
    ),
    LogSignature(
        "log.no-cuda-gpus",
        Severity.ERROR,
        re.compile(
            r"No CUDA GPUs are available|Found no NVIDIA driver on your system"
            r"|Failed to infer device type|No platform detected, vLLM is running on UnspecifiedPlatform"
        ),
        _explain_no_cuda_gpus,
        "torch/cuda/__init__.py (_lazy_init); "
        "vllm/platforms/__init__.py (resolve_current_platform_cls_qualname), "
        "vllm/config/device.py (DeviceConfig: no platform, no device)",
    ),
    LogSignature(
        "log.gpu-id-not-visible",
        Severity.ERROR,
        re.compile(
            r"self\.gpu_id=(?P<gpu_id>\d+) os\.environ\.get\('CUDA_VISIBLE_DEVICES'\)='(?P<visible>[^']*)'"
            r"|CUDA error: invalid device ordinal"
        ),
        _explain_gpu_not_visible,
        "sglang/srt/model_executor/model_runner.py (init_torch_distributed context); CUDA error 101",
        when=_gpu_not_visible,
    ),
    LogSignature(
        "log.world-size-exceeds-local-gpus",
        Severity.ERROR,
        re.compile(
            r"please ensure that world_size \((?P<world>\d+)\) is less than (?:than )?max local gpu count "
            r"\((?P<local>\d+)\)"
            r"|Tensor parallel size \((?P<world2>\d+)\) cannot be larger than the number of available GPUs "
            r"\((?P<local2>\d+)\)"
        ),
        _explain_world_size,
        "vllm/executor/multiproc_executor.py / mp_distributed_executor.py (_check_cuda); vllm/config "
        "(ParallelConfig: the multiprocessing executor on one node, from 0.11)",
    ),
    LogSignature(
        "log.launcher-passed-unknown-argument",
        Severity.ERROR,
        re.compile(
            r"(?:Async)?EngineArgs\.(?:__)?init(?:__)?\(\) got an unexpected keyword argument"
            r"(?: '(?P<name>\w+)')?"
            # Python before 3.10 names no class: the traceback's last line builds the EngineArgs.
            r"|EngineArgs\([^\n]*\n(?:[^\n]*\n){0,2}?\s*TypeError: __init__\(\) got an unexpected "
            r"keyword argument '(?P<name2>\w+)'"
        ),
        _explain_unexpected_keyword,
        "Python TypeError from vllm.engine.arg_utils.(Async)EngineArgs, when a wrapper builds it from kwargs "
        "(Python 3.10 and later name the class; 3.9 says __init__() under the frame that builds it)",
    ),
    LogSignature(
        "log.no-c-compiler",
        Severity.ERROR,
        re.compile(r"Failed to find C compiler"),
        _explain_no_c_compiler,
        "triton/runtime/build.py (_build)",
    ),
)
