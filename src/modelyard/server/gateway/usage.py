"""Token metering: what the engine reported in ``usage``, written to ``usage_records`` in batches.

The gateway never counts tokens itself: a response without ``usage`` is recorded with
``usage_reported=False`` and zero tokens. ``UsageRecorder.record`` only appends to an in-memory
queue; one task drains it and writes each batch in a worker thread, so the event loop never waits
on the database.

Every row is appended to the usage journal first (``usage_journal.py``): one ``write()`` made
before the answer's last bytes leave, so no answered request goes unrecorded across a crash;
the journal is replayed at start (``replay_journal``). A batch the database refuses (a full
disk) is kept and written with the next one, and stays in the journal meanwhile.

Usage::

    recorder = UsageRecorder(database, journal=UsageJournal.open(data_dir / "usage-journal"))
    recorder.start()                      # inside the running event loop
    recorder.record(UsageRow(...))        # per request, never blocks
    await recorder.close()                # at shutdown: writes what is left
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from modelyard.server.gateway.usage_journal import UsageJournal, journal_segments, read_segment
from modelyard.store.database import Database
from modelyard.store.storage_errors import is_storage_full
from modelyard.store.tables import UsageRecord, utc_now

logger = logging.getLogger(__name__)

USAGE_MARKER = b'"usage"'


@dataclass(frozen=True, slots=True)
class TokenUsage:
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def from_payload(cls, usage: Any) -> TokenUsage | None:
        """From a ``usage`` object; None when it is absent or has no token counts.

        OpenAI's chat, completions and embeddings: ``prompt_tokens`` / ``completion_tokens``;
        the Responses API and Anthropic's Messages: ``input_tokens`` / ``output_tokens``; vLLM's
        rerank and score: ``total_tokens`` alone (all of them input). Audio durations are not tokens.
        """
        if not isinstance(usage, dict):
            return None
        prompt_tokens = usage.get("prompt_tokens")
        if prompt_tokens is None:
            prompt_tokens = usage.get("input_tokens")
        completion_tokens = usage.get("completion_tokens")
        if completion_tokens is None:
            completion_tokens = usage.get("output_tokens", 0)  # embeddings report none
        if prompt_tokens is None and completion_tokens == 0:
            prompt_tokens = usage.get("total_tokens")
        if type(prompt_tokens) is not int or type(completion_tokens) is not int:
            return None
        return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def usage_from_body(body: bytes) -> TokenUsage | None:
    """The ``usage`` of a JSON response body without parsing the whole body.

    Engines put ``usage`` after ``choices`` / ``data``, so the last ``"usage"`` in the bytes is the
    top-level one; only the object after it is decoded (an embeddings body stays unparsed).
    """
    position = body.rfind(USAGE_MARKER)
    if position < 0:
        return None
    tail = body[position + len(USAGE_MARKER) :].lstrip()
    if not tail.startswith(b":"):
        return None
    try:
        text = tail[1:].decode("utf-8").lstrip()
        value, _end = json.JSONDecoder().raw_decode(text)
    except (UnicodeDecodeError, ValueError):
        return None
    return TokenUsage.from_payload(value)


# A random prefix per process and a counter: unique across processes and restarts without a
# uuid4 per request (os.urandom is a system call).
_ID_PREFIX = uuid.uuid4().hex[:16]
_id_counter = itertools.count(1)


def new_usage_id() -> str:
    return f"{_ID_PREFIX}{next(_id_counter):012x}"


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One request, as it will be stored in ``usage_records``."""

    api_key_id: int | None
    deployment_name: str
    # The gateway path, e.g. "/v1/chat/completions".
    endpoint: str
    usage: TokenUsage | None
    # The status the client saw; 502 for a stream the engine cut.
    status_code: int = 200
    at: datetime = field(default_factory=utc_now)
    # Unique per request: a row replayed from the journal is written once.
    request_id: str = field(default_factory=lambda: new_usage_id())
    # Time to first token (ms), as the gateway saw it (``ttft_ms_of`` in proxy.py); None: none.
    ttft_ms: float | None = None

    def to_json(self) -> list[Any]:
        """For the trip from a gateway worker to the main process (``UsageBatch``), a flat list:
        ``[key id, deployment, endpoint, prompt tokens|None, completion tokens|None, status, unix
        time, request id, ttft ms|None]``."""
        usage = self.usage
        return [
            self.api_key_id,
            self.deployment_name,
            self.endpoint,
            None if usage is None else usage.prompt_tokens,
            None if usage is None else usage.completion_tokens,
            self.status_code,
            self.at.timestamp(),
            self.request_id,
            self.ttft_ms,
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> UsageRow:
        key_id, deployment, endpoint, prompt_tokens, completion_tokens, status, at, request_id = data[:8]
        ttft_ms = data[8] if len(data) > 8 else None
        usage = None if prompt_tokens is None else TokenUsage(int(prompt_tokens), int(completion_tokens))
        return cls(
            api_key_id=None if key_id is None else int(key_id),
            deployment_name=str(deployment),
            endpoint=str(endpoint),
            usage=usage,
            status_code=int(status),
            at=datetime.fromtimestamp(float(at), UTC),
            request_id=str(request_id),
            ttft_ms=None if ttft_ms is None else float(ttft_ms),
        )

    def to_values(self) -> dict[str, Any]:
        """The column values of its ``usage_records`` row."""
        return {
            "api_key_id": self.api_key_id,
            "deployment_name": self.deployment_name,
            "endpoint": self.endpoint,
            "prompt_tokens": self.usage.prompt_tokens if self.usage else 0,
            "completion_tokens": self.usage.completion_tokens if self.usage else 0,
            "usage_reported": self.usage is not None,
            "status_code": self.status_code,
            "at": self.at,
            "request_id": self.request_id,
            "ttft_ms": self.ttft_ms,
        }


def insert_usage_rows(connection: Connection, values: list[dict[str, Any]]) -> None:
    """One multi-row INSERT; rows whose ``request_id`` is there already are skipped."""
    if connection.dialect.name == "postgresql":
        statement: Any = postgresql.insert(UsageRecord).on_conflict_do_nothing(index_elements=["request_id"])
    elif connection.dialect.name == "sqlite":
        statement = sqlite.insert(UsageRecord).on_conflict_do_nothing(index_elements=["request_id"])
    else:
        statement = insert(UsageRecord)
    connection.execute(statement, values)


def tokens_used_since(database: Database, key_id: int, since: datetime) -> int:
    """Prompt and completion tokens of ``key_id``'s requests since ``since`` (a quota's period)."""
    with database.session() as session:
        total = session.scalar(
            select(
                func.coalesce(func.sum(UsageRecord.prompt_tokens + UsageRecord.completion_tokens), 0)
            ).where(UsageRecord.api_key_id == key_id, UsageRecord.at >= since)
        )
    return int(total or 0)


def replay_journal(
    database: Database, directory: Path, *, batch_rows: int = 1000, only_pid: int | None = None
) -> int:
    """Write the rows that earlier processes journaled (skipping those already written), then
    delete their segments; ``only_pid``: only that (dead) process's, e.g. a gateway worker before
    it is restarted. Returns how many rows were read. Blocking: call before serving."""
    exclude = None if only_pid is not None else os.getpid()
    segments = journal_segments(directory, exclude_pid=exclude, only_pid=only_pid)
    replayed = replay_segments(database, segments, batch_rows=batch_rows)
    if replayed:
        logger.info("replayed %d usage rows from the usage journal in %s", replayed, directory)
    return replayed


def replay_segments(database: Database, segments: list[Path], *, batch_rows: int = 1000) -> int:
    """Write the rows of these journal segments (skipping those already written) and delete them.

    A segment can go between its listing and its reading: its worker deleted it once the main
    process had its rows, or another replay (a worker's exit and the server's stop) wrote it
    first. Either way its rows are in the database, so it is skipped."""
    replayed = 0
    for segment in segments:
        try:
            rows = list(read_segment(segment))
        except FileNotFoundError:
            continue
        with database.engine.begin() as connection:
            for start in range(0, len(rows), batch_rows):
                insert_usage_rows(connection, rows[start : start + batch_rows])
        replayed += len(rows)
        segment.unlink(missing_ok=True)
    return replayed


class UsageRecorder:
    """Batches ``UsageRow``s into ``usage_records`` off the event loop, journaled first.

    ``batch_delay_s`` is how long the drain task waits after the first row of a batch for others
    to join it; ``max_queued_rows`` bounds memory when the database is slower than the traffic
    (rows beyond it are dropped with one warning per batch, never blocking a request; they stay
    in the journal and are written at the next start). A batch the database refuses is kept and
    tried again with the next (up to ``max_queued_rows`` rows), the reason in ``failure``.
    """

    def __init__(
        self,
        database: Database,
        *,
        journal: UsageJournal | None = None,
        batch_delay_s: float = 0.25,
        max_batch_rows: int = 1000,
        max_queued_rows: int = 100_000,
    ) -> None:
        self._database = database
        self._journal = journal
        self._batch_delay_s = batch_delay_s
        self._max_batch_rows = max_batch_rows
        self._max_queued_rows = max_queued_rows
        self._queue: asyncio.Queue[tuple[UsageRow, int]] = asyncio.Queue(maxsize=max_queued_rows)
        self._task: asyncio.Task[None] | None = None
        self._dropped_rows = 0
        # Rows the database refused, written first with the next batch.
        self._retry: list[tuple[UsageRow, int]] = []
        self._database_failure: str | None = None
        self.written_rows = 0

    @property
    def failure(self) -> str | None:
        """Why usage is not being recorded durably right now (None: it is)."""
        journal_failure = self._journal.failure if self._journal is not None else None
        return journal_failure or self._database_failure

    def start(self) -> None:
        """Start the drain task (call from inside the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="usage-recorder")

    def record(self, row: UsageRow) -> None:
        """Journal one row (one ``write()``) and queue it; never blocks on the database."""
        sequence = self._journal.append(row.to_values()) if self._journal is not None else 0
        try:
            self._queue.put_nowait((row, sequence))
        except asyncio.QueueFull:
            self._dropped_rows += 1

    async def flush(self) -> None:
        """Wait until every row queued so far is written (or failed to be)."""
        await self._queue.join()

    async def close(self) -> None:
        """Write what is queued, then stop the drain task."""
        if self._task is None:
            rows = self._take_all()
            if rows:
                await asyncio.to_thread(self._write, rows)
        else:
            await self._queue.join()
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._journal is not None:
            self._journal.close()
            if not self._retry:
                self._journal.committed_through(self._journal.last_sequence)

    def _take_all(self) -> list[tuple[UsageRow, int]]:
        rows: list[tuple[UsageRow, int]] = []
        while not self._queue.empty() and len(rows) < self._max_batch_rows:
            rows.append(self._queue.get_nowait())
        return rows

    async def _drain(self) -> None:
        while True:
            first = await self._queue.get()
            if self._batch_delay_s > 0 and self._queue.qsize() < self._max_batch_rows - 1:
                await asyncio.sleep(self._batch_delay_s)
            rows = [first, *self._take_all()]
            try:
                await asyncio.to_thread(self._write, rows)
            finally:
                for _ in rows:
                    self._queue.task_done()

    def _write(self, rows: list[tuple[UsageRow, int]]) -> None:
        if self._dropped_rows:
            logger.warning(
                "usage queue was full: %d usage rows were dropped (the database is too slow); "
                "they are in the usage journal and are written at the next start",
                self._dropped_rows,
            )
            self._dropped_rows = 0
        batch = [*self._retry, *rows]
        if self._journal is not None:
            self._journal.sync()
        try:
            # One multi-row INSERT (Core, not ORM objects): a batch costs little more than a row.
            with self._database.engine.begin() as connection:
                insert_usage_rows(connection, [row.to_values() for row, _ in batch])
        except SQLAlchemyError as error:
            # Metering never fails requests: the rows wait (in memory and in the journal).
            self._retry = batch[-self._max_queued_rows :]
            reason = "the disk is full" if is_storage_full(error) else type(error).__name__
            if self._database_failure is None:
                logger.exception("could not write %d usage rows to usage_records (%s)", len(batch), reason)
            self._database_failure = (
                f"usage_records cannot be written: {reason}; {len(self._retry)} rows wait"
            )
            return
        self._retry = []
        if self._database_failure is not None:
            logger.warning("usage rows are written to usage_records again")
            self._database_failure = None
        self.written_rows += len(batch)
        if self._journal is not None:
            self._journal.committed_through(max(sequence for _, sequence in batch))
