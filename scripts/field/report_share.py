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

GIB = 2**30


def _steps(results: Path, step: str) -> list[dict[str, Any]]:
    lines = (results / "steps.jsonl").read_text().splitlines()
    return [entry for entry in (json.loads(line) for line in lines if line) if entry["step"] == step]


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


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
                    _number(booked / GIB if booked else None, 2),
                    _number(engine.get("booked_kv_tokens"), 0),
                    _number(engine.get("estimated_kv_tokens"), 0),
                    _number(engine.get("logged_kv_tokens"), 0),
                    _number(engine.get("error_pct"), 2),
                    _number(used[core] / 1024 if core in used else None, 2),
                    f"{passed}/{len(engine.get('verification') or [])}",
                ]
            )
    if not rows:
        return ""
    return _table(
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
        f"{_number(entry.get('seconds_to_running'))} s to running (exit {entry.get('exit_code')})"
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
                    _number(statistics.median(run["ttft_ms"]) if run["ttft_ms"] else None),
                    _number(_percentile(run["ttft_ms"], 0.99)),
                    _number(100 * rate if rate is not None else None),
                ]
            )
        everything = [value for run in runs for value in run["ttft_ms"]]
        hits, queries = sum(run["hits"] for run in runs), sum(run["queries"] for run in runs)
        rows.append(
            [
                f"**{policy}**",
                "all",
                str(len(everything)),
                _number(statistics.median(everything) if everything else None),
                _number(_percentile(everything, 0.99)),
                _number(100 * hits / queries if queries else None),
            ]
        )
    text = _table(
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


def _point(point: dict[str, Any]) -> dict[str, float | None]:
    metrics = point.get("metrics") or {}

    def median(name: str) -> float | None:
        value = (metrics.get(name) or {}).get("median")
        return float(value) if value is not None else None

    return {
        "load": float(point["point"]["value"]),
        "ok": point.get("requests_succeeded"),
        "tok_s": point.get("output_token_throughput_per_s"),
        "ttft": median("ttft_ms"),
        "tpot": median("tpot_ms"),
    }


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
            r, p = _point(ray_point), _point(process_point)
            ratio = r["tok_s"] / p["tok_s"] if r["tok_s"] and p["tok_s"] else None
            added = r["ttft"] - p["ttft"] if r["ttft"] is not None and p["ttft"] is not None else None
            rows.append(
                [
                    str(repeat),
                    _number(r["load"], 0),
                    f"{r['ok']} / {p['ok']}",
                    f"{_number(r['tok_s'])} / {_number(p['tok_s'])}",
                    _number(ratio, 3),
                    f"{_number(r['ttft'], 2)} / {_number(p['ttft'], 2)}",
                    _number(added, 2),
                    f"{_number(r['tpot'], 2)} / {_number(p['tpot'], 2)}",
                ]
            )
    if not rows:
        return ""
    text = _table(
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
            f"\n- {name} ({runtime} runtime): {_number(starts.get(name))} s from deploy to running; "
            f"first chat through the gateway HTTP {chat.get('status', '-')} "
            f"in {_number(chat.get('seconds'), 3)} s"
        )
    return text
