"""The one parsed form of backend parameters: shell words, flags, values, the engine's spellings."""

from __future__ import annotations

import random
import shlex

import pytest

from modelyard.backends.flag_tables import load_flag_table
from modelyard.backends.parameters import parse_arguments, parse_backend_parameters, read_integer
from modelyard.backends.shell_words import UnbalancedQuoting, split_words
from modelyard.errors import InvalidInput

VLLM = load_flag_table("vllm", "0.25.0")
SGLANG = load_flag_table("sglang", "0.5.23")


def _shlex_or_error(text: str) -> list[str] | str:
    try:
        return shlex.split(text)
    except ValueError as error:
        return f"error: {error}"


def _words_or_error(text: str) -> list[str] | str:
    try:
        return split_words(text)
    except UnbalancedQuoting as error:
        return f"error: {error}"


def test_words_are_split_exactly_as_posix_shlex_splits_them() -> None:
    """The reference is the standard library's shlex, which the platform used before: 20,000
    random lines over the characters that matter (quotes, backslashes, spaces, '=', '#')."""
    generator = random.Random(20260101)
    alphabet = ["a", "b", " ", "\t", "'", '"', "\\", "=", "-", "{", "}", "é", "#", "\r"]
    for _ in range(20_000):
        text = "".join(generator.choice(alphabet) for _ in range(generator.randint(0, 14)))
        assert _words_or_error(text) == _shlex_or_error(text), text


def test_words_keep_quoted_json_and_empty_strings() -> None:
    assert split_words("""--speculative-config '{"method": "mtp"}' --x "" --y=a\\ b""") == [
        "--speculative-config",
        '{"method": "mtp"}',
        "--x",
        "",
        "--y=a b",
    ]


def test_an_open_quote_is_named_like_shlex_names_it() -> None:
    with pytest.raises(UnbalancedQuoting, match="No closing quotation"):
        split_words("--served-model-name 'qwen")
    with pytest.raises(UnbalancedQuoting, match="No escaped character"):
        split_words("--x \\")


def test_flags_take_the_values_their_table_entry_says() -> None:
    parsed = parse_backend_parameters(
        "--enforce-eager /stray --max-model-len 8192 --cudagraph-capture-sizes 1 2 4 --port=8000", VLLM
    )
    assert [(option.name, option.values) for option in parsed.options] == [
        ("--enforce-eager", []),
        ("--max-model-len", ["8192"]),
        ("--cudagraph-capture-sizes", ["1", "2", "4"]),
        ("--port", ["8000"]),
    ]
    assert [stray.text for stray in parsed.strays] == ["/stray"]
    assert parsed.options[-1].inline_value


def test_vllm_spellings_resolve_to_the_documented_flag() -> None:
    parsed = parse_backend_parameters(
        ["--max_model_len 32k", "-tp 2", "-O3", "--compilation-config.mode 3", "--gpu-memory 0.8"], VLLM
    )
    assert parsed.integer("--max-model-len") == 32_000
    assert parsed.integer("--tensor-parallel-size") == 2
    assert parsed.value_of("--optimization-level") == "3"
    assert parsed.value_of("--compilation-config.mode") == "3"
    assert parsed.value_of("--compilation-config") is None  # the dotted key is not the whole JSON
    abbreviated = parsed.find("--gpu-memory-utilization")
    assert (
        abbreviated is not None
        and abbreviated.abbreviated
        and parsed.number("--gpu-memory-utilization") == 0.8
    )


def test_sglang_takes_no_underscores_and_an_ambiguous_prefix_resolves_to_nothing() -> None:
    parsed = parse_backend_parameters("--tp_size 2 --enable 1", SGLANG)
    assert [option.spec for option in parsed.options] == [None, None]


def test_no_switches_repeats_and_the_last_value_wins() -> None:
    parsed = parse_backend_parameters(
        "--no-enable-prefix-caching --max-model-len 4096\n--max-model-len 8192 --enable-chunked-prefill", VLLM
    )
    assert parsed.switch("--enable-prefix-caching") is False
    assert parsed.switch("--enable-chunked-prefill") is True
    assert parsed.switch("--enforce-eager") is None
    assert [option.values for option in parsed.find_all("--max-model-len")] == [["4096"], ["8192"]]
    assert parsed.integer("--max-model-len") == 8192
    assert [option.line_number for option in parsed.find_all("--max-model-len")] == [1, 2]


def test_negative_numbers_are_values_not_flags() -> None:
    parsed = parse_backend_parameters("--max-model-len -1 --seed -7", VLLM)
    assert parsed.value_of("--max-model-len") == "-1" and parsed.value_of("--seed") == "-7"


def test_without_a_table_a_flag_takes_one_following_word() -> None:
    parsed = parse_backend_parameters("--flag value extra --switch")
    assert [(option.typed, option.values) for option in parsed.options] == [
        ("--flag", ["value"]),
        ("--switch", []),
    ]
    assert [stray.text for stray in parsed.strays] == ["extra"]


def test_a_stored_argv_is_taken_word_for_word() -> None:
    parsed = parse_arguments(["--limit-mm-per-prompt", '{"image": 0}', "--served-model-name", "a b"], VLLM)
    assert parsed.value_of("--limit-mm-per-prompt") == '{"image": 0}'
    assert parsed.value_of("--served-model-name") == "a b"


def test_lines_that_cannot_be_split_are_kept_and_named() -> None:
    parsed = parse_backend_parameters(["--a 1", "--b 'x"], VLLM)
    assert [line.where for line in parsed.split_errors] == ["item 2"]
    assert parsed.argv == ["--a", "1"]
    with pytest.raises(InvalidInput, match=r"item 2 cannot be split \(No closing quotation\)"):
        parsed.require_split()


def test_a_number_that_is_not_one_names_the_flag() -> None:
    parsed = parse_backend_parameters("--max-model-len lots --gpu-memory-utilization high", VLLM)
    with pytest.raises(InvalidInput, match="--max-model-len needs a whole number, got 'lots'"):
        parsed.integer("--max-model-len")
    with pytest.raises(InvalidInput, match="--gpu-memory-utilization needs a number"):
        parsed.number("--gpu-memory-utilization")


def test_human_readable_integers_follow_vllm() -> None:
    assert [read_integer(text) for text in ("8192", "1k", "1K", "25.6k", "1.5K", "2M", "x")] == [
        8192,
        1000,
        1024,
        25600,
        None,
        2 * 2**20,
        None,
    ]


def test_a_2_mib_parameter_is_split_into_its_words() -> None:
    """The case that took minutes with shlex: one quoted 2 MiB value; and 256 KiB of short words.
    (The time per byte at 256 KiB and 2 MiB is measured by benchmarks/parameter_parsing.py.)"""
    value = "x" * (2 << 20)
    parsed = parse_backend_parameters(f"--chat-template '{value}'", VLLM)
    assert parsed.value_of("--chat-template") == value
    many = parse_backend_parameters("--max-model-len 8192 " * ((256 << 10) // 21), VLLM)
    assert len(many.options) == (256 << 10) // 21 and many.integer("--max-model-len") == 8192
