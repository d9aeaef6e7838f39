"""The tune's answer: the winner for all SLOs together and for each one alone, the Pareto front of
throughput against latency, every candidate's figures or the reason it was dropped, the gain over
the engine's defaults, and the deployment to create (a ``modelyard deploy`` command and the body
of ``POST /api/v1/deployments``). ``build_report`` computes it as data; ``report_markdown``
writes it for people; ``cli/tune.py`` draws it in the terminal.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from modelyard.secret_names import is_secret_env_name
from modelyard.tune.gains import gain_text, gains_over_defaults
from modelyard.tune.measurement import Measurement, PointFigures
from modelyard.tune.pruning import Dropped
from modelyard.tune.slo import Slo, format_slos
from modelyard.tune.space import Candidate
from modelyard.tune.tuner import TuneOutcome
from modelyard.tune.workloads import Workload


@dataclass(frozen=True)
class Winner:
    slos: str
    candidate: Candidate
    point: PointFigures


def deploy_body(candidate: Candidate, model: str, name: str) -> dict[str, Any]:
    """The body of ``POST /api/v1/deployments`` for ``candidate``."""
    return {
        "model": model,
        "name": name,
        "backend": candidate.engine.backend,
        "backend_version": candidate.engine.version,
        "gpus_per_replica": candidate.gpu_count,
        "backend_parameters": candidate.arguments,
        # Secret values masked (the report is written down): give them again when posting it.
        **({"env": candidate.shown_env} if candidate.env else {}),
    }


def deploy_command(candidate: Candidate, model: str, name: str) -> str:
    """The ``modelyard deploy`` command line that creates it; a secret variable's value is taken
    from the shell (``--env "HF_TOKEN=$HF_TOKEN"``), never written."""
    words = ["modelyard", "deploy", model, "--name", name, "--backend", candidate.engine.backend]
    if candidate.engine.version:
        words += ["--version", candidate.engine.version]
    words += ["--gpus", str(candidate.gpu_count)]
    for argument in candidate.arguments:
        words += ["--args", argument]
    secrets = []
    for variable, value in candidate.env:
        if is_secret_env_name(variable):
            secrets.append(f'--env "{variable}=${variable}"')
        else:
            words += ["--env", f"{variable}={value}"]
    return " ".join([shlex.join(words), *secrets])


def _winner(
    candidates: Sequence[Candidate], outcome: TuneOutcome, slos: list[Slo], label: str
) -> Winner | None:
    best: Winner | None = None
    for candidate in candidates:
        measurement = outcome.latest(candidate.candidate_id)
        point = measurement.best_point(slos) if measurement else None
        if point is not None and (best is None or point.throughput > best.point.throughput):
            best = Winner(label, candidate, point)
    return best


def pareto_front(
    candidates: Sequence[Candidate], outcome: TuneOutcome, latency_slo: Slo
) -> list[tuple[Candidate, PointFigures]]:
    """The measured points no other point beats on both throughput (higher) and the latency of
    ``latency_slo``'s metric and statistic (lower), by throughput."""
    points: list[tuple[Candidate, PointFigures, float]] = []
    for candidate in candidates:
        measurement = outcome.latest(candidate.candidate_id)
        for point in measurement.points if measurement else ():
            latency = point.value_of(latency_slo)
            if point.valid and point.requests_succeeded and latency is not None:
                points.append((candidate, point, latency))
    front = [
        (candidate, point)
        for candidate, point, latency in points
        if not any(
            other.throughput >= point.throughput
            and other_latency <= latency
            and (other.throughput > point.throughput or other_latency < latency)
            for _, other, other_latency in points
        )
    ]
    return sorted(front, key=lambda item: item[1].throughput)


def _point_json(point: PointFigures, slos: list[Slo]) -> dict[str, Any]:
    return {
        "load": point.load,
        "throughput": point.throughput,
        "output_tokens_per_s": point.output_token_throughput_per_s,
        "requests_per_s": point.request_throughput_per_s,
        "meets_slos": point.meets(slos),
        **{slo.text.split("<=")[0] + "_ms": point.value_of(slo) for slo in slos},
    }


