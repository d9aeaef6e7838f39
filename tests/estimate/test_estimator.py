"""The estimator's parts, each on a behaviour a user sees in ``modelyard estimate``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from modelyard.backends.parameters import parse_arguments
from modelyard.doctor.memory import memory_findings
from modelyard.errors import InvalidInput
from modelyard.estimate import (
    GpuSpec,
    estimate_memory,
    parse_engine_arguments,
    parse_gpu_specs,
)
from modelyard.modeldir import read_model_facts, write_safetensors_header_only

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
GIB = 1 << 30
LLAMA = CONFIGS / "llama-3.1-8b-instruct.json"


def _config(tmp_path: Path, **changes: Any) -> Path:
    config = json.loads(LLAMA.read_text())
    config.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def _estimate(path: Path, engine: str = "vllm", gpus: str = "1x80GB", arguments: str = "") -> Any:
    return estimate_memory(
        read_model_facts(path), engine, parse_gpu_specs(gpus), [arguments] if arguments else []
    )


def test_gpu_specs_read_counts_sizes_and_names() -> None:
    assert [gpu.memory_total_bytes for gpu in parse_gpu_specs("2x48GB")] == [48 * GIB, 48 * GIB]
    assert len(parse_gpu_specs("4xH100")) == 4
    assert parse_gpu_specs("H200")[0].memory_total_bytes > 139 * GIB
    with pytest.raises(InvalidInput, match="unknown GPU"):
        parse_gpu_specs("2xWHATEVER")


def test_engine_arguments_read_both_spellings_and_aliases() -> None:
    assert (
        parse_engine_arguments("vllm", ["--tensor-parallel-size=2 --max-model-len 8192"]).tensor_parallel == 2
    )
    assert parse_engine_arguments("vllm", ["-tp", "4"]).tensor_parallel == 4
    sglang = parse_engine_arguments("sglang", ["--tp 2 --mem-fraction-static 0.8 --context-length 4096"])
    assert (sglang.tensor_parallel, sglang.memory_fraction, sglang.context_tokens) == (2, 0.8, 4096)
    with pytest.raises(InvalidInput, match="between 0 and 1"):
        parse_engine_arguments("vllm", ["--gpu-memory-utilization 1.5"])


def test_json_values_survive_a_stored_argv_and_a_quoted_line() -> None:
    stored = parse_engine_arguments(
        "vllm", parse_arguments(["--limit-mm-per-prompt", '{"image": 0, "video": 0}'])
    )
    line = parse_engine_arguments("vllm", ['--limit-mm-per-prompt \'{"image": 0, "video": 0}\' -tp 2'])
    assert stored.language_only and line.language_only and line.tensor_parallel == 2
    mtp = parse_engine_arguments(
        "vllm", ["""--speculative-config='{"method": "mtp", "num_speculative_tokens": 2}'"""]
    )
    assert mtp.speculative_mtp


def test_engine_arguments_read_vllm_spellings_human_numbers_and_no_switches() -> None:
    arguments = parse_engine_arguments(
        "vllm", ["--max_model_len 32k --tensor-parallel 2 --no-enable-prefix-caching --enforce-eager"]
    )
    assert arguments.context_tokens == 32000 and arguments.tensor_parallel == 2
    assert not arguments.prefix_caching and arguments.enforce_eager
    assert parse_engine_arguments("vllm", ["--max-model-len 32K"]).context_tokens == 32768
    with pytest.raises(InvalidInput, match="--max-model-len needs a whole number, got 'lots'"):
        parse_engine_arguments("vllm", ["--max-model-len lots"])


def test_llama_kv_per_token_is_128_kib_and_halves_with_fp8_or_tp2() -> None:
    assert _estimate(LLAMA).cache.kv_bytes_per_token == 128 * 1024
    assert _estimate(LLAMA, arguments="--kv-cache-dtype fp8").cache.kv_bytes_per_token == 64 * 1024
    assert _estimate(LLAMA, gpus="2x80GB", arguments="-tp 2").cache.kv_bytes_per_token == 64 * 1024


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    # 8 KV heads over 16 GPUs: each GPU still holds one head.
    estimate = _estimate(LLAMA, gpus="16x80GB", arguments="-tp 16")
    assert estimate.cache.kv_bytes_per_token == 32 * 1 * 256 * 2


def test_auto_kv_dtype_follows_checkpoint_quantisation_and_never_fp32(tmp_path: Path) -> None:
    scheme = {"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    assert _estimate(_config(tmp_path, quantization_config=scheme)).cache.kv_dtype == "fp8"
    assert _estimate(_config(tmp_path, torch_dtype="float32")).cache.kv_dtype == "bfloat16"


def test_mla_caches_one_latent_not_split_by_tensor_parallel(tmp_path: Path) -> None:
    path = _config(tmp_path, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    one = _estimate(path).cache.kv_bytes_per_token
    four = _estimate(path, gpus="4x80GB", arguments="-tp 4").cache.kv_bytes_per_token
    assert one == four == 32 * 576 * 2


def test_hybrid_model_counts_only_full_attention_layers_plus_fp32_state() -> None:
    estimate = _estimate(
        CONFIGS / "qwen3.6-35b-a3b-nvfp4.json", gpus="1x32GB", arguments="--max-model-len 65536"
    )
    cache = estimate.cache
    assert cache.kv_bytes_per_token == 10 * 2 * 512 * 2  # 10 of 40 layers, 2 KV heads, K+V of 256, bf16
    assert cache.state_dtype == "float32"
    assert cache.state_bytes_per_sequence == 30 * (3 * 8192 * 2 + 32 * 128 * 128 * 4)


def test_sliding_window_layers_hold_the_window_and_one_chunk_in_vllm(tmp_path: Path) -> None:
    """vLLM 0.25 admits a sequence's sliding layers for min(window - 1 + max_num_batched_tokens,
    max_model_len) tokens (``SlidingWindowSpec.max_admission_blocks_per_request``): on an 80 GB
    card the API server's default batch is 8192 tokens, so 1023 + 8192 = 9215 tokens here."""
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    path = _config(tmp_path, num_hidden_layers=6, layer_types=kinds, sliding_window=1024)
    cache = _estimate(path).cache
    assert cache.sliding_bytes_per_token == 5 * 128 * 1024 // 32
    assert cache.sliding_admission_tokens == 1023 + 8192
    assert (
        cache.sequence_bytes(100_000)
        == 100_000 * cache.kv_bytes_per_token + 9215 * cache.sliding_bytes_per_token
    )
    chunked = _estimate(path, arguments="--max-num-batched-tokens 2048").cache
    assert chunked.sliding_admission_tokens == 1023 + 2048


