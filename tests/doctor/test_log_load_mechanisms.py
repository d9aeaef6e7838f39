"""Log signatures of what a start loads and binds: a tokenizer class the engine's transformers does
not have, torch's EADDRINUSE, compressed-tensors' capability refusal, and Triton's fp8e4nv refusal
read as the KV cache's or the checkpoint's by what the arguments and the log say."""

from __future__ import annotations

from modelyard.doctor.findings import Severity
from modelyard.doctor.log_signatures import diagnose_log

TRITON_E4M3 = (
    'ValueError("type fp8e4nv not supported in this architecture. The supported fp8 dtypes are '
    "('fp8e4b15', 'fp8e5')\")"
)


def _ids(text: str, engine: str = "vllm", arguments: tuple[str, ...] = ()) -> list[str]:
    return [finding.check_id for finding in diagnose_log(text, engine=engine, engine_args=list(arguments))]


def test_a_tokenizer_class_from_a_newer_transformers() -> None:
    (finding,) = diagnose_log(
        '  File "/usr/local/lib/python3.12/dist-packages/transformers/models/auto/tokenization_auto.py", '
        "line 1153, in from_pretrained\n"
        "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported.",
        engine="sglang",
    )
    assert (finding.check_id, finding.severity) == ("log.transformers-too-old", Severity.ERROR)
    assert "transformers 5" in finding.message and "tokenizer_class" in finding.fix
    (other,) = diagnose_log(
        "ValueError: Tokenizer class MyCustomTokenizer does not exist or is not currently imported."
    )
    assert "--trust-remote-code" in other.fix and "transformers 5" not in other.message


def test_torch_distributed_eaddrinuse_names_the_port() -> None:
    (finding,) = diagnose_log(
        "[W1204 10:01:02.123456 socket.cpp:464] [c10d] The server socket has failed to listen on any "
        "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address "
        "already in use"
    )
    assert finding.check_id == "log.address-in-use" and "port 29500" in finding.message
    assert "MASTER_PORT" in finding.message
    assert _ids("INFO worker.py: bound the rendezvous socket on port 29500") == []


def test_compressed_tensors_refusal_in_its_tuple_form() -> None:
    (finding,) = diagnose_log(
        "RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min capability: "
        "75. ', 'Current capability: 70.')"
    )
    assert finding.check_id == "log.quantization-unsupported-by-gpu"
    assert "7.5 or newer" in finding.message and "7.0" in finding.message


def test_triton_e4m3_refusal_is_the_kv_cache_where_one_was_asked() -> None:
    assert _ids(TRITON_E4M3, arguments=("--kv-cache-dtype", "fp8_e4m3")) == [
        "log.kv-cache-dtype-unsupported-by-gpu"
    ]
    assert _ids("INFO ... kv_cache_dtype=fp8, ...\n" + TRITON_E4M3) == [
        "log.kv-cache-dtype-unsupported-by-gpu"
    ]


def test_triton_e4m3_refusal_is_the_checkpoint_where_its_weights_are_fp8() -> None:
    log = "[2025-07-02 10:00:00 TP0] Load weight begin. avail mem=23.1 GB\n[TP0] Detected fp8 checkpoint.\n"
    (finding,) = diagnose_log(log + TRITON_E4M3, engine="sglang")
    assert finding.check_id == "log.quantization-unsupported-by-gpu"
    assert "SGLANG_FORCE_FP8_MARLIN=1" in finding.fix
    # With neither shown, both readings are given.
    assert _ids(TRITON_E4M3, engine="sglang") == [
        "log.kv-cache-dtype-unsupported-by-gpu",
        "log.quantization-unsupported-by-gpu",
    ]


def test_engine_args_keyword_refusal_in_python_3_9_words() -> None:
    (finding,) = diagnose_log(
        '  File "/opt/conda/lib/python3.9/site-packages/vllm/entrypoints/llm.py", line 177, in __init__\n'
        "    engine_args = EngineArgs(\n"
        "TypeError: __init__() got an unexpected keyword argument 'enable_reasoning'\n"
    )
    assert finding.check_id == "log.launcher-passed-unknown-argument"
    assert "'enable_reasoning'" in finding.message
    # The same words under any other constructor are not the engine's arguments.
    other = "    client = Client(\nTypeError: __init__() got an unexpected keyword argument 'timeout'"
    assert _ids(other) == []


def test_a_lora_path_without_an_adapter() -> None:
    (finding,) = diagnose_log(
        "ValueError: Loading lora sql-adapter failed: No adapter found for /adapters/sql/global_step_200"
    )
    assert finding.check_id == "log.lora-adapter-not-found"
    assert "/adapters/sql/global_step_200" in finding.message and "adapter_config.json" in finding.fix


def test_shortened_and_title_wordings_of_known_refusals() -> None:
    assert _ids("ValueError: No valid attention backend found for cuda. Reasons: {...}") == [
        "log.attention-unsupported-by-gpu"
    ]
    (quant,) = diagnose_log("The quantization method fp8 is not supported for the current GPU SM70")
    assert quant.check_id == "log.quantization-unsupported-by-gpu" and "7.0" in quant.message


def test_a_launchers_missing_engine_helper() -> None:
    line = "RuntimeError: SGLang server initialization failed: name 'launch_server_cmd' is not defined."
    assert _ids(line, engine="sglang") == ["log.launcher-engine-mismatch"]
    # A NameError with no launcher in the log is the user's own code, not a release mismatch.
    assert _ids("NameError: name 'prompt' is not defined", engine="sglang") == []
