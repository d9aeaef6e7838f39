"""`modelyard doctor` in an 80-column terminal: the table fits, the documentation links sit under it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_doctor_findings_fit_80_columns_with_links_under_the_table(tiny_model_dir: Path) -> None:
    environment = {**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "modelyard.cli.main", "doctor", "--model-dir", str(tiny_model_dir)]
    command += ["--backend", "vllm", "--args", "--mem-fraction-static 0.8", "--gpus", "1x24GB"]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 1, result.stderr  # the SGLang flag given to vLLM is an error
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in result.stdout.splitlines()]
    links = [line for line in lines if re.match(r"\[\d+\] https?://", line)]
    table = [line for line in lines if line not in links]
    assert links, result.stdout
    assert max(len(line) for line in table) <= 80, table
    assert any("param.unknown-flag" in line for line in table)
    # Every reference in the table is listed under it.
    references = set(re.findall(r"\[(\d+)\]\s*$", "\n".join(table), re.MULTILINE))
    assert references == {re.match(r"\[(\d+)\]", link).group(1) for link in links}  # type: ignore[union-attr]
