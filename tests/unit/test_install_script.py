"""``scripts/install.sh``: where it installs, and that its last line names the command it installed.

The script runs for real (bash, in a copy of the repository's layout); only pip is a double: each
virtualenv's ``bin/python`` is a small script that records its pip commands and, for
``pip install -e``, writes ``bin/modelyard`` as the real install would (a real install takes
minutes and the package index).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install.sh"

# The pip double: "python -c ..." (the script's version probes) says nothing; "python -m pip ..."
# is recorded, and an editable install writes bin/modelyard.
PYTHON_DOUBLE = """#!/usr/bin/env bash
bin=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = -m ] && [ "$2" = pip ]; then
  echo "${@:3}" >> "$bin/../pip-calls"
  case " $* " in *" -e "*) printf '#!/bin/sh\\n' > "$bin/modelyard"; chmod +x "$bin/modelyard" ;; esac
  exit 0
fi
exit 1
"""


def _virtualenv_double(directory: Path) -> Path:
    (directory / "bin").mkdir(parents=True)
    python = directory / "bin" / "python"
    python.write_text(PYTHON_DOUBLE)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return directory


def _run(checkout: Path, *arguments: str, active: Path | None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    if active is not None:
        environment["VIRTUAL_ENV"] = str(active)
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "install.sh"), "--torch", "skip", "--no-demo", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / "scripts" / "install.sh")
    _virtualenv_double(checkout / ".venv")
    return checkout


def test_an_active_virtualenv_is_left_alone_and_the_readme_command_exists(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    active = _virtualenv_double(tmp_path / "active")
    result = _run(checkout, active=active)
    assert result.returncode == 0, result.stderr
    installed = checkout / ".venv" / "bin" / "modelyard"
    assert installed.is_file()  # the README's `.venv/bin/modelyard serve` works
    assert not (active / "pip-calls").exists()
    assert f"the active virtualenv {active} is left alone; installing into .venv" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == f"   start the server with: {installed} serve"


def test_the_active_virtualenv_is_used_when_asked_and_the_last_line_names_its_command(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    active = _virtualenv_double(tmp_path / "active")
    result = _run(checkout, "--venv", str(active), active=active)
    assert result.returncode == 0, result.stderr
    assert "left alone" not in result.stdout
    assert "install --quiet -e .[engine]" in (active / "pip-calls").read_text()
    last = result.stdout.strip().splitlines()[-1]
    assert last == f"   start the server with: {active / 'bin' / 'modelyard'} serve"
