"""JSON nesting found without parsing, exactly, in one pass that stops at the limit."""

from __future__ import annotations

import asyncio
import itertools
import json
import random

import pytest

from modelyard.server.door.json_depth import SLICE_BYTES, JsonDepthScanner, feed_sliced, json_nesting_exceeds


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, {"b": [[], {}]}], "c": "[[[[[[[[[[[[[[[["}',
        '{"a": "\\"[[[[[[[[[[[[", "b": [[[["x"]]]]}',
        "[" * 10 + "]" * 10,
        '[{"k": ' * 5 + "0" + "}]" * 5,
        '[[], [[]], [[[]]], {"k": [{"k": [{}]}]}]',
    ],
)
def test_the_depth_found_is_the_parsers(text: str) -> None:
    depth = _depth(json.loads(text))
    data = text.encode()
    assert not json_nesting_exceeds(data, depth)
    assert json_nesting_exceeds(data, depth - 1)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"prompt": "[" * 10_000, "escaped": '\\"{' * 1000}).encode()
    assert not json_nesting_exceeds(text, 1)


def test_many_shallow_values_are_not_deep() -> None:
    text = json.dumps({"messages": [{"role": "user", "content": [{"type": "text"}]}] * 10_000}).encode()
    assert not json_nesting_exceeds(text, 5)
    assert json_nesting_exceeds(text, 4)


def test_an_unterminated_string_full_of_escaped_quotes_is_handled() -> None:
    text = b'{"a": "' + b'\\"' * 200_000 + b"\\"
    assert not json_nesting_exceeds(text, 1)


def test_brackets_count_whether_they_pair_or_not() -> None:
    # Not JSON either way, but deep before it is wrong: a parser would recurse that far first.
    assert json_nesting_exceeds(b"[" * 5 + b"}" * 5, 4)
    assert json_nesting_exceeds(b"[" * 100_000, 64)


def _deepest(text: bytes) -> int:
    """The depth a parser reads, byte by byte (a backslash makes a quote after it not count)."""
    depth = deepest = 0
    inside = escaped = False
    for byte in text:
        if escaped:
            escaped = False
            if byte in b'"\\' or inside:
                continue
        if byte == ord("\\"):
            escaped = True
        elif byte == ord('"'):
            inside = not inside
        elif not inside and byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif not inside and byte in b"]}":
            depth -= 1
    return deepest


def test_a_text_fed_in_pieces_is_read_as_a_whole() -> None:
    # Pieces cut anywhere: inside strings, between a backslash and the quote it escapes.
    generator = random.Random(24)
    for _ in range(3000):
        text = bytes(generator.choice(b'[]{}"\\\\a,') for _ in range(generator.randint(1, 40)))
        deepest = _deepest(text)
        for limit in (deepest - 1, deepest):
            scanner = JsonDepthScanner(max(limit, 0))
            position = 0
            while position < len(text):
                size = generator.randint(1, 6)
                scanner.feed(text[position : position + size])
                position += size
            assert scanner.exceeded == (deepest > max(limit, 0)), (text, limit)


def test_a_deep_8_mib_body_is_refused_within_its_first_slice() -> None:
    # The scan stops where the limit is passed: the rest of the body is not examined.
    scanner = JsonDepthScanner(64)
    half = 4 * 1024 * 1024
    assert scanner.feed(b"[" * half + b"]" * half)
    assert scanner.examined_bytes == SLICE_BYTES
    assert scanner.feed(b"]" * 1024)  # once refused, it stays refused, and examines nothing more
    assert scanner.examined_bytes == SLICE_BYTES


def test_a_body_arriving_in_pieces_is_refused_at_the_piece_that_passes_the_limit() -> None:
    scanner = JsonDepthScanner(64)
    pieces = [b'{"messages": ' + b"[" * 40, b"[" * 40, b"[" * 1000]
    assert not scanner.feed(pieces[0])
    assert scanner.feed(pieces[1])
    assert scanner.examined_bytes == len(pieces[0]) + len(pieces[1])


def test_the_sliced_feed_gives_the_loop_a_turn_between_slices() -> None:
    # Another task runs while a wide 1 MiB body is examined: the check does not hold the loop.
    body = b"[" + b"[1]," * (256 * 1024) + b"[1]]"
    turns: list[int] = []

    async def other() -> None:
        while True:
            turns.append(scanner.examined_bytes)
            await asyncio.sleep(0)

    async def check() -> bool:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        try:
            return await feed_sliced(scanner, body)
        finally:
            task.cancel()

    scanner = JsonDepthScanner(64)
    assert not asyncio.run(check())
    assert scanner.examined_bytes == len(body)
    # The other task ran between the slices, never more than one slice apart.
    steps = [after - before for before, after in itertools.pairwise(turns)]
    assert len(turns) >= len(body) // SLICE_BYTES
    assert max(steps) <= SLICE_BYTES
