"""Token metering: what the engine reported in ``usage``, written to ``usage_records`` in batches.

The gateway never counts tokens itself: a response without ``usage`` is recorded with
``usage_reported=False`` and zero tokens. ``UsageRecorder.record`` only appends to an in-memory
queue; one task drains it and writes each batch in a worker thread, so the event loop never waits
on the database.

Usage::

    recorder = UsageRecorder(database)
    recorder.start()                      # inside the running event loop
    recorder.record(UsageRow(...))        # per request, never blocks
    await recorder.close()                # at shutdown: writes what is left
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import SQLAlchemyError

from modelyard.store.database import Database
from modelyard.store.tables import UsageRecord, utc_now

logger = logging.getLogger(__name__)

USAGE_MARKER = b'"usage"'


@dataclass(frozen=True, slots=True)
class TokenUsage:
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def from_payload(cls, usage: Any) -> TokenUsage | None:
        """From an OpenAI ``usage`` object; None when it is absent or has no token counts."""
        if not isinstance(usage, dict):
            return None
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens", 0)  # embeddings report none
        if not isinstance(prompt_tokens, int) or not isinstance(completion_tokens, int):
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
        }


class UsageRecorder:
    """Batches ``UsageRow``s into ``usage_records`` off the event loop.

    ``batch_delay_s`` is how long the drain task waits after the first row of a batch for others
    to join it; ``max_queued_rows`` bounds memory when the database is slower than the traffic
    (rows beyond it are dropped with one warning per batch, never blocking a request).
    """

    def __init__(
        self,
        database: Database,
        *,
        batch_delay_s: float = 0.25,
        max_batch_rows: int = 1000,
        max_queued_rows: int = 100_000,
    ) -> None:
        self._database = database
        self._batch_delay_s = batch_delay_s
        self._max_batch_rows = max_batch_rows
        self._queue: asyncio.Queue[UsageRow] = asyncio.Queue(maxsize=max_queued_rows)
        self._task: asyncio.Task[None] | None = None
        self._dropped_rows = 0
        self.written_rows = 0

    def start(self) -> None:
        """Start the drain task (call from inside the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="usage-recorder")

    def record(self, row: UsageRow) -> None:
        """Queue one row; never blocks, never touches the database."""
        try:
            self._queue.put_nowait(row)
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
            return
        await self._queue.join()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    def _take_all(self) -> list[UsageRow]:
        rows: list[UsageRow] = []
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

    def _write(self, rows: list[UsageRow]) -> None:
        if self._dropped_rows:
            logger.warning(
                "usage queue was full: %d usage rows were dropped (the database is too slow)",
                self._dropped_rows,
            )
            self._dropped_rows = 0
        try:
            # One multi-row INSERT (Core, not ORM objects): a batch costs little more than a row.
            with self._database.engine.begin() as connection:
                connection.execute(insert(UsageRecord), [row.to_values() for row in rows])
        except SQLAlchemyError:
            # A metering failure must never fail requests; the rows are lost and the reason logged.
            logger.exception("could not write %d usage rows to usage_records", len(rows))
            return
        self.written_rows += len(rows)
