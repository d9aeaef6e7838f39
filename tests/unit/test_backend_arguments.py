"""Backend parameters and environment variables as users type them."""

from __future__ import annotations

import pytest

from modelyard.backends.arguments import parse_env, split_backend_parameters
from modelyard.errors import InvalidInput


def test_parameters_on_one_line_are_split_like_a_shell() -> None:
    assert split_backend_parameters("--max-model-len 8192 --chat-template '{{ messages }}'") == [
        "--max-model-len",
        "8192",
        "--chat-template",
        "{{ messages }}",
    ]


def test_parameters_on_many_lines_skip_blanks_and_comments() -> None:
    text = "--max-model-len 8192\n\n# prefix caching helps chat\n--enable-prefix-caching\n"
    assert split_backend_parameters(text) == ["--max-model-len", "8192", "--enable-prefix-caching"]


def test_parameters_as_a_list_keep_json_values_whole() -> None:
    raw = ["--tensor-parallel-size 2", """--speculative-config '{"method": "mtp"}'"""]
    assert split_backend_parameters(raw) == [
        "--tensor-parallel-size",
        "2",
        "--speculative-config",
        '{"method": "mtp"}',
    ]


def test_unclosed_quote_names_the_line() -> None:
    with pytest.raises(InvalidInput, match=r"line 2 cannot be split .*No closing quotation"):
        split_backend_parameters("--max-model-len 8192\n--served-model-name 'qwen")


def test_unclosed_quote_in_a_list_names_the_item() -> None:
    with pytest.raises(InvalidInput, match=r"item 2 cannot be split"):
        split_backend_parameters(["--a 1", '--b "x'])


def test_env_lines_become_a_mapping_with_values_kept_literally() -> None:
    assert parse_env(["A=1", "URL=http://host/?x=1", "EMPTY=", "SPACED=a b"]) == {
        "A": "1",
        "URL": "http://host/?x=1",
        "EMPTY": "",
        "SPACED": "a b",
    }


def test_env_line_without_equals_says_how_to_write_it() -> None:
    with pytest.raises(InvalidInput, match=r"line 2 'VLLM_DEBUG' has no '='.*VLLM_DEBUG=value"):
        parse_env("A=1\nVLLM_DEBUG")


def test_env_spaces_around_equals_show_the_fixed_line() -> None:
    with pytest.raises(
        InvalidInput, match=r"item 1 'A = 1' has spaces around '='.*write it without them: A=1"
    ):
        parse_env(["A = 1"])


def test_env_invalid_name_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"'1ABC' is not a valid environment variable name"):
        parse_env(["1ABC=x"])


def test_env_name_given_twice_names_both_lines() -> None:
    with pytest.raises(InvalidInput, match=r"A is set twice \(line 1 and line 3\)"):
        parse_env("A=1\nB=2\nA=3")


def test_env_mapping_with_a_number_value_asks_for_quotes() -> None:
    with pytest.raises(InvalidInput, match=r"quote it"):
        parse_env({"A": 1})  # type: ignore[dict-item]


def test_env_read_leniently_skips_bad_lines_and_keeps_the_last_of_a_name() -> None:
    # doctor reads the env this way: each bad line is its own finding, the rest still count.
    assert parse_env(["A = 1", "VLLM_DEBUG", "", "# note", "B=x=y", "A=2 "], strict=False) == {
        "A": "2",
        "B": "x=y",
    }
    assert parse_env({" A ": "1"}, strict=False) == {"A": "1"}
