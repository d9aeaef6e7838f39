"""ReplicaBalancer: least outstanding requests (across workers), round-robin among equals."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from modelyard.control.endpoints import Endpoint
from modelyard.server.gateway.routing import REFUSED_HOLD_S, ReplicaBalancer
from modelyard.server.gateway.shared_counters import SharedCounters


def endpoint(port: int) -> Endpoint:
    return Endpoint(
        deployment_name="demo",
        instance_id=port,
        base_url=f"http://127.0.0.1:{port}",
        served_model_name="demo",
        counter_column=port,
    )


def new_balancer(clock: Callable[[], float] | None = None) -> ReplicaBalancer:
    table = SharedCounters.private().table("endpoint_requests")
    return ReplicaBalancer(table) if clock is None else ReplicaBalancer(table, clock=clock)


A, B, C = endpoint(1), endpoint(2), endpoint(3)


def test_the_least_busy_replica_is_chosen() -> None:
    balancer = new_balancer()
    balancer.acquire(A)
    balancer.acquire(A)
    balancer.acquire(B)
    assert [balancer.choose([A, B, C]) for _ in range(3)] == [C, C, C]


def test_idle_replicas_share_sequential_requests() -> None:
    balancer = new_balancer()
    chosen = Counter(balancer.choose([A, B, C]) for _ in range(30))
    assert chosen == Counter({A: 10, B: 10, C: 10})


def test_released_requests_no_longer_count() -> None:
    balancer = new_balancer()
    balancer.acquire(A)
    balancer.release(A)
    assert balancer.outstanding(A) == 0
    balancer.acquire(B)
    assert {balancer.choose([A, B]) for _ in range(4)} == {A}


def test_excluded_replicas_are_skipped_and_none_is_left_at_the_end() -> None:
    balancer = new_balancer()
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
    balancer = new_balancer(clock)
    for _ in range(3):
        balancer.acquire(B)
    balancer.refused(A)
    assert {balancer.choose([A, B]) for _ in range(4)} == {B}
    clock.now += REFUSED_HOLD_S
    assert {balancer.choose([A, B]) for _ in range(4)} == {A}


def test_when_every_replica_refused_one_is_still_tried() -> None:
    balancer = new_balancer(FakeClock())
    balancer.refused(A)
    balancer.refused(B)
    balancer.acquire(A)
    assert balancer.choose([A, B]) == B
    assert balancer.choose([A]) == A


def test_requests_in_flight_through_another_worker_count_too() -> None:
    # Two workers' balancers on one shared table, each writing its own row.
    counters = SharedCounters.create(workers=2)
    try:
        own = ReplicaBalancer(counters.table("endpoint_requests"))
        other_view = SharedCounters(counters._views[0], workers=2, row=1, memory=None)
        other = ReplicaBalancer(other_view.table("endpoint_requests"))
        for _ in range(3):
            other.acquire(A)
        own.acquire(B)
        assert own.outstanding(A) == 3 and other.outstanding(B) == 1
        assert {own.choose([A, B, C]) for _ in range(3)} == {C}
        own.acquire(C)
        own.acquire(C)
        assert own.choose([A, B, C]) == B
        counters.clear_row(1)  # worker 1 died: its requests are gone
        assert own.outstanding(A) == 0
        other_view.close()
    finally:
        counters.close(unlink=True)


def test_a_prompt_prefix_keeps_its_replica_in_any_order_of_the_list() -> None:
    balancer = new_balancer()
    chosen = {balancer.choose_by_prefix(order, 12345, 1.25) for order in ([A, B, C], [C, A, B], [B, C, A])}
    assert len(chosen) == 1
    # Other prefixes land on the other replicas too (rendezvous hashing spreads them).
    assert {balancer.choose_by_prefix([A, B, C], key, 1.25) for key in range(64)} == {A, B, C}


def test_a_prefix_replica_busier_than_the_bound_gives_way_to_the_least_busy() -> None:
    balancer = new_balancer()
    home = balancer.choose_by_prefix([A, B], 777, 1.25)
    assert home is not None
    other = B if home == A else A
    balancer.acquire(home)
    # 1 in flight there, 0 on the other: the bound is ceil(1.25 * (1 + 1) / 2) = 2, and 1 + 1 fits.
    assert balancer.choose_by_prefix([A, B], 777, 1.25) == home
    balancer.acquire(home)
    # 2 against 0: ceil(1.25 * 3 / 2) = 2, and 2 + 1 does not fit.
    assert balancer.choose_by_prefix([A, B], 777, 1.25) == other
    balancer.acquire(other)
    # 2 against 1: ceil(1.25 * 4 / 2) = 3: it fits again.
    assert balancer.choose_by_prefix([A, B], 777, 1.25) == home
