"""The usage journal: rows on disk before the answer ends, replayed once after a crash."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sqlalchemy import func, select

from modelyard.server.gateway.usage import (
    TokenUsage,
    UsageRecorder,
    UsageRow,
    replay_journal,
    replay_segments,
)
from modelyard.server.gateway.usage_journal import UsageJournal, journal_segments
from modelyard.store.database import Database
from modelyard.store.tables import UsageRecord


def _row(index: int) -> UsageRow:
    return UsageRow(
        api_key_id=None,
        deployment_name="demo",
        endpoint="/v1/chat/completions",
        usage=TokenUsage(prompt_tokens=index, completion_tokens=1),
    )


def _count(database: Database) -> int:
    with database.session() as session:
        return int(session.scalar(select(func.count()).select_from(UsageRecord)) or 0)


def _journal_written_by_another_process(directory: Path, rows: list[UsageRow]) -> None:
    """What a killed server leaves: a segment named after another pid, not yet deleted."""
    journal = UsageJournal.open(directory)
    for row in rows:
        journal.append(row.to_values())
    journal.close()
    for segment in journal_segments(directory):
        segment.rename(segment.with_name(f"{os.getpid() + 1}-{segment.name.split('-', 1)[1]}"))


def test_rows_journaled_by_a_killed_server_are_written_once_at_the_next_start(
    database_url: str, tmp_path: Path
) -> None:
    database = Database.open(database_url)
    directory = tmp_path / "usage-journal"
    rows = [_row(index) for index in range(25)]
    # The killed server had written the first ten to the database before it died.
    recorder = UsageRecorder(database)
    asyncio.run(_record_and_close(recorder, rows[:10]))
    _journal_written_by_another_process(directory, rows)

    assert replay_journal(database, directory) == 25
    assert _count(database) == 25
    assert journal_segments(directory) == []
    assert replay_journal(database, directory) == 0
    database.close()


def test_a_segment_gone_before_its_replay_is_skipped_and_the_others_are_written(
    database_url: str, tmp_path: Path
) -> None:
    # As at a server's stop, when a worker's exit and the stop replay the same journal: a segment
    # listed by one can be deleted by the other before it is read.
    database = Database.open(database_url)
    directory = tmp_path / "usage-journal"
    _journal_written_by_another_process(directory, [_row(index) for index in range(1000, 1007)])
    segments = journal_segments(directory)
    gone = directory / f"{os.getpid() + 2}-0.jsonl"
    assert not gone.exists()

    assert replay_segments(database, [gone, *segments]) == 7
    assert _count(database) == 7
    assert journal_segments(directory) == []
    database.close()


async def _record_and_close(recorder: UsageRecorder, rows: list[UsageRow]) -> None:
    recorder.start()
    for row in rows:
        recorder.record(row)
    await recorder.close()


def test_a_segment_is_deleted_once_its_rows_are_in_the_database(database_url: str, tmp_path: Path) -> None:
    database = Database.open(database_url)
    journal = UsageJournal.open(tmp_path / "usage-journal", segment_rows=4)
    recorder = UsageRecorder(database, journal=journal, batch_delay_s=0)
    asyncio.run(_record_and_close(recorder, [_row(index) for index in range(10)]))
    assert _count(database) == 10
    assert journal_segments(tmp_path / "usage-journal") == []
    database.close()


def test_a_journal_that_cannot_be_written_is_reported_and_the_row_still_reaches_the_database(
    database_url: str,
) -> None:
    database = Database.open(database_url)
    # /dev/full is a device: no segment can ever be made under it, whoever runs the test.
    journal = UsageJournal(Path("/dev/full/usage-journal"))
    recorder = UsageRecorder(database, journal=journal, batch_delay_s=0)
    asyncio.run(_record_and_close(recorder, [_row(1)]))
    assert recorder.failure is not None and "usage journal in /dev/full/usage-journal" in recorder.failure
    assert _count(database) == 1
    database.close()


def test_a_segment_journaled_before_ttft_was_recorded_replays_beside_newer_rows(
    database_url: str, tmp_path: Path
) -> None:
    """A line written by a server before revision 0015 has no ``ttft_ms``: replayed in one INSERT
    with rows that have one, it is stored with none (every row of a multi-row INSERT must name the
    same columns: without the default the whole segment would be refused)."""
    database = Database.open(database_url)
    directory = tmp_path / "usage-journal"
    older, newer = _row(1).to_values(), {**_row(2).to_values(), "ttft_ms": 123.5}
    del older["ttft_ms"]
    _journal_written_by_another_process(directory, [])
    journal = UsageJournal.open(directory)
    journal.append(older)
    journal.append(newer)
    journal.close()
    for segment in journal_segments(directory):
        segment.rename(segment.with_name(f"{os.getpid() + 1}-{segment.name.split('-', 1)[1]}"))

    assert replay_journal(database, directory) == 2
    with database.session() as session:
        stored = session.execute(
            select(UsageRecord.prompt_tokens, UsageRecord.ttft_ms).order_by(UsageRecord.id)
        )
        assert [tuple(row) for row in stored] == [(1, None), (2, 123.5)]
    database.close()


def test_a_rows_ttft_crosses_from_a_worker_to_the_main_process() -> None:
    """``UsageBatch`` carries rows as flat lists: the time to first token is the ninth item, and a
    list without one (a worker of the version before) reads as none."""
    row = UsageRow(
        api_key_id=3,
        deployment_name="demo",
        endpoint="/v1/chat/completions",
        usage=TokenUsage(prompt_tokens=5, completion_tokens=7),
        ttft_ms=41.25,
    )
    carried = UsageRow.from_json(row.to_json())
    assert (carried.request_id, carried.usage, carried.ttft_ms) == (row.request_id, row.usage, 41.25)
    assert UsageRow.from_json(row.to_json()[:8]).ttft_ms is None
