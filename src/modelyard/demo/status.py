"""Where the demo stands while the server prepares it in the background.

Read by ``GET /api/v1/system`` (``demo``) and, through the endpoint registry's note, by the
gateway, which answers 503 "demo is being prepared (42%)" until the demo deployment exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

# skipped: --no-demo; preparing: converting the model; deployed: handed to the controller;
# failed: see message and log_path. Once deployed, ``GET /api/v1/system`` reports the ``demo``
# deployment's own state instead (``deployed_json``).
DemoState = Literal["skipped", "preparing", "deployed", "failed"]


@dataclass
class DemoStatus:
    state: DemoState = "skipped"
    progress_percent: int = 0
    stage: str = ""
    message: str = ""
    log_path: Path | None = None

    def update(self, percent: int, stage: str) -> None:
        self.state = "preparing"
        self.progress_percent = max(0, min(100, percent))
        self.stage = stage
        self.message = f"demo is being prepared ({self.progress_percent}%)"

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "progress_percent": self.progress_percent,
            "stage": self.stage,
            "message": self.message,
            "log_path": str(self.log_path) if self.log_path else None,
        }


def deployed_json(status: DemoStatus, deployment: dict[str, Any] | None) -> dict[str, Any]:
    """The demo once handed to the controller, as the ``demo`` deployment really is: its state
    (running, starting, error, degraded, stopped, ...; "removed" when a user removed it) and, while
    it is not running, the reason of its first instance that is not."""
    shown = status.to_json()
    if deployment is None:
        shown.update(state="removed", message="the demo deployment was removed")
        return shown
    shown["state"] = deployment["state"]
    waiting = [instance for instance in deployment["instances"] if instance["state"] != "running"]
    if deployment["state"] != "running" and waiting:
        first = waiting[0]
        shown["message"] = f"replica {first['replica_index']} {first['state']}: {first['reason']}"
    return shown
