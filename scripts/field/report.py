"""The field run's tables, in Markdown, from the results folder that ``h200.sh`` filled.

    python scripts/field/report.py RESULTS_DIR > tables.md

Every number printed comes from a file under RESULTS_DIR (``steps.jsonl``, each deployment's
``ps.json``, the benchmarks' ``result.json``, the engines' logs); nothing is typed in by hand.
"""

from __future__ import annotations

import json
import lzma
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from report_share import prefix_table, runtime_table, scale_lines, shared_gpu_table
from report_tables import number, point_figures, steps, table

ENGINE_MEMORY_LINES = re.compile(
    r"Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|"
    r"init engine \(profile|Load weight end|KV Cache is allocated|max_total_num_tokens="
)


def load_run(path: Path) -> dict[str, Any] | None:
    result = path / "result.json"
    return json.loads(result.read_text()) if result.exists() else None


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


def measured_requests(run_dir: Path) -> list[dict[str, Any]]:
    """The run's measured, successful requests (``requests.jsonl``, or the brief form published)."""
    plain, brief = run_dir / "requests.jsonl", run_dir / "requests-brief.jsonl.xz"
    if plain.exists():
        text = plain.read_text()
    elif brief.exists():  # a published report keeps only the fields used here
        text = lzma.decompress(brief.read_bytes()).decode()
    else:
        return []
    records = [json.loads(line) for line in text.splitlines() if line]
    return [r for r in records if not r.get("warmup") and r.get("error") is None and r.get("e2el_ms")]


def bootstrap_interval(
    gateway: list[float], direct: list[float], statistic: Callable[[Any, Any], float], rounds: int = 2000
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of ``statistic(gateway, direct)``, requests resampled
    within each side. It treats requests as independent, which concurrent ones are not quite."""
    rng = np.random.default_rng(0)
    g, d = np.asarray(gateway), np.asarray(direct)
    values = [statistic(rng.choice(g, size=g.size), rng.choice(d, size=d.size)) for _ in range(rounds)]
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def client_label(folder: str) -> str:
    """``side-direct-direct-c128-direct-2`` -> ``direct-2``."""
    return folder.rsplit("-c", 1)[1].split("-", 1)[1]


def side_by_side_table(results: Path, name: str) -> str:
    """``field_run.py gateway-cost``: two clients at once, half the streams each; A against B."""
    rows = []
    for entry in steps(results):
        if entry["step"] != "gateway-cost" or entry.get("name") != name or "streams_per_path" not in entry:
            continue
        streams = entry["streams_per_path"]
        folders = entry.get("folders") or [f"side-c{streams}-gateway", f"side-c{streams}-direct"]
        first_dir, second_dir = (results / name / folder for folder in folders)
        first, second = load_run(first_dir), load_run(second_dir)
        if first is None or second is None:
            continue
        a, b = point_figures(first["points"][0]), point_figures(second["points"][0])
        ratio = a["tok_s"] / b["tok_s"] if a["tok_s"] and b["tok_s"] else None
        added = a["ttft"] - b["ttft"] if a["ttft"] is not None and b["ttft"] is not None else None
        a_requests, b_requests = measured_requests(first_dir), measured_requests(second_dir)
        ratio_ci = added_ci = "-"
        if a_requests and b_requests:
            # Per stream, the closed loop's rate is one over the mean request latency.
            low, high = bootstrap_interval(
                [r["e2el_ms"] for r in a_requests],
                [r["e2el_ms"] for r in b_requests],
                lambda x, y: float(y.mean() / x.mean()),
            )
            ratio_ci = f"{low:.3f} to {high:.3f}"
            low, high = bootstrap_interval(
                [r["ttft_ms"] for r in a_requests],
                [r["ttft_ms"] for r in b_requests],
                lambda x, y: float(np.median(x) - np.median(y)),
            )
            added_ci = f"{low:+.2f} to {high:+.2f}"
        rows.append(
            [
                f"{client_label(first_dir.name)} / {client_label(second_dir.name)}",
                number(a["load"], 0),
                f"{a['ok']} / {b['ok']}",
                f"{number(a['tok_s'])} / {number(b['tok_s'])}",
                number(ratio, 3),
                ratio_ci,
                f"{number(a['ttft'], 2)} / {number(b['ttft'], 2)}",
                number(added, 2),
                added_ci,
                f"{number(a['tpot'], 2)} / {number(b['tpot'], 2)}",
            ]
        )
    if not rows:
        return f"(no side-by-side runs for {name})"
    return table(
        [
            "A / B",
            "streams each",
            "requests A / B",
            "out tok/s A / B",
            "ratio A/B",
            "95 % interval (B/A mean latency)",
            "TTFT p50 A / B ms",
            "TTFT p50 A-B ms",
            "95 % interval",
            "TPOT p50 A / B ms",
        ],
        rows,
    )


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
    """Every section the results folder has data for (a run need not have every step)."""
    results = Path(sys.argv[1])
    names = sorted({entry["name"] for entry in steps(results) if entry.get("name")})
    sections: list[tuple[str, str]] = [("Deployments", deployments_table(results))]
    for name in names:
        sections.append(
            (f"{name}: through the gateway against direct", gateway_against_direct(results, name))
        )
        for suffix in ("-fixed", "-abba"):
            sections.append(
                (
                    f"{name}{suffix}: through the gateway against direct",
                    gateway_against_direct(results, name, suffix),
                )
            )
        sections.append((f"{name}: gateway and direct side by side", side_by_side_table(results, name)))
    sections.append(("vLLM, fixed work per point, two repeats", repeats_table(results, "vllm", "-fixed")))
    engines = [name for name in names if (results / name / "bench-gateway" / "result.json").exists()]
    sections.append(("Engines side by side (through the gateway)", engines_at(results, engines)))
    sections.append(("Engines side by side (direct)", engines_at(results, engines, "direct")))
    sections.append(("KV cache: estimate against the engines' logs", kv_truth_table(results)))
    sections.append(("Engines sharing one GPU, placed by memory", shared_gpu_table(results)))
    sections.append(("Replicas added one after the other", scale_lines(results)))
    sections.append(
        ("Prefix routing against least outstanding (one deployment, two replicas)", prefix_table(results))
    )
    sections.append(("The Ray runtime (one node) against the process runtime", runtime_table(results)))
    for name in ("vllm", "vllm-kv-mem08", "sglang", "sglang-kv-mem08", "vllm-tp2", "sglang-tp2"):
        lines = memory_lines(results, name)
        if lines:
            sections.append((f"memory lines, {name}", f"```\n{lines}\n```"))
    sections.append(("SIGKILL of the vLLM engine", kill_summary(results)))
    sections.append(("Deliberately wrong deployments", refusals(results)))
    for title, body in sections:
        empty_table = body.startswith("|") and body.count("\n") < 2
        if body.strip() and not body.startswith("(no") and not empty_table:
            print(f"## {title}\n\n{body}\n")


if __name__ == "__main__":
    main()
