"""JSON nesting found without parsing, exactly, in linear time."""

from __future__ import annotations

import json

import pytest

from modelyard.server.door.json_depth import json_nesting_exceeds


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


def test_unpaired_brackets_are_left_to_the_parser() -> None:
    assert not json_nesting_exceeds(b"[" * 5 + b"}" * 5, 2)
