"""Log signatures of the engines' own refusals of a layout, an adapter or a pair of options.

Each pattern is the engine's message template (its source named with it), with the variable parts
as groups, so that any report of the same refusal matches, whatever the model or the numbers:

- ``log.pipeline-parallel-unsupported``: the model class does not implement pipeline parallelism
  (vLLM ``ModelConfig.verify_with_parallel_config``: "Pipeline parallelism is not supported for this
  model. Supported models implement the `SupportsPP` interface."; before 0.6.4 "Pipeline
  parallelism is only supported for the following architectures: [...]").
- ``log.lora-rank-exceeds-max``: an adapter's rank above ``--max-lora-rank`` (vLLM
  ``LoRAModelManager``/``PEFTHelper.validate_legal``: "LoRA rank {r} is greater than max_lora_rank
  {max}"); the default is 16 and the flag takes one of 1, 8, 16, 32, 64, 128, 256, 320, 512.
- ``log.lora-adapter-not-found``: vLLM ``WorkerLoRAManager._load_adapter``: "Loading lora X failed: No
  adapter found for PATH" (no adapter_config.json and weights at the path).
- ``log.ray-driver-without-gpu``: the Ray executor found no GPU for the engine on the node the
  engine's driver runs on (vLLM ``executor/ray_utils.py``: "Current node has no GPU available").
- ``log.flags-conflict``: two options the engine refuses together (vLLM ``cli_args.py``
  ``validate_parsed_serve_args``: "Error: --X and --Y cannot be enabled at the same time";
  argparse's mutually exclusive groups: "argument --X: not allowed with argument --Y").
- ``log.batched-tokens-below-max-model-len``: vLLM ``SchedulerConfig`` without chunked prefill
  ("max_num_batched_tokens (X) is smaller than max_model_len (Y)"), and its sibling ("must be
  greater than or equal to max_num_seqs").
- ``log.reasoning-parser-token``: SGLang's constrained reasoning needs the parser's think tokens to
  be single tokens of the model's tokenizer ("think_end_token '</think>' must encode to exactly one
  token"): the parser was written for another model family.
- ``log.attention-unsupported-by-gpu``: no attention kernel for this model on this GPU (vLLM
  ``FlashAttentionImpl``: "Sinks are only supported in FlashAttention 3", FA3 being Hopper-only;
  ``CudaPlatform.get_attn_backend_cls``: "No valid attention backend found for cuda with ...").
- ``log.transformers-fallback``: the engine has no model class of its own for the architecture and runs
  it through its Transformers wrapper (vLLM and SGLang ``TransformersForCausalLM`` and kin), which
  lacks what this model needs: an ``AttributeError`` on the wrapper object.
- ``log.extension-built-for-another-torch``: a compiled extension of the engine (``vllm._C``,
  ``sgl_kernel``, ``flash_attn``, ...) fails to load with the dynamic linker's "undefined symbol"
  naming a PyTorch C++ symbol (mangled in ``c10``, ``at`` or ``torch``): it was built against another
  torch release than the one installed (PyTorch has no stable C++ ABI between releases).
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.signatures.base import LogContext, LogSignature

# vLLM's --max-lora-rank choices (vllm/config/lora.py, MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _explain_pipeline_unsupported(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    size = context.flag_value("--pipeline-parallel-size", "-pp")
    where = f" (--pipeline-parallel-size {size})" if size else ""
    return (
        f"this engine release cannot split the model into pipeline stages{where}: its model class does not "
        "implement pipeline parallelism (SupportsPP); a speculative draft model (MTP) counts too",
        "use tensor parallelism alone over the GPUs of one node (--pipeline-parallel-size 1), or a "
        "release whose model class supports it (check the engine's supported-models table, column PP); "
        "with MTP, turn the speculative decoding off first",
    )


def _explain_lora_rank(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    rank, limit = int(match["rank"]), int(match["limit"])
    fitting = next((size for size in LORA_RANKS if size >= rank), None)
    raise_to = f"--max-lora-rank {fitting}" if fitting else f"a --max-lora-rank of at least {rank}"
    return (
        f"the LoRA adapter has rank {rank}, above the engine's --max-lora-rank {limit} "
        "(vLLM's default is 16)",
        f"start the engine with {raise_to} (it takes one of {', '.join(map(str, LORA_RANKS))}); a launcher "
        "that builds the engine arguments itself needs its own max_lora_rank setting",
    )


def _explain_lora_adapter_missing(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    path = match["path"]
    return (
        f"vLLM found no LoRA adapter at {path}: the folder has no adapter_config.json with adapter weights "
        "(a training checkpoint of the full model, a folder one level off, or a path that does not exist "
        "where the engine runs)",
        "point --lora-modules (or the request's lora_path) at the folder that holds adapter_config.json and "
        "adapter_model.safetensors, as it is seen inside the engine's container or node",
    )


def _explain_ray_without_gpu(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "vLLM's Ray executor found no free GPU on the node its engine runs on: the process that starts it "
        "(the API server, a Ray Serve replica or a data-parallel engine core) is placed where Ray has no "
        "GPU left for it, or a placement group of an earlier run still holds them",
        "start the engine on a node with a GPU Ray can give it (the head node's GPUs, or --num-gpus in "
        "`ray start`); release leaked placement groups (`ray stop` on every node); inside a Ray actor that "
        "already holds its GPUs, use --distributed-executor-backend mp",
    )


def _explain_flags_conflict(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    first = match["first"] or match["first2"]
    second = match["second"] or match["second2"]
    return (
        f"the engine refuses {first} and {second} together",
        f"drop one of {first} and {second}; where both are needed, use an engine release that allows the "
        "pair (vLLM 0.8.0 and later run tool calling and a reasoning parser together)",
    )


def _explain_batched_tokens(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    batched = int(match["batched"] or match["batched2"])
    if match["length"]:
        length = int(match["length"])
        return (
            f"--max-num-batched-tokens {batched} is below the context of {length} tokens and chunked prefill "
            "is off, so vLLM refuses the start",
            f"raise --max-num-batched-tokens to {length}, lower --max-model-len to {batched}, or turn "
            "chunked prefill on (--enable-chunked-prefill)",
        )
    sequences = int(match["sequences"])
    return (
        f"--max-num-batched-tokens {batched} is below --max-num-seqs {sequences}, so vLLM refuses the start",
        f"raise --max-num-batched-tokens to at least {sequences}, or lower --max-num-seqs to {batched}",
    )


def _explain_reasoning_token(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    parser = context.flag_value("--reasoning-parser")
    named = f" --reasoning-parser {parser}" if parser else " the reasoning parser"
    return (
        f"the model's tokenizer has no single token for {match['token']}, which{named} needs: the parser is "
        "for another model family (or the model is not a reasoning one)",
        "pick the reasoning parser of the model's own family (its model card names it), or drop "
        "--reasoning-parser for a model that does not think",
    )


def _explain_attention(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    if match["sinks"]:
        return (
            "the model uses attention sinks (gpt-oss and its kin), which vLLM's FlashAttention backend runs "
            "only with FlashAttention 3, a Hopper (sm90) kernel; this GPU gets FlashAttention 2",
            "select the Triton backend (--attention-backend TRITON_ATTN, or VLLM_ATTENTION_BACKEND="
            "TRITON_ATTN on releases before 0.11), or use a vLLM release that picks it on this GPU",
        )
    if match["ampere"]:
        return (
            "the flash-attn library runs only on Ampere (compute capability 8.0) and newer GPUs, and this "
            "GPU is older (Turing or Volta)",
            "pick an attention backend that runs here (vLLM --attention-backend TRITON_ATTN or XFORMERS on "
            "releases that have it; SGLang --attention-backend triton or torch_native), or uninstall the "
            "flash-attn package that the launcher or model code imports",
        )
    return (
        "no attention backend of this vLLM build supports this model on this GPU (the reasons follow the "
        "message: compute capability, head size, KV-cache dtype, MLA or sparse attention)",
        "read the reasons in the line: change the KV-cache dtype or block size they name, or run the model "
        "on a GPU generation one of the backends supports",
    )


def _explain_transformers_fallback(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"the engine has no implementation of its own for this model and ran it through its Transformers "
        f"fallback ({match['wrapper']}), which cannot run it (no attribute {match['attribute']!r})",
        "use an engine release that lists the model's architecture natively (its supported-models page), "
        "and the transformers release it pins",
    )


def _explain_extension_abi(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    if match["operator"]:
        return (
            "torchvision's compiled operators did not load: the installed torchvision was built for another "
            "torch release than the installed torch (the engine's upgrade moved torch, not torchvision)",
            "install the torchvision release paired with the installed torch (torch 2.9 with torchvision "
            "0.24, 2.10 with 0.25, ...), from the same index (the same CUDA) as torch",
        )
    return (
        f"the compiled extension {match['library']} was built against another PyTorch release than the one "
        f"installed: it needs the torch symbol {match['symbol'][:80]}, which this torch does not have",
        "install the torch release the engine (and its kernel package) pins, or reinstall the kernel package "
        "built for your torch (`pip show torch` and the package's requirements); do not mix a torch nightly "
        "with released kernel wheels",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.pipeline-parallel-unsupported",
        Severity.ERROR,
        re.compile(
            r"Pipeline parallelism is not supported for this model"
            r"|Pipeline parallelism is only supported for the following\s+architectures"
        ),
        _explain_pipeline_unsupported,
        "vllm/config/model.py (ModelConfig.verify_with_parallel_config: registry.is_pp_supported_model)",
    ),
    LogSignature(
        "log.lora-rank-exceeds-max",
        Severity.ERROR,
        re.compile(r"LoRA rank (?P<rank>\d+) is greater than max_lora_rank (?P<limit>\d+)"),
        _explain_lora_rank,
        "vllm/lora/models.py (LoRAModelManager), vllm/lora/peft_helper.py (PEFTHelper.validate_legal)",
    ),
    LogSignature(
        "log.lora-adapter-not-found",
        Severity.ERROR,
        re.compile(r"No adapter found for (?P<path>[^\s'\"\]]+)"),
        _explain_lora_adapter_missing,
        "vllm/lora/worker_manager.py (WorkerLoRAManager._load_adapter: the adapter's files are not at the "
        "path)",
    ),
    LogSignature(
        "log.ray-driver-without-gpu",
        Severity.ERROR,
        re.compile(r"Current node has no GPU available"),
        _explain_ray_without_gpu,
        "vllm/executor/ray_utils.py (initialize_ray_cluster / _verify_bundles)",
        supersedes=("log.no-cuda-gpus",),
    ),
    LogSignature(
        "log.flags-conflict",
        Severity.ERROR,
        re.compile(
            r"(?P<first>--[\w-]+) and (?P<second>--[\w-]+) cannot be (?:enabled|used) "
            r"(?:at the same time|together)"
            r"|argument (?P<first2>--[\w-]+): not allowed with argument (?P<second2>--[\w-]+)"
        ),
        _explain_flags_conflict,
        "vllm/entrypoints/openai/cli_args.py (validate_parsed_serve_args); "
        "argparse (mutually exclusive group)",
    ),
    LogSignature(
        "log.batched-tokens-below-max-model-len",
        Severity.ERROR,
        re.compile(
            r"max_num_batched_tokens \((?P<batched>\d+)\) is smaller than max_model_len \((?P<length>\d+)\)"
            r"|max_num_batched_tokens \((?P<batched2>\d+)\) must be greater than or equal to max_num_seqs "
            r"\((?P<sequences>\d+)\)"
        ),
        _explain_batched_tokens,
        "vllm/config/scheduler.py (SchedulerConfig._verify_args / verify_max_model_len)",
    ),
    LogSignature(
        "log.reasoning-parser-token",
        Severity.ERROR,
        re.compile(r"think_(?:start|end)_token (?P<token>'[^']*') must encode to exactly one token"),
        _explain_reasoning_token,
        "sglang/srt/parser (constrained reasoning: the reasoning parser's think tokens)",
    ),
    LogSignature(
        "log.attention-unsupported-by-gpu",
        Severity.ERROR,
        re.compile(
            r"(?P<sinks>Sinks are only supported in FlashAttention 3)"
            r"|No valid attention backend found for \w+"
            r"|(?P<ampere>FlashAttention only supports Ampere GPUs or newer)"
        ),
        _explain_attention,
        "vllm/v1/attention/backends/flash_attn.py (FlashAttentionImpl: flash_attn_supports_sinks); "
        "vllm/platforms/cuda.py (get_attn_backend_cls)",
    ),
    LogSignature(
        "log.transformers-fallback",
        Severity.ERROR,
        re.compile(r"'(?P<wrapper>Transformers\w*)' object has no attribute '(?P<attribute>\w+)'"),
        _explain_transformers_fallback,
        "vllm/model_executor/models/transformers/ (TransformersForCausalLM and kin); "
        "sglang/srt/models/transformers.py (TransformersForCausalLM)",
    ),
    LogSignature(
        "log.extension-built-for-another-torch",
        Severity.ERROR,
        re.compile(
            r"(?P<library>[\w./-]+\.so[\w.]*): undefined symbol: (?P<symbol>_ZN\d*(?:c10|at|torch)\w+)"
            r"|(?P<operator>operator torchvision::\w+ does not exist)"
        ),
        _explain_extension_abi,
        "the dynamic linker (ImportError: undefined symbol) on a PyTorch C++ symbol; PyTorch's C++ ABI is "
        "not stable across releases (extensions must be built against the installed torch)",
    ),
)
