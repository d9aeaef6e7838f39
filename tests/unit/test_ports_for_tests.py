"""The ports test servers get (``modelyard.testing.ports``): never one the kernel hands out by
itself, never the same twice in one process, and each xdist worker its own."""

from __future__ import annotations

import socket

import pytest

from modelyard.testing.ports import (
    FIRST_TEST_PORT,
    LAST_TEST_PORT,
    XDIST_WORKER_VARIABLE,
    listening_socket,
    refusing_port,
    reserved_port,
    reserved_port_window,
    worker_slice,
)


def _ephemeral_range() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        first, last = ports.read().split()
    return int(first), int(last)


def test_reserved_ports_are_distinct_free_and_outside_the_kernels_own_range() -> None:
    ports = [reserved_port() for _ in range(20)]
    first_ephemeral, _ = _ephemeral_range()
    assert len(set(ports)) == 20
    assert all(FIRST_TEST_PORT <= port <= LAST_TEST_PORT < first_ephemeral for port in ports)
    for port in ports:  # nothing is bound to any of them
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_handed_out() -> None:
    window = reserved_port_window(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", window.last + 1))
        taken.listen()
        assert window.last + 1 not in [reserved_port() for _ in range(5)]


def test_each_xdist_worker_has_a_slice_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = []
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv(XDIST_WORKER_VARIABLE, worker)
        slices.append(worker_slice())
    monkeypatch.delenv(XDIST_WORKER_VARIABLE)
    slices.append(worker_slice())  # a plain pytest run
    for index, one in enumerate(slices):
        assert not any(one.overlaps(other) for other in slices[index + 1 :]), slices


def test_a_listening_socket_accepts_and_a_refusing_port_refuses() -> None:
    with listening_socket() as server, socket.create_connection(server.getsockname()[:2], timeout=5):
        pass
    with refusing_port() as port, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
