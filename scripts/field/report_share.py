"""The report's tables for engines sharing one GPU (``field_share.py``'s steps), from a results folder.

``report.py`` prints them beside its own: the engines placed by memory (knob, booking, KV cache
logged against the estimate, memory per process), prefix routing against least outstanding, and
the same deployment on two runtimes. Every number comes from a file under the results folder.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from report_tables import number, point_figures, steps, table

GIB = 2**30


def _steps(results: Path, step: str) -> list[dict[str, Any]]:
    return [entry for entry in steps(results) if entry["step"] == step]


ENGINE_CORE_PID = re.compile(r"\(EngineCore pid=(\d+)\)")


def engine_core_pid(results: Path, engine: dict[str, Any]) -> int | None:
    """The pid that holds the GPU: vLLM V1's EngineCore child, named in the engine's log lines
    (``ps`` shows the API server's pid; nvidia-smi lists the EngineCore's)."""
    folder = results / str(engine["deployment"]) / f"instance-{engine['instance']}"
    for name in ("engine.log", "engine-excerpt.log"):
        if (folder / name).exists():
            found = ENGINE_CORE_PID.search((folder / name).read_text(errors="replace"))
            return int(found.group(1)) if found else None
    return None


def shared_gpu_table(results: Path) -> str:
    """Each engine placed by memory: its knob, what was booked, the KV cache it logged."""
    rows = []
    for entry in _steps(results, "kv-shared"):
        used = {row["pid"]: row["used_mib"] for row in entry.get("gpu_processes") or []}
        for engine in entry.get("engines") or []:
            core = engine_core_pid(results, engine)
            passed = sum(1 for check in engine.get("verification") or [] if check.endswith(" passed"))
            booked = engine.get("booked_bytes")
            rows.append(
                [
                    f"{engine['deployment']} #{engine['instance']}",
                    str(engine.get("state")),
                    ",".join(str(index) for index in engine.get("gpu_ids") or []),
                    str(engine.get("knob") or "-"),
                    number(booked / GIB if booked else None, 2),
                    number(engine.get("booked_kv_tokens"), 0),
                    number(engine.get("estimated_kv_tokens"), 0),
                    number(engine.get("logged_kv_tokens"), 0),
                    number(engine.get("error_pct"), 2),
                    number(used[core] / 1024 if core in used else None, 2),
                    f"{passed}/{len(engine.get('verification') or [])}",
                ]
            )
    if not rows:
        return ""
    return table(
        [
            "engine",
            "state",
            "GPU",
            "knob (set by the placement)",
            "booked GiB",
            "KV tokens booked",
            "KV tokens estimated at that knob",
            "KV tokens the engine logged",
            "estimate error %",
            "GiB on the GPU (nvidia-smi, EngineCore pid)",
            "verification passed",
        ],
        rows,
    )


def scale_lines(results: Path) -> str:
    return "\n".join(
        f"- `scale {entry['name']} {entry['replicas']}`: {entry.get('running')} running, "
        f"{number(entry.get('seconds_to_running'))} s to running (exit {entry.get('exit_code')})"
        for entry in _steps(results, "scale")
    )


def _percentile(values: list[float], fraction: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


def prefix_table(results: Path) -> str:
    """``benchmarks/prefix_routing.py --one-deployment``: per pass and per policy."""
    path = results / "prefix-routing" / "result.json"
    if not path.exists():
        return ""
    document = json.loads(path.read_text())
    rows = []
    for policy, runs in document["policies"].items():
        for index, run in enumerate(runs, start=1):
            rate = run["hits"] / run["queries"] if run["queries"] else None
            rows.append(
                [
                    policy,
                    str(index),
                    str(len(run["ttft_ms"])),
                    number(statistics.median(run["ttft_ms"]) if run["ttft_ms"] else None),
                    number(_percentile(run["ttft_ms"], 0.99)),
                    number(100 * rate if rate is not None else None),
                ]
            )
        everything = [value for run in runs for value in run["ttft_ms"]]
        hits, queries = sum(run["hits"] for run in runs), sum(run["queries"] for run in runs)
        rows.append(
            [
                f"**{policy}**",
                "all",
                str(len(everything)),
                number(statistics.median(everything) if everything else None),
                number(_percentile(everything, 0.99)),
                number(100 * hits / queries if queries else None),
            ]
        )
    text = table(
        ["policy", "pass", "requests", "TTFT p50 ms", "TTFT p99 ms", "prefix-cache hit rate %"], rows
    )
    for entry in _steps(results, "prefix-routing"):
        counters = entry.get("engine_counters") or {}
        shown = "; ".join(
            f"instance {instance}: {values['hits']:,.0f} of {values['queries']:,.0f} tokens"
            for instance, values in counters.items()
        )
        text += f"\n\nEach engine's own counters over the whole run (hits of queries, in tokens): {shown}."
        text += f"\nSettings: `{' '.join(entry.get('settings') or [])}`."
    return text


def runtime_table(results: Path, ray_name: str = "ray-solo", process_name: str = "solo") -> str:
    """The same deployment on the Ray runtime and on the process runtime, through each server's
    gateway (``bench --suffix=-runtime``, passes alternated), and its start and first chat."""
    rows = []
    for repeat in range(1, 10):
        tag = "-runtime" + (f"-{repeat}" if repeat > 1 else "")
        ray_path = results / ray_name / f"bench-gateway{tag}" / "result.json"
        process_path = results / process_name / f"bench-gateway{tag}" / "result.json"
        if not ray_path.exists() or not process_path.exists():
            break
        ray_run, process_run = json.loads(ray_path.read_text()), json.loads(process_path.read_text())
        for ray_point, process_point in zip(ray_run["points"], process_run["points"], strict=False):
            r, p = point_figures(ray_point), point_figures(process_point)
            ratio = r["tok_s"] / p["tok_s"] if r["tok_s"] and p["tok_s"] else None
            added = r["ttft"] - p["ttft"] if r["ttft"] is not None and p["ttft"] is not None else None
            rows.append(
                [
                    str(repeat),
                    number(r["load"], 0),
                    f"{r['ok']} / {p['ok']}",
                    f"{number(r['tok_s'])} / {number(p['tok_s'])}",
                    number(ratio, 3),
                    f"{number(r['ttft'], 2)} / {number(p['ttft'], 2)}",
                    number(added, 2),
                    f"{number(r['tpot'], 2)} / {number(p['tpot'], 2)}",
                ]
            )
    if not rows:
        return ""
    text = table(
        [
            "pass",
            "streams",
            "requests Ray / process",
            "out tok/s Ray / process",
            "ratio Ray/process",
            "TTFT p50 Ray / process ms",
            "added TTFT ms",
            "TPOT p50 Ray / process ms",
        ],
        rows,
    )
    starts = {entry["name"]: entry.get("seconds_to_running") for entry in _steps(results, "deploy")}
    chats = {entry["name"]: entry for entry in _steps(results, "chat")}
    for name, runtime in ((ray_name, "Ray"), (process_name, "process")):
        chat = chats.get(name) or {}
        text += (
            f"\n- {name} ({runtime} runtime): {number(starts.get(name))} s from deploy to running; "
            f"first chat through the gateway HTTP {chat.get('status', '-')} "
            f"in {number(chat.get('seconds'), 3)} s"
        )
    return text
