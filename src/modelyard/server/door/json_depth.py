"""How deep a JSON text nests, found in one bounded pass as its bytes arrive, without parsing it.

Python's ``json`` recurses once per level and fails with ``RecursionError`` near 1,000 levels (a
500 where a 400 is due); code that walks the result recurses too. So the depth is checked before
any parser, by ``JsonDepthScanner``: it is fed the body piece by piece (as the client sends it)
and keeps, between pieces, the depth so far, whether it is inside a string and whether a
backslash is pending. Each piece is examined in slices of at most ``SLICE_BYTES``, each slice in
a few vectorised passes (numpy: escaped quotes, string regions, a running sum of the brackets
outside strings), and the scan stops at the first slice that goes deeper than the limit: a body
refused for its depth is refused before the rest of it is read or examined.

The work is linear in the bytes examined (the previous version removed the innermost bracket
pairs one level per round, up to ``limit`` rounds over the whole text: 0.6 s per MiB of
``[[[...]]]``), and ``feed_sliced`` gives the event loop a turn after every slice, so that no
check holds the loop for longer than one slice takes (well under a millisecond).

Backslashes are taken as escapes wherever they are: in JSON they can only be inside strings, so
up to the first error of a text (where every parser stops) the scan reads it as a parser does.

Usage::

    scanner = JsonDepthScanner(limit=64)
    for chunk in chunks:
        if await feed_sliced(scanner, chunk):
            raise InvalidInput("the JSON nests deeper than 64 levels")

    json_nesting_exceeds(body, 64)   # the same for a body that is all there
"""

from __future__ import annotations

import asyncio

import numpy as np

# The most bytes examined between two turns of the event loop (about 0.3 ms of work).
SLICE_BYTES = 64 * 1024

_QUOTE = ord('"')
_BACKSLASH = ord("\\")
# Each byte as its step in depth: +1 for [ and {, -1 (255 as a signed byte) for ] and }.
_DEPTH_STEP = bytes(1 if byte in b"[{" else 255 if byte in b"]}" else 0 for byte in range(256))
_BRACKETS = (b"[", b"{", b"]", b"}")


class JsonDepthScanner:
    """Says whether a JSON text nests deeper than ``limit``, fed a piece at a time."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.depth = 0
        self.exceeded = False
        # The bytes looked at so far (the scan stops at the slice where the limit is passed).
        self.examined_bytes = 0
        self._in_string = False
        # The previous slice ended with an odd run of backslashes: the next byte is escaped.
        self._escape_pending = False

    def feed(self, data: bytes | bytearray | memoryview) -> bool:
        """Examine ``data`` (the next bytes of the text); True once the text is too deep."""
        view = memoryview(data).cast("B")
        for start in range(0, len(view), SLICE_BYTES):
            if self.exceeded:
                break
            self._scan(view[start : start + SLICE_BYTES])
        return self.exceeded

    def _scan(self, piece: memoryview) -> None:
        raw = piece.tobytes()
        self.examined_bytes += len(raw)
        codes = np.frombuffer(raw, dtype=np.uint8)
        quotes = self._string_quotes(raw, codes)
        if not len(quotes) and (self._in_string or not any(bracket in raw for bracket in _BRACKETS)):
            return  # wholly inside a string, or no bracket: the depth does not change
        steps = np.frombuffer(raw.translate(_DEPTH_STEP), dtype=np.int8)
        if len(quotes):
            toggles = np.zeros(len(codes), dtype=np.int8)
            toggles[quotes] = 1
            # Odd: inside a string (its opening quote counts as inside, its closing one not).
            inside = (np.cumsum(toggles) + self._in_string) & 1
            steps = np.where(inside == 1, 0, steps)
            self._in_string = bool(inside[-1])
        depths = np.cumsum(steps, dtype=np.int64) + self.depth
        if int(depths.max()) > self.limit:
            self.exceeded = True
        self.depth = int(depths[-1])

    def _string_quotes(self, raw: bytes, codes: np.ndarray) -> np.ndarray:
        """The positions of the quotes that open or close a string; updates ``_escape_pending``."""
        quotes = np.flatnonzero(codes == _QUOTE) if b'"' in raw else _NONE
        carried = self._escape_pending
        if b"\\" not in raw:
            self._escape_pending = False
            if carried and len(quotes) and quotes[0] == 0:
                return quotes[1:]
            return quotes
        runs = _backslash_runs(codes, carried)
        self._escape_pending = bool(runs[-1] & 1)
        if not len(quotes):
            return quotes
        # A quote is escaped when the run of backslashes just before it is odd.
        before = quotes - 1
        escaped = np.where(before >= 0, runs[np.maximum(before, 0)] & 1, int(carried))
        unescaped: np.ndarray = quotes[escaped == 0]
        return unescaped


_NONE = np.zeros(0, dtype=np.intp)


def _backslash_runs(codes: np.ndarray, carried: bool) -> np.ndarray:
    """For each byte, how many backslashes end there in a row (0 for any other byte).

    ``carried``: the previous slice ended with an odd run, which counts one more here.
    """
    positions = np.arange(len(codes))
    last_other = np.maximum.accumulate(np.where(codes == _BACKSLASH, -1, positions))
    runs: np.ndarray = positions - last_other
    if carried:
        runs = runs + (last_other == -1)
    return runs


async def feed_sliced(scanner: JsonDepthScanner, data: bytes | bytearray | memoryview) -> bool:
    """``scanner.feed(data)``, giving the event loop a turn after each slice of a large piece."""
    view = memoryview(data).cast("B")
    if len(view) <= SLICE_BYTES:
        return scanner.feed(view)
    for start in range(0, len(view), SLICE_BYTES):
        if scanner.feed(view[start : start + SLICE_BYTES]):
            return True
        await asyncio.sleep(0)
    return False


def json_nesting_exceeds(text: bytes, limit: int) -> bool:
    """Whether ``text`` (JSON, or something close to it) nests objects and arrays deeper than ``limit``."""
    return JsonDepthScanner(limit).feed(text)
