"""What one level of the fleet's start observations corrects in a KV estimate (the record
shown beside an estimate; `correction.py` computes it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class KvCorrection:
    """The correction of one key level. ``applied`` False: shown, not used (and ``note`` says why)."""

    level: str
    starts: int
    outliers: int
    offset_bytes: int
    relative_offset: float
    # How far the kept starts lie from the median: the headroom a booking keeps beyond the offset.
    spread_bytes: int
    last_error: float
    applied: bool
    note: str | None = None

    def describe(self) -> str:
        """ "corrected by 3 starts on this cluster (these settings), last error +0.4 %"."""
        percent = round(self.last_error * 100, 1) or 0.0  # never "-0.0 %"
        last = f"last error {percent:+.1f} %"
        if not self.applied:
            return f"not corrected: {self.note} ({last})"
        outliers = f", {self.outliers} outlier(s) left out" if self.outliers else ""
        plural = "s" if self.starts != 1 else ""
        return f"corrected by {self.starts} start{plural} on this cluster ({self.level}{outliers}), {last}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.describe()}
