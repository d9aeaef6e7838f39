"""An interrupted ``modelyard tune`` goes on where it stopped: Ctrl-C (SIGINT) deletes the
candidate's deployment and exits 130, also while a candidate is still starting; after a SIGKILL
the leftover deployment is deleted when the tune resumes; ``--resume ID`` runs only what the
journal lacks.

The signal is sent on an event, a progress line of the tune on stderr (read as it is written),
not by polling the journal: the earlier poll (every 10 ms, parsing every journal line) could read
a line half written, and on a loaded machine it saw the second start so late that the second run
was over and the signal landed in the third candidate's start, whose deployment Ctrl-C then left
behind (the tuner only stopped a candidate once it ran; it now stops one interrupted mid-start).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from .conftest import BACKEND, GPUS_TEXT, MODEL_NAME, TunePlatform
from .curve_engine import STARTUP_DELAY_VARIABLE

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


class StderrLines:
    """The tune's stderr, line by line as it is written (a thread reads the pipe), kept whole."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.text: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace")
            self.text.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, prefix: str, count: int, timeout_s: float = 120.0) -> None:
        """Until the ``count``-th line starting with ``prefix`` (leading spaces aside) is written."""
        seen = 0
        while seen < count:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(
                    f"no line {prefix!r} within {timeout_s:.0f} s: {''.join(self.text)}"
                ) from None
            assert line is not None, f"the tune ended before line {count} {prefix!r}: {''.join(self.text)}"
            seen += line.lstrip().startswith(prefix)

    def all(self) -> str:
        self._thread.join(timeout=60)
        return "".join(self.text)


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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr = StderrLines(process.stderr)
    stderr.wait_for("rung 0: bench", count=2)  # the second candidate's run has begun
    process.send_signal(signal_number)
    process.wait(timeout=120)
    errors = stderr.all()
    before = measured(data_dir)
    if signal_number == signal.SIGINT:
        assert process.returncode == 130, errors
        assert "modelyard tune --resume" in errors
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


def test_ctrl_c_while_a_candidate_starts_removes_its_deployment(
    tune_platform: TunePlatform, tmp_path: Path
) -> None:
    data_dir = tmp_path / "cli-data"
    workload = tmp_path / "eight.yaml"
    workload.write_text(WORKLOAD_YAML)
    # The engine double answers only after 60 s: the interrupt lands while the server starts it.
    arguments = [*ARGUMENTS, "--workload", str(workload), "--env", f"{STARTUP_DELAY_VARIABLE}=60"]
    process = subprocess.Popen(
        command(tune_platform, data_dir, *arguments),
        env=environment(tune_platform),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr = StderrLines(process.stderr)
    stderr.wait_for("starting vllm-double", count=1)
    tune_id = next(data_dir.glob("tunes/*")).name
    name_prefix = f"tune-{tune_id[:6]}-"
    # The deployment is the server's record: its API is the only place to see it appear.
    deadline_s = time.monotonic() + 60
    while not any(name.startswith(name_prefix) for name in tune_platform.deployments()):
        assert process.poll() is None, stderr.all()
        assert time.monotonic() < deadline_s, "the candidate's deployment was never created"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=120)

    assert process.returncode == 130, stderr.all()
    assert measured(data_dir) == []
    assert tune_platform.deployments() == []
