"""A log read as facts: a new wording of the same raise, or the same line behind another launcher's
prefix, gets the same diagnosis (``doctor/log_facts.py``, ``doctor/signatures/raise_sites.py``).

Each log here keeps the engine's raise site (the class, the file and function of the frame that
raised) and changes what the message says, or wraps the line the way another logger does.
"""

from __future__ import annotations

import pytest

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.log_facts import read_log_facts, strip_prefix
from modelyard.doctor.log_signatures import diagnose_log


def _ids(findings: list[Finding]) -> set[str]:
    return {finding.check_id for finding in findings if finding.severity is Severity.ERROR}


def _traceback(path: str, function: str, exception: str, prefix: str = "") -> str:
    return "\n".join(
        f"{prefix}{line}"
        for line in (
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 90, in __init__',
            "    self._initialize_kv_caches(vllm_config)",
            f'  File "/usr/lib/python3.12/site-packages/{path}", line 700, in {function}',
            "    raise ValueError(",
            exception,
        )
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("(EngineCore_DP0 pid=7) ERROR 10-25 13:12:42 [core.py:671] RuntimeError: x", "RuntimeError: x"),
        ("(Worker_TP1 pid=9) INFO 07-30 12:25:04 [parallel_state.py:1615] world_size=8", "world_size=8"),
        ("[rank1]:   Input should be a valid number", "Input should be a valid number"),
        ("[2025-10-16 09:06:22 TP0] Load weight begin.", "Load weight begin."),
        ("llama-server  | error: invalid argument: 0.0.0.0", "error: invalid argument: 0.0.0.0"),
        ("Feb 21 01:41:02 paibo ollama[402476]: llama_model_load: error", "llama_model_load: error"),
        ("2025-05-16T13:12:16.645427617Z DEBUG 05-16 13:12:16 [core_client.py:425] Waiting", "Waiting"),
        ("[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ValueError: Free", "ValueError: Free"),
    ],
)
def test_a_line_is_read_without_what_loggers_and_launchers_put_before_it(line: str, message: str) -> None:
    assert strip_prefix(line) == message


def test_the_exception_and_the_frame_that_raised_it_are_read_from_a_traceback() -> None:
    text = _traceback(
        "vllm/v1/core/kv_cache_utils.py", "_check_enough_kv_cache_memory", "ValueError: too long"
    )
    (exception,) = read_log_facts(text).exceptions
    assert exception.name == "ValueError" and exception.message == "too long"
    assert exception.raised_in is not None and exception.raised_in.function == "_check_enough_kv_cache_memory"


def test_vllms_sampler_warmup_raise_is_out_of_memory_whatever_its_message_says() -> None:
    text = _traceback(
        "vllm/v1/worker/gpu_model_runner.py",
        "_dummy_sampler_run",
        "RuntimeError: the sampler's warm-up with 1024 dummy requests exhausted the device",
        prefix="(Worker pid=3) ERROR 10-25 13:12:42 [multiproc_executor.py:671] ",
    )
    (finding,) = [f for f in diagnose_log(text) if f.check_id == "log.cuda-out-of-memory"]
    assert finding.severity is Severity.ERROR and "--max-num-seqs" in (finding.fix or "")
    assert "_dummy_sampler_run" in finding.message


def test_torch_out_of_memory_under_another_module_name_and_wording_is_out_of_memory() -> None:
    text = "torch.cuda.OutOfMemoryError: allocation of 2.00 GiB failed on device 0\n"
    assert "log.cuda-out-of-memory" in _ids(diagnose_log(text, engine="vllm"))


def test_ggml_cudamalloc_failure_is_out_of_memory_with_the_llama_cpp_fix() -> None:
    text = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 81656.95 MiB on device 0: cudaMalloc failed: "
        "out of memory\nllama_model_load: error loading model: unable to allocate CUDA0 buffer\n"
    )
    (finding,) = [f for f in diagnose_log(text) if f.check_id == "log.cuda-out-of-memory"]
    assert "-ngl" in (finding.fix or "")


@pytest.mark.parametrize(
    ("message", "check_id"),
    [
        (
            "ValueError: one request of 131072 tokens needs 9 GiB, 4 GiB are left",
            "log.max-model-len-exceeds-kv-cache",
        ),
        ("ValueError: No available memory for the cache blocks (reworded)", "log.kv-cache-no-memory"),
    ],
)
def test_vllms_kv_cache_check_is_read_by_its_raise_site(message: str, check_id: str) -> None:
    text = _traceback("vllm/v1/core/kv_cache_utils.py", "_check_enough_kv_cache_memory", message)
    assert check_id in _ids(diagnose_log(text, engine="vllm"))


