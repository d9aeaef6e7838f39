"""Compact JSON as UTF-8 bytes, for what the gateway re-encodes (request bodies, changed events)."""

from __future__ import annotations

import json
from typing import Any


def compact_json(value: Any) -> bytes:
    """``value`` as compact JSON; raw UTF-8 for text, ``\\u`` escapes only when it cannot be encoded.

    JSON from a client may carry a lone surrogate (``"\\ud800"``), which has no UTF-8 form; it is
    then escaped rather than failing the request.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()
