"""What a new password must be: long enough, and not one that attackers try first.

- at least ``MINIMUM_PASSWORD_LENGTH`` characters, at most ``MAXIMUM_PASSWORD_CHARACTERS``;
- no leading or trailing whitespace (a copy-paste accident);
- hard to guess by zxcvbn's estimate (score ``MINIMUM_STRENGTH_SCORE`` of 4 or more), which
  matches it against the 30,000 most common passwords, English words and names shipped with the
  ``zxcvbn`` package, keyboard patterns, dates and repeats, and against the user's own name and
  ``modelyard`` (so ``password``, ``modelyard2026`` and ``admin12345678`` are refused).

The refusal says why, with zxcvbn's own warning and suggestions. Usage::

    check_new_password("correct horse battery staple", username="admin")
"""

from __future__ import annotations

from zxcvbn import zxcvbn

from modelyard.errors import InvalidInput
from modelyard.services.password_hashing import MAXIMUM_PASSWORD_CHARACTERS

MINIMUM_PASSWORD_LENGTH = 12
MINIMUM_STRENGTH_SCORE = 3
# zxcvbn looks at this many characters (its own limit); a longer password is judged by its start.
_JUDGED_CHARACTERS = 72


def check_new_password(password: str, *, username: str) -> None:
    """Raise ``InvalidInput`` saying what is wrong with ``password`` as a new password."""
    if len(password) < MINIMUM_PASSWORD_LENGTH:
        raise InvalidInput(
            f"the new password has {len(password)} characters; it needs at least {MINIMUM_PASSWORD_LENGTH}",
            hint="a few uncommon words together make a long password that is easy to remember",
        )
    if len(password) > MAXIMUM_PASSWORD_CHARACTERS:
        raise InvalidInput(
            f"the new password has {len(password)} characters; at most {MAXIMUM_PASSWORD_CHARACTERS}"
        )
    if password != password.strip():
        raise InvalidInput(
            "the new password starts or ends with whitespace",
            hint="remove the leading or trailing spaces (often a copy-paste accident)",
        )
    verdict = zxcvbn(password[:_JUDGED_CHARACTERS], user_inputs=[username, "modelyard", "admin"])
    if verdict["score"] < MINIMUM_STRENGTH_SCORE:
        feedback = verdict["feedback"]
        why = feedback.get("warning") or "it is one of the first an attacker would try"
        suggestions = " ".join(feedback.get("suggestions") or []) or "use a few uncommon words together."
        raise InvalidInput(f"the new password is too easy to guess: {why.rstrip('.')}", hint=suggestions)
