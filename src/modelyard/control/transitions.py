"""Every change the controller makes to an instance row, one typed class per transition.

A transition is data: the state it goes to, its reason, and the columns it writes (``apply``,
type-checked against the ``Instance`` table, so a misspelt column is a mypy error). The store
(``InstanceStore.transition``) checks it against the state machine (``states.py``) and against
the states the transition may leave (``sources``): a move that is not allowed is refused with
``IllegalTransition``, naming the instance, both states and the allowed ones; nothing is written.

    pending --Launching--> starting --EngineLaunched--> starting --Ready--> running
    (any) --StartFailed--> error (with a back-off)      (any) --EngineStopped--> stopped | error

What a user sees of each (``state``, ``reason`` and the columns) is what the API and ``ps`` show.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

from modelyard.control.states import IllegalTransition, InstanceState, check_transition
from modelyard.store.tables import Instance


class Keep(enum.Enum):
    """A column a transition leaves as it is (``diagnosis=KEEP``)."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True, kw_only=True)
class Transition:
    """One move of an instance: to ``state``, because of ``reason``, writing ``apply``'s columns."""

    reason: str
    # The states it may leave; None: every state the state machine allows.
    sources: ClassVar[frozenset[InstanceState] | None] = None
    # An event is recorded for every new state, and for the same state when this is True.
    records_event: ClassVar[bool] = False

    @property
    def state(self) -> InstanceState:
        raise NotImplementedError

    @property
    def wants_event(self) -> bool:
        """Recorded as an event even when the state stays the same."""
        return self.records_event

    def apply(self, row: Instance) -> None:
        """Write the columns beyond state and reason (none by default)."""

    def check(self, current: InstanceState, instance_id: int) -> None:
        """Raise ``IllegalTransition`` when this transition may not leave ``current``."""
        if self.sources is not None and current not in self.sources:
            raise IllegalTransition(
                f"instance {instance_id}: {type(self).__name__} ({current} -> {self.state}) leaves only "
                f"{', '.join(sorted(self.sources))}, and the instance is {current}"
            )
        check_transition(current, self.state, instance_id, type(self).__name__)


def _clear_engine(row: Instance) -> None:
    row.pid = None
    row.handle = None


# -- starting -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Waiting(Transition):
    """Not launched: it waits for a backend version, a placement or a GPU another start holds."""

    @property
    def state(self) -> InstanceState:
        return InstanceState.PENDING


@dataclass(frozen=True, kw_only=True)
class Launching(Transition):
    """The intent of a start, written before the runtime is asked (``launch.py``): a restarted
    server finds the engine by ``launch_token``. What the previous start left is cleared."""

    records_event: ClassVar[bool] = True

    runtime: str
    launch_token: str
    host: str
    port: int
    engine_port: int
    gpu_ids: list[int]
    placement: dict[str, Any]
    mounts: list[dict[str, Any]]
    command: list[str]
    log_path: str
    start_count: int
    started_at: datetime

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING

    def apply(self, row: Instance) -> None:
        row.runtime = self.runtime
        row.launch_token = self.launch_token
        _clear_engine(row)
        row.process_start_time = None
        row.host = self.host
        row.port = self.port
        row.engine_port = self.engine_port
        row.gpu_ids = list(self.gpu_ids)
        row.placement = self.placement
        row.mounts = self.mounts
        row.command = list(self.command)
        row.log_path = self.log_path
        row.start_count = self.start_count
        row.started_at = self.started_at
        row.ready_at = None
        row.next_start_at = None
        row.diagnosis = None
        row.verification = []
        row.verified_at = None
        # A request to verify again was for the engine that ran until now, not for this one: kept,
        # it would run the suite on every later start, even of a deployment that skips it.
        row.verification_requested_at = None


@dataclass(frozen=True, kw_only=True)
class EngineLaunched(Transition):
    """The runtime started the engine: its handle (and a process's pid) and the command it ran."""

    sources: ClassVar[frozenset[InstanceState] | None] = frozenset({InstanceState.STARTING})

    handle: dict[str, Any]
    pid: int | None
    process_start_time: float | None
    command: list[str]

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING

    def apply(self, row: Instance) -> None:
        row.handle = self.handle
        row.pid = self.pid
        row.process_start_time = self.process_start_time
        row.command = list(self.command)


@dataclass(frozen=True, kw_only=True)
class StartStalled(Transition):
    """A starting engine's log has been silent for long: said, with the doctor's reading."""

    sources: ClassVar[frozenset[InstanceState] | None] = frozenset({InstanceState.STARTING})
    records_event: ClassVar[bool] = True

    diagnosis: str | None

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING

    def apply(self, row: Instance) -> None:
        row.diagnosis = self.diagnosis


@dataclass(frozen=True, kw_only=True)
class StartFailed(Transition):
    """The start failed: ``error``, and a restart at ``next_start_at`` (the back-off)."""

    restart_count: int
    next_start_at: datetime
    diagnosis: str | Keep | None = KEEP
    image_pull: dict[str, Any] | Keep | None = KEEP

    @property
    def state(self) -> InstanceState:
        return InstanceState.ERROR

    def apply(self, row: Instance) -> None:
        _clear_engine(row)
        row.restart_count = self.restart_count
        row.next_start_at = self.next_start_at
        if not isinstance(self.diagnosis, Keep):
            row.diagnosis = self.diagnosis
        if not isinstance(self.image_pull, Keep):
            row.image_pull = self.image_pull


