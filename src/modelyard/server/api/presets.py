"""``/api/v1/presets``: the tested deployment recipes (``modelyard.presets``), optionally checked
against a registered model (``?model=NAME``: 409 when it is another architecture)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from modelyard.errors import Conflict
from modelyard.presets import Preset, get_preset, load_presets, presets_for
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import model_files

router = APIRouter(tags=["presets"])


def _architecture(session: Session, model: str) -> str | None:
    return model_files.get_model(session, model).architecture


def _check(preset: Preset, model: str, architecture: str | None) -> None:
    if preset.architectures and architecture not in preset.architectures:
        others = [candidate.name for candidate in presets_for(architecture)]
        raise Conflict(
            f"preset {preset.name!r} is for {', '.join(preset.architectures)} ({preset.model}); "
            f"model {model!r} is {architecture or 'of an unknown architecture'}",
            hint=f"presets for it: {', '.join(others)}"
            if others
            else "no preset fits it; give the flags yourself",
        )


@router.get("/presets")
async def list_presets(
    model: str | None = None, context: ServerContext = Depends(server_context)
) -> list[dict[str, Any]]:
    if model is None:
        return [preset.to_json() for preset in load_presets()]
    architecture = await in_session(context, _architecture, model)
    return [preset.to_json() for preset in presets_for(architecture)]


@router.get("/presets/{name}")
async def show_preset(
    name: str, model: str | None = None, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    preset = get_preset(name)
    if model is not None:
        _check(preset, model, await in_session(context, _architecture, model))
    return preset.to_json()
