"""How deep a JSON text nests, found in linear time without parsing it.

Python's ``json`` recurses once per level and fails with ``RecursionError`` near 1,000 levels (a
500 where a 400 is due); code that walks the result recurses too. The check runs before any
parser, in C-speed passes over the bytes:

1. at most ``limit`` opening brackets in the whole text: it cannot nest deeper (most bodies);
2. otherwise strings are cut out (a regular expression that matches from every quote, so it
   never backtracks) and only brackets are kept; each round then removes the innermost pairs
   (``[]`` and ``{}`` side by side), one level a round: still something left after ``limit``
   rounds means deeper than ``limit``. Brackets that do not pair stop the rounds early; the
   parser then reports the text as not JSON.

Usage::

    if json_nesting_exceeds(body, 64):
        raise InvalidInput("the JSON nests deeper than 64 levels")
"""

from __future__ import annotations

import re

# A string from its opening quote to its closing quote or the end of the text; a backslash takes
# the next byte (or the end) with it. It cannot fail once a quote is found.
_STRING = re.compile(rb'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_A_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_INNERMOST_PAIR = re.compile(rb"\[\]|\{\}")


def json_nesting_exceeds(text: bytes, limit: int) -> bool:
    """Whether ``text`` (JSON, or something close to it) nests objects and arrays deeper than ``limit``."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", text).translate(None, _NOT_A_BRACKET)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    for _ in range(limit):
        reduced = _INNERMOST_PAIR.sub(b"", brackets)
        if not reduced or len(reduced) == len(brackets):
            return False
        brackets = reduced
    return True
