"""The gateway's relay capacity: chunks per second delivered through ``modelyard serve
--gateway-workers N`` when its N cores are saturated, for several N, against direct access.

Issue 13 asks that N workers relay >= 0.8 N times one worker's chunks/s. ``gateway_overhead.py``
reads CPU per chunk at a fixed, moderate load (CPU efficiency); this reads capacity: the load is
more than the gateway can carry, so what comes out is what it can relay.

Set-up (every process pinned with ``taskset``; ``--cpus``, default all of this machine's):
- ``modelyard serve --gateway-workers N`` on the first N CPUs (the main process too);
- the exact upstream (``exact_upstream.py``: ``--ttft-ms`` to the first token, then one token a
  chunk every ``--itl-ms``), deployed behind it as ``--replicas`` replicas of one deployment, on
  the upstream CPUs (the next ``--upstream-cpus`` after the first max(N) CPUs);
- ``--clients`` lean-client processes (``lean_client.py``), one CPU each, on the CPUs left;
  ``--streams`` closed-loop streams in all, split evenly over them.

The gateway CPUs are reserved for the largest N, so the upstreams and clients are the same for
every N. For each N the paths run in ``--rounds`` rounds (direct, gateway, direct, ...): direct
sends the same client set straight to the replicas (client i to replica i mod R). Direct is the
ceiling of the load itself: it must deliver clearly more than the gateway does, or the gateway
was not the limit (the benchmark warns). The workers' CPU over the window (cores busy) shows that
they were saturated.

Figures: chunks per second delivered through the gateway at each N, its ratio against N = 1
and the target 0.8 N; the direct figure; TTFT p50/p99 at saturation (queueing included: at
saturation it grows by design); the load average before each run.

    python benchmarks/gateway_capacity.py                            # 16 cores: N = 1, 2, 4
    python benchmarks/gateway_capacity.py --workers 1 --streams 64 --clients 1 --replicas 1 \\
        --duration-s 3 --warmup-s 1 --rounds 1                         # a smoke run on 2 cores

On fewer CPUs than max(N) + 2 the upstreams and the clients share what is left (the figures
then mean little). Take figures on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overhead_processes import Platform, SetupFailed, machine_busy_s, require_taskset, run_client

DEPLOYMENT = "cap"
TARGET_PER_WORKER = 0.8


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs each part of the benchmark is pinned to."""

    gateway: list[int]
    upstreams: list[int]
    clients: list[int]
    # True when the upstreams and the clients share CPUs (too few for both).
    shared: bool

    def gateway_for(self, workers: int) -> list[int]:
        return self.gateway[: max(workers, 1)]


