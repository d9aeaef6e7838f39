"""The one name rule, and paths built from names that must stay inside their folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.errors import InvalidInput
from modelyard.safe_paths import path_inside
from modelyard.services.names import MAXIMUM_NAME_LENGTH, check_name


@pytest.mark.parametrize("name", ["demo", "qwen3:27b", "org/model", "org/.hidden", "a.b..c", "x" * 128])
def test_names_that_follow_the_rule_are_kept_as_given(name: str) -> None:
    assert check_name(name, "deployment") == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "is empty"),
        ("x" * (MAXIMUM_NAME_LENGTH + 1), "129 characters; at most 128"),
        ("org/../../etc", "'..' segment"),
        ("org/..", "'..' segment"),
        ("org/./model", "'.' segment"),
        ("org//model", "empty segment"),
        ("org/", "empty segment"),
        ("bad\x07name", "'\\x07' not allowed"),
        ("new\nline", "'\\n' not allowed"),
        ("/absolute", "its first character"),
        ("naïve", "'ï' not allowed"),
    ],
)
def test_names_that_break_the_rule_are_refused_naming_why(name: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        check_name(name, "deployment")
    assert fragment in str(raised.value)


def test_a_path_from_names_inside_the_base_is_returned(tmp_path: Path) -> None:
    assert path_inside(tmp_path, "org/model", "replica-0", "start-1.log") == (
        tmp_path / "org" / "model" / "replica-0" / "start-1.log"
    )


@pytest.mark.parametrize("part", ["../outside", "a/../../outside", "/etc/passwd"])
def test_a_path_leading_out_of_the_base_is_refused(tmp_path: Path, part: str) -> None:
    with pytest.raises(InvalidInput, match="would lead outside"):
        path_inside(tmp_path / "logs", part, "start-1.log")


def test_a_symbolic_link_inside_the_base_cannot_lead_out(tmp_path: Path) -> None:
    base = tmp_path / "logs"
    base.mkdir()
    (base / "escape").symlink_to(tmp_path)
    with pytest.raises(InvalidInput, match="would lead outside"):
        path_inside(base, "escape", "start-1.log")
