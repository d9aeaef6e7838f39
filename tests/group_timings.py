"""Where a ``pytest -n N --dist loadgroup`` run spends its time: each worker's busy seconds and the
groups that took longest (``tests/parallel_groups.py``), printed after the durations.

A group runs whole on one worker, so the run can never be shorter than its longest group; a
worker far busier than the others means the groups are not balanced. The figures are the sum of
each test's setup, call and teardown as its worker reported them (a session fixture's cost lands
on the first test that asked for it).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from parallel_groups import marked_group

SHOWN_GROUPS = 12
SPREAD = "(no group: spread test by test over the workers)"


class GroupTimings:
    """Collects the reports on the controller (the workers send every report there)."""

    def __init__(self) -> None:
        self.worker_seconds: dict[str, float] = defaultdict(float)
        self.group_seconds: dict[str, float] = defaultdict(float)
        self.group_workers: dict[str, str] = {}

    def add(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
        self.worker_seconds[worker] += report.duration
        group = next(
            (
                str(value)
                for name, value in report.user_properties
                if name == "xdist_group" and isinstance(value, str)
            ),
            None,
        )
        if group is None:
            self.group_seconds[SPREAD] += report.duration
            return
        self.group_seconds[group] += report.duration
        self.group_workers.setdefault(group, worker)

    def lines(self) -> list[str]:
        if not self.group_seconds:
            return []
        lines = [
            "busy seconds per worker: "
            + ", ".join(
                f"{worker} {seconds:.0f} s" for worker, seconds in sorted(self.worker_seconds.items())
            )
        ]
        longest = sorted(self.group_seconds.items(), key=lambda entry: -entry[1])[:SHOWN_GROUPS]
        lines += [
            f"{seconds:8.1f} s  {group}"
            + (f"  (on {self.group_workers[group]})" if group in self.group_workers else "")
            for group, seconds in longest
        ]
        return lines


_timings = GroupTimings()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    group = marked_group(item)
    if group is not None:
        item.user_properties.append(("xdist_group", group))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if getattr(report, "node", None) is not None:  # on the controller, a worker's report
        _timings.add(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = _timings.lines()
    if lines:
        terminalreporter.section("time per worker and longest groups")
        for line in lines:
            terminalreporter.write_line(line)
