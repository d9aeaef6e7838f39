"""docs/architecture.md is the living map: every file it names in backticks exists.

A file is matched as a path suffix under src/modelyard, tests, benchmarks, scripts and .ci, so
`control/launch.py` and `launch.py` both count; in `module.NAME`, NAME is
still in that module (renamed or removed names are caught, not the kind of definition).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SEARCHED = ("src/modelyard", "tests", "benchmarks", "scripts", ".ci")
NAMED_FILE = re.compile(r"`([A-Za-z0-9_./-]+\.(?:py|sh|js|css|html))`")
EXTENSIONS = {"py", "sh", "js", "css", "html", "yaml", "yml", "json", "md", "toml", "txt"}
MODULE_NAME = re.compile(r"`([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)[^`]*`")


def project_files() -> list[str]:
    files: list[str] = []
    for top in SEARCHED:
        files.extend(path.relative_to(ROOT).as_posix() for path in (ROOT / top).rglob("*") if path.is_file())
    return files


def matches(name: str, files: list[str]) -> list[str]:
    return [path for path in files if path == name or path.endswith("/" + name.lstrip("./"))]


def test_every_file_the_architecture_map_names_exists() -> None:
    files = project_files()
    named = NAMED_FILE.findall(DOC.read_text(encoding="utf-8"))
    assert len(named) > 50, "the map names files in backticks; has its format changed?"
    missing = sorted({name for name in named if not matches(name, files)})
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_module_name_pair_is_still_in_that_module() -> None:
    """`cases.catch_rates`, `findings.Finding`: the name after a module's stem is still in that module."""
    files = project_files()
    text = DOC.read_text(encoding="utf-8")
    pairs = sorted(set(MODULE_NAME.findall(text)))
    wrong: list[str] = []
    checked = 0
    for module, name in pairs:
        if name in EXTENSIONS or module.startswith("test_"):
            continue  # a file's extension; a fixture (test_models.copy), not a test module
        sources = [path for path in files if path.endswith(f"/{module}.py")]
        if not sources:
            continue  # not a module's stem (a column, a JSON field, a file of another kind)
        checked += 1
        mentioned = re.compile(rf"\b{name}\b")
        if not any(mentioned.search((ROOT / path).read_text(encoding="utf-8")) for path in sources):
            wrong.append(f"{module}.{name}")
    assert checked > 10, "the map names module.name pairs; has its format changed?"
    assert not wrong, f"docs/architecture.md names what these modules do not define: {wrong}"
