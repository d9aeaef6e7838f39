"""Each log signature fires on a real engine log excerpt and stays quiet on a clean start."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.doctor.findings import Severity
from modelyard.doctor.log_signatures import diagnose_log

FIXTURES = Path(__file__).parent / "fixtures" / "logs"

# fixture file -> the check id that must come first
EXPECTED_FIRST = {
    "vllm_free_memory_issue20305.log": "log.free-memory-below-utilization",
    "vllm_free_memory_device_name_issue23192.log": "log.free-memory-below-utilization",
    "vllm_free_memory_cuda0_pytorch175666.log": "log.free-memory-below-utilization",
    "vllm_no_cache_blocks_issue27508.log": "log.kv-cache-no-memory",
    "vllm_max_seq_len_issue34076.log": "log.max-model-len-exceeds-kv-cache",
    "vllm_v0_max_seq_len_qwen295.log": "log.max-model-len-exceeds-kv-cache",
    "vllm_unknown_architecture_issue27314.log": "log.unknown-architecture",
    "vllm_invalid_tool_parser_recipes51.log": "log.parser-not-found",
    "vllm_tool_parser_invalid_choice_issue9312.log": "log.parser-not-found",
    "vllm_auto_tool_choice_cli_args.log": "log.auto-tool-choice-without-parser",
    "vllm_nccl_unhandled_system_error_akash543.log": "log.nccl-error",
    "sglang_not_enough_memory_issue4330.log": "log.sglang-not-enough-memory",
    "sglang_not_enough_memory_current_value.log": "log.sglang-not-enough-memory",
    "torch_cuda_oom.log": "log.cuda-out-of-memory",
    "uvicorn_address_in_use.log": "log.address-in-use",
    "kernel_oom_killer_dmesg.log": "log.host-oom-killed",
    "python_executable_not_found.log": "log.executable-not-found",
    "docker_executable_not_found.log": "log.executable-not-found",
    "vllm_unrecognized_arguments.log": "log.unrecognized-arguments",
    "torch_driver_too_old.log": "log.driver-too-old",
    # Real vLLM 0.25.0 on an H200 (field run, 2026-11-30):
    "vllm025_auto_tool_choice_without_parser.log": "log.auto-tool-choice-without-parser",
    "vllm025_invalid_tool_parser.log": "log.parser-not-found",
    "vllm025_sglang_flag.log": "log.unrecognized-arguments",
    "vllm025_unknown_architecture.log": "log.unknown-architecture",
    "vllm025_port_in_use.log": "log.address-in-use",
    "vllm025_free_memory_below_utilization.log": "log.free-memory-below-utilization",
    "vllm025_max_model_len_exceeds_kv.log": "log.max-model-len-exceeds-kv-cache",
}
CLEAN_STARTS = [
    "vllm_healthy_startup.log",
    "vllm025_healthy_start.log",
    "vllm025_start_with_low_utilization.log",
]


def _read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(EXPECTED_FIRST))
def test_real_log_excerpt_is_diagnosed(name: str) -> None:
    findings = diagnose_log(_read(name))
    assert findings, f"{name}: no finding"
    assert findings[0].check_id == EXPECTED_FIRST[name]
    assert findings[0].severity is Severity.ERROR
    assert findings[0].fix
    assert findings[0].details["line"]


def test_every_fixture_has_its_source_named() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for path in FIXTURES.glob("*.log"):
        assert f"`{path.name}`" in sources


@pytest.mark.parametrize("name", CLEAN_STARTS)
def test_clean_start_has_no_finding(name: str) -> None:
    assert diagnose_log(_read(name)) == []


def test_trailing_space_in_the_parser_name_is_pointed_out() -> None:
    # The story of the Qwen3.6 guides: --tool-call-parser "qwen3_coder " (real vLLM 0.25.0 log).
    (finding,) = diagnose_log(_read("vllm025_invalid_tool_parser.log"))
    assert "'qwen3_coder '" in finding.message
    assert "whitespace" in finding.message


def test_real_vllm_free_memory_fix() -> None:
    (finding,) = diagnose_log(_read("vllm025_free_memory_below_utilization.log"))
    # 18.77 of 139.8 GiB free on the H200 while another process held 120 GiB.
    assert "from 0.9 to 0.11" in finding.fix


def test_free_memory_fix_names_a_utilization_that_fits() -> None:
    (finding,) = diagnose_log(_read("vllm_free_memory_issue20305.log"))
    # 31.44 of 47.38 GiB free: 0.66 of the GPU, minus a margin.
    assert "from 0.95 to 0.64" in finding.fix
    assert "31.44 of 47.38 GiB" in finding.message


def test_max_model_len_fix_uses_the_engines_estimate() -> None:
    (finding,) = diagnose_log(_read("vllm_max_seq_len_issue34076.log"))
    assert "--max-model-len to 34736" in finding.fix
    assert "262144" in finding.message


def test_v0_max_model_len_fix_uses_the_kv_capacity() -> None:
    (finding,) = diagnose_log(_read("vllm_v0_max_seq_len_qwen295.log"))
    assert "--max-model-len to 7344" in finding.fix


def test_no_cache_blocks_fix_raises_the_given_utilization() -> None:
    (finding,) = diagnose_log(
        _read("vllm_no_cache_blocks_issue27508.log"), engine_args=["--gpu-memory-utilization", "0.8"]
    )
    assert "from 0.8 to 0.85" in finding.fix


def test_sglang_fix_reads_the_current_fraction_from_the_log() -> None:
    (finding,) = diagnose_log(_read("sglang_not_enough_memory_current_value.log"))
    assert "--mem-fraction-static from 0.6 to 0.65" in finding.fix


def test_cuda_oom_fix_is_engine_specific() -> None:
    text = _read("torch_cuda_oom.log")
    (vllm,) = diagnose_log(text, engine="vllm", engine_args=["--gpu-memory-utilization=0.95"])
    assert "lower --gpu-memory-utilization from 0.95 to 0.85" in vllm.fix
    (sglang,) = diagnose_log(text, engine="sglang", engine_args=["--mem-fraction-static", "0.9"])
    assert "lower --mem-fraction-static from 0.9 to 0.85" in sglang.fix
    assert "146.00 MiB" in vllm.message


def test_parser_name_is_reported() -> None:
    (finding,) = diagnose_log(_read("vllm_invalid_tool_parser_recipes51.log"))
    assert "'openai'" in finding.message
    assert "--tool-call-parser" in finding.fix


def test_unknown_architecture_is_named() -> None:
    (finding,) = diagnose_log(_read("vllm_unknown_architecture_issue27314.log"))
    assert "DeepseekOCRForCausalLM" in finding.message


def test_port_is_named_when_address_in_use() -> None:
    (finding,) = diagnose_log(_read("uvicorn_address_in_use.log"))
    assert "port 8002" in finding.message


def test_missing_program_is_named() -> None:
    (python_finding,) = diagnose_log(_read("python_executable_not_found.log"))
    (docker_finding,) = diagnose_log(_read("docker_executable_not_found.log"))
    assert "vllm" in python_finding.message
    assert "vllm" in docker_finding.message


def test_missing_model_file_is_not_a_missing_program() -> None:
    text = "FileNotFoundError: [Errno 2] No such file or directory: '/models/qwen/config.json'"
    assert diagnose_log(text) == []


def test_sigkill_without_other_finding_points_at_the_oom_killer() -> None:
    text = "Loading safetensors checkpoint shards:  40% Completed | 2/5\n"
    (finding,) = diagnose_log(text, exit_code=-9)
    assert finding.check_id == "log.host-oom-killed"
    assert finding.severity is Severity.ERROR
    assert diagnose_log(text, exit_code=1) == []


def test_kernel_line_names_the_killed_process() -> None:
    (finding,) = diagnose_log(_read("kernel_oom_killer_dmesg.log"), exit_code=137)
    assert "python3" in finding.message


def test_specific_memory_diagnosis_comes_before_generic_ones() -> None:
    text = _read("vllm_no_cache_blocks_issue27508.log") + "\n" + _read("torch_cuda_oom.log")
    ids = [finding.check_id for finding in diagnose_log(text)]
    assert ids == ["log.kv-cache-no-memory", "log.cuda-out-of-memory"]


def test_line_number_and_occurrences_are_reported() -> None:
    text = "ok\nRuntimeError: NCCL error: unhandled cuda error\nRuntimeError: NCCL error: again\n"
    (finding,) = diagnose_log(text)
    assert finding.details["line_number"] == 2
    assert finding.details["occurrences"] == 2


NCCL_HANG = """\
INFO 11-11 14:17:08 pynccl.py:69] vLLM is using nccl==2.21.5
omega:18302:18445 [0] NCCL INFO Bootstrap : Using wlp38s0:192.168.1.19<0>
omega:18302:18445 [0] NCCL INFO cudaDriverVersion 12060
"""


def test_a_start_without_output_names_the_stage_it_stopped_in() -> None:
    (finding,) = diagnose_log(NCCL_HANG, stalled_seconds=900)
    assert finding.check_id == "log.stalled"
    assert finding.details["stage"] == "initialising NCCL between the GPUs"
    assert "NCCL_P2P_DISABLE=1" in finding.fix


def test_a_short_pause_or_a_known_error_is_no_stall() -> None:
    assert diagnose_log(NCCL_HANG, stalled_seconds=120) == []
    ids = [
        finding.check_id
        for finding in diagnose_log(NCCL_HANG + "RuntimeError: NCCL error: x\n", stalled_seconds=900)
    ]
    assert ids == ["log.nccl-error"]


def test_clean_starts_stay_quiet_when_not_stalled() -> None:
    for name in CLEAN_STARTS:
        assert diagnose_log(_read(name), stalled_seconds=None) == []


# What the model needs: each line as a report or the engine's source gives it, with the signature
# it must fire; the wording of the engine and its libraries (see signatures/model.py for sources).
MODEL_LINES = {
    # a report of vLLM with Qwen3-Coder-480B at --max-model-len 1048576
    "Value error, User-specified max_model_len (1048576) is greater than the derived max_model_len "
    "(max_position_embeddings=262144 or model_max_length=None in model's config.json). This may lead "
    "to incorrect model outputs or CUDA errors.": "log.context-beyond-model",
    "User-specified context_length (65536) is greater than the derived context_length (32768). This "
    "may lead to incorrect model outputs or CUDA errors.": "log.context-beyond-model",
    "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
    "Tesla T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting "
    "the`dtype` flag in CLI, for example: --dtype=half.": "log.dtype-unsupported-by-gpu",
    "The quantization method awq is not supported for the current GPU. Minimum capability: 75. "
    "Current capability: 70.": "log.quantization-unsupported-by-gpu",
    "RuntimeError: Quantization scheme is not supported for the current GPU. Min capability: 89. "
    "Current capability: 86.": "log.quantization-unsupported-by-gpu",
    "ValueError: Loading /models/chatglm3-6b requires you to execute the configuration file in that "
    "repo on your local machine. Make sure you have read the code there to avoid malicious use, then "
    "set the option `trust_remote_code=True` to remove this error.": "log.trust-remote-code",
    "ValueError: Total number of attention heads (28) must be divisible by tensor parallel size "
    "(8).": "log.tensor-parallel-heads",
    "OSError: /models/qwen does not appear to have a file named config.json. Checkout "
    "'https://huggingface.co//models/qwen/tree/None' for available files.": "log.model-not-found",
    "OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/tmp'": "log.disk-full",
}


@pytest.mark.parametrize("line", sorted(MODEL_LINES))
def test_what_the_model_needs_is_diagnosed(line: str) -> None:
    findings = diagnose_log(f"INFO starting\n{line}\n")
    assert findings and findings[0].check_id == MODEL_LINES[line]
    assert findings[0].fix


def test_model_signature_fixes_name_the_values() -> None:
    (context,) = diagnose_log(next(line for line, id in MODEL_LINES.items() if "1048576" in line))
    assert "--max-model-len 1048576" in context.message and "262144" in (context.fix or "")
    (heads,) = diagnose_log(
        "Total number of attention heads (28) must be divisible by tensor parallel size (8)"
    )
    assert "1, 2, 4, 7, 14" in (heads.fix or "")
    (quant,) = diagnose_log(
        "The quantization method awq is not supported for the current GPU. Minimum capability: 75. "
        "Current capability: 70."
    )
    assert "7.5" in quant.message and "7.0" in quant.message


def test_what_the_model_needs_is_quiet_on_near_misses() -> None:
    quiet = [
        "Using max model len 131072",
        "INFO Resolved architecture: Qwen2ForCausalLM; quantization=awq",
        "Downloading config.json: 100%",
        # a gated model is log.hub-gated, not a missing model
        "401 Client Error. Cannot access gated repo for url https://huggingface.co/meta-llama/x. "
        "Repository Not Found for url: https://huggingface.co/api/models/meta-llama/x",
    ]
    for text in quiet:
        ids = [finding.check_id for finding in diagnose_log(text)]
        assert not {
            "log.model-not-found",
            "log.context-beyond-model",
            "log.quantization-unsupported-by-gpu",
        } & set(ids), (text, ids)


# What the process finds of CUDA, its libraries, its kernels and the weights (signatures/runtime.py,
# and the wordings the older signatures learnt): the program's own words, with the signature.
RUNTIME_LINES = {
    "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
    "must use the 'spawn' start method": "log.cuda-initialized-before-fork",
    "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory": (
        "log.cuda-library-missing"
    ),
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
    "calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported "
    "display driver / cuda driver combination": "log.cuda-driver-mismatch",
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 106496, Hardware "
    "limit: 101376. Reducing block sizes or `num_stages` may help.": "log.triton-shared-memory",
    "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge": (
        "log.weights-corrupt"
    ),
    "ValueError: Unknown quantization method: mxfp4. Must be one of ['aqlm', 'awq', 'deepspeedfp', "
    "'fp8', 'gptq']": "log.quantization-unknown",
    "ValueError: Quantization method specified in the model config (gptq) does not match the quantization "
    "method specified in the `quantization` argument (awq).": "log.quantization-mismatch",
    "Value error, Tensor parallel size (8) cannot be larger than the number of available GPUs (4).": (
        "log.world-size-exceeds-local-gpus"
    ),
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder "
    "for the specified revision on the local disk and outgoing traffic has been disabled.": "log.hub-offline",
    "RuntimeError: FlashAttention only supports Ampere GPUs or newer.": "log.attention-unsupported-by-gpu",
    "RuntimeError: operator torchvision::nms does not exist": "log.extension-built-for-another-torch",
    "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.": (
        "log.driver-too-old"
    ),
}


@pytest.mark.parametrize("line", sorted(RUNTIME_LINES))
def test_what_the_process_finds_is_diagnosed(line: str) -> None:
    findings = diagnose_log(f"INFO starting\n{line}\n", engine="vllm")
    assert findings and findings[0].check_id == RUNTIME_LINES[line]
    assert findings[0].severity is Severity.ERROR and findings[0].fix


def test_runtime_fixes_name_the_values() -> None:
    (library,) = diagnose_log(
        "OSError: libcuda.so.1: cannot open shared object file: No such file or directory"
    )
    assert "NVIDIA container runtime" in library.message and "--gpus" in library.fix
    (memory,) = diagnose_log(next(line for line in RUNTIME_LINES if "Hardware" in line))
    assert "104 KiB" in memory.message and "99 KiB" in memory.message
    (unknown,) = diagnose_log(next(line for line in RUNTIME_LINES if "Unknown quantization" in line))
    assert "'mxfp4'" in unknown.message and "mxfp4" in unknown.fix


def test_what_the_process_finds_is_quiet_on_near_misses() -> None:
    quiet = [
        "INFO Using the 'spawn' start method for the worker processes",
        "INFO loaded libcudart.so.12 from /usr/local/cuda/lib64",
        "INFO Loading safetensors checkpoint shards: 100% Completed | 4/4",
        "INFO quantization method fp8 selected from the model config",
        "INFO Tensor parallel size 4, the number of available GPUs 8",
    ]
    for text in quiet:
        assert diagnose_log(text, engine="vllm") == [], text
