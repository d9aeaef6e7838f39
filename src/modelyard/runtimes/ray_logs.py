"""Copying the output of a gang's ranks from their nodes into the per-start log file.

Each rank's supervisor keeps its engine's output in a file on its node; a copier task in the
server asks every rank for what is new (``read_log(offset)``) a few times a second and appends
it to ``<data-dir>/instances/<uid>/start-<n>.log``: rank 0's lines as they are, other ranks'
lines prefixed ``[rank N]`` (so the doctor's log signatures see every rank's failure). Asking
for an offset tells the supervisor all before it has been copied, so a re-adopted engine's
copier goes on from there (``copied_bytes``). A copier is drained once more when its engine
stops, so that the log holds the engine's last words.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from modelyard.runtimes.log_files import open_engine_log
from modelyard.runtimes.log_redactor import Redactor

logger = logging.getLogger(__name__)

COPY_INTERVAL_SECONDS = 0.25


class RankLogCopier:
    """Copies the logs of one gang's ranks (``actors[rank]``) into ``log_path``."""

    def __init__(
        self,
        actors: list[Any | None],
        log_path: Path,
        offsets: list[int] | None = None,
        secrets: frozenset[str] = frozenset(),
    ) -> None:
        self._actors = actors
        # The launch's secrets, masked in what the ranks print (a re-adopted engine's are unknown).
        self._redactors = [Redactor(secrets) for _ in actors]
        self._log_path = log_path
        self._offsets = offsets or [0] * len(actors)
        # A rank's partial last line, held until its newline (rank > 0 lines get a prefix).
        self._partial = [b""] * len(actors)
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"ray-log-copier {self._log_path.name}")

    async def _run(self) -> None:
        while True:
            try:
                await self.copy_once()
            except Exception:  # a rank that cannot answer now may answer later
                logger.debug("copying %s failed this time", self._log_path, exc_info=True)
            await asyncio.sleep(COPY_INTERVAL_SECONDS)

    async def copy_once(self) -> None:
        async with self._lock:
            for rank, actor in enumerate(self._actors):
                await self._copy_rank(rank, actor)

    async def _copy_rank(self, rank: int, actor: Any | None) -> None:
        while actor is not None:
            try:
                data: bytes = await actor.read_log.remote(self._offsets[rank])
            except Exception:
                return  # the rank is gone; what it wrote before is copied
            if not data:
                return
            self._offsets[rank] += len(data)
            self._write(rank, data)

    def _write(self, rank: int, data: bytes) -> None:
        data = self._redactors[rank].feed(data)
        if rank == 0:
            text = data
        else:
            lines = (self._partial[rank] + data).split(b"\n")
            self._partial[rank] = lines.pop()
            text = b"".join(f"[rank {rank}] ".encode() + line + b"\n" for line in lines)
        if text:
            with open_engine_log(self._log_path) as log_file:
                log_file.write(text)

    async def close(self, *, drain: bool) -> None:
        """Stop copying (after one last copy with ``drain``)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if drain:
            with contextlib.suppress(Exception):
                await self.copy_once()
            for rank, redactor in enumerate(self._redactors):
                if rank == 0:
                    self._write_zero(redactor.finish())
                else:
                    self._partial[rank] += redactor.finish()
            for rank, rest in enumerate(self._partial):
                if rest:
                    self._partial[rank] = b""
                    with open_engine_log(self._log_path) as log_file:
                        log_file.write(f"[rank {rank}] ".encode() + rest + b"\n")

    def _write_zero(self, text: bytes) -> None:
        if text:
            with open_engine_log(self._log_path) as log_file:
                log_file.write(text)
