"""Log mechanisms written from the corpus's 2025-2026 fit reports: a JSON override a launcher split at
its commas, SGLang's weights leaving no room for the KV cache, a launcher whose release does not fit
the engine's, and a checkpoint saved as a bare model class. Each on the engine's own words, and quiet
on the near miss a healthy start prints."""

from __future__ import annotations

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.log_signatures import diagnose_log


def _only(findings: list[Finding], check_id: str) -> Finding:
    matching = [finding for finding in findings if finding.check_id == check_id]
    assert matching, [finding.check_id for finding in findings]
    return matching[0]


def test_a_json_override_split_at_its_commas_names_the_setting_and_the_launcher() -> None:
    log = (
        "INFO 06-04 02:30:35 [config.py:456] Overriding HF config with "
        "{'rope_scaling': ['{\"rope_type\":\"yarn\"', '\"factor\":4.0', "
        "'\"original_max_position_embeddings\":32768}']}\n"
        "ERROR    Creating vllm engine failed\n"
    )
    finding = _only(diagnose_log(log, engine="vllm"), "log.launcher-mangled-json")
    assert finding.severity is Severity.ERROR
    assert "'rope_scaling'" in finding.message and "split at its commas" in finding.message
    assert "--hf-overrides" in finding.fix


def test_a_json_override_left_as_a_string_is_mangled_too() -> None:
    log = (
        "INFO [config.py:520] Overriding HF config with "
        '{\'rope_scaling\': \'{"rope_type": "yarn", "factor": 4.0}\'}\n'
    )
    finding = _only(diagnose_log(log, engine="vllm"), "log.launcher-mangled-json")
    assert "left as a string" in finding.message


def test_a_parsed_json_override_is_no_finding() -> None:
    log = (
        "INFO [config.py:456] Overriding HF config with {'rope_scaling': {'rope_type': 'yarn', "
        "'factor': 4.0, 'original_max_position_embeddings': 32768}}\n"
    )
    assert diagnose_log(log, engine="vllm") == []


def test_sglang_weights_that_leave_no_kv_cache_name_the_minimum_fraction() -> None:
    log = (
        "[2026-07-09 10:00:00 TP0] Load weight end. quant=fp8, fmt=e4m3, avail mem=12.25 GB, "
        "mem usage=125.65 GB.\n"
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. "
        "Raise --mem-fraction-static above 0.912 (minimum viable = 1 - available/pre = 0.9113).\n"
    )
    finding = _only(
        diagnose_log(log, engine="sglang", engine_args=["--mem-fraction-static", "0.88"]),
        "log.sglang-not-enough-memory",
    )
    assert finding.severity is Severity.ERROR
    assert "--mem-fraction-static=0.88" in finding.message
    assert "above 0.912" in finding.fix and "0.94" in finding.fix


def test_a_minimum_fraction_near_one_says_to_spread_the_weights_instead() -> None:
    log = (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.95. "
        "Raise --mem-fraction-static above 0.973 (minimum viable = 1 - available/pre = 0.9722).\n"
    )
    finding = _only(diagnose_log(log, engine="sglang"), "log.sglang-not-enough-memory")
    assert "--tp-size" in finding.fix and "raise --mem-fraction-static above" not in finding.fix


def test_ray_serve_llm_on_a_vllm_it_was_not_made_for_is_a_release_mismatch() -> None:
    log = (
        "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
        "ray::_EngineBackgroundProcess.__init__() (pid=5555, ip=10.0.156.65)\n"
        "AttributeError: 'torch.dtype' object has no attribute 'startswith'\n"
    )
    finding = _only(diagnose_log(log), "log.launcher-engine-mismatch")
    assert finding.severity is Severity.ERROR
    assert "Ray Serve LLM" in finding.message and "'startswith'" in finding.message
    assert "VLLM_USE_V1=1" in finding.fix and "pip show" in finding.fix


def test_an_attribute_error_without_a_launcher_is_not_called_a_release_mismatch() -> None:
    log = "AttributeError: 'NoneType' object has no attribute 'shape'\n"
    assert all(finding.check_id != "log.launcher-engine-mismatch" for finding in diagnose_log(log))


def test_the_engine_args_keyword_refusal_stays_the_launcher_argument_finding() -> None:
    log = (
        '  File "/usr/lib/python3/site-packages/xinference/model/llm/vllm/core.py", line 476, in _load\n'
        "TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'enable_auto_tool_choice'\n"
    )
    ids = [finding.check_id for finding in diagnose_log(log, engine="vllm")]
    assert "log.launcher-passed-unknown-argument" in ids
    assert "log.launcher-engine-mismatch" not in ids


def test_a_bare_model_class_with_no_vllm_implementation_says_to_fix_architectures() -> None:
    log = (
        "engine.py           :116  2025-03-24 18:13:28,839 Error initializing vLLM engine: "
        "Qwen2_5_VLModel has no vLLM implementation and the Transformers implementation is not "
        "compatible with vLLM.\n"
    )
    finding = _only(diagnose_log(log), "log.unknown-architecture")
    assert finding.severity is Severity.ERROR
    assert "Qwen2_5_VLModel" in finding.message
    assert "`architectures` in config.json" in finding.fix and "ForConditionalGeneration" in finding.fix
