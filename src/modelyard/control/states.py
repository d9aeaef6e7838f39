"""The instance state machine: which states exist and which transitions are allowed.

``InstanceStore.transition`` enforces the table for every typed transition (``transitions.py``):
a move it does not allow is a bug in the controller, raised as ``IllegalTransition`` and turned
into that instance's ``error`` state by the reconcile loop's guard (never into a stopped loop).
``error`` and ``stopped`` can be reached from every state: anything can fail, and anything can
be stopped.

    pending --launch--> starting --ready--> running
       ^                   |  ^                |
       |                   v  | re-adopted,    v
       +---- back-off -- error  not healthy  stopping --> stopped --start--> pending
"""

from __future__ import annotations

from enum import StrEnum

from modelyard.errors import ModelyardError


class InstanceState(StrEnum):
    """States of an instance (external API: shown by `ps`, the REST API and the console)."""

    PENDING = "pending"  # waiting for a placement or for its restart back-off to pass
    STARTING = "starting"  # launch recorded (and engine launched), not yet ready
    RUNNING = "running"  # ready: health answers, a tiny chat succeeded, verification passed
    ERROR = "error"  # the engine exited, could not be launched or failed readiness/verification
    STOPPING = "stopping"  # being stopped (SIGTERM sent, waiting)
    STOPPED = "stopped"  # no engine; desired state is stopped


class IllegalTransition(ModelyardError):
    """The controller tried a move the state machine does not allow (a bug, reported as such)."""

    code = "illegal_transition"


_FROM_ANYWHERE = frozenset({InstanceState.ERROR, InstanceState.STOPPED})

ALLOWED_TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    InstanceState.PENDING: frozenset({InstanceState.STARTING}),
    # Back to pending: the launch was refused before anything ran (no placement yet).
    InstanceState.STARTING: frozenset({InstanceState.RUNNING, InstanceState.STOPPING, InstanceState.PENDING}),
    # Back to starting: a re-adopted engine that does not answer its health check yet.
    InstanceState.RUNNING: frozenset({InstanceState.STOPPING, InstanceState.STARTING}),
    # Running again from error: a re-run verification passed on the same engine.
    InstanceState.ERROR: frozenset(
        {InstanceState.PENDING, InstanceState.STARTING, InstanceState.STOPPING, InstanceState.RUNNING}
    ),
    InstanceState.STOPPING: frozenset(),
    InstanceState.STOPPED: frozenset({InstanceState.PENDING, InstanceState.STARTING}),
}


def can_transition(current: InstanceState, target: InstanceState) -> bool:
    return current == target or target in _FROM_ANYWHERE or target in ALLOWED_TRANSITIONS[current]


def check_transition(current: InstanceState, target: InstanceState, instance_id: int, what: str = "") -> None:
    """Raise ``IllegalTransition`` naming the instance, both states and the allowed targets
    (``what``: the transition's name) when the table does not allow the move."""
    if not can_transition(current, target):
        allowed = sorted({*ALLOWED_TRANSITIONS[current], *_FROM_ANYWHERE})
        named = f"{what} " if what else ""
        raise IllegalTransition(
            f"instance {instance_id}: {named}{current} -> {target} is not a transition of the state "
            f"machine (from {current}: {', '.join(allowed)})"
        )
