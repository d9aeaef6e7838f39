"""What the gateway costs: added time to first token, throughput and CPU, against direct access
and against LiteLLM's proxy, on this machine's CPUs, with an upstream of exact timing.

Set-up (every process pinned with ``taskset``): ``modelyard serve --gateway-workers N`` on
``--proxy-cpus`` (default CPU 0); the exact upstream (``exact_upstream.py``: 20 ms to the first
token, then one token a chunk every 5 or 40 ms) deployed behind it as an engine, and the lean
client (``lean_client.py``), both on ``--load-cpus`` (default CPU 1); LiteLLM's proxy (installed
by this script into ``benchmarks/.venvs/``, git-ignored) on the proxy CPUs, in front of the same
upstream.

For each scenario the paths run one after another, in ``--rounds`` rounds (direct, gateway,
LiteLLM, direct, gateway, ...), so slow drifts of the machine hit every path alike. The A/A
control is direct against direct (odd rounds against even ones): the method's own spread.

Scenarios: 1 and 32 streams at 5 ms a token; 256 and 1024 streams at 40 ms a token with starts
spread over one answer; 256 streams starting together (every stream sends at the same instant,
and a closed loop of fixed lengths keeps them together) at 40 ms and at 5 ms a token.

CPU per request and per chunk: the serving processes' CPU time (``/proc/PID/stat``) over two
runs of 32 streams, one with 1-token answers and one with 256-token answers, solved for the two
unknowns (cpu = requests x per-request + chunks x per-chunk). Scaling: the same with N workers,
as chunks per CPU-second per worker, and how evenly the kernel spread the connections.

Targets (issue 13): CPU per request <= 150 µs and per chunk <= 25 µs on one core; added TTFT
<= 1 ms p50 and <= 5 ms p99 at 256 spread streams, p99 <= 40 ms at 256 starting together;
N workers relay >= 0.8 N times one worker; >= 10x less CPU per chunk than LiteLLM.

    python benchmarks/gateway_overhead.py                       # everything, ~20 minutes
    python benchmarks/gateway_overhead.py --scenarios 1,32 --workers 1 --no-litellm --rounds 1
    python benchmarks/gateway_overhead.py --json results.json

Take figures on a quiet machine: the load average is printed before and after each run.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overhead_processes import (
    BareRelay,
    LiteLlmProxy,
    Platform,
    SetupFailed,
    machine_busy_s,
    require_taskset,
    run_client,
)

TTFT_MS = 20.0


@dataclass(frozen=True)
class Scenario:
    name: str
    streams: int
    start: str
    itl_ms: float
    output_tokens: int

    @property
    def answer_s(self) -> float:
        return (TTFT_MS + (self.output_tokens - 1) * self.itl_ms) / 1000

    @property
    def deployment(self) -> str:
        return f"ref{self.itl_ms:g}"


SCENARIOS = {
    "1": Scenario("1", 1, "spread", 5, 64),
    "32": Scenario("32", 32, "spread", 5, 64),
    "256-spread": Scenario("256-spread", 256, "spread", 40, 32),
    "256-together": Scenario("256-together", 256, "together", 40, 32),
    "256-together-5ms": Scenario("256-together-5ms", 256, "together", 5, 64),
    "1024-spread": Scenario("1024-spread", 1024, "spread", 40, 32),
}
COST_SHORT = Scenario("cost-1-token", 32, "spread", 5, 1)
COST_LONG = Scenario("cost-256-tokens", 32, "spread", 5, 256)
# LiteLLM relays about a thousand chunks a second on a core: the same split at a load it can carry.
LITELLM_COST_SHORT = Scenario("litellm-cost-1-token", 4, "spread", 5, 1)
LITELLM_COST_LONG = Scenario("litellm-cost-64-tokens", 4, "spread", 5, 64)
LITELLM_SCENARIOS = frozenset({"1", "32", "256-spread"})
# Scenarios run again with the workers' garbage collection untuned (--gc-compare).
GC_SCENARIOS = frozenset({"256-spread", "256-together", "1024-spread"})


@dataclass
class RunFigures:
    path: str
    scenario: str
    round: int
    workers: int
    requests: int
    events: int
    duration_s: float
    ttft_ms: list[float]
    serving_cpu_s: float
    per_process_cpu_s: list[float]
    load_before: float
    machine_busy_fraction: float
    gc_mode: str = "tuned"
    # The main process's CPU over the window (with workers: the usage writer, the metrics it
    # receives; not on the relay's path, but spent per request all the same).
    main_cpu_s: float = 0.0
    # Garbage collections in the gateway processes during the run (from /metrics): how many, their
    # total pause, and the upper bound of the slowest one's histogram bucket.
    gc_collections: int = 0
    gc_pause_s: float = 0.0
    gc_slowest_under_s: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.duration_s


GcReading = tuple[dict[float, float], float, float]


def gc_reading(metrics_text: str) -> GcReading:
    """The gateway's GC pause histogram: cumulative counts by ``le``, count, sum."""
    buckets: dict[float, float] = {}
    count = total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("modelyard_gateway_gc_pause_seconds_bucket"):
            bound = line.split('le="')[1].split('"')[0]
            buckets[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("modelyard_gateway_gc_pause_seconds_count"):
            count = float(line.rsplit(" ", 1)[1])
        elif line.startswith("modelyard_gateway_gc_pause_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
    return buckets, count, total


def gc_between(before: GcReading, after: GcReading) -> tuple[int, float, float]:
    """(collections, total pause s, the bucket bound under which the slowest pause fell)."""
    grown = [bound for bound in sorted(after[0]) if after[0][bound] - before[0].get(bound, 0.0) > 0]
    slowest = 0.0
    if grown:
        # The first bound whose cumulative count took in every new pause.
        new_total = after[1] - before[1]
        slowest = next(
            (bound for bound in sorted(after[0]) if after[0][bound] - before[0].get(bound, 0.0) >= new_total),
            float("inf"),
        )
    return int(after[1] - before[1]), after[2] - before[2], slowest


@dataclass
class Bench:
    arguments: argparse.Namespace
    scratch: Path
    runs: list[RunFigures] = field(default_factory=list)

    def measure(
        self,
        path: str,
        url: str,
        key: str,
        scenario: Scenario,
        round_index: int,
        pids: list[int],
        workers: int,
        gc_source: Callable[[], str] | None = None,
        gc_mode: str = "tuned",
        main_pid: int | None = None,
    ) -> RunFigures:
        arguments = self.arguments
        out = self.scratch / f"{path}-{scenario.name}-{workers}w-{round_index}.json"
        gc_before = gc_reading(gc_source()) if gc_source is not None else None
        busy_before, total_before = machine_busy_s()
        load_before = os.getloadavg()[0]
        result = run_client(
            url,
            cpus=arguments.load_cpus,
            streams=scenario.streams,
            start=scenario.start,
            output_tokens=scenario.output_tokens,
            answer_s=scenario.answer_s,
            duration_s=arguments.duration_s,
            warmup_s=arguments.warmup_s,
            out=out,
            api_key=key,
            model=scenario.deployment,
            cpu_pids=pids + ([main_pid] if main_pid is not None else []),
        )
        busy_after, total_after = machine_busy_s()
        # CPU, events and requests over exactly the measured window (the client reads them).
        measured_cpu = [float(value) for value in result["cpu_pids_s"]]
        per_process = measured_cpu[: len(pids)]
        main_cpu_s = measured_cpu[len(pids)] if main_pid is not None else 0.0
        gc = (0, 0.0, 0.0)
        if gc_source is not None and gc_before is not None:
            time.sleep(1.5)  # the workers send their counts every second
            gc = gc_between(gc_before, gc_reading(gc_source()))
        if result["errors"]:
            print(f"  warning: {result['errors']} errors ({result['statuses']})", file=sys.stderr)
        figures = RunFigures(
            path=path,
            scenario=scenario.name,
            round=round_index,
            workers=workers,
            requests=int(result["window_requests"]),
            events=int(result["window_events"]),
            duration_s=arguments.duration_s,
            ttft_ms=list(result["ttft_ms"]),
            serving_cpu_s=sum(per_process),
            per_process_cpu_s=per_process,
            load_before=load_before,
            machine_busy_fraction=(busy_after - busy_before) / max(total_after - total_before, 1e-9),
            gc_mode=gc_mode,
            main_cpu_s=main_cpu_s,
            gc_collections=gc[0],
            gc_pause_s=gc[1],
            gc_slowest_under_s=gc[2],
        )
        self.runs.append(figures)
        p50, p99 = percentiles(figures.ttft_ms)
        print(
            f"  {path:8} {scenario.name:17} w{workers} r{round_index}: {figures.requests:6} req "
            f"{figures.events_per_s:9.0f} chunks/s  TTFT p50 {p50:7.2f} p99 {p99:7.2f} ms  "
            f"cpu {figures.serving_cpu_s:6.2f} s  load {load_before:.2f} "
            f"busy {figures.machine_busy_fraction:.0%}"
            + (f"  gc {gc[0]} x, {gc[1] * 1e3:.1f} ms, slowest < {gc[2] * 1e3:g} ms" if gc_source else ""),
            file=sys.stderr,
        )
        return figures


def percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def pooled(runs: list[RunFigures], **match: Any) -> list[RunFigures]:
    return [run for run in runs if all(getattr(run, name) == value for name, value in match.items())]


def ttft_of(runs: list[RunFigures]) -> list[float]:
    return [value for run in runs for value in run.ttft_ms]


def cost_split(
    short: list[RunFigures], long: list[RunFigures], cpu: str = "serving_cpu_s"
) -> tuple[float, float] | None:
    """(µs per request, µs per chunk) from cpu = requests * r + chunks * c over the two workloads."""
    if not short or not long:
        return None
    r1, c1, t1 = (sum(getattr(run, name) for run in short) for name in ("requests", "events", cpu))
    r2, c2, t2 = (sum(getattr(run, name) for run in long) for name in ("requests", "events", cpu))
    determinant = r1 * c2 - r2 * c1
    if determinant == 0:
        return None
    per_request = (t1 * c2 - t2 * c1) / determinant
    per_chunk = (r1 * t2 - r2 * t1) / determinant
    return per_request * 1e6, per_chunk * 1e6


def run_platform(bench: Bench, workers: int, gc_mode: str = "tuned") -> None:
    """Every scenario on one ``modelyard serve`` (``gc_mode`` "default": the workers' GC untuned,
    and only the gateway path of the GC scenarios is measured)."""
    arguments = bench.arguments
    scratch = bench.scratch / f"platform-{workers}w-{gc_mode}"
    scratch.mkdir()
    cpus = arguments.proxy_cpus if workers <= 1 else arguments.all_cpus
    environment = {"MODELYARD_GATEWAY_GC": gc_mode}
    server = Platform(scratch, gateway_workers=workers, cpus=cpus, environment=environment)
    litellm: LiteLlmProxy | None = None
    floor: BareRelay | None = None
    compare_only = gc_mode != "tuned"
    try:
        server.start()
        ports: dict[float, int] = {}
        for itl_ms in sorted({SCENARIOS[name].itl_ms for name in arguments.scenarios} | {5.0}):
            options = f"--ttft-ms {TTFT_MS:g} --itl-ms {itl_ms:g}"
            ports[itl_ms] = server.deploy(f"ref{itl_ms:g}", arguments.load_cpus, options)[0]
        pids = server.serving_pids()
        main_pid = server.main_pid() if workers else None
        print(
            f"modelyard serve on {server.url}, {workers} gateway worker(s), GC {gc_mode}: pids {pids}",
            file=sys.stderr,
        )
        if arguments.floor and workers == arguments.workers[0] and not compare_only:
            floor = BareRelay(ports[COST_LONG.itl_ms], cpus=arguments.proxy_cpus)
            floor.start()
        if arguments.litellm and workers == arguments.workers[0] and not compare_only:
            upstreams = {f"ref{itl_ms:g}": f"http://127.0.0.1:{port}" for itl_ms, port in ports.items()}
            litellm = LiteLlmProxy(scratch, upstreams, cpus=arguments.proxy_cpus)
        if compare_only:
            scenarios = [SCENARIOS[name] for name in arguments.scenarios if name in GC_SCENARIOS]
        else:
            scenarios = [SCENARIOS[name] for name in arguments.scenarios] + [COST_SHORT, COST_LONG]
        for scenario in scenarios:
            for round_index in range(arguments.rounds):
                direct = f"http://127.0.0.1:{ports[scenario.itl_ms]}"
                if not compare_only:
                    bench.measure("direct", direct, "", scenario, round_index, pids, workers)
                bench.measure(
                    "gateway",
                    server.url,
                    server.api_key,
                    scenario,
                    round_index,
                    pids,
                    workers,
                    gc_source=server.metrics_text,
                    gc_mode=gc_mode,
                    main_pid=main_pid,
                )
                if floor is not None and scenario in (COST_SHORT, COST_LONG):
                    assert floor.process is not None
                    floor_pids = [floor.process.pid]
                    bench.measure("floor", floor.url, "", scenario, round_index, floor_pids, workers)
                if litellm is not None and scenario.name in LITELLM_SCENARIOS | {
                    COST_SHORT.name,
                    COST_LONG.name,
                }:
                    if litellm.process is None:
                        litellm.start()
                    litellm_scenario = scenario
                    if scenario.name.startswith("cost"):
                        litellm_scenario = LITELLM_COST_SHORT if scenario is COST_SHORT else LITELLM_COST_LONG
                    bench.measure(
                        "litellm",
                        litellm.url,
                        litellm.master_key,
                        litellm_scenario,
                        round_index,
                        litellm.pids(),
                        workers,
                    )
    finally:
        if floor is not None:
            floor.stop()
        if litellm is not None:
            litellm.stop()
        server.stop()


def summarise(bench: Bench) -> dict[str, Any]:
    runs = bench.runs
    arguments = bench.arguments
    summary: dict[str, Any] = {"scenarios": {}, "costs": {}, "gc": {}}
    print(
        "\nadded TTFT against direct (pooled rounds); A/A: direct odd rounds against even rounds", flush=True
    )
    print(
        f"{'scenario':18} {'workers':>7} {'path':8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'+p50':>8} {'+p99':>8} {'tput':>6}"
    )
    for name in arguments.scenarios:
        for workers in arguments.workers:
            direct = pooled(runs, scenario=name, workers=workers, path="direct")
            if not direct:
                continue
            d50, d99 = percentiles(ttft_of(direct))
            direct_rate = statistics.mean(run.events_per_s for run in direct)
            odd, even = direct[0::2], direct[1::2]
            rows: dict[str, Any] = {}
            if odd and even:
                a50, a99 = percentiles(ttft_of(odd))
                b50, b99 = percentiles(ttft_of(even))
                rows["A/A"] = {"added_p50_ms": a50 - b50, "added_p99_ms": a99 - b99}
                print(f"{name:18} {workers:7} {'A/A':8} {'':8} {'':8} {a50 - b50:+8.2f} {a99 - b99:+8.2f}")
            print(f"{name:18} {workers:7} {'direct':8} {d50:8.2f} {d99:8.2f}")
            for path in ("gateway", "litellm"):
                measured = pooled(runs, scenario=name, workers=workers, path=path, gc_mode="tuned")
                if not measured:
                    continue
                p50, p99 = percentiles(ttft_of(measured))
                ratio = statistics.mean(run.events_per_s for run in measured) / direct_rate
                rows[path] = {
                    "p50_ms": p50,
                    "p99_ms": p99,
                    "added_p50_ms": p50 - d50,
                    "added_p99_ms": p99 - d99,
                }
                rows[path]["throughput_ratio"] = ratio
                print(
                    f"{name:18} {workers:7} {path:8} {p50:8.2f} {p99:8.2f} "
                    f"{p50 - d50:+8.2f} {p99 - d99:+8.2f} {ratio:6.3f}"
                )
            summary["scenarios"][f"{name}/{workers}w"] = rows
    print("\nCPU of the serving processes (two workloads of 32 streams solved for per request and per chunk)")
    for workers in arguments.workers:
        for path in ("floor", "gateway", "litellm"):
            short_name, long_name = (
                (COST_SHORT.name, COST_LONG.name)
                if path != "litellm"
                else (LITELLM_COST_SHORT.name, LITELLM_COST_LONG.name)
            )
            short = pooled(runs, scenario=short_name, workers=workers, path=path, gc_mode="tuned")
            long = pooled(runs, scenario=long_name, workers=workers, path=path, gc_mode="tuned")
            split = cost_split(short, long)
            if split is None:
                continue
            per_request_us, per_chunk_us = split
            chunks_per_cpu_s = sum(run.events for run in long) / max(
                sum(run.serving_cpu_s for run in long), 1e-9
            )
            shares = [
                sum(run.per_process_cpu_s[index] for run in long)
                for index in range(len(long[0].per_process_cpu_s))
            ]
            main_split = cost_split(short, long, cpu="main_cpu_s") if path == "gateway" and workers else None
            summary["costs"][f"{path}/{workers}w"] = {
                "main_process_per_request_us": main_split[0] if main_split else None,
                "main_process_per_chunk_us": main_split[1] if main_split else None,
                "per_request_us": per_request_us,
                "per_chunk_us": per_chunk_us,
                "chunks_per_cpu_s": chunks_per_cpu_s,
                "cpu_s_by_process": shares,
            }
            print(
                f"{path:8} {workers} worker(s): {per_request_us:7.1f} µs per request, "
                f"{per_chunk_us:6.1f} µs per chunk, {chunks_per_cpu_s:8.0f} chunks per CPU-second; "
                f"CPU by process {', '.join(f'{s:.2f}' for s in shares)} s"
            )
            if main_split is not None:
                print(
                    f"{'':8} and in the main process (usage writer, metrics): {main_split[0]:7.1f} µs per "
                    f"request, {main_split[1]:6.1f} µs per chunk"
                )
    gc_rows = [run for run in runs if run.path == "gateway" and run.scenario in GC_SCENARIOS]
    if gc_rows:
        print("\ngarbage collection in the gateway worker(s) during the runs (from /metrics)")
        print(
            f"{'scenario':18} {'workers':>7} {'GC':8} {'TTFT p99':>9} {'collections':>12} "
            f"{'paused ms':>10} {'slowest <':>10}"
        )
        for name in sorted({run.scenario for run in gc_rows}):
            for workers in arguments.workers:
                for mode in ("tuned", "default"):
                    chosen = [
                        run
                        for run in gc_rows
                        if run.scenario == name and run.workers == workers and run.gc_mode == mode
                    ]
                    if not chosen:
                        continue
                    _, p99 = percentiles(ttft_of(chosen))
                    collections = sum(run.gc_collections for run in chosen)
                    paused_ms = sum(run.gc_pause_s for run in chosen) * 1e3
                    slowest_ms = max(run.gc_slowest_under_s for run in chosen) * 1e3
                    summary["gc"][f"{name}/{workers}w/{mode}"] = {
                        "ttft_p99_ms": p99,
                        "collections": collections,
                        "paused_ms": paused_ms,
                        "slowest_under_ms": slowest_ms,
                    }
                    print(
                        f"{name:18} {workers:7} {mode:8} {p99:9.2f} {collections:12} "
                        f"{paused_ms:10.1f} {slowest_ms:10g}"
                    )
    costs = summary["costs"]
    floor_cost = costs.get("floor/1w") or next((costs[k] for k in costs if k.startswith("floor/")), None)
    gateway_one = costs.get("gateway/1w")
    if floor_cost and gateway_one:
        above_request = gateway_one["per_request_us"] - floor_cost["per_request_us"]
        above_chunk = gateway_one["per_chunk_us"] - floor_cost["per_chunk_us"]
        print(
            f"\nthe floor (bare_relay.py: bytes between two sockets, no HTTP) costs "
            f"{floor_cost['per_request_us']:.1f} µs a request and "
            f"{floor_cost['per_chunk_us']:.1f} µs a chunk "
            f"here; the gateway's own work above it: {above_request:.1f} µs a request, "
            f"{above_chunk:.1f} µs a chunk"
        )
        summary["above_floor"] = {"per_request_us": above_request, "per_chunk_us": above_chunk}
    one, many = (
        costs.get("gateway/1w"),
        next((costs[k] for k in costs if k.startswith("gateway/") and k != "gateway/1w"), None),
    )
    if one and many:
        n = max(w for w in arguments.workers)
        scaling = (many["chunks_per_cpu_s"] * n) / (one["chunks_per_cpu_s"])
        print(
            f"\nN={n} workers: {scaling:.2f} x one worker's relay capacity "
            f"(chunks per CPU-second x N), target >= {0.8 * n:.1f}"
        )
        summary["scaling"] = {"workers": n, "ratio": scaling}
    if one and costs.get("litellm/1w"):
        ratio = costs["litellm/1w"]["per_chunk_us"] / one["per_chunk_us"]
        print(f"LiteLLM per chunk / gateway per chunk: {ratio:.1f}x (target >= 10x)")
        summary["litellm_cpu_ratio"] = ratio
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", type=lambda text: text.split(","), default=list(SCENARIOS))
    parser.add_argument("--workers", type=lambda text: [int(v) for v in text.split(",")], default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--proxy-cpus", default="0")
    parser.add_argument("--load-cpus", default="1")
    parser.add_argument("--all-cpus", default="0,1", help="CPUs of modelyard serve with several workers")
    parser.add_argument("--no-litellm", dest="litellm", action="store_false")
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the floor: bare_relay.py between the client and the upstream (CPU split only)",
    )
    parser.add_argument(
        "--gc-compare",
        action="store_true",
        help="Run the 256- and 1024-stream scenarios again with the workers' GC untuned",
    )
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    unknown = [name for name in arguments.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    started = time.monotonic()
    try:
        require_taskset()
        with tempfile.TemporaryDirectory(prefix="modelyard-gateway-overhead-") as scratch:
            bench = Bench(arguments, Path(scratch))
            for workers in arguments.workers:
                run_platform(bench, workers)
            if arguments.gc_compare:
                run_platform(bench, arguments.workers[0], gc_mode="default")
            summary = summarise(bench)
    except SetupFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
    loads = [run.load_before for run in bench.runs]
    print(
        f"\nmachine: {machine}; load average before runs {min(loads):.2f} to {max(loads):.2f}; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    if arguments.json is not None:
        document = {
            "machine": machine,
            "settings": {key: str(value) for key, value in vars(arguments).items() if key != "json"},
            "summary": summary,
            "runs": [{**vars(run), "ttft_ms": percentiles(run.ttft_ms)} for run in bench.runs],
        }
        arguments.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
