"""What every doctor check reports: one finding with an id, a severity, the problem and the fix.

Each check in ``modelyard.doctor`` returns a list of ``Finding``. The ids are stable, external
API (scripts match on them). An id is ``<area>.<name>``, e.g. ``param.unknown-flag``; areas:
``param``, ``memory``, ``host``, ``model``, ``log``, ``verify``. Each id has an entry (a heading
whose anchor is the id) in ``docs/doctor/<area>.md``, which ``doc_url`` points to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

DOCS_BASE_URL = "https://github.com/modelyard/modelyard/blob/main/docs/doctor"


class Severity(StrEnum):
    """How bad a finding is. ``error`` refuses a deployment; the others are shown."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One problem (or fact) found by a check.

    ``message`` names the problem with the offending value; ``fix`` says what to change.
    """

    check_id: str
    severity: Severity
    message: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # The engine release whose flag table answered (vLLM, SGLang flag and env checks); it differs
    # from the version deployed when that one has no table of its own.
    table_version: str | None = None

    @property
    def doc_url(self) -> str:
        area = self.check_id.split(".", 1)[0]
        return f"{DOCS_BASE_URL}/{area}.md#{self.check_id.replace('.', '')}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = str(self.severity)
        if self.table_version is None:
            del data["table_version"]
        data["doc_url"] = self.doc_url
        return data


def has_errors(findings: list[Finding]) -> bool:
    return any(finding.severity is Severity.ERROR for finding in findings)
