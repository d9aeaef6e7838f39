"""What each field-run call would send to the GPU machine, in bytes, against the 64 MiB of one transfer.

The device tool sends, on every call, a copy of the checkout's working tree (tracked files and
untracked files git does not ignore, as they are on disk, plus ``shared/`` where the checkout has
one) and the ignored paths the call names in ``carry``. This adds those up for each phase, exactly
(bytes, not rounded MiB), and exits 1 when any phase would not fit, before a machine is asked.

    python3 scripts/field/carry.py stage-vllm=.gpu/p1a,.gpu/kit setup=.gpu/p1b,.gpu/p2,.gpu/kit,.whl/field
    python3 scripts/field/carry.py --limit-bytes 67108864 --margin-bytes 1048576 PHASE=PATHS ...

``--largest-piece-bytes PHASE=PATHS``: print only how many bytes are left in that phase for one more
file (what ``prepare.sh`` uses to size the pieces a bundle is split into).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

LIMIT_BYTES = 64 * 1024 * 1024
# Room left for what the transfer adds around the files (archive headers, directory entries).
MARGIN_BYTES = 1024 * 1024


def working_tree_files(root: Path) -> list[Path]:
    """The files a copy of the working tree holds: tracked and untracked-not-ignored, on disk."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    files = {root / os.fsdecode(name) for name in listed if name}
    shared = root / "shared"
    if shared.is_dir():
        files.update(path for path in shared.rglob("*") if path.is_file())
    return sorted(path for path in files if path.is_file() and not path.is_symlink())


def path_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (what ``carry`` takes along)."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        raise FileNotFoundError(f"{path} (named in a phase's carry) does not exist: run prepare.sh first")
    files = [child for child in path.rglob("*") if child.is_file() and not child.is_symlink()]
    return sum(child.stat().st_size for child in files)


def parse_phase(text: str) -> tuple[str, list[str]]:
    name, separator, paths = text.partition("=")
    if not separator or not name:
        raise SystemExit(f"carry.py: {text!r} is not PHASE=PATH,PATH")
    return name, [path for path in paths.split(",") if path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("phases", nargs="*", metavar="PHASE=PATHS")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    parser.add_argument("--limit-bytes", type=int, default=LIMIT_BYTES)
    parser.add_argument("--margin-bytes", type=int, default=MARGIN_BYTES)
    parser.add_argument("--largest-piece-bytes", metavar="PHASE=PATHS")
    arguments = parser.parse_args(argv)
    root = arguments.root.resolve()
    tree = sum(path.stat().st_size for path in working_tree_files(root))
    budget = arguments.limit_bytes - arguments.margin_bytes
    if arguments.largest_piece_bytes:
        _, paths = parse_phase(arguments.largest_piece_bytes)
        try:
            print(budget - tree - sum(path_bytes(root / path) for path in paths))
        except FileNotFoundError as error:
            print(f"carry.py: {error}", file=sys.stderr)
            return 2
        return 0
    print(f"working tree: {tree:,} bytes (every call sends it); limit {arguments.limit_bytes:,} bytes")
    over = []
    for text in arguments.phases:
        name, paths = parse_phase(text)
        try:
            carried = sum(path_bytes(root / path) for path in paths)
        except FileNotFoundError as error:
            print(f"carry.py: {name}: {error}", file=sys.stderr)
            return 2
        total = tree + carried
        verdict = "fits" if total <= budget else "TOO LARGE"
        print(
            f"{name}: {total:,} bytes ({total / 2**20:.2f} MiB) = tree + {', '.join(paths) or 'nothing'} "
            f"({carried:,}); {budget - total:+,} bytes to spare: {verdict}"
        )
        if total > budget:
            over.append(name)
    if over:
        print(
            f"carry.py: {', '.join(over)} would pass the {arguments.limit_bytes:,} bytes of one transfer "
            f"(with {arguments.margin_bytes:,} kept spare); split its bundle in smaller pieces or "
            "carry less",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
