"""``GET /api/v1/usage/report?group_by=project&bucket=day&since=7d&until=now&format=csv``:
requests, tokens and errors by project, user, key or deployment, per hour or day; a member sees
the requests made with their projects' keys (``modelyard.services.usage_report``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session
from starlette.responses import JSONResponse, Response

from modelyard.errors import InvalidInput
from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext, server_context
from modelyard.server.policy import authorize
from modelyard.services.projects import visible_project_ids
from modelyard.services.usage_report import (
    UsageReport,
    parse_bucket,
    parse_dimension,
    parse_range,
    usage_report,
)
from modelyard.store.tables import utc_now

router = APIRouter(tags=["usage"])

FORMATS = ("json", "csv")


def _report(
    session: Session, group_by: str, bucket: str | None, since: str | None, until: str | None, user: SignedIn
) -> UsageReport:
    dimension = parse_dimension(group_by)
    chosen_bucket = parse_bucket(bucket)
    window = parse_range(since, until, bucket=chosen_bucket, now=utc_now())
    return usage_report(
        session,
        group_by=dimension,
        bucket=chosen_bucket,
        window=window,
        project_ids=visible_project_ids(session, user.id, user.role),
    )


@router.get("/usage/report", response_model=None)
async def read_usage_report(
    group_by: str = "project",
    bucket: str | None = None,
    since: str | None = None,
    until: str | None = None,
    format: str = "json",
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any] | Response:
    """Usage by ``group_by`` (project, user, key, deployment) per ``bucket`` (hour, day; none:
    totals) from ``since`` (default: 7 days before ``until``) to ``until`` (default: now); times
    in ISO 8601 or a span before now (``24h``, ``7d``). ``format=csv``: a CSV attachment."""
    if format not in FORMATS:
        raise InvalidInput(
            f"format {format!r} is not one of {', '.join(FORMATS)}", hint="leave it out for JSON"
        )
    report = await in_session(context, _report, group_by, bucket, since, until, user)
    if format == "csv":
        return Response(
            report.to_csv(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{report.csv_filename()}"'},
        )
    return JSONResponse(report.to_json())
