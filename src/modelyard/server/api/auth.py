"""``PUT /api/v1/auth/password``: change the admin password (and the password file)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from modelyard.server.api.common import in_session
from modelyard.server.auth import AdminUser, require_admin
from modelyard.server.context import ServerContext, server_context
from modelyard.services import users
from modelyard.services.password_hashing import MAXIMUM_PASSWORD_CHARACTERS

router = APIRouter(tags=["auth"])


class PasswordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_password: str = Field(max_length=MAXIMUM_PASSWORD_CHARACTERS)
    new_password: str = Field(max_length=MAXIMUM_PASSWORD_CHARACTERS)


@router.put("/auth/password", status_code=204)
async def change_password(
    change: PasswordChange,
    admin: AdminUser = Depends(require_admin),
    context: ServerContext = Depends(server_context),
) -> Response:
    await in_session(
        context,
        users.change_password,
        admin.username,
        change.current_password,
        change.new_password,
        context.settings.admin_password_file,
    )
    return Response(status_code=204)
