"""Engine ports kept to a range (``serve --engine-ports``, ``worker join --engine-ports``): the
range as given, the ports picked from it on a real socket layer, a full range named, and ranges
refused before anything starts."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from modelyard.cli.main import app
from modelyard.errors import InvalidInput
from modelyard.runtimes.engine_ports import (
    NoFreeEnginePort,
    PortBook,
    PortRange,
    check_apart,
    parse_port_range,
    pick_port,
)
from modelyard.runtimes.process import ProcessRuntime
from modelyard.testing.serve_process import free_port_window

TOKEN = "0123456789abcdef" * 4


def _ports(window: PortRange) -> range:
    return range(window.first, window.last + 1)


@pytest.fixture
def listening() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    yield sockets
    for listener in sockets:
        listener.close()


def _listen(sockets: list[socket.socket], port: int) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    sockets.append(listener)


def test_a_range_is_two_ports_with_a_dash() -> None:
    assert parse_port_range("30000-30009") == PortRange(30000, 30009)
    assert parse_port_range(" 30000-30000 ").size == 1
    assert 30009 in PortRange(30000, 30009) and 30010 not in PortRange(30000, 30009)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("30010-30000", "--engine-ports '30010-30000' starts above where it ends (30010 > 30000)"),
        ("abc", "--engine-ports 'abc' is not a range of ports"),
        ("30000", "--engine-ports '30000' is not a range of ports"),
        ("80-90", "--engine-ports '80-90' is outside 1024-65535"),
        ("60000-70000", "--engine-ports '60000-70000' is outside 1024-65535"),
    ],
)
def test_a_bad_range_is_refused_with_the_form(text: str, said: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_port_range(text)
    assert raised.value.message == said
    assert "A-B" in str(raised.value.hint) or "30000-30010" in str(raised.value.hint)


def test_a_range_over_rays_worker_ports_is_refused_naming_them() -> None:
    with pytest.raises(InvalidInput) as raised:
        check_apart(PortRange(15000, 15099), {"Ray's worker ports": PortRange(10002, 19999)})
    assert raised.value.message == "--engine-ports 15000-15099 overlaps Ray's worker ports (10002-19999)"
    assert "--engine-ports 30000-30099" in str(raised.value.hint)


def test_the_first_free_port_of_the_range_is_picked(listening: list[socket.socket]) -> None:
    window = free_port_window(4)
    _listen(listening, window.first)
    assert pick_port("127.0.0.1", window, where="this host") == window.first + 1
    assert pick_port("127.0.0.1", window, held={window.first + 1}, where="this host") == window.first + 2


def test_a_full_range_names_the_range_the_host_and_the_flag(listening: list[socket.socket]) -> None:
    window = free_port_window(3)
    for port in _ports(window):
        _listen(listening, port)
    with pytest.raises(NoFreeEnginePort) as raised:
        pick_port("127.0.0.1", window, where="worker gpu-2")
    assert (
        raised.value.message
        == f"no free engine port in {window} on worker gpu-2: 3 in use; widen --engine-ports"
    )


def test_without_a_range_any_free_port_is_picked() -> None:
    port = pick_port("127.0.0.1", None, where="this host")
    assert 1 <= port <= 65535


def test_a_port_handed_out_is_held_until_its_engine_stops_or_the_hold_runs_out() -> None:
    now = [0.0]
    book = PortBook(unclaimed_hold_seconds=60.0, clock=lambda: now[0])
    book.hold("node-1", 30000)
    book.hold("node-1", 30001)
    book.claim("node-1", 30000, "engine-a")
    assert book.held("node-1") == {30000, 30001} and book.held("node-2") == set()
    now[0] = 61.0  # 30001 was never claimed by a start
    assert book.held("node-1") == {30000}
    book.release("engine-a")
    assert book.held("node-1") == set()


async def test_the_process_runtime_gives_two_starts_two_ports_of_its_range() -> None:
    window = free_port_window(2)
    runtime = ProcessRuntime(engine_ports=window)
    first = await runtime.allocate_address("127.0.0.1")
    second = await runtime.allocate_address("127.0.0.1")
    assert {first.port, second.port} == set(_ports(window))
    with pytest.raises(NoFreeEnginePort, match=f"no free engine port in {window} on this host: 2 in use"):
        await runtime.allocate_address("127.0.0.1")


def test_worker_join_refuses_a_bad_range_before_reaching_the_head() -> None:
    runner = CliRunner()
    result = runner.invoke(
        app, ["worker", "join", "127.0.0.1:1", "--token", TOKEN, "--engine-ports", "30010-30000"]
    )
    assert result.exit_code == 1
    assert "--engine-ports '30010-30000' starts above where it ends" in result.output
    result = runner.invoke(
        app, ["worker", "join", "127.0.0.1:1", "--token", TOKEN, "--engine-ports", "15000-15010"]
    )
    assert result.exit_code == 1
    assert "--engine-ports 15000-15010 overlaps Ray's worker ports" in result.output
    assert "cannot reach" not in result.output


def test_serve_refuses_a_range_over_its_own_port_before_binding(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--no-demo",
            "--data-dir",
            str(tmp_path),
            "--port",
            "30005",
            "--engine-ports",
            "30000-30009",
        ],
    )
    assert result.exit_code == 1
    assert "--engine-ports 30000-30009 overlaps the server's --port (30005)" in result.output
    assert not (tmp_path / "modelyard.db").exists()
