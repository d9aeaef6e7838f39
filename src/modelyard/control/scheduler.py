"""Placement: which workers and GPUs an instance gets, by whole GPUs or by memory.

The scheduler sees every worker (one, ``local``, on a single host; every Ray node of a cluster)
with its GPUs, and the bookings of the instances that hold engines. A request asks for
``gpus_per_rank`` GPUs on each of ``ranks`` distinct workers (a multi-node replica is a gang),
either whole (``memory_bytes_per_gpu`` None: a GPU nobody else books) or by memory: that many
bytes on each GPU, so that two small engines may share one GPU when both fit. A GPU's free
memory for placement is its total minus the larger of what NVML says is used and what its
bookings claim (an engine still loading has not used its share yet; a process that is not ours
uses memory no booking claims).

Selectors narrow the workers: labels (``zone=a``), a GPU model (``L40S`` matches
``NVIDIA L40S``), explicit workers (id or name) and explicit GPU ids.

Speed: a request of one GPU on one worker without selectors (the common case) is answered from
GPU lists kept sorted by free memory (best fit by bisection; O(log n) search, O(n) memmove
update), and a booking finds its worker by id in a dict kept with the worker list (no scan of
the workers), so 10,000 placements over 1,000 GPUs take well under a second and filling 10,000
GPUs over 1,250 workers costs about the same per instance (``benchmarks/scheduler_scale.py``).

A refusal is one bounded sentence, never a list of every GPU: "needs 41.5 GiB on one GPU; 12
GPUs free, the largest has 30.2 GiB (node-b GPU 1, NVIDIA L4)"; with selectors, the workers that
come closest first, each with its GPUs and what they have: "needs 1 GPU(s) with 45.0 GiB free
each on one worker; the best candidate is node-c (1 x NVIDIA L40S): 0 fit, the largest has 40.0
GiB free; node-b (2 x NVIDIA L4): 0 fit, the largest has 24.0 GiB free" (three workers at most,
the rest counted).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from modelyard.control.placement_types import (
    GIB,
    LOCAL_WORKER,
    Placement,
    PlacementRequest,
    RankPlacement,
    Worker,
    cluster_inventory,
    gib,
    local_worker,
)
from modelyard.control.request_fit import check_request_fits
from modelyard.errors import Unschedulable
from modelyard.estimate.gpus import engine_view
from modelyard.hardware.gpus import GpuInfo

# The types (placement_types.py) and the hardware check (request_fit.py) are imported from here
# too, as before they moved out.
__all__ = [
    "GIB",
    "LOCAL_WORKER",
    "SHOWN_IN_REASON",
    "Placement",
    "PlacementRequest",
    "RankPlacement",
    "Scheduler",
    "Worker",
    "check_request_fits",
    "cluster_inventory",
    "local_worker",
]

# Holders and workers named in a refusal, at most; the rest are counted.
SHOWN_IN_REASON = 3


@dataclass
class _Gpu:
    worker: int
    info: GpuInfo
    # instance id -> (holder label, bytes; None: the whole GPU)
    bookings: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    # Kept current by ``refresh`` after every change of ``bookings``.
    free_bytes: int = 0

    def refresh(self) -> None:
        # What an engine can have of the GPU: CUDA's view of it (NVML's figures less the driver's
        # reservation), the total the memory knob and the estimate divide.
        seen = engine_view(self.info.name, self.info.memory_total_bytes, self.info.memory_free_bytes)
        total = seen.memory_total_bytes
        if any(size is None for _, size in self.bookings.values()):
            booked = total
        else:
            booked = sum(size or 0 for _, size in self.bookings.values())
        used = total - (seen.memory_free_bytes or 0)
        self.free_bytes = max(0, total - max(used, booked))

    @property
    def idle(self) -> bool:
        return not self.bookings


class Scheduler:
    """Workers, their GPUs and the bookings; ``place`` decides, ``book``/``release`` record.

    ``epoch`` changes whenever something that could let a waiting instance fit changes (a GPU
    released, a worker joined or left, GPUs read again), so that the controller retries a
    refused instance only then."""

    def __init__(self) -> None:
        self._workers: list[Worker] = []
        # Worker id -> its position in ``_workers``; name -> positions (names need not be unique).
        self._position_of: dict[str, int] = {}
        self._positions_named: dict[str, list[int]] = {}
        self._gpus: dict[tuple[int, int], _Gpu] = {}
        # Each worker's GPUs (by worker position), for requests that look at workers one by one.
        self._worker_gpus: list[list[_Gpu]] = []
        self._by_instance: dict[int, list[tuple[int, int]]] = {}
        # Sorted (free bytes, worker, index) of every GPU, and of the idle ones.
        self._by_free: list[tuple[int, int, int]] = []
        self._idle_by_free: list[tuple[int, int, int]] = []
        self.epoch = 0

    # -- state ------------------------------------------------------------------------------

    @property
    def workers(self) -> list[Worker]:
        return list(self._workers)

    def set_workers(self, workers: Iterable[Worker]) -> None:
        """The workers as last read; bookings on GPUs that are still there are kept."""
        new = list(workers)
        if _same_workers(new, self._workers):
            return
        bookings = {
            (self._workers[w].id, index): gpu.bookings
            for (w, index), gpu in self._gpus.items()
            if gpu.bookings
        }
        self._workers = new
        self._position_of = {}
        self._positions_named = {}
        for position, worker in enumerate(new):
            self._position_of.setdefault(worker.id, position)
            self._positions_named.setdefault(worker.name, []).append(position)
        self._gpus = {}
        for position, worker in enumerate(new):
            for info in worker.gpus:
                gpu = _Gpu(worker=position, info=info)
                gpu.bookings = dict(bookings.get((worker.id, info.index), {}))
                gpu.refresh()
                self._gpus[(position, info.index)] = gpu
        self._worker_gpus = [[] for _ in new]
        for (position, _), gpu in sorted(self._gpus.items()):
            self._worker_gpus[position].append(gpu)
        self._by_instance = {}
        for key, gpu in self._gpus.items():
            for instance_id in gpu.bookings:
                self._by_instance.setdefault(instance_id, []).append(key)
        self._rebuild_indexes()
        self.epoch += 1

    def _rebuild_indexes(self) -> None:
        ready = [(key, gpu) for key, gpu in self._gpus.items() if self._workers[key[0]].ready]
        self._by_free = sorted((gpu.free_bytes, key[0], key[1]) for key, gpu in ready)
        self._idle_by_free = sorted((gpu.free_bytes, key[0], key[1]) for key, gpu in ready if gpu.idle)

    def _reindex(self, key: tuple[int, int], before: tuple[int, bool]) -> None:
        if not self._workers[key[0]].ready:
            return
        gpu = self._gpus[key]
        old_free, old_idle = before
        _remove(self._by_free, (old_free, *key))
        bisect.insort(self._by_free, (gpu.free_bytes, *key))
        if old_idle:
            _remove(self._idle_by_free, (old_free, *key))
        if gpu.idle:
            bisect.insort(self._idle_by_free, (gpu.free_bytes, *key))

    def book(self, instance_id: int, label: str, placement: Placement) -> None:
        self.release(instance_id, count_as_change=False)
        keys = []
        for rank in placement.ranks:
            position = self._position(rank.worker_id)
            for index in rank.gpu_ids:
                key = (position, index) if position is not None else None
                if key is None or key not in self._gpus:
                    continue  # a worker or GPU that is gone: nothing to hold
                gpu = self._gpus[key]
                before = (gpu.free_bytes, gpu.idle)
                gpu.bookings[instance_id] = (label, placement.memory_bytes_per_gpu)
                gpu.refresh()
                self._reindex(key, before)
                keys.append(key)
        self._by_instance[instance_id] = keys

    def release(self, instance_id: int, *, count_as_change: bool = True) -> None:
        keys = self._by_instance.pop(instance_id, [])
        for key in keys:
            gpu = self._gpus.get(key)
            if gpu is None or instance_id not in gpu.bookings:
                continue
            before = (gpu.free_bytes, gpu.idle)
            del gpu.bookings[instance_id]
            gpu.refresh()
            self._reindex(key, before)
        if keys and count_as_change:
            self.epoch += 1

    def booked(self, instance_id: int) -> bool:
        return instance_id in self._by_instance

    def booked_instances(self) -> list[int]:
        return sorted(self._by_instance)

    def _position(self, worker_id: str) -> int | None:
        return self._position_of.get(worker_id)

    def worker(self, worker_id: str) -> Worker | None:
        """The worker with this id as last set (None: not among them)."""
        position = self._position_of.get(worker_id)
        return None if position is None else self._workers[position]

    def holders(self) -> dict[tuple[str, int], list[tuple[str, int | None]]]:
        """(worker name, GPU index) -> the holders' labels and bytes (for people)."""
        return {
            (self._workers[w].name, index): list(gpu.bookings.values())
            for (w, index), gpu in self._gpus.items()
            if gpu.bookings
        }

    def free_bytes(self, worker_id: str, index: int) -> int | None:
        position = self._position(worker_id)
        gpu = self._gpus.get((position, index)) if position is not None else None
        return gpu.free_bytes if gpu is not None else None

    # -- deciding ---------------------------------------------------------------------------

    def place(self, request: PlacementRequest, *, excluding: int | None = None) -> Placement:
        """Where ``request`` fits now; raises ``Unschedulable`` with a bounded reason.

        ``excluding``: an instance whose own bookings do not count (placed again)."""
        if excluding is not None and excluding in self._by_instance:
            held = self._by_instance[excluding]
            saved = []
            for key in held:
                gpu = self._gpus[key]
                before = (gpu.free_bytes, gpu.idle)
                saved.append((key, gpu.bookings.pop(excluding)))
                gpu.refresh()
                self._reindex(key, before)
            try:
                return self.place(request)
            finally:
                for key, booking in saved:
                    gpu = self._gpus[key]
                    before = (gpu.free_bytes, gpu.idle)
                    gpu.bookings[excluding] = booking
                    gpu.refresh()
                    self._reindex(key, before)
        if request.gpus_per_rank == 0:
            return self._place_without_gpus(request)
        if request.simple and request.memory_bytes_per_gpu is not None:
            return self._place_one_by_memory(request.memory_bytes_per_gpu)
        if request.simple and len(self._workers) > 1:
            return self._place_one_whole()
        return self._place_general(request)

    def _place_one_whole(self) -> Placement:
        if not self._idle_by_free:
            busy = len(self._by_free)
            raise Unschedulable(f"needs 1 whole GPU; none of the {busy} GPU(s) of ready workers is free")
        most = self._idle_by_free[-1][0]
        _, worker_position, index = self._idle_by_free[bisect.bisect_left(self._idle_by_free, (most, -1, -1))]
        worker = self._workers[worker_position]
        return Placement(ranks=(RankPlacement(worker.id, worker.name, worker.host, (index,)),))

    def _place_without_gpus(self, request: PlacementRequest) -> Placement:
        candidates = self._candidates(request)
        if len(candidates) < request.ranks:
            raise Unschedulable(self._too_few_workers(request, candidates))
        chosen = candidates[: request.ranks]
        return Placement(
            ranks=tuple(RankPlacement(w.id, w.name, w.host, ()) for _, w in chosen),
            memory_bytes_per_gpu=request.memory_bytes_per_gpu,
        )

    def _place_one_by_memory(self, need: int) -> Placement:
        position = bisect.bisect_left(self._by_free, (need, -1, -1))
        if position == len(self._by_free):
            raise Unschedulable(self._memory_refusal(need))
        _, worker_position, index = self._by_free[position]
        worker = self._workers[worker_position]
        return Placement(
            ranks=(RankPlacement(worker.id, worker.name, worker.host, (index,)),), memory_bytes_per_gpu=need
        )

    def _memory_refusal(self, need: int, per: str = "one GPU") -> str:
        with_room = len(self._by_free) - bisect.bisect_left(self._by_free, (1, -1, -1))
        if not with_room:
            return f"needs {gib(need)} on {per}; no GPU has memory free ({len(self._by_free)} GPU(s) in all)"
        largest, worker_position, index = self._by_free[-1]
        model = self._gpus[(worker_position, index)].info.name
        where = f"{self._workers[worker_position].name} GPU {index}, {model}"
        return (
            f"needs {gib(need)} on {per}; {with_room} GPU(s) free, the largest has {gib(largest)} ({where})"
        )

    def _candidates(self, request: PlacementRequest) -> list[tuple[int, Worker]]:
        if request.workers:
            # Explicit workers (by id or name): looked up, not scanned; in the workers' order.
            named: set[int] = set()
            for wanted in request.workers:
                if wanted in self._position_of:
                    named.add(self._position_of[wanted])
                named.update(self._positions_named.get(wanted, ()))
            positions: Iterable[int] = sorted(named)
        else:
            positions = range(len(self._workers))
        return [
            (position, self._workers[position])
            for position in positions
            if self._workers[position].ready
            and all(self._workers[position].labels.get(key) == value for key, value in request.labels.items())
        ]

    def _fitting_gpus(self, position: int, request: PlacementRequest) -> list[_Gpu]:
        gpus = self._selected_gpus(position, request)
        need = request.memory_bytes_per_gpu
        if need is None:
            fitting = [gpu for gpu in gpus if gpu.idle]
            fitting.sort(key=lambda gpu: (-gpu.free_bytes, gpu.info.index))
        else:
            fitting = [gpu for gpu in gpus if gpu.free_bytes >= need]
            fitting.sort(key=lambda gpu: (gpu.free_bytes, gpu.info.index))  # best fit
        return fitting

    def _place_general(self, request: PlacementRequest) -> Placement:
        candidates = self._candidates(request)
        if not candidates:
            raise Unschedulable(self._no_candidates(request))
        scored: list[tuple[tuple[int, int], int, list[_Gpu]]] = []
        for position, _ in candidates:
            fitting = self._fitting_gpus(position, request)
            if request.gpu_ids is not None and len(fitting) < len(request.gpu_ids):
                continue
            if len(fitting) >= request.gpus_per_rank:
                chosen = fitting[: request.gpus_per_rank]
                # Best fit by memory (least left over), most free first for whole GPUs.
                left = sum(gpu.free_bytes for gpu in chosen)
                key = (left, position) if request.memory_bytes_per_gpu is not None else (-left, position)
                scored.append((key, position, chosen))
        if len(scored) < request.ranks:
            raise Unschedulable(self._general_refusal(request, candidates, len(scored)))
        scored.sort(key=lambda entry: entry[0])
        ranks = []
        for _, position, chosen in scored[: request.ranks]:
            worker = self._workers[position]
            ids = tuple(sorted(gpu.info.index for gpu in chosen))
            ranks.append(RankPlacement(worker.id, worker.name, worker.host, ids))
        return Placement(ranks=tuple(ranks), memory_bytes_per_gpu=request.memory_bytes_per_gpu)

    # -- refusals (bounded) -----------------------------------------------------------------

    def _selectors(self, request: PlacementRequest) -> str:
        parts = []
        if request.labels:
            parts.append("labels " + ",".join(f"{k}={v}" for k, v in sorted(request.labels.items())))
        if request.workers:
            parts.append("workers " + ",".join(request.workers))
        return " and ".join(parts)

    def _no_candidates(self, request: PlacementRequest) -> str:
        ready = [worker.name for worker in self._workers if worker.ready]
        shown = ", ".join(ready[:SHOWN_IN_REASON]) + (
            f" +{len(ready) - SHOWN_IN_REASON} more" if len(ready) > SHOWN_IN_REASON else ""
        )
        return f"no ready worker matches {self._selectors(request)} (ready: {shown or 'none'})"

    def _too_few_workers(self, request: PlacementRequest, candidates: list[tuple[int, Worker]]) -> str:
        return f"needs {request.ranks} workers, {len(candidates)} ready match"

    def _general_refusal(
        self, request: PlacementRequest, candidates: list[tuple[int, Worker]], fit: int
    ) -> str:
        count = request.gpus_per_rank
        need = request.memory_bytes_per_gpu
        what = f"{count} GPU(s)" if need is None else f"{count} GPU(s) with {gib(need)} free each"
        if request.gpu_model:
            what += f" of model {request.gpu_model}"
        if request.gpu_ids is not None:
            what = f"GPU(s) {list(request.gpu_ids)}" + (
                "" if need is None else f" with {gib(need)} free each"
            )
        where = "on one worker" if request.ranks == 1 else f"on each of {request.ranks} workers ({fit} can)"
        if len(self._workers) == 1 and self._workers[0].id == LOCAL_WORKER and request.ranks == 1:
            return self._single_host_refusal(request, what)
        # The workers that come closest first (the best candidate), each with what it has.
        judged = sorted(
            (self._worker_verdict(position, request) for position, _ in candidates),
            key=lambda verdict: verdict[0],
            reverse=True,
        )
        details = [text for _, text in judged[:SHOWN_IN_REASON]]
        if len(details) > 1:
            details[0] = "the best candidate is " + details[0]
        more = len(candidates) - SHOWN_IN_REASON
        suffix = f" +{more} more worker(s)" if more > 0 else ""
        return f"needs {what} {where}; {'; '.join(details)}{suffix}"

    def _worker_verdict(self, position: int, request: PlacementRequest) -> tuple[tuple[int, int, int], str]:
        """How close one worker comes to ``request`` (larger is closer), and why it does not fit:
        "node-b (2 x NVIDIA L4): 0 fit, the largest has 24.0 GiB free"."""
        worker = self._workers[position]
        gpus = self._selected_gpus(position, request)
        named = f"{worker.name} ({_models(self._worker_gpus[position]) or 'no GPU'})"
        if not gpus:
            wanted = f"GPU(s) {list(request.gpu_ids)}" if request.gpu_ids is not None else "GPU"
            model = f" of model {request.gpu_model}" if request.gpu_model else ""
            return (-1, 0, -position), f"{named}: no {wanted}{model}"
        need = request.memory_bytes_per_gpu
        if need is None:
            idle = sum(1 for gpu in gpus if gpu.idle)
            return (min(idle, request.gpus_per_rank), idle, -position), f"{named}: {idle} free"
        frees = sorted((gpu.free_bytes for gpu in gpus), reverse=True)
        fitting = sum(1 for free in frees if free >= need)
        # The GPU that decides: the last of the ``gpus_per_rank`` largest (0: too few GPUs).
        deciding = frees[request.gpus_per_rank - 1] if len(frees) >= request.gpus_per_rank else 0
        text = f"{named}: {fitting} fit, the largest has {gib(frees[0])} free"
        return (min(fitting, request.gpus_per_rank), deciding, -position), text

    def _selected_gpus(self, position: int, request: PlacementRequest) -> list[_Gpu]:
        """A worker's GPUs that the request's GPU ids and GPU model allow (fitting or not)."""
        gpus = self._worker_gpus[position]
        if request.gpu_ids is not None:
            gpus = [gpu for gpu in gpus if gpu.info.index in request.gpu_ids]
        if request.gpu_model is not None:
            model = request.gpu_model.lower()
            gpus = [gpu for gpu in gpus if model in gpu.info.name.lower()]
        return gpus

    def _single_host_refusal(self, request: PlacementRequest, what: str) -> str:
        gpus = [gpu for (_, _), gpu in sorted(self._gpus.items())]
        if request.memory_bytes_per_gpu is None and request.gpu_ids is None:
            idle = [gpu for gpu in gpus if gpu.idle]
            text = f"needs {request.gpus_per_rank} GPU(s), {len(idle)} free"
        elif request.memory_bytes_per_gpu is None:
            text = f"needs GPU(s) {sorted(request.gpu_ids or ())}"
        else:
            return self._memory_refusal(
                request.memory_bytes_per_gpu, f"each of {request.gpus_per_rank} GPU(s)"
            )
        held = [
            f"GPU {gpu.info.index} held by {', '.join(label for label, _ in gpu.bookings.values())}"
            for gpu in gpus
            if gpu.bookings and (request.gpu_ids is None or gpu.info.index in request.gpu_ids)
        ]
        if held:
            more = len(held) - SHOWN_IN_REASON
            text += ": " + ", ".join(held[:SHOWN_IN_REASON]) + (f" +{more} more" if more > 0 else "")
        return text


def _models(gpus: Iterable[_Gpu]) -> str:
    """A worker's GPUs by model, for people: "2 x NVIDIA L4" (models in order of first GPU)."""
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.info.name] = counts.get(gpu.info.name, 0) + 1
    return ", ".join(f"{count} x {name}" for name, count in counts.items())


def _remove(entries: list[tuple[int, int, int]], entry: tuple[int, int, int]) -> None:
    position = bisect.bisect_left(entries, entry)
    if position < len(entries) and entries[position] == entry:
        del entries[position]


def _same_workers(new: list[Worker], old: list[Worker]) -> bool:
    if len(new) != len(old):
        return False
    for a, b in zip(new, old, strict=True):
        if (a.id, a.name, a.ready, a.host, dict(a.labels)) != (b.id, b.name, b.ready, b.host, dict(b.labels)):
            return False
        if [(g.index, g.name, g.memory_total_bytes, g.memory_free_bytes) for g in a.gpus] != [
            (g.index, g.name, g.memory_total_bytes, g.memory_free_bytes) for g in b.gpus
        ]:
            return False
    return True
