"""Input lengths of a run: requested against achieved (the prompts file), and achieved against what
the engine reported (``usage.prompt_tokens`` of each request); and a digest of the prompt texts,
to tell whether two runs did identical work.

Usage::

    check = check_input_lengths(prompts, requests_by_point)
    print(check.exact_prompts, check.prompts_with_request, check.points[0].usage_equal)
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from modelyard.bench.records import BenchPrompt, RequestRecord


@dataclass(frozen=True)
class PointUsageCheck:
    point_index: int
    requests_with_usage: int
    usage_equal: int
    """Requests whose ``usage.prompt_tokens`` equals the prompt's achieved length."""
    max_difference_tokens: int | None
    missing_usage: int


@dataclass
class InputLengthCheck:
    prompts: int = 0
    prompts_with_request: int = 0
    """Prompts that asked for a length (synthetic sets)."""
    exact_prompts: int = 0
    """Of those, prompts built at exactly the requested length."""
    achieved_min: int | None = None
    achieved_max: int | None = None
    points: list[PointUsageCheck] = field(default_factory=list)


def check_input_lengths(
    prompts: Sequence[BenchPrompt], requests_by_point: dict[int, list[RequestRecord]]
) -> InputLengthCheck:
    check = InputLengthCheck(prompts=len(prompts))
    requested = [p for p in prompts if p.requested_input_tokens is not None]
    check.prompts_with_request = len(requested)
    check.exact_prompts = sum(1 for p in requested if p.achieved_input_tokens == p.requested_input_tokens)
    achieved = [p.achieved_input_tokens for p in prompts if p.achieved_input_tokens is not None]
    if achieved:
        check.achieved_min, check.achieved_max = min(achieved), max(achieved)
    by_id = {prompt.prompt_id: prompt for prompt in prompts}
    for point_index in sorted(requests_by_point):
        succeeded = [r for r in requests_by_point[point_index] if r.succeeded]
        differences: list[int] = []
        missing = 0
        for record in succeeded:
            prompt = by_id.get(record.prompt_id)
            if record.usage_prompt_tokens is None:
                missing += 1
            elif prompt is not None and prompt.achieved_input_tokens is not None:
                differences.append(record.usage_prompt_tokens - prompt.achieved_input_tokens)
        check.points.append(
            PointUsageCheck(
                point_index=point_index,
                requests_with_usage=len(differences),
                usage_equal=sum(1 for difference in differences if difference == 0),
                max_difference_tokens=max(differences, key=abs) if differences else None,
                missing_usage=missing,
            )
        )
    return check


def prompts_digest(prompts: Sequence[BenchPrompt]) -> str:
    """A short digest of the prompts' texts and output lengths, in order: equal digests, same work."""
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(json.dumps([prompt.text(), prompt.max_output_tokens]).encode())
    return digest.hexdigest()[:12]


def input_lengths_html(check: InputLengthCheck, point_labels: Sequence[str]) -> str:
    """The section of the report: prompt lengths, then the engine's count per point."""
    if check.prompts == 0:
        return "<p>No prompts.jsonl beside the result: input lengths cannot be checked.</p>"
    lines = []
    if check.prompts_with_request:
        lines.append(
            f"{check.exact_prompts} of {check.prompts_with_request} prompts were built at exactly their "
            "requested length."
        )
    if check.achieved_min is not None:
        lines.append(
            f"Input lengths (counted before sending): {check.achieved_min} to {check.achieved_max} tokens."
        )
    rows = []
    for point in check.points:
        label = (
            point_labels[point.point_index]
            if point.point_index < len(point_labels)
            else str(point.point_index)
        )
        difference = "-" if point.max_difference_tokens is None else f"{point.max_difference_tokens:+d}"
        cells = [
            label,
            f"{point.usage_equal} / {point.requests_with_usage}",
            difference,
            str(point.missing_usage),
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    head = (
        "<tr><th>load</th><th>usage.prompt_tokens = counted</th><th>largest difference (tokens)</th>"
        "<th>no usage</th></tr>"
    )
    table = f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>" if rows else ""
    return "".join(f"<p>{html.escape(line)}</p>" for line in lines) + table
