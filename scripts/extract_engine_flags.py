"""Write the engines' flag histories in ``src/modelyard/backends/flags/`` from their real releases.

Usage::

    python scripts/extract_engine_flags.py                     # add the releases new on PyPI
    python scripts/extract_engine_flags.py --engine sglang --version 0.5.23   # (re)read one
    python scripts/extract_engine_flags.py --all               # re-read every release

Every release of vLLM from 0.6.0 and of SGLang from 0.4.0 that PyPI lists
(``https://pypi.org/pypi/<engine>/json``) gets a table. One release at a time, its source
distribution (or, where there is none, a wheel) is downloaded into a temporary directory, read
with ``ast`` and deleted; nothing from it is imported or executed. What is read:

- vLLM: the explicit ``add_argument`` calls of ``EngineArgs.add_cli_args`` and
  ``make_arg_parser`` (0.6 onwards, defaults from the ``EngineArgs`` dataclass) and the config
  dataclass fields they register (``vllm/config/*.py``, the frontend ``*Args`` classes), turned
  into flags the way ``vllm.engine.arg_utils.get_kwargs`` does (bool fields get ``--no-`` forms,
  ``Literal`` fields get choices, dataclass and dict fields take JSON);
- SGLang: every ``add_argument`` in ``server_args.py`` and ``arg_groups/``, and the
  ``A[type, Arg(...)]`` fields that ``add_cli_args_from_dataclass`` registers (0.5.17 and later,
  ``arg_groups/fields/`` from 0.5.23);
- the reasoning-parser and tool-call-parser names each release registers;
- the environment variables each release reads, and those it only warns about as removed.

The result is one JSON file per engine, every flag with the releases where it
exists (``scripts/engine_flags/history.py`` describes the format).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from engine_flags.archive import Sources
from engine_flags.history import pack, read_history, unpack, write_history
from engine_flags.release_table import ENGINES, build_table
from engine_flags.releases import ReleaseFile, downloaded, list_releases

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
OUTPUT_DIRECTORY = REPOSITORY_ROOT / "src" / "modelyard" / "backends" / "flags"


def history_path(engine: str) -> Path:
    return OUTPUT_DIRECTORY / f"{engine}.json"


def read_release(engine: str, release: ReleaseFile, archive_cache: Path | None) -> dict[str, Any]:
    """Download (or reuse from ``archive_cache``), read and delete one release's archive."""
    if archive_cache is not None:
        cached = archive_cache / release.filename
        if not cached.exists():
            archive_cache.mkdir(parents=True, exist_ok=True)
            with downloaded(release) as path:
                path.replace(cached)
        return build_table(engine, release.version, Sources(cached, engine), release.filename)
    with downloaded(release) as path:
        return build_table(engine, release.version, Sources(path, engine), release.filename)


def refresh(
    engine: str, versions: list[str], *, everything: bool, first: str | None, archive_cache: Path | None
) -> None:
    started = time.monotonic()
    releases = list_releases(engine, first=first)
    existing = read_history(history_path(engine))
    tables = {table["version"]: table for table in unpack(existing)} if existing else {}
    if versions:
        wanted = [release for release in releases if release.version in versions]
        missing = sorted(set(versions) - {release.version for release in wanted})
        if missing:
            raise SystemExit(f"PyPI lists no {engine} release {', '.join(missing)}")
    elif everything:
        wanted = releases
    else:
        wanted = [release for release in releases if release.version not in tables]
    for release in wanted:
        began = time.monotonic()
        table = read_release(engine, release, archive_cache)
        tables[release.version] = table
        size = write_history(history_path(engine), pack(engine, list(tables.values())))
        sys.stdout.write(
            f"{engine} {release.version} ({release.kind}, {release.size_bytes / 1e6:.0f} MB): "
            f"{len(table['flags'])} flags, {len(table['reasoning_parsers'])} reasoning parsers, "
            f"{len(table['tool_call_parsers'])} tool-call parsers, {len(table['env_vars'])} env vars "
            f"in {time.monotonic() - began:.1f} s; history {size / 1e3:.0f} kB\n"
        )
        sys.stdout.flush()
    sys.stdout.write(
        f"{engine}: {len(tables)} releases in {history_path(engine).relative_to(REPOSITORY_ROOT)} "
        f"({len(wanted)} read in {time.monotonic() - started:.0f} s)\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=ENGINES, help="one engine (default: both)")
    parser.add_argument(
        "--version", action="append", default=[], help="(re)read this release of --engine (repeatable)"
    )
    parser.add_argument("--all", action="store_true", help="re-read every release, not only new ones")
    parser.add_argument("--first", help="the oldest release to list (default: vLLM 0.6.0, SGLang 0.4.0)")
    parser.add_argument(
        "--archive-cache",
        type=Path,
        help="keep the downloaded archives in this folder and reuse them (when changing the extractor)",
    )
    arguments = parser.parse_args()
    if arguments.version and not arguments.engine:
        parser.error("--version needs --engine")
    OUTPUT_DIRECTORY.mkdir(parents=True, exist_ok=True)
    for engine in [arguments.engine] if arguments.engine else list(ENGINES):
        refresh(
            engine,
            arguments.version,
            everything=arguments.all,
            first=arguments.first,
            archive_cache=arguments.archive_cache,
        )


if __name__ == "__main__":
    main()