# -- image pulls ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PullingImage(Transition):
    """A container's image is being pulled (the ``pulling`` stage), before any engine runs."""

    runtime: str
    image_pull: dict[str, Any]
    # What the container will see of the host (this host's Docker); None: left as it is.
    mounts: list[dict[str, Any]] | None = None
    # Recorded as an event even when the instance was starting already (a pull on a worker).
    announce: bool = False

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING

    @property
    def wants_event(self) -> bool:
        return self.announce

    def apply(self, row: Instance) -> None:
        _clear_engine(row)
        row.runtime = self.runtime
        row.image_pull = self.image_pull
        if self.mounts is not None:
            row.mounts = self.mounts


@dataclass(frozen=True, kw_only=True)
class ImagePulled(Transition):
    """The image came down: what and how long, as one event; the next pass launches."""

    records_event: ClassVar[bool] = True

    image_pull: dict[str, Any]

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING

    def apply(self, row: Instance) -> None:
        row.image_pull = self.image_pull


# -- ready, verified ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Ready(Transition):
    """Readiness passed (and the verification suite, when it ran): running, in rotation."""

    ready_at: datetime
    # The suite's results and when it ran; None: it did not run on this start.
    verification: list[dict[str, Any]] | None = None
    verified_at: datetime | None = None

    @property
    def state(self) -> InstanceState:
        return InstanceState.RUNNING

    def apply(self, row: Instance) -> None:
        row.ready_at = self.ready_at
        if self.verification is not None:
            row.verification = self.verification
            row.verified_at = self.verified_at


@dataclass(frozen=True, kw_only=True)
class VerificationRetrying(Transition):
    """The suite failed for want of answers (a busy engine): out of rotation, run again later."""

    records_event: ClassVar[bool] = True

    verification: list[dict[str, Any]]
    verified_at: datetime
    retry_at: datetime

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING

    def apply(self, row: Instance) -> None:
        row.verification = self.verification
        row.verified_at = self.verified_at
        row.verification_requested_at = self.retry_at


@dataclass(frozen=True, kw_only=True)
class VerificationFailed(Transition):
    """The suite failed on what the engine answered: ``error`` with no restart (the user fixes it)."""

    verification: list[dict[str, Any]]
    verified_at: datetime

    @property
    def state(self) -> InstanceState:
        return InstanceState.ERROR

    def apply(self, row: Instance) -> None:
        row.verification = self.verification
        row.verified_at = self.verified_at
        row.next_start_at = None


@dataclass(frozen=True, kw_only=True)
class Reverifying(Transition):
    """The suite runs again on a live engine after a retry delay: out of rotation meanwhile."""

    records_event: ClassVar[bool] = True

    @property
    def state(self) -> InstanceState:
        return InstanceState.STARTING


@dataclass(frozen=True, kw_only=True)
class Reverified(Transition):
    """The suite run again passed: running, in rotation (``ready_at``: it takes traffic from
    now; None: it took traffic already, as on a user's request)."""

    records_event: ClassVar[bool] = True

    verification: list[dict[str, Any]]
    verified_at: datetime
    ready_at: datetime | None = None

    @property
    def state(self) -> InstanceState:
        return InstanceState.RUNNING

    def apply(self, row: Instance) -> None:
        row.verification = self.verification
        row.verified_at = self.verified_at
        if self.ready_at is not None:
            row.ready_at = self.ready_at


@dataclass(frozen=True, kw_only=True)
class StartChecked(Transition):
    """The start check (its KV cache against the estimate) found something to say, as an event."""

    sources: ClassVar[frozenset[InstanceState] | None] = frozenset({InstanceState.RUNNING})
    records_event: ClassVar[bool] = True

    @property
    def state(self) -> InstanceState:
        return InstanceState.RUNNING


# -- stopping, exits, adoption --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Stopping(Transition):
    """Its engine is being stopped (signal sent, grace period running)."""

    @property
    def state(self) -> InstanceState:
        return InstanceState.STOPPING


@dataclass(frozen=True, kw_only=True)
class EngineStopped(Transition):
    """No engine any more: ``stopped`` (asked for), or ``error`` (stopped because it failed)."""

    final_state: Literal[InstanceState.STOPPED, InstanceState.ERROR] = InstanceState.STOPPED

    @property
    def state(self) -> InstanceState:
        return self.final_state

    def apply(self, row: Instance) -> None:
        _clear_engine(row)


@dataclass(frozen=True, kw_only=True)
class EngineGone(Transition):
    """At server start its engine was gone: ``error``, restarted at once."""

    next_start_at: datetime

    @property
    def state(self) -> InstanceState:
        return InstanceState.ERROR

    def apply(self, row: Instance) -> None:
        _clear_engine(row)
        row.next_start_at = self.next_start_at


@dataclass(frozen=True, kw_only=True)
class Readopted(Transition):
    """A server restart found the engine again: its handle recorded, the state ``to`` (kept,
    running again, starting for readiness, or error when its backend version is gone)."""

    to: InstanceState
    handle: dict[str, Any]
    pid: int | None
    process_start_time: float | None
    announce: bool = False

    @property
    def state(self) -> InstanceState:
        return self.to

    @property
    def wants_event(self) -> bool:
        return self.announce

    def apply(self, row: Instance) -> None:
        row.handle = self.handle
        row.pid = self.pid
        row.process_start_time = self.process_start_time


def records_event(change: Transition, previous: InstanceState) -> bool:
    """Whether ``change`` from ``previous`` is recorded as an event (always for a new state)."""
    return previous != change.state or change.wants_event
