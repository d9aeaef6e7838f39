"""The instance state machine: which states exist and which transitions are allowed."""

from __future__ import annotations

from enum import StrEnum


class InstanceState(StrEnum):
    """States of an instance (external API: shown by `ps`, the REST API and the console)."""

    PENDING = "pending"  # waiting for a placement or for its restart back-off to pass
    STARTING = "starting"  # engine process launched, not yet ready
    RUNNING = "running"  # ready: health answers, a tiny chat succeeded, verification passed
    ERROR = "error"  # the engine exited or failed readiness; will restart after back-off
    STOPPING = "stopping"  # being stopped (SIGTERM sent, waiting)
    STOPPED = "stopped"  # no process; desired state is stopped


ALLOWED_TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    InstanceState.PENDING: frozenset({InstanceState.STARTING, InstanceState.STOPPED, InstanceState.ERROR}),
    InstanceState.STARTING: frozenset(
        {InstanceState.RUNNING, InstanceState.ERROR, InstanceState.STOPPING, InstanceState.STOPPED}
    ),
    InstanceState.RUNNING: frozenset({InstanceState.ERROR, InstanceState.STOPPING, InstanceState.STOPPED}),
    InstanceState.ERROR: frozenset(
        {InstanceState.PENDING, InstanceState.STARTING, InstanceState.STOPPING, InstanceState.STOPPED}
    ),
    InstanceState.STOPPING: frozenset({InstanceState.STOPPED, InstanceState.ERROR}),
    InstanceState.STOPPED: frozenset({InstanceState.PENDING, InstanceState.STARTING}),
}


def can_transition(current: InstanceState, target: InstanceState) -> bool:
    return current == target or target in ALLOWED_TRANSITIONS[current]
