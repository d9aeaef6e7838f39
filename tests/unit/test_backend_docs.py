"""The backend YAML examples in docs/backends.md import as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelyard.backends.gpustack import parse_gpustack_yaml

DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
EXAMPLES = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.DOTALL)


def test_docs_have_yaml_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda text: text.split("\n", 1)[0])
def test_docs_yaml_example_imports(example: str) -> None:
    spec = parse_gpustack_yaml(example)
    assert spec.versions[spec.default_version].run_command
