"""Log signatures of collectives, arguments, KV-cache dtypes, the chat template and V0's KV budget:
each on the engine's own words, and quiet on a near miss."""

from __future__ import annotations

import pytest

from modelyard.doctor.findings import Severity
from modelyard.doctor.log_signatures import diagnose_log

WORKED = [
    (
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
        "no error",
        "log.gloo-connect-failed",
        "GLOO_SOCKET_IFNAME",
    ),
    (
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/'
        'custom_all_reduce.py", line 307, in register_graph_buffers',
        "log.custom-all-reduce-failed",
        "--disable-custom-all-reduce",
    ),
    ("error: invalid argument: --ctx-size=16384", "log.unrecognized-arguments", "two arguments"),
    (
        'vllm serve: error: argument --speculative-config: Value \\{\\"method\\":\\"mtp\\"\\} cannot be '
        "converted to <function loads at 0x7f00>.",
        "log.launcher-mangled-json",
        "plain JSON",
    ),
    (
        "launch_server.py: error: argument --json-model-override-args: invalid loads value: "
        "\"{'rope_scaling': {'rope_type': 'yarn'}}\"",
        "log.launcher-mangled-json",
        "plain JSON",
    ),
    (
        "  Value error, rope_scaling should have a 'rope_type' key [type=value_error, input_value=ArgsKwargs",
        "log.launcher-mangled-json",
        "--hf-overrides",
    ),
    (
        'ValueError("type fp8e4nv not supported in this architecture. The supported fp8 dtypes are '
        "('fp8e4b15', 'fp8e5')\")",
        "log.kv-cache-dtype-unsupported-by-gpu",
        "fp8_e5m2",
    ),
    (
        "RuntimeError: Worker failed with error 'MLA kv_data_type torch.uint8 is not supported. Supported "
        "dtypes: [torch.float16, torch.bfloat16, torch.float8_e4m3fn].'",
        "log.kv-cache-dtype-unsupported-by-gpu",
        "--kv-cache-dtype auto",
    ),
    (
        "400 As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
        "chat template if the tokenizer does not define one. None",
        "log.chat-template-missing",
        "--chat-template",
    ),
    (
        "INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; "
        "PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is "
        "-1.05GiB.",
        "log.kv-cache-no-memory",
        "--gpu-memory-utilization",
    ),
]

NEAR_MISSES = [
    # Gloo connected; the custom all-reduce named in a healthy line; a flag with a valid value.
    "INFO [parallel_state.py] world_size=16 rank=3 backend=gloo connected",
    "INFO 08-27 [custom_all_reduce.py:41] Custom allreduce is disabled because it's not supported",
    "vllm serve: error: argument --max-model-len: invalid int value: 'abc'",
    "RuntimeError: CUDA error: invalid argument: CUDA kernel errors might be asynchronously reported",
    "INFO Using KV cache dtype fp8_e5m2 with the Triton backend",
    "INFO Using supplied chat template: /templates/qwen.jinja",
    "INFO 02-26 executor_base.py:111] # cuda blocks: 4681, # CPU blocks: 4681",
]


@pytest.mark.parametrize(("line", "check_id", "in_fix"), WORKED, ids=[item[1] for item in WORKED])
def test_the_engines_own_words_give_the_cause_and_its_fix(line: str, check_id: str, in_fix: str) -> None:
    findings = diagnose_log(line, engine="vllm", engine_args=["--gpu-memory-utilization", "0.7"])
    assert findings and findings[0].check_id == check_id
    assert findings[0].severity is Severity.ERROR
    assert in_fix in findings[0].fix


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_misses_stay_quiet(line: str) -> None:
    ids = {finding.check_id for finding in diagnose_log(line, engine="vllm")}
    assert not ids & {item[1] for item in WORKED}


def test_llama_box_goes_on_with_its_defaults_so_its_unknown_argument_is_a_warning() -> None:
    (finding,) = diagnose_log("Unknown argument: --main-gpu 1\nUnknown argument: --ctx-size 131072\n")
    assert (finding.check_id, finding.severity) == ("log.unrecognized-arguments", Severity.WARNING)
    assert "one argument" in finding.message
    assert finding.details["occurrences"] == 2


def test_the_v0_refusal_itself_is_not_reported_twice() -> None:
    log = (
        "INFO executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681\n"
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`\n"
    )
    assert [finding.check_id for finding in diagnose_log(log)] == ["log.kv-cache-no-memory"]
