"""Log signatures of the engines' own refusals, widened in the 2026-12 round: each fires on the
engine's message template with numbers and names no corpus report has, and stays quiet on the near
miss (a line that looks alike but means something else)."""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.log_signatures import diagnose_log


def _ids(log: str) -> list[str]:
    return [finding.check_id for finding in diagnose_log(log)]


def _only(findings: list[Finding], check_id: str) -> Finding:
    matching = [finding for finding in findings if finding.check_id == check_id]
    assert matching, [finding.check_id for finding in findings]
    return matching[0]


def test_a_model_without_pipeline_parallelism_names_the_flag_and_the_way_out() -> None:
    log = (
        "(APIServer pid=7) ERROR [core.py:1] NotImplementedError: Pipeline parallelism is not supported for "
        "this model. Supported models implement the `SupportsPP` interface.\n"
    )
    finding = _only(
        diagnose_log(log, engine="vllm", engine_args=["--pipeline-parallel-size", "3"]),
        "log.pipeline-parallel-unsupported",
    )
    assert finding.severity is Severity.ERROR
    assert "--pipeline-parallel-size 3" in finding.message
    assert "--pipeline-parallel-size 1" in finding.fix


def test_the_older_pipeline_parallel_wording_is_the_same_refusal() -> None:
    log = (
        "NotImplementedError: Pipeline parallelism is only supported for the following  architectures: "
        "['LlamaForCausalLM', 'Qwen2ForCausalLM'].\n"
    )
    assert _ids(log) == ["log.pipeline-parallel-unsupported"]


def test_a_lora_rank_above_the_maximum_names_the_smallest_allowed_value_that_fits() -> None:
    log = "ValueError: LoRA rank 100 is greater than max_lora_rank 64.\n"
    finding = _only(diagnose_log(log, engine="vllm"), "log.lora-rank-exceeds-max")
    assert "rank 100" in finding.message and "--max-lora-rank 64" in finding.message
    assert "--max-lora-rank 128" in finding.fix  # the next value vLLM accepts


def test_the_ray_executor_without_a_gpu_on_its_node_replaces_the_generic_no_gpu_finding() -> None:
    log = (
        "RuntimeError: No CUDA GPUs are available\n"
        "ValueError: Current node has no GPU available. current_node_resource={'CPU': 8.0}. vLLM engine "
        "cannot start without GPU.\n"
    )
    assert _ids(log) == ["log.ray-driver-without-gpu"]


def test_two_options_the_engine_refuses_together_are_both_named() -> None:
    log = "TypeError: Error: --enable-foo and --enable-bar cannot be enabled at the same time\n"
    finding = _only(diagnose_log(log, engine="vllm"), "log.flags-conflict")
    assert "--enable-foo" in finding.message and "--enable-bar" in finding.message
    argparse_log = "vllm serve: error: argument --quiet: not allowed with argument --verbose\n"
    assert "log.flags-conflict" in _ids(argparse_log)


def test_batched_tokens_below_the_context_without_chunked_prefill_name_both_numbers() -> None:
    log = (
        "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (4096). This effectively "
        "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
        "sequences.\n"
    )
    finding = _only(diagnose_log(log, engine="vllm"), "log.batched-tokens-below-max-model-len")
    assert "2048" in finding.message and "4096" in finding.message
    assert "--enable-chunked-prefill" in finding.fix
    sequences = (
        "ValueError: max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256).\n"
    )
    assert (
        "--max-num-seqs 256"
        in _only(diagnose_log(sequences), "log.batched-tokens-below-max-model-len").message
    )


def test_think_tokens_the_tokenizer_splits_point_at_the_reasoning_parser() -> None:
    log = (
        "ValueError: think_start_token '<seed:think>' must encode to exactly one token for "
        "constrained reasoning.\n"
    )
    finding = _only(
        diagnose_log(log, engine="sglang", engine_args=["--reasoning-parser", "qwen3"]),
        "log.reasoning-parser-token",
    )
    assert "'<seed:think>'" in finding.message and "--reasoning-parser qwen3" in finding.message


