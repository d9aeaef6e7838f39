"""ReplicaBalancer: least outstanding requests, round-robin among equals."""

from __future__ import annotations

from collections import Counter

from modelyard.control.endpoints import Endpoint
from modelyard.server.gateway.routing import REFUSED_HOLD_S, ReplicaBalancer


def endpoint(port: int) -> Endpoint:
    return Endpoint(
        deployment_name="demo",
        instance_id=port,
        base_url=f"http://127.0.0.1:{port}",
        served_model_name="demo",
    )


A, B, C = endpoint(1), endpoint(2), endpoint(3)


def test_the_least_busy_replica_is_chosen() -> None:
    balancer = ReplicaBalancer()
    balancer.acquire(A)
    balancer.acquire(A)
    balancer.acquire(B)
    assert [balancer.choose([A, B, C]) for _ in range(3)] == [C, C, C]


def test_idle_replicas_share_sequential_requests() -> None:
    balancer = ReplicaBalancer()
    chosen = Counter(balancer.choose([A, B, C]) for _ in range(30))
    assert chosen == Counter({A: 10, B: 10, C: 10})


def test_released_requests_no_longer_count() -> None:
    balancer = ReplicaBalancer()
    balancer.acquire(A)
    balancer.release(A)
    assert balancer.outstanding(A) == 0
    balancer.acquire(B)
    assert {balancer.choose([A, B]) for _ in range(4)} == {A}


def test_excluded_replicas_are_skipped_and_none_is_left_at_the_end() -> None:
    balancer = ReplicaBalancer()
    assert balancer.choose([A, B], exclude={A.base_url}) == B
    assert balancer.choose([A, B], exclude={A.base_url, B.base_url}) is None
    assert balancer.choose([A], exclude={A.base_url}) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_replica_that_refused_is_passed_over_while_another_is_ready() -> None:
    # A dead engine has nothing outstanding, so least-outstanding alone would pick it first.
    clock = FakeClock()
    balancer = ReplicaBalancer(clock=clock)
    for _ in range(3):
        balancer.acquire(B)
    balancer.refused(A)
    assert {balancer.choose([A, B]) for _ in range(4)} == {B}
    clock.now += REFUSED_HOLD_S
    assert {balancer.choose([A, B]) for _ in range(4)} == {A}


def test_when_every_replica_refused_one_is_still_tried() -> None:
    balancer = ReplicaBalancer(clock=FakeClock())
    balancer.refused(A)
    balancer.refused(B)
    balancer.acquire(A)
    assert balancer.choose([A, B]) == B
    assert balancer.choose([A]) == A
