"""``Scheduler.place``/``book``/``release`` on workers described as data: sharing a GPU by memory,
gangs over several workers, selectors, refusals with their reasons, and no over-booking ever.

Pure: no runtime, no server, no GPU; the GPUs are ``GpuInfo`` values as NVML would report them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from modelyard.control.scheduler import LOCAL_WORKER, Placement, PlacementRequest, Scheduler, Worker
from modelyard.errors import Unschedulable
from modelyard.estimate.gpus import cuda_visible_total_bytes
from modelyard.hardware.gpus import GpuInfo

GIB = 1 << 30


def seen(memory_gib: float) -> int:
    """What the scheduler can book of a GPU of ``memory_gib`` (NVML): CUDA's view of it, less the
    driver's reservation (621 MiB on these boards), the total every engine's knob divides."""
    return cuda_visible_total_bytes(int(memory_gib * GIB))


def gpu(
    worker: str, index: int, memory_gib: float, name: str = "NVIDIA L40S", used_gib: float = 0
) -> GpuInfo:
    total = int(memory_gib * GIB)
    used = int(used_gib * GIB)
    return GpuInfo(
        index=index,
        uuid=f"GPU-{worker}-{index}",
        name=name,
        memory_total_bytes=total,
        memory_free_bytes=total - used,
        memory_used_bytes=used,
    )


def worker(
    name: str,
    *sizes_gib: float,
    model: str = "NVIDIA L40S",
    ready: bool = True,
    used_gib: float = 0,
    **labels: str,
) -> Worker:
    """A worker whose id differs from its name (placements must carry ids, people read names)."""
    return Worker(
        id=f"id-{name}",
        name=name,
        host=f"10.0.0.{len(name)}",
        gpus=tuple(gpu(name, index, size, model, used_gib) for index, size in enumerate(sizes_gib)),
        labels=labels,
        ready=ready,
    )


def scheduler_of(*workers: Worker) -> Scheduler:
    scheduler = Scheduler()
    scheduler.set_workers(workers)
    return scheduler


def where(placement: Placement) -> list[tuple[str, tuple[int, ...]]]:
    return [(rank.worker_name, rank.gpu_ids) for rank in placement.ranks]


def by_memory(
    gib_per_gpu: float,
    *,
    workers: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    gpu_model: str | None = None,
) -> PlacementRequest:
    return PlacementRequest(
        gpus_per_rank=1,
        memory_bytes_per_gpu=int(gib_per_gpu * GIB),
        workers=workers,
        labels=labels or {},
        gpu_model=gpu_model,
    )


def place_and_book(scheduler: Scheduler, instance_id: int, request: PlacementRequest) -> Placement:
    placement = scheduler.place(request)
    scheduler.book(instance_id, f"deployment-{instance_id}/replica-0", placement)
    return placement


# -- where a request lands ----------------------------------------------------------------------

MIXED = (
    worker("b", 24, 24, model="NVIDIA L4", zone="a"),
    worker("c", 48, model="NVIDIA L40S", zone="b"),
    worker("d", 80, 80, model="NVIDIA H100 80GB HBM3", zone="b", ready=False),
)


@dataclass(frozen=True)
class Case:
    request: PlacementRequest
    expected: list[tuple[str, tuple[int, ...]]]
    workers: tuple[Worker, ...] = MIXED
    # Placed and booked first, in order.
    before: list[PlacementRequest] = field(default_factory=list)


PLACEMENTS = {
    "memory: best fit, the smallest GPU that holds it": Case(by_memory(20), [("b", (0,))]),
    "memory: only the larger GPU holds it": Case(by_memory(30), [("c", (0,))]),
    "memory: two share one GPU while both fit": Case(
        by_memory(20), [("c", (0,))], before=[by_memory(20)] * 3
    ),
    "memory: NVML's use counts though nobody booked it": Case(
        by_memory(20), [("c", (0,))], workers=(worker("b", 24, used_gib=8), worker("c", 48))
    ),
    "whole: the GPU with most free memory": Case(PlacementRequest(gpus_per_rank=1), [("c", (0,))]),
    "whole: a GPU shared by memory is not whole any more": Case(
        PlacementRequest(gpus_per_rank=1),
        [("e", (1,))],
        workers=(worker("e", 48, 48),),
        before=[by_memory(2)],
    ),
    "whole: two GPUs of one worker": Case(PlacementRequest(gpus_per_rank=2), [("b", (0, 1))]),
    "selector: a worker by name": Case(by_memory(2, workers=("c",)), [("c", (0,))]),
    "selector: a worker by id": Case(by_memory(2, workers=("id-c",)), [("c", (0,))]),
    "selector: labels": Case(PlacementRequest(gpus_per_rank=1, labels={"zone": "a"}), [("b", (0,))]),
    "selector: GPU model, by part of its name": Case(by_memory(2, gpu_model="l40s"), [("c", (0,))]),
    "selector: GPU ids": Case(PlacementRequest(gpus_per_rank=1, gpu_ids=(1,), workers=("b",)), [("b", (1,))]),
    "gang: one rank on each of two workers": Case(
        PlacementRequest(gpus_per_rank=1, ranks=2), [("c", (0,)), ("b", (0,))]
    ),
    "gang: by memory, each rank on its own worker": Case(
        PlacementRequest(gpus_per_rank=1, ranks=2, memory_bytes_per_gpu=10 * GIB), [("b", (0,)), ("c", (0,))]
    ),
    "no GPUs: a worker, none of its GPUs": Case(PlacementRequest(gpus_per_rank=0), [("b", ())]),
}


@pytest.mark.parametrize("case", PLACEMENTS.values(), ids=PLACEMENTS.keys())
def test_a_request_lands_where_expected(case: Case) -> None:
    scheduler = scheduler_of(*case.workers)
    for instance_id, earlier in enumerate(case.before, start=100):
        place_and_book(scheduler, instance_id, earlier)
    assert where(scheduler.place(case.request)) == case.expected


def test_a_worker_that_is_not_ready_is_never_chosen() -> None:
    scheduler = scheduler_of(*MIXED)
    with pytest.raises(Unschedulable, match=r"no ready worker matches workers d \(ready: b, c\)"):
        scheduler.place(PlacementRequest(gpus_per_rank=1, workers=("d",)))
    with pytest.raises(Unschedulable, match=r"needs 70\.0 GiB on one GPU"):
        scheduler.place(by_memory(70))


# -- refusals: one bounded sentence that says why -----------------------------------------------

REFUSALS = {
    "memory: the largest GPU named, with its model": (
        MIXED,
        by_memory(60),
        "needs 60.0 GiB on one GPU; 3 GPU(s) free, the largest has 47.4 GiB (c GPU 0, NVIDIA L40S)",
    ),
    "memory on a named worker: its GPUs and what they have": (
        MIXED,
        by_memory(30, workers=("b",)),
        "needs 1 GPU(s) with 30.0 GiB free each on one worker; "
        "b (2 x NVIDIA L4): 0 fit, the largest has 23.4 GiB free",
    ),
    "memory on several workers: the closest first": (
        MIXED,
        by_memory(50, labels={}, workers=("b", "c")),
        "the best candidate is c (1 x NVIDIA L40S): 0 fit, the largest has 47.4 GiB free; "
        "b (2 x NVIDIA L4): 0 fit, the largest has 23.4 GiB free",
    ),
    "GPU model that no worker has": (
        MIXED,
        PlacementRequest(gpus_per_rank=1, gpu_model="H200"),
        "needs 1 GPU(s) of model H200 on one worker; the best candidate is b (2 x NVIDIA L4): "
        "no GPU of model H200; c (1 x NVIDIA L40S): no GPU of model H200",
    ),
    "whole GPUs: more than a worker has": (
        MIXED,
        PlacementRequest(gpus_per_rank=2, workers=("c",)),
        "needs 2 GPU(s) on one worker; c (1 x NVIDIA L40S): 1 free",
    ),
    "labels that no ready worker has": (
        MIXED,
        PlacementRequest(gpus_per_rank=1, labels={"zone": "z"}),
        "no ready worker matches labels zone=z (ready: b, c)",
    ),
    "a gang wider than the workers that match": (
        MIXED,
        PlacementRequest(gpus_per_rank=1, ranks=2, labels={"zone": "b"}),
        "needs 1 GPU(s) on each of 2 workers (1 can); c (1 x NVIDIA L40S): 1 free",
    ),
    "this host alone: who holds the GPUs": (
        (Worker(id=LOCAL_WORKER, name=LOCAL_WORKER, host="127.0.0.1", gpus=(gpu("local", 0, 48),)),),
        PlacementRequest(gpus_per_rank=2),
        "needs 2 GPU(s), 1 free",
    ),
}


@pytest.mark.parametrize(("workers", "request_", "reason"), REFUSALS.values(), ids=REFUSALS.keys())
def test_a_request_that_cannot_be_placed_is_refused_with_its_reason(
    workers: tuple[Worker, ...], request_: PlacementRequest, reason: str
) -> None:
    with pytest.raises(Unschedulable) as refused:
        scheduler_of(*workers).place(request_)
    assert reason in refused.value.message
    assert len(refused.value.message) < 300


def test_a_refusal_on_a_large_cluster_stays_one_bounded_sentence() -> None:
    many = [worker(f"node-{n}", 24, 24, model="NVIDIA L4") for n in range(500)]
    with pytest.raises(Unschedulable) as refused:
        scheduler_of(*many).place(by_memory(30, workers=tuple(w.name for w in many)))
    assert refused.value.message.endswith("+497 more worker(s)")
    assert len(refused.value.message) < 400


def test_who_holds_a_gpu_is_named_when_a_single_host_is_full() -> None:
    scheduler = scheduler_of(
        Worker(id=LOCAL_WORKER, name=LOCAL_WORKER, host="h", gpus=(gpu("local", 0, 48),))
    )
    place_and_book(scheduler, 1, PlacementRequest(gpus_per_rank=1))
    with pytest.raises(
        Unschedulable, match=r"needs 1 GPU\(s\), 0 free: GPU 0 held by deployment-1/replica-0"
    ):
        scheduler.place(PlacementRequest(gpus_per_rank=1))


# -- booking and releasing ----------------------------------------------------------------------


def test_a_booking_takes_memory_and_its_release_gives_it_back() -> None:
    scheduler = scheduler_of(worker("c", 48))
    epoch = scheduler.epoch
    place_and_book(scheduler, 1, by_memory(30))
    assert scheduler.free_bytes("id-c", 0) == seen(48) - 30 * GIB and scheduler.booked(1)
    with pytest.raises(Unschedulable):
        scheduler.place(by_memory(20))
    scheduler.release(1)
    assert scheduler.free_bytes("id-c", 0) == seen(48) and not scheduler.booked(1)
    assert scheduler.epoch > epoch  # a waiting instance is tried again
    assert where(scheduler.place(by_memory(20))) == [("c", (0,))]


def test_booking_an_instance_again_replaces_its_booking() -> None:
    scheduler = scheduler_of(worker("c", 48, 48))
    place_and_book(scheduler, 1, by_memory(30))
    scheduler.book(
        1, "again", Placement(ranks=scheduler.place(by_memory(40)).ranks, memory_bytes_per_gpu=40 * GIB)
    )
    assert scheduler.holders() == {("c", 1): [("again", 40 * GIB)]}
    assert scheduler.free_bytes("id-c", 0) == seen(48)


def test_placing_an_instance_again_does_not_count_its_own_booking() -> None:
    scheduler = scheduler_of(worker("c", 48))
    place_and_book(scheduler, 1, by_memory(40))
    assert where(scheduler.place(by_memory(40), excluding=1)) == [("c", (0,))]
    with pytest.raises(Unschedulable):
        scheduler.place(by_memory(40))  # still booked


def test_bookings_follow_their_worker_by_id_when_the_workers_are_read_again_in_another_order() -> None:
    b, c = worker("b", 48), worker("c", 48)
    scheduler = scheduler_of(b, c)
    placement = scheduler.place(by_memory(40, workers=("c",)))
    scheduler.set_workers([c, b, worker("e", 48)])
    scheduler.book(1, "on-c", placement)
    assert scheduler.holders() == {("c", 0): [("on-c", 40 * GIB)]}
    scheduler.set_workers([worker("e", 48), b, c])  # read again: the booking stays on c
    assert scheduler.free_bytes("id-c", 0) == seen(48) - 40 * GIB
    assert scheduler.free_bytes("id-b", 0) == seen(48)
    assert where(scheduler.place(by_memory(40, workers=("b", "c")))) == [("b", (0,))]


def test_a_booking_on_a_worker_that_left_holds_nothing_and_is_dropped_with_it() -> None:
    b, c = worker("b", 48), worker("c", 48)
    scheduler = scheduler_of(b, c)
    placement = place_and_book(scheduler, 1, by_memory(40, workers=("c",)))
    scheduler.set_workers([b])
    assert scheduler.holders() == {}
    scheduler.book(2, "late", placement)  # placed on c before it left: nothing to hold
    assert scheduler.holders() == {}
    scheduler.release(2)


def test_a_worker_renamed_is_found_by_its_new_name() -> None:
    scheduler = scheduler_of(worker("b", 48))
    scheduler.set_workers([Worker(id="id-b", name="gpu-b", host="h", gpus=worker("b", 48).gpus)])
    assert where(scheduler.place(by_memory(10, workers=("gpu-b",)))) == [("gpu-b", (0,))]


# -- over-booking, never ------------------------------------------------------------------------


def booked(scheduler: Scheduler) -> dict[tuple[str, int], tuple[int, int]]:
    """(worker, GPU) -> (bytes booked by memory, how many hold it whole)."""
    return {
        key: (
            sum(size for _, size in holders if size is not None),
            sum(1 for _, size in holders if size is None),
        )
        for key, holders in scheduler.holders().items()
    }


@pytest.mark.parametrize("seed", range(8))
def test_no_sequence_of_places_books_and_releases_over_books_a_gpu(seed: int) -> None:
    """Bookings by memory never pass a GPU's total; each fits what was free (NVML's use or the
    bookings, the larger) when it was placed; a GPU held whole is held by nobody else."""
    rng = random.Random(seed)
    workers = [
        worker(
            f"n{n}",
            *[rng.choice((24, 48, 80)) for _ in range(rng.randint(1, 4))],
            used_gib=rng.choice((0, 3)),
        )
        for n in range(6)
    ]
    by_name = {w.name: w for w in workers}
    total = {(w.name, g.index): g.memory_total_bytes for w in workers for g in w.gpus}
    scheduler = scheduler_of(*workers)
    held: list[int] = []
    for instance_id in range(400):
        if held and rng.random() < 0.3:
            scheduler.release(held.pop(rng.randrange(len(held))))
            continue
        whole = rng.random() < 0.2
        request = PlacementRequest(
            gpus_per_rank=rng.choice((1, 1, 1, 2)),
            ranks=rng.choice((1, 1, 2)),
            memory_bytes_per_gpu=None if whole else rng.randint(1, 50) * GIB,
            workers=tuple(rng.sample(list(by_name), 3)) if rng.random() < 0.3 else (),
        )
        try:
            placement = scheduler.place(request)
        except Unschedulable:
            continue
        ranks = [(rank.worker_id, index) for rank in placement.ranks for index in rank.gpu_ids]
        assert len({worker_id for worker_id, _ in ranks}) == request.ranks  # a gang: distinct workers
        for worker_id, index in ranks:
            free = scheduler.free_bytes(worker_id, index)
            assert free is not None and free >= (request.memory_bytes_per_gpu or 0)
        scheduler.book(instance_id, f"i{instance_id}", placement)
        held.append(instance_id)
        for key, (memory, whole_count) in booked(scheduler).items():
            holders = scheduler.holders()[key]
            assert whole_count == 0 or len(holders) == 1, (key, holders)
            assert memory <= total[key], (key, holders)
