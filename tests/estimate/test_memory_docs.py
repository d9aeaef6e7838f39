"""Every ``memory.*`` id the estimator reports has its heading (the doc_url anchor) in memory.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_memory_finding_id_is_documented() -> None:
    sources = (ROOT / "src/modelyard/doctor/memory.py").read_text()
    ids = set(re.findall(r'"(memory\.[a-z-]+)"', sources))
    headings = set(re.findall(r"^## (memory\.[a-z-]+)$", (ROOT / "docs/doctor/memory.md").read_text(), re.M))
    assert ids, "no memory.* ids found in the estimator's findings"
    assert ids <= headings, f"undocumented: {sorted(ids - headings)}"
