"""The main process's side of the gateway workers: start them, keep them fed, restart them.

For each worker: a ``socketpair`` (the control channel, ``messages.py``) and one listening socket
of the public port, both inherited by ``python -m modelyard.server.gateway.worker``. Then:

- every change of the endpoint registry is sent to every worker as one ``EndpointsChanged``
  per event-loop turn (a burst of publishes sends one snapshot);
- ``invalidate()`` (the REST API, after a key changed) sends ``KeysChanged`` to every worker;
- ``UsageBatch`` rows go to the usage recorder, the only writer of ``usage_records``;
- after each batch is written, the quota ledger's totals that changed go to every worker as one
  ``QuotaUsage`` (``quota_ledger.py``);
- ``ReplicaRefused`` pokes the controller; ``MetricsSnapshot`` is kept for ``/metrics``;
- a worker that exits is restarted on the same socket after a short back-off, once its row of
  the shared counters is cleared (its requests in flight are gone);
- wrong API keys are counted in one shared table for every worker (``server/throttle_table.py``),
  made here and handed to each worker in its ``WorkerHello``.

Implements the context's ``GatewayHandle`` and ``KeyCacheHandle``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from modelyard.server.autoscale_wiring import wake_autoscaler
from modelyard.server.context import GatewayWorkerPlan, ServerContext
from modelyard.server.gateway.messages import (
    Channel,
    Drain,
    EndpointsChanged,
    KeysChanged,
    Message,
    MetricsSnapshot,
    QuotaUsage,
    ReplicaRefused,
    ReplicaWanted,
    UsageBatch,
    UsageCommitted,
    WorkerHello,
    WorkerReady,
)
from modelyard.server.gateway.quota_ledger import QuotaLedger
from modelyard.server.gateway.runtime import GatewayRuntime, GatewaySettings, journal_directory
from modelyard.server.gateway.shared_counters import SharedCounters
from modelyard.server.gateway.usage import UsageRow, replay_journal
from modelyard.server.gateway.worker_usage import WorkerUsageWriter
from modelyard.server.metrics.gateway_counts import GatewayCounts, merge_snapshots
from modelyard.server.throttle import FailureThrottle
from modelyard.server.throttle_table import ThrottleTable
from modelyard.settings import default_gateway_workers as settings_default_gateway_workers

logger = logging.getLogger(__name__)

RESTART_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
DRAIN_GRACE_S = 10.0


@dataclass
class _Worker:
    index: int
    listen_socket: socket.socket
    process: asyncio.subprocess.Process | None = None
    channel: Channel | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    restarts: int = 0
    metrics: dict[str, Any] | None = None


class WorkerSupervisor:
    """Starts ``len(plan.sockets)`` gateway workers and serves as their main process."""

    def __init__(self, context: ServerContext, settings: GatewaySettings) -> None:
        plan = context.gateway_workers
        assert plan is not None
        self._context = context
        self._plan: GatewayWorkerPlan = plan
        self._settings = settings
        self._workers = [_Worker(index, sock) for index, sock in enumerate(plan.sockets)]
        self._counters = SharedCounters.create(len(self._workers))
        # Wrong API keys per address, counted in one table by every worker (server/throttle.py);
        # the main process's key throttle is the same table, read by /metrics.
        lock_path = Path(plan.api_socket_path).with_name("key-throttle.lock")
        self._key_throttle_table = ThrottleTable.create(lock_path)
        context.key_throttle = FailureThrottle(what="API key", table=self._key_throttle_table)
        self._ledger = QuotaLedger(context.database)
        self._usage = WorkerUsageWriter(
            context.database, acknowledge=self._usage_committed, after_insert=self._usage_inserted
        )
        # QuotaUsage made in the usage writer's thread, sent before the rows are acknowledged.
        self._quota_updates: list[QuotaUsage] = []
        self._quota_lock = threading.Lock()
        self._journal_failures: dict[int, str | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._snapshot_scheduled = False
        self._closing = False
        # The sum of the last snapshots of workers that exited: their counts stay in /metrics.
        self._retired = GatewayCounts()
        self._retired_requests: dict[int, int] = {}
        self._exited_pids: list[int] = []

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every worker; ``serving`` waits for them (the server starts its engines meanwhile)."""
        self._usage.start()
        self._context.endpoints.subscribe(self._endpoints_changed)
        for worker in self._workers:
            self._spawn_task(self._keep_running(worker), f"gateway-worker-{worker.index}")

    async def serving(self) -> None:
        """Returns once each worker has said it is serving (or at most 30 s after it is called)."""
        try:
            async with asyncio.timeout(30):
                await asyncio.gather(*(worker.ready.wait() for worker in self._workers))
        except TimeoutError:
            logger.warning("not every gateway worker was serving 30 s after start; see the lines above")

    async def close(self) -> None:
        """Drain the workers (they finish their requests), then write the last usage rows."""
        self._closing = True
        for worker in self._workers:
            if worker.channel is not None:
                worker.channel.send(Drain())
        processes = [worker.process for worker in self._workers if worker.process is not None]
        try:
            async with asyncio.timeout(DRAIN_GRACE_S + 2):
                await asyncio.gather(*(process.wait() for process in processes))
        except TimeoutError:
            for process in processes:
                if process.returncode is None:
                    process.kill()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._usage.close()
        # Whatever the workers journaled and the database did not get goes in now (or at the next start).
        await asyncio.to_thread(self._replay_exited, None)
        self._counters.close(unlink=True)
        self._key_throttle_table.close(unlink=True)

    # -- what the server calls ----------------------------------------------------------------------

    def invalidate(self) -> None:
        """A key was created, changed or revoked: every worker drops its key cache now."""
        self._ledger.forget()
        self._broadcast(KeysChanged())

    def in_process_runtime(self) -> GatewayRuntime | None:
        return None

    def gateway_counts(self) -> GatewayCounts:
        live = [worker.metrics for worker in self._workers if worker.metrics is not None]
        return merge_snapshots(live, [self._retired.snapshot()])

    def requests_by_worker(self) -> dict[str, int]:
        totals = dict(self._retired_requests)
        for worker in self._workers:
            if worker.metrics is not None:
                totals[worker.index] = totals.get(worker.index, 0) + _requests_in(worker.metrics)
        return {str(index): value for index, value in sorted(totals.items())}

    def shared_counters(self) -> SharedCounters:
        return self._counters

    def worker_pids(self) -> list[int]:
        return [
            w.process.pid for w in self._workers if w.process is not None and w.process.returncode is None
        ]

    async def flush_usage(self) -> None:
        """Wait until the usage rows received so far are written (tests, shutdown)."""
        await self._usage.flush()

    def usage_failure(self) -> str | None:
        """Why usage is not recorded durably right now: the database, or a worker's journal."""
        return self._usage.failure or next((f for f in self._journal_failures.values() if f), None)

    def _usage_committed(self, worker_index: int, through_sequence: int) -> None:
        # The quota totals that include these rows reach every worker first: a worker stops
        # counting its rows itself when it reads UsageCommitted (limits.py).
        with self._quota_lock:
            updates, self._quota_updates = self._quota_updates, []
        for update in updates:
            self._broadcast(update)
        channel = self._workers[worker_index].channel
        if channel is not None:
            channel.send(UsageCommitted(through_sequence))

    def _usage_inserted(self, rows: list[UsageRow]) -> None:
        """In the usage writer's thread: the quotas' totals, to every worker (``quota_ledger.py``)."""
        try:
            update = self._ledger.tally(rows)
        except Exception:  # the rows are written: nothing here may make the writer try them again
            logger.exception("could not read the token quotas' usage; each worker counts its own meanwhile")
            self._ledger.forget()
            return
        if update is not None:
            with self._quota_lock:
                self._quota_updates.append(update)

    def _replay_exited(self, pid: int | None) -> None:
        """Rows a worker journaled but the database did not get (all workers' when ``pid`` is None)."""
        directory = journal_directory(self._context.settings)
        try:
            if pid is None:
                for worker_pid in self._exited_pids:
                    replay_journal(self._context.database, directory, only_pid=worker_pid)
            else:
                replay_journal(self._context.database, directory, only_pid=pid)
        except SQLAlchemyError:
            logger.exception("could not replay the usage journal of gateway worker %s", pid)
        # Rows that came in by the journal, not by a batch: the quota totals are read again.
        self._ledger.forget()

    # -- endpoints -------------------------------------------------------------------------------

    def _endpoints_changed(self) -> None:
        if not self._snapshot_scheduled:
            self._snapshot_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_snapshot)

    def _send_snapshot(self) -> None:
        self._snapshot_scheduled = False
        self._broadcast(EndpointsChanged(self._context.endpoints.snapshot().to_json()))

    def _broadcast(self, message: Message) -> None:
        for worker in self._workers:
            if worker.channel is not None:
                worker.channel.send(message)

    # -- one worker ------------------------------------------------------------------------------

    def _spawn_task(self, work: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _keep_running(self, worker: _Worker) -> None:
        while not self._closing:
            status = await self._run_once(worker)
            if self._closing:
                return
            delay_s = RESTART_BACKOFF_S[min(worker.restarts, len(RESTART_BACKOFF_S) - 1)]
            worker.restarts += 1
            logger.warning(
                "gateway worker %d exited (%s); restarting it in %.1f s", worker.index, status, delay_s
            )
            await asyncio.sleep(delay_s)

    async def _run_once(self, worker: _Worker) -> str:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        listen_fd = worker.listen_socket.fileno()
        control_fd = theirs.fileno()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "modelyard.server.gateway.worker",
                "--index",
                str(worker.index),
                "--listen-fd",
                str(listen_fd),
                "--control-fd",
                str(control_fd),
                pass_fds=(listen_fd, control_fd),
                stdin=asyncio.subprocess.DEVNULL,
                # Not in the terminal's process group: Ctrl-C reaches the main process only, which
                # drains the workers; they die with it anyway (PR_SET_PDEATHSIG).
                start_new_session=True,
            )
        finally:
            theirs.close()
        worker.process = process
        channel = await Channel.open(ours)
        worker.channel = channel
        channel.send(self._hello(worker))
        try:
            await self._serve_channel(worker, channel)
        finally:
            worker.channel = None
            channel.close()
        code = await process.wait()
        self._exited_pids.append(process.pid)
        # Its rows that the database did not get are in its journal: in before it starts again.
        await self._usage.flush()
        await asyncio.to_thread(self._replay_exited, process.pid)
        if worker.metrics is not None:
            self._retired.add_snapshot(worker.metrics, live=False)
            requests = self._retired_requests.get(worker.index, 0) + _requests_in(worker.metrics)
            self._retired_requests[worker.index] = requests
            worker.metrics = None
        self._counters.clear_row(worker.index)
        return f"exit status {code}" if code >= 0 else f"signal {-code}"

    def _hello(self, worker: _Worker) -> WorkerHello:
        context = self._context
        return WorkerHello(
            index=worker.index,
            workers=len(self._workers),
            settings=self._settings.to_json(),
            endpoints=context.endpoints.snapshot().to_json(),
            shared_counters_name=self._counters.name,
            database_url=context.settings.database_url,
            api_socket_path=self._plan.api_socket_path,
            limits=dataclasses.asdict(context.limits),
            journal_directory=str(journal_directory(context.settings)),
            access_log=self._plan.access_log,
            key_throttle_name=self._key_throttle_table.name,
            key_throttle_lock_path=str(self._key_throttle_table.lock_path),
        )

    async def _serve_channel(self, worker: _Worker, channel: Channel) -> None:
        while (message := await channel.receive()) is not None:
            if isinstance(message, UsageBatch):
                rows = [UsageRow.from_json(row) for row in message.rows]
                self._usage.accept(worker.index, rows, message.through_sequence)
            elif isinstance(message, MetricsSnapshot):
                worker.metrics = message.counts
                self._journal_failures[worker.index] = message.journal_failure
            elif isinstance(message, ReplicaRefused):
                self._context.controller.poke()
            elif isinstance(message, ReplicaWanted):
                wake_autoscaler(self._context, message.deployment_name)
            elif isinstance(message, WorkerReady):
                worker.ready.set()
                logger.info("gateway worker %d serving (pid %d)", worker.index, message.pid)


def _requests_in(snapshot: dict[str, Any]) -> int:
    return sum(int(row[-1]) for row in snapshot.get("requests", []))


# Defined in settings.py, which `modelyard serve` reads before it binds (this package is heavy).
default_gateway_workers = settings_default_gateway_workers
