"""The log redactor masks a launch's secrets in what the engine prints, however its output is cut."""

from __future__ import annotations

from modelyard.runtimes.log_redactor import MAXIMUM_HELD_BYTES, Redactor

SECRET = "sk-canary-0123456789"
LINE = f"INFO [api_utils.py:273] non-default args: {{'api_key': ['{SECRET}'], 'port': 8000}}\n"


def _through(redactor: Redactor, chunks: list[bytes]) -> bytes:
    return b"".join(redactor.feed(chunk) for chunk in chunks) + redactor.finish()


def test_a_secret_cut_between_any_two_reads_is_masked() -> None:
    data = (LINE * 2).encode()
    for cut in range(1, len(data)):
        out = _through(Redactor([SECRET]), [data[:cut], data[cut:]])
        assert SECRET.encode() not in out, cut
        assert out == data.replace(SECRET.encode(), b"********")


def test_lines_without_secrets_pass_unchanged_and_complete_lines_are_not_held() -> None:
    redactor = Redactor([SECRET])
    assert redactor.feed(b"Loading weights: 100%\nhalf a li") == b"Loading weights: 100%\n"
    assert redactor.feed(b"ne\n") == b"half a line\n"
    assert redactor.finish() == b""


def test_the_longer_of_two_overlapping_secrets_is_masked_whole() -> None:
    out = _through(Redactor(["abcd", "abcdefgh"]), [b"key=abcdefgh other=abcd\n"])
    assert out == b"key=******** other=********\n"


def test_a_long_line_without_newline_is_written_in_pieces_and_still_masked() -> None:
    redactor = Redactor([SECRET])
    bar = b"=" + b"#" * (MAXIMUM_HELD_BYTES - 5) + SECRET.encode() + b"#" * 1000
    written = redactor.feed(bar[: MAXIMUM_HELD_BYTES + 3])
    assert written  # not held until a newline that may never come
    rest = redactor.feed(bar[MAXIMUM_HELD_BYTES + 3 :]) + redactor.finish()
    assert SECRET.encode() not in written + rest
    assert written + rest == bar.replace(SECRET.encode(), b"********")


def test_a_last_line_without_newline_is_written_at_the_end() -> None:
    assert _through(Redactor([SECRET]), [f"exit: {SECRET}".encode()]) == b"exit: ********"


def test_a_progress_bar_is_written_at_each_carriage_return() -> None:
    redactor = Redactor([SECRET])
    assert redactor.feed(b"Loading weights:  50%\rLoading we") == b"Loading weights:  50%\r"


def test_without_secrets_everything_passes_at_once() -> None:
    assert Redactor([]).feed(b"half a li") == b"half a li"
