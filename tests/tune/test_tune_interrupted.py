"""An interrupted ``modelyard tune`` goes on where it stopped: Ctrl-C (SIGINT) deletes the
candidate's deployment and exits 130; after a SIGKILL the leftover deployment is deleted when the
tune resumes; ``--resume ID`` runs only what the journal lacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import BACKEND, GPUS_TEXT, MODEL_NAME, TunePlatform

WORKLOAD_YAML = (
    "name: eight\ninput_tokens: 16\noutput_tokens: 8\ninput_spread: 0\noutput_spread: 0\nloads: [8]\n"
)
# tp 2 with (defaults + 2 x 2 knobs): 5 candidates, rungs of 5 and 3 runs.
ARGUMENTS = [
    *[MODEL_NAME, "--gpus", GPUS_TEXT, "--slo", "ttft_p95<=150ms", "--backends", BACKEND, "--tp", "2"],
    *["--memory", "0.9", "--max-num-seqs", "2,8", "--batched-tokens", "1024,8192", "--rungs", "2"],
    *["--requests", "16", "--no-knee-search"],
]
TOTAL_RUNS = 8


def command(platform: TunePlatform, data_dir: Path, *arguments: str) -> list[str]:
    return [
        *[sys.executable, "-m", "modelyard.cli.main", "--url", platform.served.url],
        *["--data-dir", str(data_dir), "tune", *arguments],
    ]


def environment(platform: TunePlatform) -> dict[str, str]:
    return {**os.environ, "MODELYARD_PASSWORD": platform.served.password, "NO_COLOR": "1"}


def measured(data_dir: Path) -> list[tuple[str, int]]:
    runs = []
    for journal in data_dir.glob("tunes/*/journal.jsonl"):
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if entry["kind"] == "measurement":
                runs.append((entry["candidate_id"], entry["rung"]))
    return runs


def entries(data_dir: Path) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    for journal in data_dir.glob("tunes/*/journal.jsonl"):
        found += [json.loads(line) for line in journal.read_text().splitlines() if line.endswith("}")]
    return found


def interrupt_during_second_run(process: subprocess.Popen[bytes], data_dir: Path, signal_number: int) -> None:
    """Once one run is recorded and the next candidate has started (its bench is running)."""
    deadline_s = time.monotonic() + 120
    while True:
        journal = entries(data_dir)
        started = [entry for entry in journal if entry["kind"] == "start" and "failed_reason" not in entry]
        if measured(data_dir) and len(started) >= 2 and journal[-1]["kind"] == "start":
            break
        assert process.poll() is None, "the tune ended before its second run began"
        assert time.monotonic() < deadline_s, "no second run began within 120 s"
        time.sleep(0.01)
    process.send_signal(signal_number)


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_an_interrupted_tune_resumes_without_repeating_runs(
    tune_platform: TunePlatform, tmp_path: Path, signal_number: int
) -> None:
    data_dir = tmp_path / "cli-data"
    workload = tmp_path / "eight.yaml"
    workload.write_text(WORKLOAD_YAML)
    arguments = [*ARGUMENTS, "--workload", str(workload)]
    process = subprocess.Popen(
        command(tune_platform, data_dir, *arguments),
        env=environment(tune_platform),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    interrupt_during_second_run(process, data_dir, signal_number)
    _, errors = process.communicate(timeout=120)
    before = measured(data_dir)
    if signal_number == signal.SIGINT:
        assert process.returncode == 130, errors.decode()
        assert "modelyard tune --resume" in errors.decode()
        assert tune_platform.deployments() == []
    assert 1 <= len(before) < TOTAL_RUNS
    left = tune_platform.deployments()
    if signal_number == signal.SIGKILL:
        assert len(left) == 1, "the killed session's candidate should still be deployed"

    tune_id = next(data_dir.glob("tunes/*")).name
    resumed = subprocess.run(
        command(tune_platform, data_dir, "--resume", tune_id, "--json"),
        env=environment(tune_platform),
        capture_output=True,
        timeout=300,
        check=False,
    )

    assert resumed.returncode == 0, resumed.stderr.decode()
    report = json.loads(resumed.stdout)
    after = measured(data_dir)
    assert len(after) == len(set(after)) == TOTAL_RUNS
    assert after[: len(before)] == before
    assert report["runs"] == TOTAL_RUNS
    if left:  # killed while a candidate ran: the resumed session removed it before starting any
        assert f"removed {len(left)} deployment(s) an interrupted session left" in resumed.stderr.decode()
    assert report["winners"][0]["label"] == "vllm-double 1.0 tp2 mem=0.9 seqs=8 batched=8192"
    assert tune_platform.deployments() == []
