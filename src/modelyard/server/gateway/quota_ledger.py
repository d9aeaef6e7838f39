"""In the main process: what each key with a token quota has used this period, from every worker.

Every usage row reaches the main process once (``UsageBatch``). After a batch is written to
``usage_records``, ``tally`` adds its tokens to the period total of each key that has a quota
(read once from ``usage_records`` when the key is first seen in a period, so it includes earlier
runs), and the supervisor broadcasts the totals that changed as one ``QuotaUsage``. A worker then
refuses a key whose recorded total plus what it has running leaves no room for a request
(``limits.py``), although the tokens were used through another worker.

What is missed: rows written without a batch (a dead worker's journal, replayed before it
restarts): ``forget`` drops every total, and the next batch reads them again from the table.

Usage::

    ledger = QuotaLedger(database)
    update = ledger.tally(rows)           # blocking: in the usage writer's thread, after the insert
    if update is not None:
        broadcast(update)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select

from modelyard.server.gateway.limits import QuotaPeriod, period_start
from modelyard.server.gateway.messages import QuotaUsage
from modelyard.server.gateway.usage import UsageRow, tokens_used_since
from modelyard.store.database import Database
from modelyard.store.tables import ApiKey


@dataclass
class QuotaLedger:
    database: Database
    clock: Callable[[], float] = time.time
    # key id -> its quota period ("day", "month"), None when it has no quota.
    _periods: dict[int, QuotaPeriod | None] = field(default_factory=dict)
    _used: dict[tuple[int, datetime], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def forget(self) -> None:
        """Keys changed, or rows arrived another way: read periods and totals again when next needed."""
        with self._lock:
            self._periods.clear()
            self._used.clear()

    def tally(self, rows: list[UsageRow]) -> QuotaUsage | None:
        """Add rows that are now in ``usage_records``; the totals that changed, or None (blocking)."""
        tokens_by_key: dict[int, list[UsageRow]] = {}
        for row in rows:
            if row.api_key_id is not None:
                tokens_by_key.setdefault(row.api_key_id, []).append(row)
        if not tokens_by_key:
            return None
        with self._lock:
            periods = self._quota_periods(list(tokens_by_key))
            now = datetime.fromtimestamp(self.clock(), UTC)
            changed: list[tuple[int, float, int]] = []
            for key_id, key_rows in tokens_by_key.items():
                period = periods.get(key_id)
                if period is None:
                    continue
                start = period_start(period, now)
                known = self._used.get((key_id, start))
                if known is None:
                    total = tokens_used_since(self.database, key_id, start)  # this batch included
                else:
                    total = known + sum(_tokens(row) for row in key_rows if row.at >= start)
                self._used[(key_id, start)] = total
                changed.append((key_id, start.timestamp(), total))
        return QuotaUsage(used=changed) if changed else None

    def _quota_periods(self, key_ids: list[int]) -> dict[int, QuotaPeriod | None]:
        unknown = [key_id for key_id in key_ids if key_id not in self._periods]
        if unknown:
            with self.database.session() as session:
                query = select(ApiKey.id, ApiKey.quota_period).where(
                    ApiKey.id.in_(unknown), ApiKey.token_quota.is_not(None)
                )
                found = {key_id: period for key_id, period in session.execute(query).all()}
            for key_id in unknown:
                period = found.get(key_id)
                self._periods[key_id] = period if period in ("day", "month") else None  # type: ignore[assignment]
        return {key_id: self._periods.get(key_id) for key_id in key_ids}


def _tokens(row: UsageRow) -> int:
    return row.usage.prompt_tokens + row.usage.completion_tokens if row.usage is not None else 0
