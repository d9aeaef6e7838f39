"""What both field report scripts read and write: the steps a run recorded, a load point's
figures, numbers and Markdown tables (``report.py`` and ``report_share.py`` import them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def steps(results: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (results / "steps.jsonl").read_text().splitlines() if line]


def point_figures(point: dict[str, Any]) -> dict[str, float | None]:
    metrics = point.get("metrics") or {}

    def median(name: str) -> float | None:
        value = (metrics.get(name) or {}).get("median")
        return float(value) if value is not None else None

    return {
        "load": float(point["point"]["value"]),
        "ok": point.get("requests_succeeded"),
        "failed": point.get("requests_failed"),
        "tok_s": point.get("output_token_throughput_per_s"),
        "ttft": median("ttft_ms"),
        "tpot": median("tpot_ms"),
        "itl": median("itl_ms"),
    }


def number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
