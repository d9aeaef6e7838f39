"""The field run's tables, in Markdown, from the results folder that ``h200.sh`` filled.

    python scripts/field/report.py RESULTS_DIR > tables.md

Every number printed comes from a file under RESULTS_DIR (``steps.jsonl``, each deployment's
``ps.json``, the benchmarks' ``result.json``, the engines' logs); nothing is typed in by hand.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ENGINE_MEMORY_LINES = re.compile(
    r"Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|"
    r"init engine \(profile|Load weight end|KV Cache is allocated|max_total_num_tokens="
)


def steps(results: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (results / "steps.jsonl").read_text().splitlines() if line]


def load_run(path: Path) -> dict[str, Any] | None:
    result = path / "result.json"
    return json.loads(result.read_text()) if result.exists() else None


def point_figures(point: dict[str, Any]) -> dict[str, float | None]:
    metrics = point.get("metrics") or {}

    def median(name: str) -> float | None:
        value = (metrics.get(name) or {}).get("median")
        return float(value) if value is not None else None

    return {
        "load": float(point["point"]["value"]),
        "ok": point.get("requests_succeeded"),
        "failed": point.get("requests_failed"),
        "tok_s": point.get("output_token_throughput_per_s"),
        "ttft": median("ttft_ms"),
        "tpot": median("tpot_ms"),
        "itl": median("itl_ms"),
    }


def number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def deployments_table(results: Path) -> str:
    rows = []
    for entry in steps(results):
        if entry["step"] != "deploy":
            continue
        ps_path = results / entry["name"] / "ps.json"
        verification = ""
        if ps_path.exists() and ps_path.read_text().startswith("{"):
            found = json.loads(ps_path.read_text())
            checks = [
                check
                for instance in found.get("instances", [])
                for check in instance.get("verification") or []
            ]
            counts = {
                status: sum(1 for check in checks if check["status"] == status)
                for status in ("passed", "skipped", "failed")
            }
            verification = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
        rows.append(
            [
                entry["name"],
                "running" if entry.get("seconds_to_running") else f"failed (exit {entry.get('exit_code')})",
                number(entry.get("seconds_to_running")),
                verification or "-",
            ]
        )
    return table(["deployment", "outcome", "s from deploy to running", "verification"], rows)


def gateway_against_direct(results: Path, name: str, suffix: str = "") -> str:
    """Each pass through the gateway against the direct pass of the same number (``bench
    --paths gateway,direct,direct,gateway`` writes ``bench-gateway``, ``bench-gateway-2``, ...)."""
    rows = []
    for repeat in range(1, 100):
        tag = f"{suffix}-{repeat}" if repeat > 1 else suffix
        gateway = load_run(results / name / f"bench-gateway{tag}")
        direct = load_run(results / name / f"bench-direct{tag}")
        if gateway is None or direct is None:
            break
        rows += _paired_rows(gateway, direct, repeat)
    if not rows:
        return f"(no pair of runs for {name}{suffix})"
    return table(
        [
            "pass",
            "concurrency",
            "requests gw / direct",
            "out tok/s gateway",
            "out tok/s direct",
            "ratio",
            "TTFT p50 gw",
            "TTFT p50 direct",
            "added TTFT ms",
            "TPOT p50 gw / direct",
            "ITL p50 gw / direct",
        ],
        rows,
    )


def _paired_rows(gateway: dict[str, Any], direct: dict[str, Any], repeat: int) -> list[list[str]]:
    rows = []
    for through, straight in zip(gateway["points"], direct["points"], strict=False):
        g, d = point_figures(through), point_figures(straight)
        ratio = g["tok_s"] / d["tok_s"] if g["tok_s"] and d["tok_s"] else None
        added = g["ttft"] - d["ttft"] if g["ttft"] is not None and d["ttft"] is not None else None
        rows.append(
            [
                str(repeat),
                number(g["load"], 0),
                f"{g['ok']} / {d['ok']}",
                number(g["tok_s"]),
                number(d["tok_s"]),
                number(ratio, 2),
                number(g["ttft"]),
                number(d["ttft"]),
                number(added, 1),
                f"{number(g['tpot'], 2)} / {number(d['tpot'], 2)}",
                f"{number(g['itl'], 2)} / {number(d['itl'], 2)}",
            ]
        )
    return rows


def engines_at(results: Path, names: list[str], path: str = "gateway") -> str:
    runs = {name: load_run(results / name / f"bench-{path}") for name in names}
    loads = sorted({point_figures(p)["load"] or 0.0 for run in runs.values() if run for p in run["points"]})
    rows = []
    for load in loads:
        for name, run in runs.items():
            if run is None:
                continue
            for point in run["points"]:
                figures = point_figures(point)
                if figures["load"] == load:
                    rows.append(
                        [
                            number(load, 0),
                            name,
                            number(figures["tok_s"]),
                            number(figures["ttft"]),
                            number(figures["tpot"], 2),
                            number(figures["itl"], 2),
                            f"{figures['ok']} / {figures['failed']}",
                        ]
                    )
    return table(
        ["concurrency", "engine", "out tok/s", "TTFT p50 ms", "TPOT p50 ms", "ITL p50 ms", "ok / failed"],
        rows,
    )


def kv_truth_table(results: Path) -> str:
    rows = []
    for entry in steps(results):
        if entry["step"] != "kv-truth":
            continue
        knobs = " ".join(
            part
            for part in re.findall(
                r"--(?:gpu-memory-utilization|mem-fraction-static|max-model-len|context-length) \S+",
                entry["args"],
            )
        )
        rows.append(
            [
                entry["backend"],
                knobs,
                number(entry.get("predicted_tokens"), 0),
                number(entry.get("logged_tokens"), 0),
                f"{entry['error_pct']:+.2f} %" if entry.get("error_pct") is not None else "-",
            ]
        )
    return table(
        ["engine", "settings", "modelyard estimate (tokens)", "engine logged (tokens)", "error"], rows
    )


def memory_lines(results: Path, name: str) -> str:
    log = results / name / "engine.log"
    if not log.exists():  # a published report keeps only excerpts of the engines' logs
        log = results / name / "engine-excerpt.log"
    if not log.exists():
        return ""
    return "\n".join(
        line[:220]
        for line in log.read_text(errors="replace").splitlines()
        if ENGINE_MEMORY_LINES.search(line)
    )


def kill_summary(results: Path) -> str:
    kills = [entry for entry in steps(results) if entry["step"] == "kill"]
    if not kills:
        return "(no kill step)"
    entry = kills[-1]
    lines = [
        f"- engine pid {entry['killed_pid']} killed with SIGKILL",
        f"- seconds until `modelyard ps` showed it running again: {entry['seconds_to_running']}",
        f"- seconds until the first chat answer through the gateway: {entry['seconds_to_first_answer']}",
    ]
    for message, count in entry["client_errors"].items():
        lines.append(f"- {count:,} client errors: `{message[:150]}`")
    ps = results / entry["name"] / "after-kill" / "ps.json"
    if ps.exists():
        for event in json.loads(ps.read_text()).get("events", []):
            lines.append(
                f"- event {event['at'][11:23]} {event['from_state']} -> {event['to_state']}: "
                f"{event['reason']}"
            )
    return "\n".join(lines)


def repeats_table(results: Path, name: str, suffix: str) -> str:
    rows = []
    for path in ("gateway", "direct"):
        run = load_run(results / name / f"bench-{path}{suffix}")
        if run is None:
            continue
        values = [point_figures(point) for point in run["points"]]
        for index, figures in enumerate(values):
            rows.append(
                [
                    path,
                    str(index + 1),
                    number(figures["load"], 0),
                    str(figures["ok"]),
                    number(figures["tok_s"]),
                    number(figures["ttft"]),
                ]
            )
        rates = [figures["tok_s"] for figures in values if figures["tok_s"]]
        if len(rates) > 1:
            rows.append([path, "mean", "", "", number(statistics.fmean(rates)), ""])
    return table(["path", "repeat", "concurrency", "requests", "out tok/s", "TTFT p50 ms"], rows)


def refusals(results: Path) -> str:
    lines = []
    for entry in steps(results):
        if entry["step"] != "expect-refusal":
            continue
        lines.append(
            f"**{entry['name']}** (`{entry['args']}`): exit {entry['exit_code']}, stored: {entry['stored']}"
        )
        lines.append("```\n" + entry["message"][-1800:] + "\n```")
    return "\n\n".join(lines)


def main() -> None:
    results = Path(sys.argv[1])
    print("## Deployments\n\n" + deployments_table(results) + "\n")
    for name in ("vllm", "sglang", "transformers"):
        print(
            f"## {name}: through the gateway against direct\n\n"
            + gateway_against_direct(results, name)
            + "\n"
        )
    print("## vLLM, fixed work per point, two repeats\n\n" + repeats_table(results, "vllm", "-fixed") + "\n")
    print(
        "## Engines side by side (through the gateway)\n\n"
        + engines_at(results, ["vllm", "sglang", "transformers"])
        + "\n"
    )
    print(
        "## Engines side by side (direct)\n\n"
        + engines_at(results, ["vllm", "sglang", "transformers"], "direct")
        + "\n"
    )
    print("## KV cache: estimate against the engines' logs\n\n" + kv_truth_table(results) + "\n")
    for name in ("vllm", "vllm-kv-mem08", "sglang", "sglang-kv-mem08"):
        print(f"### memory lines, {name}\n\n```\n{memory_lines(results, name)}\n```\n")
    print("## SIGKILL of the vLLM engine\n\n" + kill_summary(results) + "\n")
    print("## Deliberately wrong deployments\n\n" + refusals(results) + "\n")


if __name__ == "__main__":
    main()