def test_vllms_free_memory_check_is_read_by_its_raise_site() -> None:
    text = _traceback(
        "vllm/v1/worker/utils.py", "request_memory", "ValueError: not enough free memory to start"
    )
    assert "log.free-memory-below-utilization" in _ids(diagnose_log(text, engine="vllm"))


def test_sglangs_kv_pool_refusal_is_read_by_its_raise_site() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/model_executor/pool_configurator.py", line 67, in __post_init__\n'
        "    raise RuntimeError(msg)\n"
        "RuntimeError: KV pool would have no room: memory too low for --mem-fraction-static 0.5\n"
    )
    assert "log.sglang-not-enough-memory" in _ids(diagnose_log(text, engine="sglang"))


def test_a_config_field_given_none_is_a_launcher_written_for_another_release() -> None:
    text = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "[rank1]: mm_processor_cache_gb\n"
        "[rank1]:   Input should be a valid number [type=float_type, input_value=None, input_type=NoneType]\n"
    )
    (finding,) = [f for f in diagnose_log(text) if f.check_id == "log.launcher-engine-mismatch"]
    assert "ModelConfig.mm_processor_cache_gb" in finding.message


def test_a_config_field_refused_names_the_class_and_the_field() -> None:
    text = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
        "block_size\n"
        "  Input should be less than or equal to 256 [type=less_than_equal, input_value=512, "
        "input_type=int]\n"
    )
    (finding,) = [f for f in diagnose_log(text) if f.check_id == "log.engine-config-invalid"]
    assert finding.severity is Severity.ERROR and "CacheConfig.block_size" in finding.message


@pytest.mark.parametrize(
    ("text", "argument"),
    [
        ("error: unknown argument: -hf\n", "-hf"),
        ("/models/llava.llamafile: --host unknown argument\n", "--host"),
        ("llama-server  | error: invalid argument: 0.0.0.0\n", "0.0.0.0"),
        ("api_server.py: error: unrecognized arguments: --swap_space 16\n", "--swap_space 16"),
    ],
)
def test_a_refused_argument_is_read_in_each_parsers_words(text: str, argument: str) -> None:
    (finding,) = [f for f in diagnose_log(text) if f.check_id == "log.unrecognized-arguments"]
    assert argument in finding.message


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: CUDA error: invalid argument\nCUDA kernel errors might be asynchronously reported\n",
        "OSError: [Errno 22] Invalid argument: '/models/x'\n",
    ],
)
def test_errors_that_only_say_invalid_argument_are_not_a_refused_command_line(text: str) -> None:
    assert "log.unrecognized-arguments" not in _ids(diagnose_log(text))


def test_a_sigkill_written_in_the_log_is_the_host_oom_killer_where_nothing_else_failed() -> None:
    text = (
        "[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        "[12-16 14:27:10] Exit code: -9\n"
    )
    assert _ids(diagnose_log(text, engine="sglang")) == {"log.host-oom-killed"}
    assert "log.host-oom-killed" not in _ids(diagnose_log("vllm exited with code 1\n"))


def test_an_nccl_result_code_in_its_words_is_an_nccl_error() -> None:
    text = (
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there was a "
        "network error\n"
    )
    assert "log.nccl-error" in _ids(diagnose_log(text, engine="vllm"))


def test_ray_raylet_refusing_a_small_dev_shm_is_the_host_fact_with_both_sizes() -> None:
    text = (
        "(raylet) store_runner.cc:83: System memory request exceeds memory available in /dev/shm. The "
        "request is for 10200547328 bytes, and the amount available is 9663676416 bytes.\n"
    )
    (finding,) = [f for f in diagnose_log(text) if f.check_id == "host.shared-memory-small"]
    assert "9.0 GiB" in finding.message and "--shm-size" in (finding.fix or "")


def test_an_exception_no_rule_knows_is_named_by_where_it_was_raised_as_a_warning() -> None:
    text = _traceback("vllm/model_executor/models/newmodel.py", "load_weights", "KeyError: 'lm_head.weight'")
    (finding,) = diagnose_log(text, engine="vllm")
    assert finding.check_id == "log.engine-exception" and finding.severity is Severity.WARNING
    assert "vllm/model_executor/models/newmodel.py:load_weights" in finding.message


