"""Paths of the Hugging Face hub cache, read by the model-path check and the log signatures.

The cache keeps a repository as ``<cache>/hub/models--<org>--<name>/`` with ``blobs/``, ``refs/``
and ``snapshots/<revision>/``; the model's files are only under ``snapshots/<revision>/``.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

# The last component of a cache repository folder: ``models--`` and the repo id with "/" as "--".
_REPOSITORY_FOLDER = re.compile(r"^models--(?P<repository>[^/]+)$")


def hub_cache_repository(path: str) -> str | None:
    """The repo id whose cache repository folder ``path`` is (``…/models--Qwen--Qwen3-8B`` ->
    ``Qwen/Qwen3-8B``); None for any other path (a snapshot folder included) and for a hub id."""
    if not path.startswith(("/", "./", "../", "~")):
        return None
    match = _REPOSITORY_FOLDER.match(PurePosixPath(path.rstrip("/")).name)
    if match is None:
        return None
    return match["repository"].replace("--", "/", 1)
