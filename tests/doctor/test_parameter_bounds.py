"""Doctor on hostile or careless walls of text: the findings stay few and the work bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from modelyard.doctor.parameters import MAX_FINDINGS_PER_ID, check_parameters
from modelyard.doctor.parameters.flags import MAX_UNKNOWN_EXPLAINED

ROOT = Path(__file__).resolve().parents[2]


def test_a_wall_of_unknown_flags_gives_a_bounded_list_that_counts_the_rest() -> None:
    count = (256 << 10) // 24
    text = " ".join(f"--no-such-flag-{index}" for index in range(count))
    findings = check_parameters(engine="vllm", version="0.25.0", backend_parameters=text, env={})
    unknown = [finding for finding in findings if finding.check_id == "param.unknown-flag"]
    assert len(findings) <= 3 * MAX_FINDINGS_PER_ID
    assert sum(finding.details.get("count", 1) for finding in unknown) == count
    assert f"{count - MAX_UNKNOWN_EXPLAINED:,} more flags vLLM 0.25.0 does not have" in unknown[-1].message


def test_a_flag_repeated_many_times_is_reported_a_few_times_then_counted() -> None:
    text = "--max-model-len 8192 " * 5000
    findings = check_parameters(engine="vllm", version="0.25.0", backend_parameters=text, env={})
    duplicates = [finding for finding in findings if finding.check_id == "param.duplicate-flag"]
    assert len(duplicates) == MAX_FINDINGS_PER_ID + 1
    assert duplicates[-1].message.startswith("4,989 more findings like: --max-model-len is given twice")


def test_the_parsing_benchmark_runs() -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "parameter_parsing.py"), "--small"],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[-1] for row in rows if "shlex" in row] and len(rows) == 7
