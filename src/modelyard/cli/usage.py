"""``modelyard usage --by project|user|key|deployment --since 7d [--until ...] [--bucket day] [--csv]``:
requests, tokens, errors and time to first token (median and 90th percentile) as the gateway
metered them (``GET /api/v1/usage/report``)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from modelyard.cli.client import ApiClient
from modelyard.cli.context import stdout
from modelyard.cli.output import print_json, print_table

_TIME_HELP = (
    "ISO 8601 (2026-12-01, 2026-12-01T08:00:00Z; UTC unless it says otherwise)"
    " or a span before now (30m, 24h, 7d, 2w)"
)


def _when(bucket_start: str | None, bucket: str | None) -> str:
    if bucket_start is None:
        return ""
    return bucket_start[:10] if bucket == "day" else bucket_start[:16].replace("T", " ")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def usage(
    ctx: typer.Context,
    by: str = typer.Option(
        "project", "--by", help="Group by project, user (the key's owner), key or deployment."
    ),
    since: str = typer.Option("7d", "--since", help=f"From this time: {_TIME_HELP}."),
    until: str | None = typer.Option(None, "--until", help="Before this time (default: now), as --since."),
    bucket: str | None = typer.Option(
        None, "--bucket", help="One row per hour or day (UTC); default: one total per group over the range."
    ),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV (one line per row) instead of a table."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Requests, tokens, errors and time to first token (p50, p90) by project, user, key or
    deployment, as the gateway metered them."""
    params: dict[str, Any] = {"group_by": by, "since": since}
    if until:
        params["until"] = until
    if bucket:
        params["bucket"] = bucket
    client = ApiClient.from_context(ctx)
    if as_csv:
        sys.stdout.write(client.get_text("/usage/report", {**params, "format": "csv"}))
        return
    report: dict[str, Any] = client.get("/usage/report", params)
    if as_json:
        print_json(report)
        return
    stdout.print(
        f"usage by {report['group_by']} from {report['since']} to {report['until']}"
        + (f", per {report['bucket']}" if report["bucket"] else ""),
        highlight=False,
    )
    if not report["rows"]:
        stdout.print("no requests through the gateway in this range", highlight=False)
        return
    when = ["HOUR" if report["bucket"] == "hour" else "DAY"] if report["bucket"] else []
    totals = report["totals"]
    print_table(
        [
            report["group_by"].upper(),
            *when,
            *("REQUESTS", "PROMPT TOKENS", "COMPLETION TOKENS", "ERRORS", "NO USAGE", "TTFT P50", "TTFT P90"),
        ],
        [
            *(
                [
                    row["group"],
                    *([_when(row["bucket_start"], report["bucket"])] if when else []),
                    row["requests"],
                    row["prompt_tokens"],
                    row["completion_tokens"],
                    row["errors"],
                    row["requests_without_usage"],
                    _ms(row["ttft_p50_ms"]),
                    _ms(row["ttft_p90_ms"]),
                ]
                for row in report["rows"]
            ),
            [
                "total",
                *([""] if when else []),
                totals["requests"],
                totals["prompt_tokens"],
                totals["completion_tokens"],
                totals["errors"],
                totals["requests_without_usage"],
                _ms(totals["ttft_p50_ms"]),
                _ms(totals["ttft_p90_ms"]),
            ],
        ],
    )


def register(app: typer.Typer) -> None:
    """Add ``modelyard usage`` to the root app."""
    app.command("usage")(usage)
