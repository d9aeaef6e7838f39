"""Log signatures of what the model needs from the engine and the GPU: its context length, dtype,
quantization, custom code, head count, and the files themselves (and the disk they go to).

Each wording is the engine's or the library's own (the ``source`` of each signature names where).
"""

from __future__ import annotations

import re

from modelyard.doctor.findings import Severity
from modelyard.doctor.hub_paths import hub_cache_repository
from modelyard.doctor.signatures.base import LogContext, LogSignature, first_group


def _divisors(number: int) -> str:
    return ", ".join(str(size) for size in range(1, min(number, 16) + 1) if number % size == 0)


def _explain_context(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    asked = first_group(match, "asked", "asked2") or "?"
    derived = first_group(match, "derived", "derived2") or "?"
    derived = derived.removesuffix(".0")
    flag = "--context-length" if context.is_sglang or match.group("asked2") else "--max-model-len"
    variable = (
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
        if flag == "--context-length"
        else "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
    )
    return (
        f"{flag} {asked} is longer than the model's {derived} positions (config.json); the engine refuses it",
        f"lower {flag} to {derived}; if the model is trained for longer, add rope scaling "
        f"(vLLM --hf-overrides, SGLang --json-model-override-args), or set {variable}=1 to accept it "
        "at your own risk",
    )


def _explain_bfloat16(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        f"the {match['gpu'].strip()} GPU (compute capability {match['capability']}) has no bfloat16, and the "
        "model runs in bfloat16",
        "add --dtype half (float16); a model trained in bfloat16 may overflow in float16, so check its "
        "answers",
    )


def _explain_quantization(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    method = first_group(match, "method")
    subject = f"the quantization {method}" if method else "the checkpoint's compressed-tensors scheme"
    minimum = first_group(match, "minimum", "minimum2")
    current = first_group(match, "current", "current2", "sm")
    needs = f"a GPU of compute capability {int(minimum) / 10:.1f} or newer" if minimum else "a newer GPU"
    this = f"; this GPU is {int(current) / 10:.1f}" if current else ""
    return (
        f"{subject} needs {needs}{this}",
        "use a checkpoint quantized for this GPU (AWQ and GPTQ run from 7.5, unquantized float16 anywhere), "
        "or a newer GPU",
    )


def _explain_remote_code(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the model's repository ships its own Python code (config or modeling files) and the engine was not "
        "allowed to run it",
        "read the repository's code, then add --trust-remote-code to the backend parameters",
    )


def _explain_heads(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    heads, size = int(match["heads"]), int(match["size"])
    return (
        f"the model's {heads} attention heads do not split over tensor-parallel size {size}",
        f"use a tensor-parallel size that divides {heads} ({_divisors(heads)}), and pipeline parallelism "
        "for the remaining GPUs",
    )


def _explain_divisibility(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    numerator, denominator = int(match["numerator"]), int(match["denominator"])
    return (
        f"a dimension of the model ({numerator}: attention heads, often those of a vision encoder, or "
        f"experts) does not split over {denominator} tensor-parallel ranks",
        f"use a tensor-parallel size that divides {numerator} ({_divisors(numerator)}) and pipeline "
        "parallelism for the remaining GPUs; for a vision encoder in vLLM, --mm-encoder-tp-mode data "
        "keeps it whole on each rank",
    )


def _split_by_ranks(match: re.Match[str], text: str) -> bool:
    """vLLM's and SGLang's ``ensure_divisibility`` says only the two numbers; it is a tensor-parallel
    split when the denominator is more than one rank."""
    return int(match["denominator"]) > 1


def _explain_model_not_found(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    refused = match.groupdict().get("refused")
    if refused:
        repository = hub_cache_repository(refused)
        if repository:
            return (
                f"{refused} is a Hugging Face cache repository folder with no config.json of its own (the "
                "files are under snapshots/<revision>/), so the engine took the path for a hub id",
                f"give {refused}/snapshots/<revision>, or the repo id {repository} with HF_HOME set to the "
                "folder that holds hub/",
            )
        return (
            f"the engine got the path {refused} but found no model directory there (no such directory, or "
            "no config.json in it), so it took the path for a hub id, which huggingface_hub refuses",
            "check that the path exists where the engine runs (inside a container: the mounted path; over "
            "Ray: on every node) and that config.json is in it",
        )
    where = first_group(match, "path", "name", "url") or "the model"
    return (
        f"the engine found no model at {where}: not a directory with config.json, and not a model id the "
        "hub knows",
        "check the model path the engine got (inside a container: the mounted path) and that config.json is "
        "there; for a hub id, check its spelling and that it is public or your token can read it",
    )


def _explain_disk_full(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the disk the engine writes to is full (the model download, the Hugging Face cache or "
        "torch.compile's cache)",
        "free space there, or point HF_HOME / --download-dir (vLLM) and VLLM_CACHE_ROOT to a larger volume",
    )


def _explain_chat_template(match: re.Match[str], context: LogContext) -> tuple[str, str]:
    return (
        "the model's tokenizer has no chat template, so every request on the chat route "
        "(/v1/chat/completions) is refused; a base model is usually meant for /v1/completions",
        "serve an instruction-tuned variant of the model, or give one with --chat-template (a .jinja "
        "file or the template text), or send these requests to /v1/completions",
    )


SIGNATURES: tuple[LogSignature, ...] = (
    LogSignature(
        "log.context-beyond-model",
        Severity.ERROR,
        re.compile(
            r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived max_model_len "
            r"\((?:[^)=]*=)?(?P<derived>[\d.]+)"
            r"|User-specified context_length \((?P<asked2>\d+)\) is greater than the derived context_length "
            r"\((?P<derived2>\d+)\)"
        ),
        _explain_context,
        "vllm/config/model.py (_get_and_verify_max_len); sglang/srt/configs/model_config.py",
    ),
    LogSignature(
        "log.dtype-unsupported-by-gpu",
        Severity.ERROR,
        re.compile(
            r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0\. "
            r"Your (?P<gpu>.+?) GPU has compute capability (?P<capability>\d+\.\d+)"
        ),
        _explain_bfloat16,
        "vllm/platforms/cuda.py (check_if_supports_dtype); vllm/config.py (_check_if_gpu_supports_dtype)",
    ),
    LogSignature(
        "log.quantization-unsupported-by-gpu",
        Severity.ERROR,
        re.compile(
            r"The quantization method (?P<method>[\w.\-]+) is not supported for the current GPU"
            r"(?:\. Minimum capability: (?P<minimum>\d+)\. Current capability: (?P<current>\d+)"
            r"| SM ?(?P<sm>\d+))?"
            # compressed-tensors raises RuntimeError with three strings: the log shows the tuple.
            r"|Quantization scheme is not supported for ['\", ]*the current GPU\. "
            r"Min capability: (?P<minimum2>\d+)\. ['\", ]*Current capability: (?P<current2>\d+)"
        ),
        _explain_quantization,
        "vllm/config/vllm.py (_get_quantization_config); compressed_tensors.py (_check_scheme_supported)",
    ),
    LogSignature(
        "log.trust-remote-code",
        Severity.ERROR,
        re.compile(
            r"requires you to execute the (?:configuration|modeling|tokenizer) file in that repo on "
            r"your local machine"
            r"|contains custom code which must be executed to correctly load the model"
            r"|set the option `?trust_remote_code=True`? to remove this error"
        ),
        _explain_remote_code,
        "transformers/dynamic_module_utils.py (resolve_trust_remote_code)",
    ),
    LogSignature(
        "log.tensor-parallel-heads",
        Severity.ERROR,
        re.compile(
            r"Total number of attention heads \((?P<heads>\d+)\) must be divisible by tensor parallel size "
            r"\((?P<size>\d+)\)"
        ),
        _explain_heads,
        "vllm/config/parallel.py, vllm/config/model.py (verify_with_parallel_config)",
    ),
    LogSignature(
        "log.tensor-parallel-heads",
        Severity.ERROR,
        re.compile(r"AssertionError: (?P<numerator>\d+) is not divisible by (?P<denominator>\d+)"),
        _explain_divisibility,
        "vllm/distributed/utils.py, sglang/srt/distributed/utils.py (ensure_divisibility, used by divide() "
        "when a layer shards its heads or sizes over the tensor-parallel ranks)",
        when=_split_by_ranks,
    ),
    LogSignature(
        "log.model-not-found",
        Severity.ERROR,
        re.compile(
            r"(?P<path>[^\s'\"]+) does not appear to have a file named config\.json"
            r"|Invalid repository ID or local directory specified: '(?P<name>[^']+)'"
            r"|Repository Not Found for url: (?P<url>\S+)"
            r"|is not a local folder and is not a valid model identifier listed on"
            r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?P<refused>[/.~][^']*)'"
        ),
        _explain_model_not_found,
        "transformers/utils/hub.py (cached_files); vllm/transformers_utils/config.py; "
        "huggingface_hub/utils/_validators.py (validate_repo_id, for a path taken as a hub id)",
        when=lambda match, text: "gated" not in text.lower() and "401 client error" not in text.lower(),
    ),
    LogSignature(
        "log.chat-template-missing",
        Severity.ERROR,
        re.compile(
            r"default chat template is no longer allowed, so you must provide a chat template if the "
            r"tokenizer does not define one"
        ),
        _explain_chat_template,
        "vllm/entrypoints/chat_utils.py (apply_hf_chat_template: resolve_hf_chat_template found none)",
    ),
    LogSignature(
        "log.disk-full",
        Severity.ERROR,
        re.compile(r"No space left on device"),
        _explain_disk_full,
        "errno ENOSPC (OSError: [Errno 28])",
    ),
)
