"""docs/tune.md covers every flag of ``modelyard tune`` and every built-in workload."""

from __future__ import annotations

import inspect
from pathlib import Path

from modelyard.cli.tune import tune_command
from modelyard.tune.workloads import BUILTIN_WORKLOADS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tune.md"


def test_every_flag_and_workload_is_documented() -> None:
    text = DOCS.read_text()
    flags = []
    for parameter in inspect.signature(tune_command).parameters.values():
        default = parameter.default
        declarations = getattr(default, "param_decls", None) or ()
        for declaration in declarations:
            flags += [name for name in declaration.split("/") if name.startswith("--")]
    assert len(flags) > 20
    missing = [flag for flag in flags if f"`{flag}" not in text and f"{flag} " not in text]
    assert not missing, f"docs/tune.md does not mention {missing}"
    assert all(f"| `{name}` |" in text for name in BUILTIN_WORKLOADS)
