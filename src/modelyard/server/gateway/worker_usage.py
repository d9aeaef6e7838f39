"""Usage rows with gateway workers: journaled by the worker that answered, written once by the main process.

A worker journals each row (``usage_journal.py``: one ``write()`` before the answer's last bytes,
in its own segments ``<pid>-<n>.jsonl``) and sends the rows in batches (``UsageBatch``, every
``BATCH_DELAY_S`` or ``BATCH_ROWS`` rows, the journal ``fsync``'d first). The main process writes
them (``insert_usage_rows``: a row already there, by ``request_id``, is skipped) and answers
``UsageCommitted(through_sequence)``, after which the worker deletes the segments that hold only
committed rows. Whatever is in a dead worker's segments is replayed by the main process before it
restarts the worker; at the server's start, every segment left by an earlier run is replayed
before any worker serves. So each answered request is one row, across worker crashes and server
SIGKILLs alike.

Usage::

    usage = WorkerUsage(channel, UsageJournal.open(journal_directory))   # in a worker
    usage.record(row)                                                    # per request
    usage.committed(message.through_sequence)                           # on UsageCommitted

    writer = WorkerUsageWriter(database, acknowledge=send_committed)     # in the main process
    writer.start()
    writer.accept(worker_index, rows, through_sequence)                 # on UsageBatch
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError

from modelyard.server.gateway.messages import Channel, UsageBatch
from modelyard.server.gateway.usage import UsageRow, insert_usage_rows
from modelyard.server.gateway.usage_journal import UsageJournal
from modelyard.store.database import Database
from modelyard.store.storage_errors import is_storage_full

logger = logging.getLogger(__name__)

BATCH_DELAY_S = 0.1
BATCH_ROWS = 256
RETRY_DELAY_S = 1.0


class WorkerUsage:
    """The worker's usage sink: journal, then batch to the main process."""

    def __init__(self, channel: Channel, journal: UsageJournal) -> None:
        self._channel = channel
        self.journal = journal
        self._rows: list[UsageRow] = []
        self._through = 0
        self._scheduled: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def record(self, row: UsageRow) -> None:
        sequence = self.journal.append(row.to_values())
        self._through = max(self._through, sequence)
        self._rows.append(row)
        if len(self._rows) >= BATCH_ROWS:
            self.flush()
        elif self._scheduled is None:
            self._scheduled = asyncio.get_running_loop().call_later(BATCH_DELAY_S, self.flush)

    def flush(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        if not self._rows:
            return
        batch = UsageBatch(rows=[row.to_json() for row in self._rows], through_sequence=self._through)
        self._rows = []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: UsageBatch) -> None:
        # On disk before the main process writes it to the database (a power cut loses at most
        # one batch delay of rows, as in one process).
        await asyncio.to_thread(self.journal.sync)
        self._channel.send(batch)

    async def close(self) -> None:
        """Send what is left (its segments stay until the main process says it is in)."""
        self.flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        self.journal.close()

    def committed(self, through_sequence: int) -> None:
        self.journal.committed_through(through_sequence)


@dataclass
class _Pending:
    worker: int
    rows: list[UsageRow]
    through_sequence: int


@dataclass
class WorkerUsageWriter:
    """The main process's writer of the workers' rows; acknowledges each worker's batches."""

    database: Database
    # acknowledge(worker index, through_sequence): send that worker ``UsageCommitted``.
    acknowledge: Callable[[int, int], None]
    # Called in the writer's thread once rows are in usage_records (the quotas' ledger).
    after_insert: Callable[[list[UsageRow]], None] = lambda rows: None
    failure: str | None = None
    written_rows: int = 0
    _pending: list[_Pending] = field(default_factory=list)
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._drain(), name="worker-usage-writer")

    def accept(self, worker: int, rows: list[UsageRow], through_sequence: int) -> None:
        self._pending.append(_Pending(worker, rows, through_sequence))
        self._wakeup.set()

    async def flush(self) -> None:
        """Write what was accepted so far (tests, shutdown)."""
        while self._pending:
            if not await self._write_pending():
                return

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()

    async def _drain(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not await self._write_pending():
                await asyncio.sleep(RETRY_DELAY_S)  # the database refused: keep the rows, try again
                self._wakeup.set()

    async def _write_pending(self) -> bool:
        batches, self._pending = self._pending, []
        if not batches:
            return True
        rows = [row for batch in batches for row in batch.rows]
        values = [row.to_values() for row in rows]
        try:
            await asyncio.to_thread(self._insert, values, rows)
        except SQLAlchemyError as error:
            self._pending = batches + self._pending
            reason = "the disk is full" if is_storage_full(error) else type(error).__name__
            if self.failure is None:
                logger.exception("could not write %d usage rows to usage_records (%s)", len(values), reason)
            self.failure = f"usage_records cannot be written: {reason}; {len(values)} rows wait"
            return False
        if self.failure is not None:
            logger.warning("usage rows are written to usage_records again")
            self.failure = None
        self.written_rows += len(values)
        through: dict[int, int] = {}
        for batch in batches:
            through[batch.worker] = max(through.get(batch.worker, 0), batch.through_sequence)
        for worker, sequence in through.items():
            self.acknowledge(worker, sequence)
        return True

    def _insert(self, values: list[dict[str, object]], rows: list[UsageRow]) -> None:
        with self.database.engine.begin() as connection:
            insert_usage_rows(connection, values)
        self.after_insert(rows)