def test_vllm_logs_a_sliding_window_models_tokens_as_concurrency_times_context(tmp_path: Path) -> None:
    """Gemma-3-1B on the H200 of the memory sweep (tests/estimate/sweep/cases): 4 full and 22
    sliding layers in groups of 4 (1 full group, 6 sliding), 2,046,067 blocks; a sequence of 8192
    needs 512 full blocks + 6 x 513 sliding blocks, so vLLM logs 2,046,067 / 3590 x 8192 =
    4,668,908 tokens, the figure the sweep's log shows."""
    from modelyard.estimate.kv_tokens import kv_tokens_from_bytes

    config = {"num_hidden_layers": 26, "sliding_window": 512, "sliding_window_pattern": 6}
    path = _config(tmp_path, num_key_value_heads=1, head_dim=256, **config)
    cache = _estimate(path, gpus="1xH200", arguments="--max-model-len 8192").cache
    assert (cache.attention_layer_count, cache.sliding_layer_count) == (4, 22)
    blocks = 2_046_067
    tokens, _ = kv_tokens_from_bytes(cache, blocks * 16 * 1024 * 4, 8192, "vllm")
    assert tokens == 4_668_908


def test_weights_from_config_match_llama_8b_size() -> None:
    assert abs(_estimate(LLAMA).weights_bytes / GIB - 14.96) < 0.05


def test_weights_from_headers_are_exact_and_split_by_pipeline(tmp_path: Path) -> None:
    config = json.loads(LLAMA.read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        f"model.layers.{index}.mlp.up_proj.weight": ("BF16", (1024, 1024)) for index in range(32)
    }
    tensors["model.embed_tokens.weight"] = ("BF16", (128256, 4096))
    tensors["lm_head.weight"] = ("BF16", (128256, 4096))
    write_safetensors_header_only(tmp_path / "model.safetensors", tensors)
    single = _estimate(tmp_path)
    assert single.weights_source == "headers"
    assert single.weights_bytes == 32 * 2 * 1024 * 1024 + 2 * 128256 * 4096 * 2
    staged = _estimate(tmp_path, gpus="2x80GB", arguments="--pipeline-parallel-size 2")
    assert staged.weights_bytes == 16 * 2 * 1024 * 1024 + 128256 * 4096 * 2


def test_vllm_budget_is_total_times_utilisation_sglang_is_free_times_fraction() -> None:
    vllm = _estimate(LLAMA, gpus="1x80GB", arguments="--gpu-memory-utilization 0.8")
    assert vllm.plan_on_total.budget_bytes == pytest.approx(0.8 * 80 * GIB, rel=1e-6)
    sglang = _estimate(LLAMA, engine="sglang", gpus="1x80GB", arguments="--mem-fraction-static 0.8")
    assert sglang.plan_on_total.budget_bytes < 0.8 * 80 * GIB
    assert sglang.plan_on_total.kv_cache_bytes == sglang.plan_on_total.budget_bytes - sglang.weights_bytes


