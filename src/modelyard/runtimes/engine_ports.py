"""Engine ports kept to a range: ``serve --engine-ports A-B`` (the server's host) and
``worker join --engine-ports A-B`` (a worker; the range travels with its Ray node as the
``modelyard.io/engine-ports`` label), for firewalls between hosts.

Without a range an engine gets a port the kernel picks (``bind(0)``). With one, the first port of
the range that nothing listens on and that no engine started by this server holds (``PortBook``:
an engine may bind its port seconds after its start) is taken; a range that is full is the
instance's reason ("no free engine port in 30000-30009 on worker gpu-2: 10 in use; widen
--engine-ports"), and nothing else is disturbed.

Usage::

    ports = parse_port_range("30000-30099", "--engine-ports")
    port = pick_port("0.0.0.0", ports, held=book.held("local"), where="this host")
    book.hold("local", port)
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from modelyard.errors import EngineStartFailed, InvalidInput

ENGINE_PORTS_LABEL = "modelyard.io/engine-ports"
LOWEST_PORT = 1024
HIGHEST_PORT = 65535
# How long a port handed to a start stays held when no engine claims it (a launch that failed
# between the address and the start).
UNCLAIMED_HOLD_SECONDS = 120.0
_FORM = "give it as A-B, two port numbers from 1024 to 65535 with A <= B, e.g. --engine-ports 30000-30099"


@dataclass(frozen=True)
class PortRange:
    """Ports ``first`` to ``last``, both included."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.first <= port <= self.last

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def overlaps(self, other: PortRange) -> bool:
        return self.first <= other.last and other.first <= self.last


def parse_port_range(text: str, flag: str = "--engine-ports") -> PortRange:
    """``A-B`` as a ``PortRange``; ``InvalidInput`` saying the form otherwise."""
    first_text, separator, last_text = text.strip().partition("-")
    if not separator or not first_text.strip().isdigit() or not last_text.strip().isdigit():
        raise InvalidInput(f"{flag} {text!r} is not a range of ports", hint=_FORM)
    first, last = int(first_text), int(last_text)
    if first > last:
        raise InvalidInput(
            f"{flag} {text!r} starts above where it ends ({first} > {last})",
            hint=f"write the lower port first: {flag} {last}-{first}",
        )
    if first < LOWEST_PORT or last > HIGHEST_PORT:
        raise InvalidInput(
            f"{flag} {text!r} is outside {LOWEST_PORT}-{HIGHEST_PORT}",
            hint="engines run as an ordinary user and cannot bind ports below 1024; " + _FORM,
        )
    return PortRange(first, last)


def check_apart(ports: PortRange, taken: dict[str, PortRange], flag: str = "--engine-ports") -> None:
    """``InvalidInput`` when ``ports`` shares a port with one of ``taken`` (what uses it: range)."""
    for what, other in taken.items():
        if ports.overlaps(other):
            shown = str(other.first) if other.size == 1 else f"{other}"
            raise InvalidInput(
                f"{flag} {ports} overlaps {what} ({shown})",
                hint=f"choose engine ports apart from it, e.g. {flag} "
                f"{_suggestion(ports, list(taken.values()))}",
            )


def _suggestion(ports: PortRange, taken: list[PortRange]) -> str:
    start = 30000
    while any(PortRange(start, start + ports.size - 1).overlaps(other) for other in taken):
        start += 1000
    return str(PortRange(start, min(HIGHEST_PORT, start + ports.size - 1)))


class NoFreeEnginePort(EngineStartFailed):
    code = "no_free_engine_port"


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As engines bind (uvicorn sets it): a port with closed connections in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(host: str, ports: PortRange | None, *, held: Collection[int] = (), where: str) -> int:
    """A port on ``host`` that nothing listens on now: any (the kernel's pick) without a range,
    else the first of ``ports`` that is free and not in ``held``. ``NoFreeEnginePort`` naming
    the range and ``where`` when every one is taken."""
    if ports is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port: int = probe.getsockname()[1]
            return port
    for candidate in range(ports.first, ports.last + 1):
        if candidate not in held and _bindable(host, candidate):
            return candidate
    raise NoFreeEnginePort(
        f"no free engine port in {ports} on {where}: {ports.size} in use; widen --engine-ports",
        hint="each engine takes one port (a multi-node replica one more on its first host): give a "
        "wider range and open it in the firewall, or stop a deployment there",
    )


@dataclass
class PortBook:
    """Ports handed to engine starts, per host, until the engine that got each one stops (or,
    never claimed by a start, for ``unclaimed_hold_seconds``): an engine binds its port some
    time after it starts, and a second start must not be given the same one meanwhile."""

    unclaimed_hold_seconds: float = UNCLAIMED_HOLD_SECONDS
    clock: Callable[[], float] = time.monotonic
    # (host key, port) -> the engine handle's id that claimed it, or when the hold runs out.
    _held: dict[tuple[str, int], str | float] = field(default_factory=dict)

    def held(self, where: str) -> set[int]:
        now = self.clock()
        for key, holder in list(self._held.items()):
            if isinstance(holder, float) and holder <= now:
                del self._held[key]
        return {port for (host, port) in self._held if host == where}

    def hold(self, where: str, port: int) -> None:
        self._held[(where, port)] = self.clock() + self.unclaimed_hold_seconds

    def claim(self, where: str, port: int, handle_id: str) -> None:
        """The start of ``handle_id`` uses ``port``: held until ``release(handle_id)``."""
        if (where, port) in self._held:
            self._held[(where, port)] = handle_id

    def release(self, handle_id: str) -> None:
        for key, holder in list(self._held.items()):
            if holder == handle_id:
                del self._held[key]
