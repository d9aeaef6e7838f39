"""``/api/v1/registry-credentials``: registry logins for backend images; passwords go in, never out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import registry_credentials

router = APIRouter(tags=["registry credentials"])


class CredentialRequest(BaseModel):
    """A registry login. ``password`` is sealed as it is stored and never returned."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="How backend versions name it in registry_credential.")
    registry: str = Field(description="The registry host and port, as image references name it.")
    username: str
    password: str = Field(json_schema_extra={"writeOnly": True})
    replace: bool = Field(default=False, description="Overwrite a credential of that name.")


@router.get("/registry-credentials")
async def list_credentials(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, registry_credentials.list_credentials)


@router.post("/registry-credentials", status_code=201)
async def add_credential(
    request: CredentialRequest, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    return await in_session(
        context,
        registry_credentials.add_credential,
        context.secrets,
        request.name,
        registry=request.registry,
        username=request.username,
        password=request.password,
        replace=request.replace,
    )


@router.delete("/registry-credentials/{name}", status_code=204)
async def remove_credential(name: str, context: ServerContext = Depends(server_context)) -> Response:
    await in_session(context, registry_credentials.remove_credential, name)
    return Response(status_code=204)
