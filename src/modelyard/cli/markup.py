"""``escape(text)``: text from the server or the user, printed literally through rich markup.

A deployment's reason, an engine's log line or a path may hold square brackets (``[rank0]``,
``modelyard[postgres]``) that rich would otherwise read as markup and drop.
"""

from __future__ import annotations


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)
