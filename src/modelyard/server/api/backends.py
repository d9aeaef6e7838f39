"""``/api/v1/backends``: the built-in catalog plus custom backends; GPUStack YAML in and out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import PlainTextResponse
from sqlalchemy.orm import Session

from modelyard.errors import InvalidInput
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import backends

router = APIRouter(tags=["backends"])


def _list(session: Session) -> list[dict[str, Any]]:
    usage = backends.deployments_by_backend(session)
    return [backends.backend_to_json(spec, usage) for spec in backends.list_backends(session)]


def _show(session: Session, name: str) -> dict[str, Any]:
    return backends.backend_to_json(
        backends.get_backend(session, name), backends.deployments_by_backend(session)
    )


def _import(session: Session, text: str) -> list[dict[str, Any]]:
    return [backends.backend_to_json(spec) for spec in backends.import_backends(session, text)]


@router.get("/backends")
async def list_backends(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, _list)


@router.post("/backends/import", status_code=201)
async def import_backends(
    request: Request, context: ServerContext = Depends(server_context)
) -> list[dict[str, Any]]:
    """The body is the YAML text itself (any content type)."""
    # Its size is bounded at the door (max_import_body_bytes); depth and aliases by the parser.
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(f"the YAML is not UTF-8 text (byte {error.start})") from error
    if not text.strip():
        raise InvalidInput("the YAML is empty", hint="send the backend YAML as the request body")
    return await in_session(context, _import, text)


@router.get(
    "/backends/{name}/export",
    response_class=PlainTextResponse,
    responses={200: {"content": {"application/yaml": {}}, "description": "the GPUStack-shaped YAML"}},
)
async def export_backend(name: str, context: ServerContext = Depends(server_context)) -> PlainTextResponse:
    text = await in_session(context, backends.export_backend, name)
    return PlainTextResponse(text, media_type="application/yaml")


@router.get("/backends/{name}")
async def show_backend(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return await in_session(context, _show, name)


@router.delete("/backends/{name}", status_code=204)
async def remove_backend(name: str, context: ServerContext = Depends(server_context)) -> Response:
    await in_session(context, backends.remove_backend, name)
    return Response(status_code=204)
