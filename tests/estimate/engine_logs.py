"""The estimator's fitting fixtures (``fixtures/``): real vLLM and SGLang startup logs, read by
``modelyard.estimate.startup_logs``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modelyard.estimate.startup_logs import LoggedKvCache, parse_log

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1 << 30


@dataclass(frozen=True)
class Fixture:
    name: str
    source_url: str
    engine: str
    engine_version: str | None
    config_path: Path
    gpu: str
    arguments: list[str]
    implied_arguments: list[str]
    predict_available_memory: bool
    logged: LoggedKvCache


def load_fixture(path: Path) -> Fixture:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return Fixture(
        name=data["name"],
        source_url=data["source_url"],
        engine=data["engine"],
        engine_version=data.get("engine_version"),
        config_path=path.parent / data["config"],
        gpu=data["gpu"],
        arguments=list(data.get("arguments") or []),
        implied_arguments=list(data.get("engine_implied_arguments") or []),
        predict_available_memory=bool(data.get("predict_available_memory")),
        logged=parse_log(data["engine"], data["log"]),
    )


def all_fixtures() -> list[Fixture]:
    return [load_fixture(path) for path in sorted(FIXTURES.glob("*.yaml"))]
