"""The one rule for the names users give things (deployments, models, keys), checked once.

A name is what clients send as ``"model"`` and what appears in URLs and under the data
directory (``logs/<deployment>/...``), so it must be safe in all three:

- 1 to ``MAXIMUM_NAME_LENGTH`` characters;
- letters, digits and ``- _ . : /``, starting with a letter or digit (so no control character,
  no space, no backslash);
- ``/`` separates segments (``org/model``); no segment is empty, ``.`` or ``..``, so a name never
  climbs out of the folder it is used in, and ``a//b`` or ``a/`` (which HTTP clients rewrite)
  cannot be stored.

Backend names (``backends/spec.py``) follow the same rule without ``/``.

Usage::

    name = check_name(request.name, "deployment")   # InvalidInput naming the problem
"""

from __future__ import annotations

import re

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from modelyard.errors import AlreadyExists, InvalidInput

# A model id as clients send it in "model": letters, digits and - _ . : / (e.g. "qwen3:27b", "org/model").
MODEL_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")
_ALLOWED_CHARACTER = re.compile(r"[A-Za-z0-9_.:/-]")
MAXIMUM_NAME_LENGTH = 128
_HINT = "use letters, digits and - _ . : / (starting with a letter or digit), e.g. 'qwen3-8b' or 'org/model'"


def _shown(name: str) -> str:
    """The name for an error message: quoted, control characters escaped, long ones cut."""
    return repr(name if len(name) <= 80 else name[:77] + "...")


def check_name(name: str, what: str) -> str:
    """Return ``name`` when it follows the rule above; raise ``InvalidInput`` naming ``what`` otherwise."""
    if not name:
        raise InvalidInput(f"the {what} name is empty", hint="give a name such as 'qwen3-8b'")
    if len(name) > MAXIMUM_NAME_LENGTH:
        raise InvalidInput(
            f"the {what} name has {len(name)} characters; at most {MAXIMUM_NAME_LENGTH} are allowed",
            hint="choose a shorter name",
        )
    if not MODEL_ID_PATTERN.match(name):
        bad = sorted({character for character in name if not _ALLOWED_CHARACTER.match(character)})
        shown = ", ".join(repr(character) for character in bad[:10]) or "its first character"
        raise InvalidInput(f"the {what} name {_shown(name)} is not valid: {shown} not allowed", hint=_HINT)
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            problem = (
                "an empty segment ('//' or a '/' at the end)" if not segment else f"a {segment!r} segment"
            )
            raise InvalidInput(
                f"the {what} name {_shown(name)} is not valid: it has {problem}",
                hint="segments between '/' must be names themselves, e.g. 'org/model'",
            )
    return name


def commit_new(session: Session, what: str, name: str) -> None:
    """Commit a new named row; a name taken meanwhile by a concurrent request is ``AlreadyExists``."""
    try:
        session.commit()
    except IntegrityError as error:
        session.rollback()
        raise AlreadyExists(f"a {what} named {name!r} already exists", hint="choose another name") from error
