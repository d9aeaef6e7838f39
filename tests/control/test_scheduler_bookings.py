"""``Scheduler.place`` after earlier bookings, and ``release``, as tables: sharing a GPU by memory
beside engines already there, gangs among held GPUs, selectors with bookings, refusals that name
what holds the GPUs, and a gang's release giving back every rank. Pure, like
``test_scheduler.py`` (whose helpers these cases use).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from modelyard.control.scheduler import LOCAL_WORKER, PlacementRequest, Scheduler, Worker
from modelyard.errors import Unschedulable

from .test_scheduler import GIB, by_memory, gpu, place_and_book, scheduler_of, seen, where, worker

WHOLE = PlacementRequest(gpus_per_rank=1)


def on(*names: str) -> PlacementRequest:
    """One whole GPU on one of the named workers."""
    return PlacementRequest(gpus_per_rank=1, workers=names)


@dataclass(frozen=True)
class AfterBookings:
    workers: tuple[Worker, ...]
    # Placed and booked first, in order.
    before: list[PlacementRequest]
    request: PlacementRequest
    expected: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    # A refusal instead: words its reason must hold.
    refused: str | None = None


CASES = {
    "sharing: a third engine goes to the next GPU once two fill the first": AfterBookings(
        (worker("e", 48, 48),), [by_memory(20), by_memory(20)], by_memory(20), [("e", (1,))]
    ),
    "sharing: an engine fits beside another in what it left": AfterBookings(
        (worker("e", 48, 24),), [by_memory(30)], by_memory(17), [("e", (0,))]
    ),
    "sharing: the driver's reservation is not bookable": AfterBookings(
        # 18 GiB beside 30 on a 48 GiB board would pass CUDA's 47.4 GiB: it goes to the other GPU.
        (worker("e", 48, 24),),
        [by_memory(30)],
        by_memory(18),
        [("e", (1,))],
    ),
    "sharing: a GPU held whole takes no engine by memory": AfterBookings(
        (worker("e", 48, 48),), [WHOLE], by_memory(1), [("e", (1,))]
    ),
    "gang: its ranks skip the worker whose GPU is held": AfterBookings(
        (worker("f", 24), worker("g", 24), worker("h", 24)),
        [on("f")],
        PlacementRequest(gpus_per_rank=1, ranks=2),
        [("g", (0,)), ("h", (0,))],
    ),
    "gang: two GPUs on each of two workers, the roomiest first": AfterBookings(
        (worker("i", 24, 24), worker("j", 48, 48)),
        [],
        PlacementRequest(gpus_per_rank=2, ranks=2),
        [("j", (0, 1)), ("i", (0, 1))],
    ),
    "gang by memory: each rank where it fits beside the engines there": AfterBookings(
        (worker("k", 48), worker("l", 48), worker("m", 48)),
        [by_memory(40, workers=("k",))],
        PlacementRequest(gpus_per_rank=1, ranks=2, memory_bytes_per_gpu=20 * GIB),
        [("l", (0,)), ("m", (0,))],
    ),
    "selector: labels and a GPU model together": AfterBookings(
        (
            worker("n", 24, model="NVIDIA L4", zone="a"),
            worker("o", 48, model="NVIDIA L40S", zone="a"),
            worker("p", 48, model="NVIDIA L40S", zone="b"),
        ),
        [],
        PlacementRequest(gpus_per_rank=1, labels={"zone": "a"}, gpu_model="L40S"),
        [("o", (0,))],
    ),
    "selector: the GPU id asked for, beside a booking on the other": AfterBookings(
        (worker("q", 48, 48),),
        [PlacementRequest(gpus_per_rank=1, gpu_ids=(0,), workers=("q",))],
        PlacementRequest(gpus_per_rank=1, gpu_ids=(1,), workers=("q",)),
        [("q", (1,))],
    ),
    "refused: the GPU id asked for is held": AfterBookings(
        (worker("q", 48, 48),),
        [PlacementRequest(gpus_per_rank=1, gpu_ids=(0,), workers=("q",))],
        PlacementRequest(gpus_per_rank=1, gpu_ids=(0,), workers=("q",)),
        refused="GPU(s) [0]",
    ),
    "refused: memory left by the engines there is too little, the largest named": AfterBookings(
        (worker("r", 48, 48),),
        [by_memory(30), by_memory(30)],
        by_memory(20),
        refused="needs 20.0 GiB on one GPU; 2 GPU(s) free, the largest has 17.4 GiB (r GPU",
    ),
    "refused: a gang wider than the workers with a free GPU": AfterBookings(
        (worker("f", 24), worker("g", 24), worker("h", 24)),
        [on("f"), on("g")],
        PlacementRequest(gpus_per_rank=1, ranks=2),
        refused="needs 1 GPU(s) on each of 2 workers (1 can)",
    ),
    "refused: this host full, who holds its GPU named": AfterBookings(
        (Worker(id=LOCAL_WORKER, name=LOCAL_WORKER, host="h", gpus=(gpu("local", 0, 48),)),),
        [by_memory(10)],
        WHOLE,
        refused="GPU 0 held by deployment-100/replica-0",
    ),
    "refused: a worker named that is not there": AfterBookings(
        (worker("s", 48),), [], on("t"), refused="no ready worker matches workers t (ready: s)"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_request_after_earlier_bookings_lands_or_is_refused_as_expected(case: AfterBookings) -> None:
    scheduler = scheduler_of(*case.workers)
    for instance_id, earlier in enumerate(case.before, start=100):
        place_and_book(scheduler, instance_id, earlier)
    if case.refused is None:
        assert where(scheduler.place(case.request)) == case.expected
        return
    with pytest.raises(Unschedulable) as refused:
        scheduler.place(case.request)
    assert case.refused in refused.value.message
    assert len(refused.value.message) < 300


def test_releasing_a_gang_gives_back_every_rank_and_tells_the_waiting() -> None:
    scheduler = scheduler_of(worker("f", 24), worker("g", 24))
    gang = PlacementRequest(gpus_per_rank=1, ranks=2)
    place_and_book(scheduler, 1, gang)
    assert scheduler.free_bytes("id-f", 0) == 0 and scheduler.free_bytes("id-g", 0) == 0
    with pytest.raises(Unschedulable):
        scheduler.place(WHOLE)
    epoch = scheduler.epoch
    scheduler.release(1)
    assert scheduler.holders() == {} and scheduler.epoch > epoch
    assert where(scheduler.place(gang)) == [("f", (0,)), ("g", (0,))]


def test_releasing_what_holds_nothing_changes_nothing() -> None:
    scheduler: Scheduler = scheduler_of(worker("f", 24))
    place_and_book(scheduler, 1, by_memory(10))
    epoch, holders = scheduler.epoch, scheduler.holders()
    scheduler.release(2)  # never booked
    assert scheduler.epoch == epoch and scheduler.holders() == holders


def test_an_engine_placed_by_memory_never_takes_more_than_its_gpu_has_left() -> None:
    """Engines of every size, booked one after the other on one GPU: the sum never passes what
    CUDA sees of it (an 80 GiB board less the driver's 621 MiB), the total their knobs divide."""
    scheduler = scheduler_of(worker("u", 80))
    capacity = seen(80)
    booked = 0
    for instance_id, size_gib in enumerate([30, 25, 20, 10, 8, 5, 3, 1], start=1):
        try:
            place_and_book(scheduler, instance_id, by_memory(size_gib))
        except Unschedulable:
            assert booked + size_gib * GIB > capacity
            continue
        booked += size_gib * GIB
        assert booked <= capacity
        assert scheduler.free_bytes("id-u", 0) == capacity - booked
    # 30 + 25 + 20 + 3 + 1: 10, 8 and 5 refused (5 more would fill NVML's 80 GiB, not CUDA's 79.4)
    assert booked == 79 * GIB
