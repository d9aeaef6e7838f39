"""Which names modelyard accepts for the things users name (deployments, models, keys, backends)."""

from __future__ import annotations

import re

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from modelyard.errors import AlreadyExists, InvalidInput

# A model id as clients send it in "model": letters, digits and - _ . : / (e.g. "qwen3:27b", "org/model").
MODEL_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")
MAXIMUM_NAME_LENGTH = 128


def check_name(name: str, what: str) -> str:
    """Return ``name`` when it is a valid model id; raise ``InvalidInput`` naming ``what`` otherwise."""
    if not name:
        raise InvalidInput(f"the {what} name is empty", hint="give a name such as 'qwen3-8b'")
    if len(name) > MAXIMUM_NAME_LENGTH:
        raise InvalidInput(
            f"the {what} name has {len(name)} characters; at most {MAXIMUM_NAME_LENGTH} are allowed"
        )
    if not MODEL_ID_PATTERN.match(name):
        bad = sorted({character for character in name if not re.match(r"[A-Za-z0-9_.:/-]", character)})
        shown = ", ".join(repr(character) for character in bad) or "its first character"
        raise InvalidInput(
            f"the {what} name {name!r} is not valid: {shown} not allowed",
            hint="use letters, digits and - _ . : / (starting with a letter or digit)",
        )
    return name


def commit_new(session: Session, what: str, name: str) -> None:
    """Commit a new named row; a name taken meanwhile by a concurrent request is ``AlreadyExists``."""
    try:
        session.commit()
    except IntegrityError as error:
        session.rollback()
        raise AlreadyExists(f"a {what} named {name!r} already exists", hint="choose another name") from error
