"""Paths built from user-given names, checked to stay inside the folder they belong to.

Names are validated when they are stored (``services/names.py``), but a path is built again
wherever a name is used (engine logs under ``<data-dir>/logs/<deployment>``); checking the
resulting path itself keeps a name stored before the rule existed, or a rule with a hole, from
writing outside the data directory.

Usage::

    log_path = path_inside(settings.instances_dir, instance.uid, "start-1.log")
"""

from __future__ import annotations

import os
from pathlib import Path

from modelyard.errors import InvalidInput


def path_inside(base: Path, *parts: str) -> Path:
    """``base / part / ...``, refused (``InvalidInput``) unless it stays inside ``base``.

    The check is lexical (``..`` and absolute parts are resolved without touching the disk)
    and then on the real path, so a symbolic link inside ``base`` cannot lead out of it either.
    """
    candidate = base.joinpath(*parts)
    lexical = Path(os.path.normpath(candidate))
    root = Path(os.path.normpath(base))
    real_root = root.resolve()
    if not _is_within(lexical, root) or not _is_within(lexical.resolve(), real_root):
        shown = "/".join(parts)
        raise InvalidInput(
            f"the path {shown!r} would lead outside {base}",
            hint="names may not contain '..' segments or start with '/'",
        )
    return candidate


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