def parse_cpus(text: str) -> list[int]:
    """ "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11] (taskset's list syntax)."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    if len(set(cpus)) != len(cpus):
        raise ValueError(f"CPU list {text!r} names a CPU twice")
    return cpus


def cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and int(ranges[-1].rpartition("-")[2]) == cpu - 1:
            ranges[-1] = f"{ranges[-1].partition('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def split_cpus(cpus: list[int], gateway_cores: int, upstream_cores: int | None = None) -> CpuPlan:
    """The first ``gateway_cores`` CPUs for the gateway; of the rest, ``upstream_cores`` (default
    half, rounded down, at least one) for the upstreams and the others for the clients. With fewer
    than two CPUs left, the upstreams and the clients share them."""
    if gateway_cores < 1 or len(cpus) <= gateway_cores:
        raise ValueError(
            f"{len(cpus)} CPUs cannot hold a gateway of {gateway_cores} cores and its load: "
            "name more with --cpus or fewer workers with --workers"
        )
    gateway, rest = cpus[:gateway_cores], cpus[gateway_cores:]
    if len(rest) < 2:
        return CpuPlan(gateway, rest, rest, shared=True)
    count = upstream_cores if upstream_cores is not None else max(1, len(rest) // 2)
    if not 1 <= count < len(rest):
        raise ValueError(
            f"--upstream-cpus {count}: choose 1 to {len(rest) - 1}, so that {len(rest)} CPUs "
            "after the gateway's hold both upstreams and clients"
        )
    return CpuPlan(gateway, rest[:count], rest[count:], shared=False)


def split_streams(streams: int, clients: int) -> list[int]:
    """``streams`` over ``clients`` as evenly as they go (the first ones take the remainder)."""
    base, extra = divmod(streams, clients)
    return [base + (1 if index < extra else 0) for index in range(clients)]


@dataclass
class RunFigures:
    path: str
    workers: int
    round: int
    events: int
    requests: int
    errors: int
    duration_s: float
    ttft_ms: list[float]
    load_before: float
    machine_busy_fraction: float
    # CPU-seconds per second of each gateway worker and of the main process (gateway path only).
    worker_busy: list[float] = field(default_factory=list)
    main_busy: float = 0.0

    @property
    def chunks_per_s(self) -> float:
        return self.events / self.duration_s


def percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


@dataclass
class Bench:
    arguments: argparse.Namespace
    plan: CpuPlan
    scratch: Path
    runs: list[RunFigures] = field(default_factory=list)

    def measure(
        self, path: str, urls: list[str], key: str, workers: int, round_index: int, pids: list[int]
    ) -> RunFigures:
        arguments = self.arguments
        streams = split_streams(arguments.streams, arguments.clients)
        answer_s = (arguments.ttft_ms + (arguments.output_tokens - 1) * arguments.itl_ms) / 1000
        busy_before, total_before = machine_busy_s()
        load_before = os.getloadavg()[0]

        def one(index: int) -> dict[str, Any]:
            return run_client(
                urls[index % len(urls)],
                cpus=str(self.plan.clients[index % len(self.plan.clients)]),
                streams=streams[index],
                start="spread",
                output_tokens=arguments.output_tokens,
                answer_s=answer_s,
                duration_s=arguments.duration_s,
                warmup_s=arguments.warmup_s,
                out=self.scratch / f"{path}-{workers}w-{round_index}-client{index}.json",
                api_key=key,
                model=DEPLOYMENT,
                # The first client reads the serving processes' CPU over its window.
                cpu_pids=pids if index == 0 else None,
            )

        with ThreadPoolExecutor(max_workers=arguments.clients) as pool:
            results = list(pool.map(one, range(arguments.clients)))
        busy_after, total_after = machine_busy_s()
        cpu = [float(value) / arguments.duration_s for value in results[0]["cpu_pids_s"]]
        figures = RunFigures(
            path=path,
            workers=workers,
            round=round_index,
            events=sum(int(result["window_events"]) for result in results),
            requests=sum(int(result["window_requests"]) for result in results),
            errors=sum(int(result["errors"]) for result in results),
            duration_s=arguments.duration_s,
            ttft_ms=[value for result in results for value in result["ttft_ms"]],
            load_before=load_before,
            machine_busy_fraction=(busy_after - busy_before) / max(total_after - total_before, 1e-9),
            worker_busy=cpu[:workers] if pids else [],
            main_busy=cpu[workers] if len(cpu) > workers else 0.0,
        )
        self.runs.append(figures)
        p50, p99 = percentiles(figures.ttft_ms)
        busy = " ".join(f"{value:.2f}" for value in figures.worker_busy)
        print(
            f"  {path:8} w{workers} r{round_index}: {figures.chunks_per_s:9.0f} chunks/s "
            f"{figures.requests:6} req  TTFT p50 {p50:7.2f} p99 {p99:7.2f} ms  errors {figures.errors}  "
            f"load {load_before:.2f} busy {figures.machine_busy_fraction:.0%}"
            + (f"  workers' cores busy {busy}, main {figures.main_busy:.2f}" if busy else ""),
            file=sys.stderr,
            flush=True,
        )
        return figures


def run_workers(bench: Bench, workers: int) -> None:
    arguments = bench.arguments
    scratch = bench.scratch / f"platform-{workers}w"
    scratch.mkdir()
    server = Platform(scratch, gateway_workers=workers, cpus=cpu_list(bench.plan.gateway_for(workers)))
    try:
        server.start()
        options = f"--ttft-ms {arguments.ttft_ms:g} --itl-ms {arguments.itl_ms:g}"
        ports = server.deploy(
            DEPLOYMENT, cpu_list(bench.plan.upstreams), options, replicas=arguments.replicas
        )
        pids = server.serving_pids() + ([server.main_pid()] if workers else [])
        print(
            f"modelyard serve on {server.url} (CPUs {server.cpus}), {workers} worker(s) {pids}; "
            f"{arguments.replicas} replicas on ports {ports}",
            file=sys.stderr,
            flush=True,
        )
        direct = [f"http://127.0.0.1:{port}" for port in ports]
        for round_index in range(arguments.rounds):
            bench.measure("direct", direct, "", workers, round_index, [])
            bench.measure("gateway", [server.url], server.api_key, workers, round_index, pids)
    finally:
        server.stop()


def summarise(bench: Bench) -> dict[str, Any]:
    arguments = bench.arguments
    rows: dict[str, Any] = {}
    print("\ncapacity: chunks/s delivered at saturation (mean of rounds); TTFT pooled over rounds")
    print(
        f"{'workers':>7} {'path':8} {'chunks/s':>10} {'x N=1':>7} {'target':>7} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'cores busy':>11} {'load':>5}"
    )
    one_rate = None
    for workers in arguments.workers:
        for path in ("direct", "gateway"):
            chosen = [run for run in bench.runs if run.workers == workers and run.path == path]
            if not chosen:
                continue
            rate = statistics.mean(run.chunks_per_s for run in chosen)
            p50, p99 = percentiles([value for run in chosen for value in run.ttft_ms])
            busy = statistics.mean(sum(run.worker_busy) for run in chosen) if path == "gateway" else 0.0
            load = max(run.load_before for run in chosen)
            row: dict[str, Any] = {
                "chunks_per_s": rate,
                "chunks_per_s_by_round": [run.chunks_per_s for run in chosen],
                "ttft_p50_ms": p50,
                "ttft_p99_ms": p99,
                "errors": sum(run.errors for run in chosen),
                "load_before_max": load,
            }
            ratio_text = target_text = busy_text = ""
            if path == "gateway":
                if workers == arguments.workers[0]:
                    one_rate = rate / workers
                if one_rate:
                    row["ratio_to_one"] = rate / one_rate
                    row["target"] = TARGET_PER_WORKER * workers
                    ratio_text, target_text = f"{rate / one_rate:.2f}", f"{TARGET_PER_WORKER * workers:.1f}"
                row["workers_cores_busy"] = busy
                row["main_process_cores_busy"] = statistics.mean(run.main_busy for run in chosen)
                busy_text = f"{busy:.2f}/{workers}"
            rows[f"{path}/{workers}w"] = row
            print(
                f"{workers:7} {path:8} {rate:10.0f} {ratio_text:>7} {target_text:>7} {p50:8.2f} "
                f"{p99:8.2f} {busy_text:>11} {load:5.2f}"
            )
    direct_rates = [run.chunks_per_s for run in bench.runs if run.path == "direct"]
    gateway_rates = [run.chunks_per_s for run in bench.runs if run.path == "gateway"]
    if direct_rates and gateway_rates and min(direct_rates) < 1.2 * max(gateway_rates):
        print(
            f"warning: direct ({min(direct_rates):.0f} chunks/s at the least) is not clearly above the "
            f"gateway ({max(gateway_rates):.0f}): the load, not the gateway, may be the limit; "
            "raise --streams, --clients or --replicas",
            file=sys.stderr,
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workers",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[1, 2, 4],
        help="gateway worker counts; the first is the base of the ratio (default 1,2,4)",
    )
    parser.add_argument("--cpus", default="", help="CPUs to use, taskset syntax (default: all of ours)")
    parser.add_argument(
        "--upstream-cpus", type=int, default=None, help="how many CPUs the upstreams get (default half)"
    )
    parser.add_argument("--replicas", type=int, default=0, help="upstream replicas (default one a CPU)")
    parser.add_argument("--clients", type=int, default=0, help="client processes (default one a CPU)")
    parser.add_argument("--streams", type=int, default=1536, help="closed-loop streams in all")
    parser.add_argument("--output-tokens", type=int, default=64, help="tokens (chunks) per answer")
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="the upstream's time to first token")
    parser.add_argument("--itl-ms", type=float, default=2.0, help="the upstream's time between tokens")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    cpus = parse_cpus(arguments.cpus) if arguments.cpus else sorted(os.sched_getaffinity(0))
    try:
        plan = split_cpus(cpus, max(arguments.workers), arguments.upstream_cpus)
    except ValueError as error:
        parser.error(str(error))
    arguments.replicas = arguments.replicas or len(plan.upstreams)
    arguments.clients = arguments.clients or len(plan.clients)
    offered = arguments.streams * arguments.output_tokens * 1000
    offered /= arguments.ttft_ms + (arguments.output_tokens - 1) * arguments.itl_ms
    print(
        f"gateway CPUs {cpu_list(plan.gateway)}, upstreams {cpu_list(plan.upstreams)} "
        f"({arguments.replicas} replicas), clients {cpu_list(plan.clients)} ({arguments.clients} "
        f"processes, {arguments.streams} streams); offered at most {offered:.0f} chunks/s"
        + ("; upstreams and clients SHARE CPUs" if plan.shared else ""),
        flush=True,
    )
    started = time.monotonic()
    try:
        require_taskset()
        with tempfile.TemporaryDirectory(prefix="modelyard-gateway-capacity-") as scratch:
            bench = Bench(arguments, plan, Path(scratch))
            for workers in arguments.workers:
                run_workers(bench, workers)
            summary = summarise(bench)
    except SetupFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
    print(f"\nmachine: {machine}; {time.monotonic() - started:.0f} s in all; load now {os.getloadavg()}")
    if arguments.json is not None:
        document = {
            "machine": machine,
            "plan": {"gateway": plan.gateway, "upstreams": plan.upstreams, "clients": plan.clients},
            "settings": {key: str(value) for key, value in vars(arguments).items() if key != "json"},
            "offered_chunks_per_s": offered,
            "summary": summary,
            "runs": [{**vars(run), "ttft_ms": percentiles(run.ttft_ms)} for run in bench.runs],
        }
        arguments.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
