"""`modelyard logs` shows an engine's control characters instead of letting the terminal obey
them: a window title, a cleared screen, cursor moves, a bell. The log is a real vLLM 0.25.0
start (tests/doctor/fixtures/logs/, with its CR LF banner lines and tqdm's \r progress bar)
with such sequences appended, as
an engine (or a prompt echoed into its log) could write them, through a real server's REST API.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.cli.terminal_text import TerminalText

from .conftest import LiveServer

REAL_LOG = Path(__file__).parents[1] / "doctor" / "fixtures" / "logs" / "vllm025_healthy_start.log"
HOSTILE = (
    b"\x1b]0;you have been pwned\x07"  # OSC: the window title, ended by BEL
    b"\x1b[2J\x1b[H"  # clear the screen, cursor home
    b"\x1b[5A\x1b[2K"  # cursor up five lines, erase the line
    b"\x1b[1;32mINFO\x1b[0m coloured\tand tabbed\n"
    b"Loading safetensors checkpoint shards:   0% 0/4\rLoading safetensors checkpoint shards: 100% 4/4\n"
    b"\xc2\x9b6n C1 device status query\n"
)


@pytest.fixture
def deployed(live_server: LiveServer, tiny_model_dir: Path) -> tuple[LiveServer, Path]:
    assert live_server.cli("models", "add", str(tiny_model_dir), "--name", "tiny").exit_code == 0
    assert live_server.cli("deploy", "tiny", "--no-wait").exit_code == 0
    deployment = json.loads(live_server.cli("ps", "tiny", "--json").stdout)
    return live_server, Path(deployment["instances"][0]["log_path"])


def test_an_engines_escape_sequences_are_shown_never_sent_to_the_terminal(
    deployed: tuple[LiveServer, Path],
) -> None:
    server, log_path = deployed
    real = REAL_LOG.read_bytes()
    log_path.write_bytes(real + HOSTILE)
    result = server.cli("logs", "tiny")
    assert result.exit_code == 0, result.output
    shown = result.stdout
    assert not any(control in shown for control in ("\x1b", "\x07", "\r", "\x9b"))
    assert "^[]0;you have been pwned^G" in shown
    assert "^[[2J^[[H^[[5A^[[2K" in shown
    # Not a terminal: colours go, tabs stay; each state of the progress bar is a line.
    assert "INFO coloured\tand tabbed\n" in shown
    assert "shards:   0% 0/4\nLoading safetensors checkpoint shards: 100% 4/4\n" in shown
    assert "\\x9b6n C1 device status query" in shown
    # The engine's own lines are all there: CR LF is one line end, and its own progress bar
    # (tqdm's "\rLoading safetensors checkpoint shards: ...") a line per state.
    assert b"\rLoading safetensors checkpoint shards" in real
    assert shown.startswith(real.decode().replace("\r\n", "\n").replace("\r", "\n"))


def test_colours_reach_a_terminal_that_takes_them_and_are_reset_at_the_end() -> None:
    text = TerminalText(keep_colours=True)
    shown = text.feed(b"\x1b[1;31mERROR\x1b[0m \x1b[33mstill yellow") + text.end()
    assert shown == "\x1b[1;31mERROR\x1b[0m \x1b[33mstill yellow\x1b[0m"


def test_a_sequence_cut_between_two_reads_is_shown_as_if_read_at_once() -> None:
    whole = TerminalText(keep_colours=True)
    expected = whole.feed(HOSTILE) + whole.end()
    piecewise = TerminalText(keep_colours=True)
    shown = "".join(piecewise.feed(HOSTILE[index : index + 1]) for index in range(len(HOSTILE)))
    assert shown + piecewise.end() == expected
