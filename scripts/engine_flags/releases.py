"""The engine's releases on PyPI and the one archive of each that the extractor reads.

The release list comes from PyPI's JSON API (``https://pypi.org/pypi/<engine>/json``). For each
release the source distribution (``.tar.gz``) is preferred: it holds the same Python sources as
the wheel and is far smaller (vLLM 0.33.0: 47 MB against 336 MB). Releases without one (vLLM
0.15.x, SGLang from 0.5.11) fall back to the smallest wheel. Each archive is downloaded into a
temporary directory, its SHA-256 checked against the index, read, and deleted.

Nothing is run: pip would build an sdist's metadata (run its ``setup.py``) to download it, so the
file is fetched over HTTPS at the URL the index gives.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

INDEX_URL = "https://pypi.org/pypi/{engine}/json"
# The oldest release of each engine that gets a table.
FIRST_RELEASE = {"vllm": "0.6.0", "sglang": "0.4.0"}
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class ReleaseFile:
    version: str
    filename: str
    url: str
    sha256: str
    size_bytes: int

    @property
    def kind(self) -> str:
        return "sdist" if self.filename.endswith((".tar.gz", ".zip")) else "wheel"


def _wheel_rank(filename: str) -> tuple[int, str]:
    """Pure-Python wheels first, then x86_64 Linux, then anything."""
    if filename.endswith("-none-any.whl"):
        return (0, filename)
    if "x86_64" in filename:
        return (1, filename)
    return (2, filename)


def choose_file(version: str, files: list[dict[str, object]]) -> ReleaseFile | None:
    """The sdist of a release, else its smallest-ranked wheel; None when it has neither."""
    usable = [item for item in files if not item.get("yanked")]
    sdists = [item for item in usable if item.get("packagetype") == "sdist"]
    wheels = sorted(
        (item for item in usable if item.get("packagetype") == "bdist_wheel"),
        key=lambda item: (_wheel_rank(str(item["filename"])), int(str(item.get("size", 0)))),
    )
    chosen = (sdists or wheels or [None])[0]
    if chosen is None:
        return None
    digests = chosen.get("digests")
    sha256 = str(digests.get("sha256", "")) if isinstance(digests, dict) else ""
    return ReleaseFile(
        version=version,
        filename=str(chosen["filename"]),
        url=str(chosen["url"]),
        sha256=sha256,
        size_bytes=int(str(chosen.get("size", 0))),
    )


def index_document(engine: str) -> tuple[str, dict[str, object]]:
    """The index's JSON document of ``engine`` and the URL it came from."""
    url = INDEX_URL.format(engine=engine)
    with urllib.request.urlopen(url, timeout=120) as response:
        document: dict[str, object] = json.load(response)
    return url, document


def list_releases(engine: str, *, first: str | None = None) -> list[ReleaseFile]:
    """Every release of ``engine`` from ``first`` (default FIRST_RELEASE), oldest first."""
    base_url, document = index_document(engine)
    releases = document.get("releases")
    if not isinstance(releases, dict):
        raise SystemExit(f"{base_url}: no 'releases' in the answer")
    floor = Version(first or FIRST_RELEASE[engine])
    chosen: list[ReleaseFile] = []
    for version, files in releases.items():
        try:
            parsed = Version(version)
        except InvalidVersion:
            continue
        if parsed < floor or not isinstance(files, list):
            continue
        found = choose_file(version, files)
        if found is not None:
            absolute = urllib.parse.urljoin(base_url, found.url)
            chosen.append(
                ReleaseFile(found.version, found.filename, absolute, found.sha256, found.size_bytes)
            )
    return sorted(chosen, key=lambda item: Version(item.version))


@contextmanager
def downloaded(release: ReleaseFile) -> Iterator[Path]:
    """The release's archive in a temporary directory, deleted when the block ends."""
    directory = Path(tempfile.mkdtemp(prefix="engine-flags-"))
    try:
        path = directory / release.filename
        digest = hashlib.sha256()
        with urllib.request.urlopen(release.url, timeout=600) as response, path.open("wb") as target:
            while chunk := response.read(CHUNK_BYTES):
                digest.update(chunk)
                target.write(chunk)
        if release.sha256 and digest.hexdigest() != release.sha256:
            raise SystemExit(
                f"{release.filename}: SHA-256 {digest.hexdigest()} is not the index's {release.sha256}"
            )
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)
