"""``modelyard tune --env``: the environment every candidate's engine gets (``KEY=VALUE``) or one
backend's (``BACKEND:KEY=VALUE``), checked like a deployment's env before anything starts, given
to the engine, and carried into the report's deploy command; a secret value (``HF_TOKEN``) is
never written by the tune: not in tune.json, the journal, the report, its ids, nor the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.errors import InvalidInput
from modelyard.secret_names import MASK
from modelyard.tune.environment import parse_env_options, restore_secrets
from modelyard.tune.report import deploy_body, deploy_command
from modelyard.tune.space import Candidate, EngineChoice, SearchSpace, generate_candidates

from .conftest import BACKEND, GPUS_TEXT, MODEL_NAME, TunePlatform
from .curve_engine import EXTRA_TTFT_VARIABLE
from .test_cli_tune import WORKLOAD_YAML, run

VLLM = EngineChoice("vllm", "vllm", "0.25.0")
SGLANG = EngineChoice("sglang", "sglang", "0.5.17")
SECRET = "hf_tune_secret_value_0123456789"


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("VLLM_LOGGING_LEVEL", "--env 'VLLM_LOGGING_LEVEL' has no '='"),
        ("2FAST=1", "'2FAST' is not a valid environment variable name"),
        ("MY-VAR=1", "'MY-VAR' is not a valid environment variable name"),
        ("A = 1", "has spaces around its name or '='"),
        ("A= 1", "has spaces around its name or '='"),
        (":A=1", "names no backend before ':'"),
        ("trtllm:A=1", "'trtllm' is not a backend of this tune"),
    ],
)
def test_a_bad_env_option_is_named_with_the_way_to_write_it(item: str, expected: str) -> None:
    with pytest.raises(InvalidInput, match=expected.replace("(", r"\(").replace(")", r"\)")) as caught:
        parse_env_options([item], (VLLM, SGLANG))
    assert caught.value.hint


def test_a_variable_given_twice_for_the_same_candidates_is_refused() -> None:
    with pytest.raises(InvalidInput, match="sets A twice for sglang"):
        parse_env_options(["sglang:A=1", "sglang:A=2"], (VLLM, SGLANG))
    # Once for every candidate and once for one backend is not twice: the backend's own wins.
    parse_env_options(["A=1", "sglang:A=2"], (VLLM, SGLANG))


def test_a_secret_value_is_not_repeated_in_an_error() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_env_options([f"sglang :HF_TOKEN={SECRET}"], (VLLM, SGLANG))
    assert SECRET not in caught.value.message + (caught.value.hint or "")
    assert MASK in caught.value.message


def test_each_engine_gets_the_common_variables_and_its_own() -> None:
    settings = parse_env_options(
        ["PYTHONPATH=/opt/common", "sglang:PYTHONPATH=/opt/sglang", "vllm:VLLM_LOGGING_LEVEL=DEBUG"],
        (VLLM, SGLANG),
    )
    space = SearchSpace(
        engines=(VLLM, SGLANG), max_sequences=(None,), batched_tokens=(None,), environment=settings
    )

    env = {candidate.engine.backend: dict(candidate.env) for candidate in generate_candidates(space)}

    assert env["vllm"] == {"PYTHONPATH": "/opt/common", "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert env["sglang"] == {"PYTHONPATH": "/opt/sglang"}


def test_a_secret_is_masked_in_the_ids_and_the_deploy_command_reads_it_from_the_shell() -> None:
    def candidate_with(token: str) -> Candidate:
        settings = parse_env_options([f"HF_TOKEN={token}", "VLLM_LOGGING_LEVEL=DEBUG"], (VLLM,))
        space = SearchSpace(
            engines=(VLLM,), max_sequences=(None,), batched_tokens=(None,), environment=settings
        )
        [candidate] = generate_candidates(space)
        return candidate

    candidate = candidate_with(SECRET)
    assert dict(candidate.env)["HF_TOKEN"] == SECRET  # the engine gets the value itself
    assert candidate.candidate_id == candidate_with("another").candidate_id
    command = deploy_command(candidate, "qwen3-8b", "qwen3-8b-tuned")
    assert command.endswith('--env VLLM_LOGGING_LEVEL=DEBUG --env "HF_TOKEN=$HF_TOKEN"')
    body = deploy_body(candidate, "qwen3-8b", "qwen3-8b-tuned")
    assert body["env"] == {"HF_TOKEN": MASK, "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert SECRET not in json.dumps(candidate.to_json())


def test_a_resumed_tune_asks_for_its_secret_again() -> None:
    stored = [f"HF_TOKEN={MASK}", "sglang:PYTHONPATH=/opt/sglang"]
    with pytest.raises(InvalidInput, match="secret --env HF_TOKEN is not stored; give it again"):
        restore_secrets(stored, [])
    assert restore_secrets(stored, [f"HF_TOKEN={SECRET}"]) == [
        f"HF_TOKEN={SECRET}",
        "sglang:PYTHONPATH=/opt/sglang",
    ]


def test_a_tune_gives_its_env_to_the_engine_and_writes_no_secret(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    served = tune_platform.served
    workload = tmp_path / "eight.yaml"
    workload.write_text(WORKLOAD_YAML)
    code, output = run(
        served.data_dir,
        served.url,
        *[MODEL_NAME, "--gpus", GPUS_TEXT, "--slo", "ttft_p95<=2s", "--backends", BACKEND],
        *["--tp", "2", "--memory", "0.9", "--max-num-seqs", "8", "--batched-tokens", "8192"],
        *["--workload", str(workload), "--rungs", "1", "--requests", "8", "--no-knee-search"],
        *["--env", f"{BACKEND}:{EXTRA_TTFT_VARIABLE}=400", "--env", f"HF_TOKEN={SECRET}", "--json"],
    )

    assert code == 0, output
    report = json.loads(output[output.index("{") : output.rindex("}") + 1])
    [winner] = report["winners"]
    # The engine double's TTFT is 30 ms with these flags; the variable added 400 ms.
    assert winner["ttft_p95_ms"] >= 400
    assert f"--env {EXTRA_TTFT_VARIABLE}=400" in report["deploy"]["command"]
    assert '--env "HF_TOKEN=$HF_TOKEN"' in report["deploy"]["command"]
    assert report["deploy"]["body"]["env"]["HF_TOKEN"] == MASK
    assert SECRET not in output
    folder = served.data_dir / "tunes" / report["tune_id"]
    written = [path for path in folder.rglob("*") if path.is_file()]
    assert any(path.name == "tune.json" for path in written)
    for path in written:
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    assert tune_platform.deployments() == []


def test_plan_gives_each_engine_its_own_args_and_env(tune_platform: TunePlatform) -> None:
    served = tune_platform.served
    code, output = run(
        served.data_dir,
        served.url,
        *[MODEL_NAME, "--gpus", GPUS_TEXT, "--slo", "ttft_p95<=1s", "--backends", "vllm,sglang"],
        *["--tp", "2", "--max-num-seqs", "default", "--batched-tokens", "default", "--plan"],
        *["--args", "vllm:--max-model-len 4096", "--args", "sglang:--context-length 4096"],
        *["--env", "sglang:PYTHONPATH=/opt/sglang", "--env", f"HF_TOKEN={SECRET}"],
    )

    assert code == 0, output
    lines = {line.split(":", 1)[0].strip(): line for line in output.splitlines() if " tp2 " in line}
    vllm = next(line for label, line in lines.items() if label.startswith("vllm "))
    sglang = next(line for label, line in lines.items() if label.startswith("sglang "))
    assert "--max-model-len 4096" in vllm and "--context-length" not in vllm
    assert "--context-length 4096" in sglang and "--max-model-len" not in sglang
    assert "PYTHONPATH=/opt/sglang" in sglang and "PYTHONPATH" not in vllm
    assert f"HF_TOKEN={MASK}" in vllm and SECRET not in output
    assert "dropped" not in output, output