def _measurement_json(measurement: Measurement, slos: list[Slo]) -> dict[str, Any]:
    return {
        "rung": measurement.rung,
        "requests_per_point": measurement.requests_per_point,
        "duration_s": measurement.duration_s,
        "record_dir": measurement.record_dir,
        "points": [_point_json(point, slos) for point in measurement.points],
        "speculation": measurement.speculation.to_json() if measurement.speculation else None,
    }


def build_report(
    *,
    tune_id: str,
    model: str,
    gpus: str,
    workload: Workload,
    slos: list[Slo],
    candidates: Sequence[Candidate],
    pruned: Sequence[Dropped],
    outcome: TuneOutcome,
    spent_s: float,
    start_count: int,
) -> dict[str, Any]:
    """Everything the report shows, as JSON-ready data (``report.json``)."""
    winners = [w for w in [_winner(candidates, outcome, slos, format_slos(slos))] if w is not None]
    if len(slos) > 1:
        for slo in slos:
            found = _winner(candidates, outcome, [slo], slo.text)
            if found is not None:
                winners.append(found)
    dropped = {d.candidate.candidate_id: d for d in [*pruned, *outcome.dropped]}
    rank = {candidate.candidate_id: index + 1 for index, candidate in enumerate(outcome.ranking)}
    rows = []
    for candidate in candidates:
        measurements = outcome.measurements.get(candidate.candidate_id, [])
        drop = dropped.get(candidate.candidate_id)
        rows.append(
            {
                **candidate.to_json(),
                "rank": rank.get(candidate.candidate_id),
                "dropped": drop.to_json() if drop else None,
                "measurements": [_measurement_json(m, slos) for m in measurements],
            }
        )
    overall = winners[0] if winners else None
    gain = None
    if overall is not None:
        defaults = [
            c
            for c in candidates
            if c.is_defaults
            and c.engine == overall.candidate.engine
            and c.gpu_count == overall.candidate.gpu_count
        ]
        measurement = outcome.latest(defaults[0].candidate_id) if defaults else None
        point = measurement.best_point(slos) if measurement else None
        gain = {
            "winner_is_defaults": bool(defaults) and defaults[0] == overall.candidate,
            "defaults": defaults[0].label if defaults else None,
            "defaults_throughput": point.throughput if point else None,
            "ratio": overall.point.throughput / point.throughput if point and point.throughput else None,
        }
    name = f"{model.replace('/', '-').lower()}-tuned"[:60]
    return {
        "tune_id": tune_id,
        "model": model,
        "gpus": gpus,
        "workload": workload.to_json(),
        "slos": [slo.text for slo in slos],
        "stopped_reason": outcome.stopped_reason,
        "spent_s": spent_s,
        "starts": start_count,
        "runs": sum(len(m) for m in outcome.measurements.values()),
        "winners": [
            {
                "slos": winner.slos,
                "candidate_id": winner.candidate.candidate_id,
                "label": winner.candidate.label,
                **_point_json(winner.point, slos),
            }
            for winner in winners
        ],
        "gain_over_defaults": gain,
        "gains_over_each_engines_defaults": gains_over_defaults(
            candidates, outcome, slos, overall.candidate, overall.point
        )
        if overall
        else [],
        "pareto_front": [
            {"candidate_id": c.candidate_id, "label": c.label, **_point_json(p, slos)}
            for c, p in pareto_front(candidates, outcome, slos[0])
        ],
        "deploy": {
            "command": deploy_command(overall.candidate, model, name),
            "body": deploy_body(overall.candidate, model, name),
        }
        if overall
        else None,
        "candidates": rows,
    }


def acceptance_text(row: dict[str, Any]) -> str:
    """A report candidate's speculative acceptance at its deepest rung: ``62% (2.9 tokens/step)``;
    "-" when it does not speculate or its engine did not say."""
    deepest = row["measurements"][-1] if row["measurements"] else None
    figures = (deepest or {}).get("speculation") or {}
    ratio, length = figures.get("acceptance_ratio"), figures.get("mean_acceptance_length")
    if ratio is None and length is None:
        return "-"
    text = f"{ratio:.0%}" if ratio is not None else ""
    if length is not None:
        text += f" ({length:.1f} tokens/step)" if text else f"{length:.1f} tokens/step"
    return text


