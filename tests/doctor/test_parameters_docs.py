"""Every ``param.*`` id the code can report has its heading (the doc_url anchor) in docs/doctor/param.md."""

from __future__ import annotations

import re
from pathlib import Path

from modelyard.doctor.findings import Finding, Severity

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "src" / "modelyard" / "doctor" / "parameters"
DOC = ROOT / "docs" / "doctor" / "param.md"


def _ids_in_code() -> set[str]:
    ids: set[str] = set()
    for path in SOURCES.glob("*.py"):
        ids.update(re.findall(r"\"(param\.[a-z0-9-]+)\"", path.read_text()))
    return ids


def _headings() -> set[str]:
    return set(re.findall(r"^## (param\.[a-z0-9-]+)$", DOC.read_text(), re.MULTILINE))


def test_every_check_id_is_documented() -> None:
    ids = _ids_in_code()
    assert len(ids) >= 30
    assert ids - _headings() == set()


def test_every_documented_id_exists_in_the_code() -> None:
    assert _headings() - _ids_in_code() == set()


def test_doc_url_points_at_the_heading_anchor() -> None:
    url = Finding("param.unknown-flag", Severity.ERROR, "x").doc_url
    assert url.endswith("docs/doctor/param.md#paramunknown-flag")
