"""What the tuner needs from the outside: something that runs a candidate as a deployment
(``Deployer``), and something told about the search as it goes (``TuneProgress``).

``server_deployer.ServerDeployer`` is the deployer of ``modelyard tune``: each candidate a
deployment of the modelyard server, measured through its gateway.
"""

from __future__ import annotations

from typing import Protocol

from modelyard.errors import ModelyardError
from modelyard.tune.endpoint import Endpoint
from modelyard.tune.measurement import Measurement
from modelyard.tune.pruning import Dropped
from modelyard.tune.space import Candidate


class CandidateStartFailed(ModelyardError):
    """A candidate could not be started (refused by the server, or its engine failed): it is
    dropped with this message as its reason, and the search goes on."""

    http_status = 500
    code = "candidate_start_failed"


class Deployer(Protocol):
    def start(self, candidate: Candidate) -> Endpoint:
        """Called before a candidate's first measurement (and again after another candidate ran);
        returns once it answers, or raises ``CandidateStartFailed``."""
        ...

    def stop(self, candidate: Candidate) -> None:
        """Called when the search moves to another candidate, and when it ends or is
        interrupted; frees its GPUs. Must not raise for a candidate that is already gone."""
        ...


class TuneProgress(Protocol):
    def candidate_starting(self, candidate: Candidate) -> None: ...

    def candidate_started(self, candidate: Candidate, seconds: float) -> None: ...

    def candidate_dropped(self, dropped: Dropped) -> None: ...

    def measurement_started(self, candidate: Candidate, rung: int, requests_per_point: int) -> None: ...

    def measurement_finished(self, candidate: Candidate, measurement: Measurement) -> None:
        """Called after the measurement is in the journal (an interruption here loses nothing)."""
        ...

    def rung_finished(self, rung: int, promoted: list[Candidate]) -> None: ...


class SilentProgress:
    """A ``TuneProgress`` that says nothing."""

    def candidate_starting(self, candidate: Candidate) -> None:
        return None

    def candidate_started(self, candidate: Candidate, seconds: float) -> None:
        return None

    def candidate_dropped(self, dropped: Dropped) -> None:
        return None

    def measurement_started(self, candidate: Candidate, rung: int, requests_per_point: int) -> None:
        return None

    def measurement_finished(self, candidate: Candidate, measurement: Measurement) -> None:
        return None

    def rung_finished(self, rung: int, promoted: list[Candidate]) -> None:
        return None
