"""The Python sources of one engine release: a wheel, an sdist or an unpacked package tree.

Every name is relative to the import root (``vllm/engine/arg_utils.py``), whatever the archive:
an sdist's top folder (``vllm-0.33.0/``) and a source layout's ``python/`` are cut off. Texts are
read once; syntax trees are parsed when first asked for. Nothing is imported or executed.
"""

from __future__ import annotations

import ast
import re
import tarfile
import zipfile
from pathlib import Path

# Where an sdist keeps the package: at its top (vLLM) or below a source folder.
SOURCE_FOLDERS = ("", "python/", "src/")


class Sources:
    """The ``.py`` files of one release of ``package``, by import path."""

    def __init__(self, path: Path, package: str | None = None) -> None:
        self.path = path
        self._texts = _read_python_files(path, package)
        self.names = sorted(self._texts)
        self._trees: dict[str, ast.Module] = {}

    def text(self, name: str) -> str:
        return self._texts[name]

    def tree(self, name: str) -> ast.Module:
        if name not in self._trees:
            self._trees[name] = ast.parse(self.text(name))
        return self._trees[name]

    def matching(self, pattern: str) -> list[str]:
        compiled = re.compile(pattern)
        return [name for name in self.names if compiled.search(name)]


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _import_path(member: str, package: str | None) -> str | None:
    """``vllm-0.33.0/vllm/x.py`` -> ``vllm/x.py``; None for files outside the package."""
    parts = member.split("/")
    if package is None:
        return member
    for start in range(min(len(parts), 2)):  # a wheel's root, or an sdist's top folder
        rest = "/".join(parts[start:])
        for folder in SOURCE_FOLDERS:
            if rest.startswith(f"{folder}{package}/"):
                return rest.removeprefix(folder)
    return None


def _read_python_files(path: Path, package: str | None) -> dict[str, str]:
    texts: dict[str, str] = {}
    if path.is_dir():
        for file in sorted(path.rglob("*.py")):
            name = _import_path(file.relative_to(path).as_posix(), package)
            if name is not None:
                texts.setdefault(name, file.read_text(encoding="utf-8", errors="replace"))
        return texts
    if path.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                if not (member.isfile() and member.name.endswith(".py")):
                    continue
                name = _import_path(member.name, package)
                extracted = archive.extractfile(member) if name is not None else None
                if name is not None and extracted is not None:
                    texts.setdefault(name, _decode(extracted.read()))
        return texts
    with zipfile.ZipFile(path) as archive:
        for member_name in archive.namelist():
            if member_name.endswith(".py"):
                name = _import_path(member_name, package)
                if name is not None:
                    texts.setdefault(name, _decode(archive.read(member_name)))
    return texts
