"""One line of text split into words by POSIX shell quoting rules, in linear time.

The rules are those of ``shlex.split(line, posix=True)``: spaces, tabs, carriage returns and
newlines separate words; ``'...'`` keeps everything literally; ``"..."`` keeps everything except
that a backslash escapes ``"`` and ``\\``; outside quotes a backslash escapes the next character;
pieces written next to each other form one word (``--x='a b'c`` is ``--x=a bc``); ``''`` is an
empty word. Nothing is expanded, and ``#`` starts no comment.

``shlex`` builds each word one character at a time (``token = token + char``), which costs time
quadratic in the word's length: a 2 MiB argument takes minutes. Here every run of ordinary
characters is one regular-expression match and every word is joined once, so the work is
proportional to the line's length.

Usage::

    split_words("--chat-template '{{ x }}' --max-model-len 8192")
    # ['--chat-template', '{{ x }}', '--max-model-len', '8192']
    split_words("--name 'open")   # raises UnbalancedQuoting("No closing quotation")
"""

from __future__ import annotations

import re

# One piece of a word (or the space between words) at the current position. Each alternative
# starts with a different character and its repetitions are possessive, so a match never
# backtracks: the scan is linear.
_PIECE = re.compile(
    r"""(?P<space>[ \t\r\n]++)
    |(?P<plain>[^ \t\r\n'"\\]++)
    |'(?P<single>[^']*+)'
    |"(?P<double>[^"\\]*+(?:\\.[^"\\]*+)*+)"
    |\\(?P<escaped>.)""",
    re.VERBOSE | re.DOTALL,
)
# Inside double quotes a backslash escapes only these; before anything else it stays.
_DOUBLE_QUOTED_ESCAPE = re.compile(r'\\([\\"])')


class UnbalancedQuoting(ValueError):
    """The line cannot be split: a quote is left open, or it ends with a lone backslash.

    The message is ``shlex``'s: ``No closing quotation`` or ``No escaped character``.
    """


def _failure(line: str, position: int) -> UnbalancedQuoting:
    rest = line[position:]
    if rest.startswith("\\"):
        return UnbalancedQuoting("No escaped character")
    if rest.startswith('"'):
        # An open double quote whose text ends in an unpaired backslash: shlex reports the escape.
        body = re.match(r'"[^"\\]*+(?:\\.[^"\\]*+)*+', rest, re.DOTALL)
        if body is not None and body.end() < len(rest) and rest[body.end()] == "\\":
            return UnbalancedQuoting("No escaped character")
    return UnbalancedQuoting("No closing quotation")


def split_words(line: str) -> list[str]:
    """The words of ``line`` by POSIX shell rules; raises ``UnbalancedQuoting`` when it cannot be split."""
    words: list[str] = []
    pieces: list[str] = []
    in_word = False
    position = 0
    length = len(line)
    while position < length:
        match = _PIECE.match(line, position)
        if match is None:
            raise _failure(line, position)
        position = match.end()
        kind = match.lastgroup
        if kind == "space":
            if in_word:
                words.append("".join(pieces))
                pieces.clear()
                in_word = False
            continue
        in_word = True
        if kind == "double":
            pieces.append(_DOUBLE_QUOTED_ESCAPE.sub(r"\1", match.group("double")))
        else:
            pieces.append(match.group(kind or "plain"))
    if in_word:
        words.append("".join(pieces))
    return words