def test_attention_sinks_and_a_backend_search_that_found_none_are_attention_findings() -> None:
    sinks = (
        "(EngineCore_0 pid=1) ERROR [core.py:718] AssertionError: Sinks are only supported in "
        "FlashAttention 3\n"
    )
    assert "TRITON_ATTN" in _only(diagnose_log(sinks), "log.attention-unsupported-by-gpu").fix
    none = (
        "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576, "
        "dtype=torch.bfloat16, use_mla=True). Reasons: {FLASHMLA: [compute capability not supported]}.\n"
    )
    assert _ids(none) == ["log.attention-unsupported-by-gpu"]


def test_the_transformers_fallback_failing_points_at_native_support() -> None:
    log = "AttributeError: 'TransformersMoEForCausalLM' object has no attribute 'packed_modules_mapping'\n"
    finding = _only(diagnose_log(log, engine="vllm"), "log.transformers-fallback")
    assert "TransformersMoEForCausalLM" in finding.message


def test_a_dimension_that_does_not_split_over_the_ranks_is_a_tensor_parallel_finding() -> None:
    log = (
        "(VllmWorker TP1 pid=9) ERROR WorkerProc failed to start.\nAssertionError: 20 is not divisible by 6\n"
    )
    finding = _only(diagnose_log(log, engine="vllm"), "log.tensor-parallel-heads")
    assert "20" in finding.message and "6 tensor-parallel ranks" in finding.message
    assert _ids("AssertionError: 7 is not divisible by 1\n") == []


def test_transformers_too_old_for_a_gguf_architecture_or_a_model_type() -> None:
    gguf = "ValueError: GGUF model with architecture gemma3n is not supported yet.\n"
    assert "GGUF" in _only(diagnose_log(gguf), "log.transformers-too-old").message
    key_error = (
        '  File "/usr/lib/python3/site-packages/transformers/models/auto/configuration_auto.py", line 1020, '
        "in __getitem__\n    raise KeyError(key)\nKeyError: 'glm4_moe'\n"
    )
    assert "'glm4_moe'" in _only(diagnose_log(key_error), "log.transformers-too-old").message
    assert _ids("KeyError: 'glm4_moe'\n") == []  # a KeyError elsewhere is not this


def test_an_engine_config_class_transformers_already_ships_means_transformers_is_too_new() -> None:
    log = (
        "ValueError: '<class 'vllm.transformers_utils.configs.ovis.OvisConfig'>' is already used by a "
        "Transformers model.\n"
    )
    finding = _only(diagnose_log(log), "log.transformers-version-mismatch")
    assert "newer" in finding.message


def test_no_platform_detected_and_no_device_type_mean_no_gpu_in_the_container() -> None:
    detected = (
        "INFO 05-14 04:44:35 [__init__.py:243] No platform detected, vLLM is running on UnspecifiedPlatform\n"
    )
    assert _ids(detected) == ["log.no-cuda-gpus"]
    assert _ids("RuntimeError: Failed to infer device type\n") == ["log.no-cuda-gpus"]


def test_nccl_failing_to_attach_its_segment_is_the_shared_memory_finding() -> None:
    log = (
        "NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl-AbC123 (size 9637888), "
        "error: No such file or directory (2)\nncclSystemError: System call failed\n"
    )
    assert _ids(log) == ["log.nccl-shared-memory"]


def test_a_launcher_that_refuses_the_engine_version_is_a_release_mismatch() -> None:
    log = "ValueError: sglang version 0.5.2 is not supported. Supported: 0.4.6.post5\n"
    finding = _only(diagnose_log(log), "log.launcher-engine-mismatch")
    assert "SGLang 0.5.2" in finding.message


def test_a_kernel_library_built_for_another_torch_names_the_library() -> None:
    log = (
        "ImportError: /usr/lib/python3.12/site-packages/vllm/_C.abi3.so: undefined symbol: "
        "_ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE\n"
    )
    finding = _only(diagnose_log(log), "log.extension-built-for-another-torch")
    assert "_C.abi3.so" in finding.message
    # A missing symbol of another library (not torch's) is not this finding.
    assert _ids("ImportError: libfoo.so.1: undefined symbol: png_create_read_struct\n") == []
