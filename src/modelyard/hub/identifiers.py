"""The rules for the repository ids and revisions a pull names, checked before any hub is asked.

A repository id is ``ORG/NAME``; each part, on Hugging Face and ModelScope alike:

- 1 to ``MAXIMUM_PART_CHARACTERS`` (96) characters, ASCII letters, digits and ``- _ .``;
- not starting or ending with ``-`` or ``.``; no ``--`` and no ``..``; a name not ending in ``.git``.

These are ``huggingface_hub.utils.validate_repo_id``'s rules (it raises ``HFValidationError``,
which the server would answer with a 500), made stricter where that is cheap: ASCII only, the
organisation required. A test holds ours to refusing everything theirs refuses.

A revision is a branch, a tag or a commit, as git's ``check-ref-format`` allows one: ASCII
letters, digits and ``- _ . /``, at most ``MAXIMUM_REVISION_CHARACTERS``; no ``..``, no ``//``, no
part that starts with ``.`` or ends with ``.lock``, not starting or ending with ``/``, not ending
with ``.`` (``refs/pr/1``, ``v1.0``, ``main``, a commit id).

Usage::

    check_repo_id("Qwen/Qwen3-8B", "hf://Qwen/Qwen3-8B")          # returns it, or raises
    check_revision("main", "hf://Qwen/Qwen3-8B@main")
"""

from __future__ import annotations

import re

from modelyard.errors import InvalidInput

MAXIMUM_PART_CHARACTERS = 96
MAXIMUM_REVISION_CHARACTERS = 128

REPO_ID_EXAMPLE = "Qwen/Qwen3-8B"
REPO_ID_RULE = (
    "a repository id is ORG/NAME, each part 1 to 96 letters, digits and - _ . "
    "(not starting or ending with - or ., no -- or ..), e.g. Qwen/Qwen3-8B"
)
REVISION_RULE = (
    "a revision is a branch, tag or commit of letters, digits and - _ . / "
    "(no .., no spaces), e.g. ORG/NAME@main, ORG/NAME@v1.0 or ORG/NAME@<40-character commit id>"
)

_ALLOWED_PART = re.compile(r"[A-Za-z0-9_.-]")
_ALLOWED_REVISION = re.compile(r"[A-Za-z0-9_./-]")
# Hub page paths a copied address may carry after ORG/NAME.
_PAGE_PATHS = ("tree", "blob", "resolve", "files", "commit", "commits", "discussions")


class InvalidModelReference(InvalidInput):
    """A pull source that is not ``hf://ORG/NAME[@REVISION]`` or ``ms://ORG/NAME[@REVISION]``."""

    code = "invalid_model_reference"


def _shown_characters(text: str, allowed: re.Pattern[str]) -> str:
    bad = sorted({character for character in text if not allowed.fullmatch(character)})
    return ", ".join(repr(character) for character in bad[:8])


def _part_problem(part: str, what: str) -> str | None:
    """Why ``part`` (the organisation or the name) cannot be one, or None."""
    if not part:
        return f"the {what} is empty"
    if len(part) > MAXIMUM_PART_CHARACTERS:
        return f"the {what} has {len(part)} characters, at most {MAXIMUM_PART_CHARACTERS} are allowed"
    if any(not _ALLOWED_PART.fullmatch(character) for character in part):
        return f"the {what} has {_shown_characters(part, _ALLOWED_PART)}, which a repository id cannot have"
    for edge in ("-", "."):
        if part.startswith(edge):
            return f"the {what} starts with {edge!r}"
        if part.endswith(edge):
            return f"the {what} ends with {edge!r}"
    for pair in ("--", ".."):
        if pair in part:
            return f"the {what} has {pair!r}"
    if what == "name" and part.endswith(".git"):
        return "the name ends with '.git'"
    return None


def check_repo_id(repo_id: str, text: str, scheme: str = "hf") -> str:
    """Return ``repo_id`` when it follows the rules above; raise ``InvalidModelReference`` saying
    which rule it breaks (``text`` is what the user typed, shown in the message)."""
    prefix = f"{repo_id!r} in {text!r} is not a repository id"
    parts = repo_id.split("/")
    if len(parts) == 1:
        raise InvalidModelReference(
            f"{prefix}: it has no organisation (ORG/NAME)",
            hint=f"write {scheme}://ORG/{repo_id or 'NAME'}; {REPO_ID_RULE}",
        )
    if len(parts) > 2:
        if parts[2] in _PAGE_PATHS and len(parts) > 3 and not _part_problem(parts[3], "name"):
            suggestion = f"{scheme}://{parts[0]}/{parts[1]}@{parts[3]}"
            raise InvalidModelReference(
                f"{prefix}: it has {len(parts)} parts, a hub page's path", hint=f"write it as {suggestion}"
            )
        empty = "an empty part ('//' or a '/' at the end), " if "" in parts else ""
        raise InvalidModelReference(
            f"{prefix}: it has {empty}{len(parts)} parts separated by '/', a repository id has 2",
            hint=REPO_ID_RULE,
        )
    for part, what in ((parts[0], "organisation"), (parts[1], "name")):
        problem = _part_problem(part, what)
        if problem:
            raise InvalidModelReference(f"{prefix}: {problem}", hint=REPO_ID_RULE)
    return repo_id


def _revision_problem(revision: str) -> str | None:
    if not revision:
        return "it is empty (nothing after '@')"
    if len(revision) > MAXIMUM_REVISION_CHARACTERS:
        return f"it has {len(revision)} characters, at most {MAXIMUM_REVISION_CHARACTERS} are allowed"
    if any(not _ALLOWED_REVISION.fullmatch(character) for character in revision):
        return f"it has {_shown_characters(revision, _ALLOWED_REVISION)}, which a revision cannot have"
    if ".." in revision:
        return "it has '..'"
    if revision.startswith("/") or revision.endswith("/") or "//" in revision:
        return "it has an empty part ('//', or a '/' at the start or the end)"
    if revision.endswith("."):
        return "it ends with '.'"
    for part in revision.split("/"):
        if part.startswith("."):
            return f"its part {part!r} starts with '.'"
        if part.endswith(".lock"):
            return f"its part {part!r} ends with '.lock'"
    return None


def check_revision(revision: str, text: str) -> str:
    """Return ``revision`` when git would take it as a branch, tag or commit; else raise."""
    problem = _revision_problem(revision)
    if problem:
        raise InvalidModelReference(
            f"revision {revision!r} in {text!r} is not a branch, tag or commit: {problem}",
            hint=REVISION_RULE,
        )
    return revision
