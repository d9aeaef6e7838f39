"""``POST /api/v1/backends/check``: read a GPUStack backend YAML (the body) as import would, store
nothing, and list every problem with its line: ``{ok, problems: [{line, column, message, hint}],
backends}``. Always 200; the console's YAML editor marks each problem's line."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from modelyard.backends.gpustack import gpustack_problems, parse_gpustack_yaml, problem_to_json
from modelyard.errors import InvalidInput
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services.backends import backend_to_json
from modelyard.services.registry_credentials import check_backend_references

router = APIRouter(tags=["backends"])


def _check(session: Session, text: str) -> dict[str, Any]:
    problems = gpustack_problems(text)
    if problems:
        return {"ok": False, "problems": [problem_to_json(problem) for problem in problems], "backends": []}
    spec = parse_gpustack_yaml(text)
    try:
        check_backend_references(session, [spec])  # registry credentials, as import checks them
    except InvalidInput as error:
        problem = {"line": None, "column": None, "message": error.message, "hint": error.hint}
        return {"ok": False, "problems": [problem], "backends": []}
    return {"ok": True, "problems": [], "backends": [backend_to_json(spec)]}


@router.post("/backends/check")
async def check_backend_yaml(
    request: Request, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    # Its size is bounded at the door (max_import_body_bytes); depth and aliases by the parser.
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(f"the YAML is not UTF-8 text (byte {error.start})") from error
    return await in_session(context, _check, text)
