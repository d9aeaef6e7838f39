"""The server's download manager: runs model tasks (pull, import, export, push) in the background.

The API stores a task as ``queued`` and pokes the manager. The manager, in the server's event
loop, claims queued tasks (at most ``parallel_tasks`` at once) and runs each on its own daemon
thread (``runners.run_task``); every ``progress_interval_seconds`` it writes their per-file
progress to the database. It owns its tasks in the database only, so that:

- a server restart (or a SIGKILL) finds the tasks it left ``running``, puts them back to
  ``queued`` and resumes them: each file continues from the bytes on disk with a Range request;
- a cancel sets ``cancel_requested`` (written by the API) and stops the run at its next chunk;
- a graceful shutdown stops the runs and leaves them ``queued`` for the next start (after
  ``shutdown_grace_seconds`` it stops waiting; daemon threads never hold the process).

Usage (``server/app.py``'s lifespan)::

    manager = DownloadManager(database, settings.models_dir, DownloadOptions.from_environment())
    await manager.start()
    ...
    await manager.shutdown()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelyard.downloads.options import DownloadOptions
from modelyard.downloads.progress import TaskProgress
from modelyard.downloads.push_runner import ModelPusher
from modelyard.downloads.records import (
    cancel_requests,
    claim_queued,
    finish_task,
    load_task,
    requeue_interrupted,
    write_progress,
)
from modelyard.downloads.runners import CANCELLED, SHUTDOWN, run_task
from modelyard.hub.transfer import StopSignal
from modelyard.store.database import Database

logger = logging.getLogger(__name__)

IDLE_CHECK_SECONDS = 5.0


@dataclass
class _Running:
    run: int
    progress: TaskProgress
    stop: StopSignal
    done: asyncio.Future[None]


class DownloadManager:
    """Implements ``DownloadsHandle`` (``server/context.py``) for the API."""

    def __init__(
        self,
        database: Database,
        models_dir: Path,
        options: DownloadOptions,
        *,
        pusher: ModelPusher | None = None,
        on_push_done: Callable[[], None] | None = None,
    ) -> None:
        self.database = database
        # How a push reaches the workers (``serve --cluster``), and who hears that one ended.
        self._pusher = pusher
        self._on_push_done = on_push_done
        self.options = options
        self.models_dir = options.models_directory(models_dir)
        self._running: dict[int, _Running] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        resumed = await asyncio.to_thread(requeue_interrupted, self.database)
        if resumed:
            logger.info("resuming model tasks %s, interrupted when the server stopped", resumed)
        self._task = asyncio.create_task(self._run(), name="modelyard-download-manager")

    async def shutdown(self) -> None:
        """Stop every run; what did not stop within the grace period is left ``queued``."""
        self._stopping = True
        for running in self._running.values():
            running.stop.stop(SHUTDOWN)
        pending = [running.done for running in self._running.values()]
        if pending:
            await asyncio.wait(pending, timeout=self.options.shutdown_grace_seconds)
        left = [(task_id, running) for task_id, running in self._running.items() if not running.done.done()]
        for task_id, running in left:
            files, done = running.progress.snapshot()
            await asyncio.to_thread(
                finish_task,
                self.database,
                task_id,
                "queued",
                "interrupted by a server shutdown; it resumes at the next start",
                files,
                done,
                run=running.run,
            )
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- what the API calls ------------------------------------------------------------------
    def poke(self) -> None:
        """A task was created, cancelled or resumed: look now (safe from any thread)."""
        if self._loop is None or self._wake is None:
            return
        wake = self._wake
        self._loop.call_soon_threadsafe(wake.set)

    def cancel(self, task_id: int) -> None:
        """Stop a run now (safe from any thread; the API has set ``cancel_requested``)."""
        if self._loop is None:
            return
        loop = self._loop
        loop.call_soon_threadsafe(lambda: loop.create_task(self._cancel(task_id)))

    async def _cancel(self, task_id: int) -> None:
        """The run's thread stops at its next chunk, or at the stall timeout when the hub is silent;
        it writes nothing after the stop, so the task is recorded cancelled at once and may be
        resumed while that thread still waits."""
        running = self._running.pop(task_id, None)
        if running is None:
            return
        running.stop.stop(CANCELLED)
        if not running.done.done():
            running.done.set_result(None)
        files, done = running.progress.snapshot()
        await asyncio.to_thread(
            finish_task, self.database, task_id, "cancelled", CANCELLED, files, done, run=running.run
        )
        if self._wake is not None:
            self._wake.set()

    def live(self, task_id: int) -> dict[str, Any] | None:
        """Rates and time left of a running task; None when it is not running here."""
        running = self._running.get(task_id)
        return running.progress.live() if running is not None else None

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            try:
                await self._start_queued()
                await self._flush_progress()
            except Exception:  # the database may be briefly unavailable; never stop the loop
                logger.exception("download manager tick failed")
            timeout = self.options.progress_interval_seconds if self._running else IDLE_CHECK_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            self._wake.clear()

    async def _start_queued(self) -> None:
        room = self.options.parallel_tasks - len(self._running)
        claimed = await asyncio.to_thread(claim_queued, self.database, room, set(self._running))
        for task_id, run in claimed:
            await self._launch(task_id, run)

    async def _launch(self, task_id: int, run: int) -> None:
        task = await asyncio.to_thread(load_task, self.database, task_id)
        if task is None:
            return
        assert self._loop is not None
        loop = self._loop
        done: asyncio.Future[None] = loop.create_future()
        running = _Running(run=run, progress=TaskProgress(task.files), stop=StopSignal(), done=done)
        self._running[task_id] = running

        def finished() -> None:
            if self._running.get(task_id) is running:
                del self._running[task_id]
            if not done.done():
                done.set_result(None)
            if self._wake is not None:
                self._wake.set()

        def work() -> None:
            try:
                run_task(
                    self.database, self.options, task_id, run, running.progress, running.stop, self._pusher
                )
            finally:
                if task.kind == "push" and self._on_push_done is not None:
                    self._on_push_done()
                loop.call_soon_threadsafe(finished)

        threading.Thread(target=work, name=f"modelyard-task-{task_id}", daemon=True).start()
        logger.info("started %s task %s for %s", task.kind, task_id, task.model_name)

    async def _flush_progress(self) -> None:
        if not self._running:
            return
        snapshots = {
            task_id: (running.run, *running.progress.snapshot()) for task_id, running in self._running.items()
        }
        await asyncio.to_thread(write_progress, self.database, snapshots)
        for task_id in await asyncio.to_thread(cancel_requests, self.database, set(self._running)):
            await self._cancel(task_id)
