"""Will it fit? The disk check a pull or an import passes before its first byte.

``free_bytes`` asks the filesystem that will hold ``path`` (its nearest existing ancestor, since the
target directory may not exist yet). Tests and odd filesystems pass their own ``DiskSpaceSource``.

Usage::

    check_disk_space(target, needed_bytes=16 * 10**9, headroom=DiskHeadroom(), free_space=free_bytes)
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from modelyard.errors import InsufficientDiskSpace

# Free bytes on the filesystem that holds (or will hold) a path.
DiskSpaceSource = Callable[[Path], int]

GIB = 1 << 30


def existing_ancestor(path: Path) -> Path:
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def free_bytes(path: Path) -> int:
    """Free bytes for an unprivileged user on the filesystem that will hold ``path``."""
    return shutil.disk_usage(existing_ancestor(path)).free


@dataclass(frozen=True)
class DiskHeadroom:
    """What must stay free after a download: the larger of a fixed amount and a share of it."""

    minimum_bytes: int = GIB
    fraction: float = 0.05

    def for_download(self, download_bytes: int) -> int:
        return max(self.minimum_bytes, int(download_bytes * self.fraction))


def format_size(size_bytes: float) -> str:
    """Decimal units as the hubs show sizes: 16.4 GB."""
    value = float(size_bytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size_bytes} B"


def check_disk_space(
    target: Path, needed_bytes: int, headroom: DiskHeadroom, free_space: DiskSpaceSource = free_bytes
) -> int:
    """Raise ``InsufficientDiskSpace`` unless ``needed_bytes`` plus headroom are free; return free bytes."""
    free = free_space(target)
    reserve = headroom.for_download(needed_bytes)
    if needed_bytes + reserve > free:
        raise InsufficientDiskSpace(
            f"not enough disk space for {target}: it needs {format_size(needed_bytes)} "
            f"plus {format_size(reserve)} headroom, and {existing_ancestor(target)} has "
            f"{format_size(free)} free",
            hint="free some space, choose another directory (--to DIR), or take fewer files "
            "(--include/--exclude, --quantization)",
        )
    return free
