"""Engine versions compared the way releases are ordered (``0.6.4.post1``, ``0.29.1rc1``, ``0.7.4.dev49``).

Behaviour that changed in a release is written as ``version_before(version, "0.9.0")``; an unknown
version (None, or text that is no version) answers None, so callers decide what an unknown means.

Usage::

    version_before("0.8.5.post1", "0.9.0")   # True
    version_before(None, "0.9.0")            # None
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


def parse_version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text.strip().lstrip("v"))
    except InvalidVersion:
        return None


def version_before(version: str | None, limit: str) -> bool | None:
    """Whether ``version`` is older than ``limit`` (pre-releases of ``limit`` count as older);
    None when ``version`` is unknown."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    return parsed.release < Version(limit).release or (
        parsed.release == Version(limit).release and parsed.is_prerelease
    )
