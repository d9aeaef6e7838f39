"""The "image pulls" table of ``modelyard ps NAME``: each instance's pull of its current start."""

from __future__ import annotations

from typing import Any

from modelyard.cli.context import stdout
from modelyard.cli.output import Column, print_table


def _bytes_text(size_bytes: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


def print_image_pulls(deployment: dict[str, Any]) -> None:
    """The image pull of each instance's current start: what came down, or how far it is."""
    rows = []
    for instance in deployment["instances"]:
        pull = instance.get("image_pull") or {}
        if not pull:
            continue
        downloaded = _bytes_text(int(pull.get("downloaded_bytes") or 0))
        total = pull.get("total_bytes")
        rows.append(
            [
                instance["id"],
                pull.get("image", ""),
                pull.get("state", ""),
                f"{pull.get('layers_done', pull.get('layers_total', 0))}/{pull.get('layers_total', 0)}",
                downloaded if total is None else f"{downloaded} of {_bytes_text(int(total))}",
                f"{pull.get('seconds', pull.get('elapsed_seconds', 0.0)):.1f} s",
                pull.get("error") or None,
            ]
        )
    if rows:
        stdout.print()
        print_table(
            [
                Column("INSTANCE"),
                Column("IMAGE"),
                Column("PULL"),
                Column("LAYERS"),
                Column("BYTES"),
                Column("TIME"),
                Column("ERROR", wraps=True),
            ],
            rows,
            title="image pulls",
        )
