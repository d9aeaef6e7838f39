"""Addresses of engines on this host, for the runtimes that run engines here (processes, Docker).

An engine told to listen on a wildcard (``0.0.0.0``, ``::``) is reached on loopback; every other
bind address is reached where it is. The ports handed out on this host are kept in a runtime's
``PortBook`` under ``THIS_HOST``.
"""

from __future__ import annotations

# The key of this host's ports in a runtime's ``PortBook``.
THIS_HOST = "this host"

_LOOPBACK_OF_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def reachable_host(bind_host: str) -> str:
    """Where to reach an engine that listens on ``bind_host`` (a wildcard means loopback here)."""
    return _LOOPBACK_OF_WILDCARD.get(bind_host, bind_host)