def test_a_busy_gpu_refuses_vllm_with_the_free_memory_named() -> None:
    gpu = GpuSpec(name="H100", memory_total_bytes=80 * GIB, memory_free_bytes=40 * GIB)
    estimate = estimate_memory(read_model_facts(LLAMA), "vllm", [gpu], ["--max-model-len 8192"])
    assert (
        estimate.plan_on_total.fits and estimate.plan_on_free is not None and not estimate.plan_on_free.fits
    )
    ids = {finding.check_id: finding for finding in memory_findings(estimate)}
    assert ids["memory.free-memory-too-low"].severity == "error"
    assert "40.0 GiB is free" in ids["memory.free-memory-too-low"].message
    # The fix names the most it may ask for on this busy GPU (largest KV cache), with 1 GiB spare.
    assert estimate.recommended_memory_fraction == 0.48
    assert "--gpu-memory-utilization 0.48" in ids["memory.free-memory-too-low"].fix
    again = estimate_memory(
        read_model_facts(LLAMA), "vllm", [gpu], ["--max-model-len 8192 --gpu-memory-utilization 0.48"]
    )
    assert again.plan_on_free is not None and again.plan_on_free.fits


def test_context_that_does_not_fit_names_the_knob_value_that_does() -> None:
    estimate = _estimate(LLAMA, gpus="1x24GB", arguments="--max-model-len 65536 --gpu-memory-utilization 0.8")
    findings = {finding.check_id: finding for finding in memory_findings(estimate)}
    problem = findings["memory.kv-cache-does-not-fit"]
    assert problem.severity == "error"
    assert "--max-model-len" in problem.fix
    recommended = estimate.recommended_memory_fraction
    if recommended is not None:
        assert "--gpu-memory-utilization" in problem.fix
        again = _estimate(
            LLAMA, gpus="1x24GB", arguments=f"--max-model-len 65536 --gpu-memory-utilization {recommended}"
        )
        assert again.plan_on_total.fits
    longest = estimate.max_context_tokens_at_safe_fraction
    shorter = _estimate(
        LLAMA, gpus="1x24GB", arguments=f"--max-model-len {longest} --gpu-memory-utilization 0.95"
    )
    assert shorter.plan_on_total.fits


def test_weights_larger_than_the_gpu_are_an_error() -> None:
    findings = memory_findings(_estimate(CONFIGS / "qwen3-32b.json", gpus="1x24GB"))
    assert findings[0].check_id == "memory.weights-do-not-fit"


def test_a_fraction_above_095_warns_about_headroom() -> None:
    findings = memory_findings(
        _estimate(LLAMA, arguments="--max-model-len 8192 --gpu-memory-utilization 0.98")
    )
    assert "memory.fraction-leaves-no-headroom" in {finding.check_id for finding in findings}


def test_a_fitting_deployment_gets_only_a_summary() -> None:
    findings = memory_findings(_estimate(LLAMA, arguments="--max-model-len 8192"))
    assert [(finding.check_id, str(finding.severity)) for finding in findings] == [("memory.summary", "info")]


def test_more_gpus_than_given_is_refused() -> None:
    with pytest.raises(InvalidInput, match="4 GPUs, but 2 given"):
        _estimate(LLAMA, gpus="2x80GB", arguments="-tp 4")


def test_cli_prints_json_and_exits_1_when_the_context_does_not_fit() -> None:
    command = [
        sys.executable,
        "-m",
        "modelyard.cli.main",
        "estimate",
        str(LLAMA),
        "--gpus",
        "1x24GB",
        "--json",
    ]
    fits = subprocess.run(
        [*command, "--args", "--max-model-len 4096"], capture_output=True, text=True, timeout=60
    )
    assert fits.returncode == 0, fits.stderr
    assert json.loads(fits.stdout)["plan_on_total"]["fits"] is True
    too_long = subprocess.run(
        [*command, "--args", "--max-model-len 131072"], capture_output=True, text=True, timeout=60
    )
    assert too_long.returncode == 1
    report = json.loads(too_long.stdout)
    assert report["findings"][0]["check_id"] == "memory.kv-cache-does-not-fit"


def test_cli_without_gpus_on_a_host_without_nvidia_driver_asks_for_gpus() -> None:
    from modelyard.hardware.gpus import read_gpu_inventory

    if read_gpu_inventory().available:
        pytest.skip("this host has GPUs; the estimate would use them")
    command = [sys.executable, "-m", "modelyard.cli.main", "estimate", str(LLAMA)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "no GPU on this host" in result.stderr and "--gpus" in result.stderr
