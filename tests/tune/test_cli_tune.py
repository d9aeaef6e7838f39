"""``modelyard tune`` as a user types it: a bad flag value is one line that names it and what to
write instead, before anything starts; ``--plan`` shows the pruning and starts nothing; a run
prints the report and writes report.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelyard.cli.main import app

from .conftest import BACKEND, GPUS_TEXT, MODEL_NAME, TunePlatform

WORKLOAD_YAML = """\
name: eight-streams
input_tokens: 16
output_tokens: 8
input_spread: 0
output_spread: 0
loads: [8]
"""


def run(data_dir: Path, url: str, *arguments: str) -> tuple[int, str]:
    environment = {"MODELYARD_URL": url, "MODELYARD_DATA_DIR": str(data_dir), "NO_COLOR": "1"}
    result = CliRunner().invoke(app, ["tune", *arguments], env=environment)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--slo", "ttft<=1s"], "--slo term 'ttft<=1s' is not METRIC_STATISTIC<=NUMBER"),
        (["--slo", "ttft_p95<=1h"], "is not METRIC_STATISTIC<=NUMBER with a unit (ms or s)"),
        (["--slo", "queue_p95<=1s"], "unknown metric 'queue'"),
        (["--slo", "ttft_p42<=1s"], "unknown statistic 'p42'"),
        (["--workload", "nosuch"], "--workload 'nosuch' is neither a built-in workload nor a file"),
        (["--gpus", "two"], "--gpus 'two'"),
        (["--max-num-seqs", "default,many"], "--max-num-seqs value 'many' is not a int or 'default'"),
        (["--memory", "1.5"], "--memory value 1.5 is not between 0.05 and 0.99"),
        (["--tp", "0"], "--tp value '0' is not a GPU count from 1 to 64"),
        (["--kv-cache-dtype", "int3"], "--kv-cache-dtype value 'int3' is not one of default"),
        (["--prefix-caching", "maybe"], "--prefix-caching value 'maybe' is not default, on or off"),
        (["--budget", "soon"], "--budget 'soon' is not a duration above 0"),
        (["--version", "vllm"], "--version 'vllm' is not BACKEND=VERSION"),
        (["--rungs", "0"], "rungs 0 is not between 1 and 8"),
    ],
)
def test_a_bad_flag_value_is_one_clear_line(
    tune_platform: TunePlatform, tmp_path: Path, arguments: list[str], expected: str
) -> None:
    base = {"--gpus": GPUS_TEXT, "--slo": "ttft_p95<=150ms", "--backends": BACKEND}
    for name, value in zip(arguments[::2], arguments[1::2], strict=True):
        base[name] = value
    flat = [MODEL_NAME, *(word for pair in base.items() for word in pair)]
    code, output = run(tune_platform.served.data_dir, tune_platform.served.url, *flat)
    assert code == 1
    assert expected in " ".join(output.split()), output
    assert "Traceback" not in output


def test_an_unknown_backend_and_model_are_named(tune_platform: TunePlatform) -> None:
    served = tune_platform.served
    common = ["--gpus", GPUS_TEXT, "--slo", "ttft_p95<=150ms"]
    code, output = run(served.data_dir, served.url, MODEL_NAME, *common, "--backends", "nosuch", "--plan")
    assert code == 1 and "the server has no backend 'nosuch'" in output
    code, output = run(served.data_dir, served.url, "nomodel", *common, "--backends", BACKEND, "--plan")
    assert code == 1 and "the server has no model 'nomodel'" in output


def test_plan_shows_what_pruning_drops_and_starts_nothing(tune_platform: TunePlatform) -> None:
    served = tune_platform.served
    code, output = run(
        served.data_dir,
        served.url,
        *[MODEL_NAME, "--gpus", GPUS_TEXT, "--slo", "ttft_p95<=150ms", "--backends", BACKEND],
        *["--tp", "1,2", "--memory", "0.9", "--max-num-seqs", "8", "--batched-tokens", "default", "--plan"],
    )
    assert code == 0, output
    text = " ".join(output.split())
    assert "4 candidates, 2 to measure" in text
    assert "dropped vllm-double 1.0 tp1 mem=0.9 seqs=8 (estimate): weights take 15.3 GiB per GPU" in text
    assert tune_platform.deployments() == []


def test_a_tune_from_the_command_line_prints_its_report(tune_platform: TunePlatform, tmp_path: Path) -> None:
    served = tune_platform.served
    workload = tmp_path / "eight.yaml"
    workload.write_text(WORKLOAD_YAML)
    code, output = run(
        served.data_dir,
        served.url,
        *[MODEL_NAME, "--gpus", GPUS_TEXT, "--slo", "ttft_p95<=150ms", "--backends", BACKEND],
        *["--tp", "2", "--memory", "0.9", "--max-num-seqs", "8", "--batched-tokens", "default,8192"],
        *["--workload", str(workload), "--rungs", "1", "--requests", "8"],
        *["--no-knee-search", "--out", str(tmp_path / "out"), "--json"],
    )
    assert code == 0, output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["runs"] == 3
    assert report["winners"][0]["label"] == "vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192"
    assert report["deploy"]["command"].startswith(f"modelyard deploy {MODEL_NAME} ")
    assert (tmp_path / "out" / "report.md").is_file()
    assert tune_platform.deployments() == []


def test_the_last_round_searches_each_finalists_saturation_knee(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    served = tune_platform.served
    workload = tmp_path / "eight.yaml"
    workload.write_text(WORKLOAD_YAML)
    code, output = run(
        served.data_dir,
        served.url,
        *[MODEL_NAME, "--gpus", GPUS_TEXT, "--slo", "ttft_p95<=250ms", "--backends", BACKEND],
        *["--tp", "2", "--memory", "0.9", "--max-num-seqs", "8", "--batched-tokens", "8192"],
        *["--workload", str(workload), "--rungs", "1", "--requests", "8", "--out", str(tmp_path / "out")],
    )
    assert code == 0, output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = {row["label"]: row for row in report["candidates"]}
    capped = rows["vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192"]["measurements"][-1]
    record = Path(capped["record_dir"])
    assert json.loads((record / "search.json").read_text())["kind"] == "knee"
    assert (record / "result.json").is_file()
    # 8 requests at once at most (the curve): throughput stops growing past 8 streams.
    assert json.loads((record / "search.json").read_text())["found_load"] <= 16
    # No such cap by default (256): throughput grows with the load up to the search's highest.
    defaults = rows["vllm-double 1.0 tp2 defaults"]["measurements"][-1]
    assert 32.0 in [point["load"] for point in defaults["points"]]
    for row in rows.values():
        assert (Path(row["measurements"][-1]["record_dir"]) / "search.json").is_file()
    assert report["winners"][0]["load"] in [
        point["load"] for row in rows.values() for point in row["measurements"][-1]["points"]
    ]