def test_a_stalled_start_with_a_handled_traceback_is_still_a_stall() -> None:
    text = (
        _traceback("vllm/model_executor/models/newmodel.py", "load_weights", "KeyError: 'x'")
        + "\n(Worker pid=3) INFO 07-30 12:25:04 [parallel_state.py:1615] world_size=2 rank=0 backend=nccl\n"
    )
    findings = diagnose_log(text, engine="vllm", stalled_seconds=3600)
    assert findings[0].check_id == "log.stalled"


@pytest.mark.parametrize(
    "text",
    [
        "ImportError: cannot import name 'serve_engine' from 'vllm.entrypoints.api' (/venv/vllm/api.py)\n",
        "AttributeError: module 'sglang.srt.utils' has no attribute 'launch_engine'\n",
        "ModuleNotFoundError: No module named 'vllm.engine.async_llm_engine'\n",
    ],
)
def test_a_program_using_an_engine_api_its_release_lacks_is_a_launcher_mismatch(text: str) -> None:
    assert "log.launcher-engine-mismatch" in _ids(diagnose_log(text))


def test_a_keyword_the_engine_function_does_not_take_is_a_launcher_of_another_release() -> None:
    text = "TypeError: build_app() got an unexpected keyword argument 'enable_reasoning'\n"
    findings = diagnose_log(text, engine="vllm")
    (finding,) = [f for f in findings if f.check_id == "log.launcher-passed-unknown-argument"]
    assert "'enable_reasoning'" in finding.message


def test_the_engine_calling_itself_with_a_wrong_keyword_is_not_blamed_on_a_launcher() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 90, in __init__\n'
        "    build(x, fast=True)\n"
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/runner.py", line 12, in build\n'
        "    raise TypeError(...)\n"
        "TypeError: build() got an unexpected keyword argument 'fast'\n"
    )
    assert "log.launcher-passed-unknown-argument" not in _ids(diagnose_log(text, engine="vllm"))


@pytest.mark.parametrize(
    ("text", "check_id"),
    [
        ("huggingface_hub.errors.GatedRepoError: 401 Client Error (reworded)\n", "log.hub-gated"),
        ("huggingface_hub.errors.RepositoryNotFoundError: 404 for org/model\n", "log.model-not-found"),
        (
            "safetensors_rust.SafetensorError: Error while deserializing header: something new\n",
            "log.weights-corrupt",
        ),
        ("OSError: [Errno 28] No space left on device: '/root/.cache/x'\n", "log.disk-full"),
        (
            "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000)\n",
            "log.address-in-use",
        ),
    ],
)
def test_exception_classes_that_are_one_cause_are_read_whatever_their_message(
    text: str, check_id: str
) -> None:
    assert check_id in _ids(diagnose_log(text, engine="vllm"))


@pytest.mark.parametrize(
    ("path", "function", "exception", "check_id"),
    [
        (
            "vllm/config/model.py",
            "_get_and_verify_max_len",
            "ValueError: 262144 > 40960 (new words)",
            "log.context-beyond-model",
        ),
        (
            "vllm/config/model.py",
            "verify_with_parallel_config",
            "ValueError: 28 heads over 8 ranks",
            "log.tensor-parallel-heads",
        ),
        (
            "vllm/model_executor/models/registry.py",
            "_raise_for_unsupported",
            "ValueError: Foo is new",
            "log.unknown-architecture",
        ),
        (
            "transformers/models/auto/configuration_auto.py",
            "from_pretrained",
            "KeyError: 'qwen9'",
            "log.transformers-too-old",
        ),
    ],
)
def test_vllm_and_transformers_raise_sites_name_their_cause_in_any_words(
    path: str, function: str, exception: str, check_id: str
) -> None:
    assert check_id in _ids(diagnose_log(_traceback(path, function, exception), engine="vllm"))


def test_a_refused_config_field_is_not_added_where_a_wording_named_the_cause() -> None:
    text = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=128000 or model_max_length=None in model's config.json). "
        "[type=value_error]\n"
    )
    ids = _ids(diagnose_log(text, engine="vllm"))
    assert "log.context-beyond-model" in ids and "log.engine-config-invalid" not in ids