def candidate_row(row: dict[str, Any]) -> tuple[str, float | None, str]:
    """A report candidate's deepest rung ("-" if never measured), its best throughput within the
    SLOs there, and why it was dropped ("" if it was not): the terminal's and Markdown's columns."""
    deepest = row["measurements"][-1] if row["measurements"] else None
    best = (
        max((p["throughput"] for p in deepest["points"] if p["meets_slos"]), default=None)
        if deepest
        else None
    )
    dropped = f"{row['dropped']['stage']}: {row['dropped']['reason']}" if row["dropped"] else ""
    return (str(deepest["rung"]) if deepest else "-"), best, dropped


def _figure(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report_markdown(report: dict[str, Any]) -> str:
    """``report.md``: the same content as the terminal, for a PR or a wiki."""
    slo_keys = [text.split("<=")[0] + "_ms" for text in report["slos"]]
    lines = [
        f"# modelyard tune {report['tune_id']}: {report['model']} on {report['gpus']}",
        "",
        f"Workload `{report['workload']['name']}` ({report['workload']['description']}), "
        f"SLOs `{', '.join(report['slos'])}`. {report['runs']} bench runs and {report['starts']} starts "
        f"in {report['spent_s']:.0f} s; stopped: {report['stopped_reason']}.",
        "",
        "## Winners",
        "",
    ]
    if not report["winners"]:
        lines.append("No candidate met the SLOs at any load measured.")
    else:
        lines += ["| SLOs | candidate | load | throughput | " + " | ".join(slo_keys) + " |"]
        lines += ["|---" * (4 + len(slo_keys)) + "|"]
        for winner in report["winners"]:
            values = " | ".join(_figure(winner.get(key)) for key in slo_keys)
            lines.append(
                f"| `{winner['slos']}` | {winner['label']} | {winner['load']:g} | "
                f"{_figure(winner['throughput'])} | {values} |"
            )
    gain = report.get("gain_over_defaults")
    if gain and gain.get("winner_is_defaults"):
        lines += ["", "The engine's defaults won: no knob tried did better."]
    elif gain and gain.get("ratio") and not report.get("gains_over_each_engines_defaults"):
        lines += [
            "",
            f"Against the engine's defaults ({gain['defaults']}): {gain['ratio']:.2f}x the throughput.",
        ]
    gains = report.get("gains_over_each_engines_defaults") or []
    if gains:
        lines += ["", "## Against each engine's defaults", "", "| defaults | the winner's throughput |"]
        lines += ["|---|---|"]
        lines += [f"| {gain['defaults']} | {gain_text(gain)} |" for gain in gains]
    if report.get("deploy"):
        lines += ["", "## Deploy it", "", "```sh", report["deploy"]["command"], "```", "", "```yaml"]
        lines += [yaml.safe_dump(report["deploy"]["body"], sort_keys=False).rstrip(), "```"]
    lines += ["", "## Pareto front (throughput against " + slo_keys[0] + ")", ""]
    lines += ["| candidate | load | throughput | " + slo_keys[0] + " |", "|---|---|---|---|"]
    for point in report["pareto_front"]:
        lines.append(
            f"| {point['label']} | {point['load']:g} | {_figure(point['throughput'])} | "
            f"{_figure(point.get(slo_keys[0]))} |"
        )
    lines += [
        "",
        "## Every candidate",
        "",
        "| rank | candidate | deepest rung | best throughput within SLOs | speculative acceptance "
        "| dropped |",
    ]
    lines += ["|---|---|---|---|---|---|"]
    for row in report["candidates"]:
        rung, best, dropped = candidate_row(row)
        lines.append(
            f"| {row['rank'] or '-'} | {row['label']} | {rung} | "
            f"{_figure(best)} | {acceptance_text(row)} | {dropped.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"
