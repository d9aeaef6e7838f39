"""Where the demo stands while the server prepares it in the background.

Read by ``GET /api/v1/system`` (``demo``) and, through the endpoint registry's note, by the
gateway, which answers 503 "demo is being prepared (42%)" until the demo deployment exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

# skipped: --no-demo; preparing: converting the model; deployed: handed to the controller (from
# then on the deployment's own state says how it is doing); failed: see message and log_path.
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
