"""The pure parts of benchmarks/gateway_capacity.py: the CPU lists and their split between the
gateway, the upstreams and the clients, and the streams split over the client processes."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def capacity() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("gateway_capacity")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_a_cpu_list_in_taskset_syntax_is_read_and_written_back(capacity: ModuleType) -> None:
    assert capacity.parse_cpus("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert capacity.cpu_list([5, 0, 1, 2, 10, 11]) == "0-2,5,10-11"


def test_a_cpu_named_twice_is_refused(capacity: ModuleType) -> None:
    with pytest.raises(ValueError, match="twice"):
        capacity.parse_cpus("0-3,2")


def test_sixteen_cpus_give_four_to_the_gateway_and_halve_the_rest(capacity: ModuleType) -> None:
    plan = capacity.split_cpus(list(range(16)), 4)
    assert plan.gateway == [0, 1, 2, 3]
    assert plan.upstreams == [4, 5, 6, 7, 8, 9]
    assert plan.clients == [10, 11, 12, 13, 14, 15]
    assert not plan.shared
    assert plan.gateway_for(2) == [0, 1]


def test_the_upstreams_share_can_be_chosen_but_must_leave_the_clients_a_cpu(capacity: ModuleType) -> None:
    assert capacity.split_cpus(list(range(16)), 4, 8).clients == [12, 13, 14, 15]
    with pytest.raises(ValueError, match="--upstream-cpus 12"):
        capacity.split_cpus(list(range(16)), 4, 12)


def test_two_cpus_let_the_upstreams_and_clients_share_the_second(capacity: ModuleType) -> None:
    plan = capacity.split_cpus([0, 1], 1)
    assert (plan.gateway, plan.upstreams, plan.clients, plan.shared) == ([0], [1], [1], True)


def test_a_gateway_that_takes_every_cpu_is_refused(capacity: ModuleType) -> None:
    with pytest.raises(ValueError, match="--workers"):
        capacity.split_cpus([0, 1], 2)


def test_streams_are_split_as_evenly_as_they_go(capacity: ModuleType) -> None:
    assert capacity.split_streams(1536, 6) == [256] * 6
    assert capacity.split_streams(10, 4) == [3, 3, 2, 2]
