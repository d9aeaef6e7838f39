"""An engine's log made harmless for a terminal, a chunk at a time (``modelyard logs``).

An engine's output is not ours: written raw to a terminal, its escape sequences would set the
window title (OSC ``ESC ] 0 ; ... BEL``), clear the screen (``ESC [ 2 J``), move the cursor or
hide text. So each control character is shown instead of obeyed:

- ``\\n`` and ``\\t`` stay as they are; ``\\r\\n`` is ``\\n``.
- A lone ``\\r`` (a progress bar redrawing its line: tqdm in vLLM and SGLang, transformers'
  downloads) is a new line: each state of the bar is a line of its own, and no text can hide
  the text before it on the same line.
- SGR colour sequences (``ESC [ 1 ; 32 m``: colour, bold, reset, nothing else) are kept when the
  output is a terminal that takes colours (not ``NO_COLOR``), with a reset at the end; otherwise
  removed, so a file or a pipe gets plain text.
- Every other C0 control and DEL is shown in caret notation, as ``cat -v`` does (ESC is ``^[``,
  BEL ``^G``: ``^[]0;title^G``, ``^[[2J``); a C1 control (U+0080 to U+009F) as ``\\x9b``.
- Bytes that are not UTF-8 become U+FFFD.

Usage::

    text = TerminalText(keep_colours=False)
    for chunk in chunks:
        output.write(text.feed(chunk))
    output.write(text.end())
"""

from __future__ import annotations

import codecs
import re

_SGR = r"\x1b\[[0-9;:]{0,32}m"
# What is replaced: an SGR sequence, a CR LF, any other control but tab and newline.
_CONTROL = re.compile(_SGR + r"|\r\n|[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
# What may be the start of a CR LF or of an SGR sequence, cut by the end of a chunk.
_UNFINISHED_TAIL = re.compile(r"(?:\r|\x1b(?:\[[0-9;:]{0,32})?)\Z")
_RESET = "\x1b[0m"


def _visible(character: str) -> str:
    code = ord(character)
    if code == 0x7F:
        return "^?"
    if code < 0x20:
        return "^" + chr(code + 0x40)
    return f"\\x{code:02x}"


class TerminalText:
    """The log as text that is safe to write to a terminal; see the module's docstring."""

    def __init__(self, *, keep_colours: bool) -> None:
        self._keep_colours = keep_colours
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._coloured = False

    def feed(self, data: bytes) -> str:
        text = self._pending + self._decoder.decode(data)
        unfinished = _UNFINISHED_TAIL.search(text)
        if unfinished is not None:
            self._pending = text[unfinished.start() :]
            text = text[: unfinished.start()]
        else:
            self._pending = ""
        return _CONTROL.sub(self._replace, text)

    def end(self) -> str:
        """What was held back at the end (a lone ``\\r``, half a sequence), and a colour reset."""
        text = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return _CONTROL.sub(self._replace, text) + (_RESET if self._coloured else "")

    def _replace(self, match: re.Match[str]) -> str:
        found = match.group()
        if found in ("\r\n", "\r"):
            return "\n"
        if len(found) > 1:  # an SGR sequence
            if self._keep_colours:
                self._coloured = True
                return found
            return ""
        return _visible(found)
