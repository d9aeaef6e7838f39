"""Where a ``pytest -n N --dist loadgroup`` run spends its time: each worker's busy seconds and the
groups that took longest (``tests/parallel_groups.py``), printed after the durations.

A group runs whole on one worker, so the run can never be shorter than its longest group; a
worker far busier than the others means the groups are not balanced. The figures are the sum of
each test's setup, call and teardown as its worker reported them (a session fixture's cost lands
on the first test that asked for it).

Whether more workers would help: the host's CPU over the run (every process on it: the servers
and engines the tests start, the checks beside them, anything else running there), and each
worker's own CPU with that of the processes it started and waited for (servers, CLI calls; not
Ray's daemons). A host busy on every core gains nothing from more workers; one far below that
is waiting, and does.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from parallel_groups import marked_group

SHOWN_GROUPS = 12
SPREAD = "(no group: spread test by test over the workers)"
PROC_STAT = Path("/proc/stat")
CPU_SECONDS_KEY = "modelyard_cpu_seconds"


def host_busy_seconds() -> float | None:
    """CPU seconds every core of this host has been busy since boot (Linux), None elsewhere."""
    try:
        fields = PROC_STAT.read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait are busy.
    ticks = [int(value) for value in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process's CPU and that of the children it waited for."""
    seconds = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        seconds += usage.ru_utime + usage.ru_stime
    return seconds


class GroupTimings:
    """Collects the reports on the controller (the workers send every report there)."""

    def __init__(self) -> None:
        self.worker_seconds: dict[str, float] = defaultdict(float)
        self.group_seconds: dict[str, float] = defaultdict(float)
        self.group_workers: dict[str, str] = {}
        self.worker_cpu_seconds: dict[str, float] = {}
        self.started_busy_seconds: float | None = None
        self.started_at = time.monotonic()

    def start(self) -> None:
        self.started_busy_seconds = host_busy_seconds()
        self.started_at = time.monotonic()

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
        if self.worker_cpu_seconds:
            lines.append(
                "CPU seconds per worker (with the processes it waited for): "
                + ", ".join(
                    f"{worker} {seconds:.0f} s" for worker, seconds in sorted(self.worker_cpu_seconds.items())
                )
            )
        busy_now = host_busy_seconds()
        if self.started_busy_seconds is not None and busy_now is not None:
            busy = busy_now - self.started_busy_seconds
            wall = time.monotonic() - self.started_at
            lines.append(
                f"host CPU over the run: {busy:.0f} s busy in {wall:.0f} s, {busy / max(wall, 1e-9):.2f} of "
                f"{os.cpu_count()} cores (every process on the host)"
            )
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


def pytest_sessionstart(session: pytest.Session) -> None:
    _timings.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    output: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if output is not None:  # on a worker: its CPU goes to the controller with its last message
        output[CPU_SECONDS_KEY] = own_cpu_seconds()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    output = getattr(node, "workeroutput", None) or {}
    if CPU_SECONDS_KEY in output:
        _timings.worker_cpu_seconds[str(node.gateway.id)] = float(output[CPU_SECONDS_KEY])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = _timings.lines()
    if lines:
        terminalreporter.section("time per worker and longest groups")
        for line in lines:
            terminalreporter.write_line(line)
