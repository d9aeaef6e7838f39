"""The survey of model files on the workers: which worker has each model, kept current.

``serve --cluster`` runs one ``WorkerModelSurvey`` beside the controller. A pass asks every
ready GPU worker about every servable model (``model_copies.survey_models`` as a Ray task pinned
to the worker: the directory there, every file with its size, the doctor's inspection) and writes
the answers to ``worker_models`` (``services/worker_models.record_survey``). A pass runs when a
worker joins (the ready workers changed), when poked (a model added or removed, a push ended),
and every ``SURVEY_SECONDS`` otherwise. A worker that leaves keeps its rows; the API shows it
``lost``. Placement reads the rows (``control/instance_store.py``).

Usage::

    survey = WorkerModelSurvey(database, cluster)
    await survey.start()
    survey.poke()
    await survey.shutdown()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol

from modelyard.cluster.model_copies import survey_models
from modelyard.services.worker_models import record_survey, survey_input
from modelyard.store.database import Database

if TYPE_CHECKING:
    from modelyard.cluster.workers import WorkerStatus

logger = logging.getLogger(__name__)

SURVEY_SECONDS = 30.0
# How often the ready workers are compared with the last pass's (no Ray call: the last read).
WATCH_SECONDS = 1.0


class SurveyedCluster(Protocol):
    def statuses(self) -> list[WorkerStatus]: ...

    def run_on(self, worker: str, function: Any, *arguments: Any) -> Any: ...


def ready_gpu_workers(cluster: SurveyedCluster) -> list[str]:
    return sorted(
        status.worker.name for status in cluster.statuses() if status.state == "ready" and status.worker.gpus
    )


class WorkerModelSurvey:
    def __init__(
        self, database: Database, cluster: SurveyedCluster, *, survey_seconds: float = SURVEY_SECONDS
    ) -> None:
        self._database = database
        self._cluster = cluster
        self._survey_seconds = survey_seconds
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        # Bumped after every pass (tests and the API can wait for the next one).
        self.passes = 0

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="modelyard-worker-model-survey")

    def poke(self) -> None:
        """Survey again now (safe from any thread)."""
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def survey_once(self) -> None:
        """One pass over the ready GPU workers (blocking: the loop runs it in a thread)."""
        with self._database.session() as session:
            models = survey_input(session)
        if not models:
            return
        asked = [{key: model[key] for key in ("name", "path", "files")} for model in models]
        for worker in ready_gpu_workers(self._cluster):
            try:
                answers = self._cluster.run_on(worker, survey_models, asked)
            except (LookupError, TimeoutError) as error:
                logger.info("no model survey of worker %s this time: %s", worker, error)
                continue
            except Exception:  # a Ray error on one worker must not stop the others' survey
                logger.exception("the model survey of worker %s failed", worker)
                continue
            with self._database.session() as session:
                record_survey(session, worker, models, answers)

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        seen: list[str] | None = None
        next_pass = loop.time()
        while True:
            ready = ready_gpu_workers(self._cluster)
            if ready != seen or loop.time() >= next_pass or self._wake.is_set():
                self._wake.clear()
                try:
                    await asyncio.to_thread(self.survey_once)
                except Exception:  # the database may be briefly unavailable; never stop the loop
                    logger.exception("model survey pass failed")
                seen = ready
                next_pass = loop.time() + self._survey_seconds
                self.passes += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=WATCH_SECONDS)
