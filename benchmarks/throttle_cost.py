"""What the API-key throttle costs per request, as ``gateway/access.py`` calls it.

Paths, each timed over ``--rounds`` calls, in microseconds per request:

- **good key** (a cached known key, the hot path): ``check``; while no address anywhere waits it
  reads one shared cell, without the lock; with some other address waiting it takes the lock;
- **bad key**: ``charge`` refused (an address past its allowance: the flood case), and ``charge``
  admitted then ``refund`` (a key the cache does not know yet, which turns out good);

on a private table (``--gateway-workers 0``) and on a shared one with its ``flock`` (gateway
workers). With ``--before SRC``, the same calls of the throttle in ``SRC/modelyard/server/
throttle.py`` (the per-process dict, check-then-count: ``check`` + ``succeeded`` for a good key,
``check`` refused for a bad one) are timed in the same run; the ratio is after / before.

    PYTHONPATH=src python benchmarks/throttle_cost.py --before /work/main/src
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from modelyard.errors import TooManyRequests
from modelyard.server.throttle import FailureThrottle
from modelyard.server.throttle_table import ThrottleTable

GUESSER, CLIENT, ELSEWHERE = "203.0.113.7", "198.51.100.20", "192.0.2.99"


def _per_call_us(call: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            call()
        best = min(best, (time.perf_counter() - started) / rounds * 1e6)
    return best


def _refused(throttle: Any, method: str) -> Callable[[], object]:
    def call() -> None:
        try:  # noqa: SIM105 - timed: a plain try costs less than contextlib.suppress
            getattr(throttle, method)(GUESSER)
        except TooManyRequests:
            pass

    return call


def _block(throttle: Any, method: str) -> None:
    for _ in range(6):
        try:
            getattr(throttle, method)(GUESSER)
        except TooManyRequests:
            return


def _load_before(source: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("throttle_before", source / "modelyard/server/throttle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _after(table: ThrottleTable, rounds: int) -> dict[str, float]:
    throttle = FailureThrottle(what="API key", base_delay_s=3600.0, table=table)
    figures = {"good key, nobody waits": _per_call_us(lambda: throttle.check(CLIENT), rounds)}

    def cold_good_key() -> None:
        throttle.charge(ELSEWHERE)
        throttle.refund(ELSEWHERE)

    figures["unknown key read, turns out good"] = _per_call_us(cold_good_key, rounds)
    _block(throttle, "charge")
    figures["good key, another address waits"] = _per_call_us(lambda: throttle.check(CLIENT), rounds)
    figures["bad key, address waits (429)"] = _per_call_us(_refused(throttle, "charge"), rounds)
    return figures


def _before(module: ModuleType, rounds: int) -> dict[str, float]:
    throttle = module.FailureThrottle(what="API key", base_delay_s=3600.0)

    def good_key() -> None:
        throttle.check(CLIENT)
        throttle.succeeded(CLIENT)

    figures = {"good key, nobody waits": _per_call_us(good_key, rounds)}
    figures["unknown key read, turns out good"] = _per_call_us(good_key, rounds)
    _block(throttle, "failed")
    figures["good key, another address waits"] = _per_call_us(good_key, rounds)
    figures["bad key, address waits (429)"] = _per_call_us(_refused(throttle, "check"), rounds)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--before", type=Path, help="a source tree with the earlier throttle.py")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        shared = ThrottleTable.create(Path(scratch) / "throttle.lock")
        try:
            columns = {
                "private": _after(ThrottleTable.private(), arguments.rounds),
                "shared (flock)": _after(shared, arguments.rounds),
            }
        finally:
            shared.close(unlink=True)
    if arguments.before is not None:
        columns = {"before": _before(_load_before(arguments.before), arguments.rounds), **columns}
    print(f"{'µs per request':36}" + "".join(f"{name:>16}" for name in columns))
    for path in next(iter(columns.values())):
        row = f"{path:36}" + "".join(f"{figures[path]:16.2f}" for figures in columns.values())
        if "before" in columns:
            row += f"   after/before: {columns['shared (flock)'][path] / columns['before'][path]:.2f}"
        print(row)


if __name__ == "__main__":
    main()
