"""The OpenAI-compatible routes: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``,
``/v1/embeddings``.

Handlers take the raw ``Request`` (no pydantic model of the body): the body is forwarded as the
client wrote it, apart from ``model`` and ``stream_options``. See ``docs/gateway.md``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from modelyard.control.endpoints import Endpoint
from modelyard.errors import ModelyardError
from modelyard.server.gateway.access import authenticate, visible_deployments
from modelyard.server.gateway.errors import ModelNotFound, gateway_error_response
from modelyard.server.gateway.proxy import forward
from modelyard.server.gateway.runtime import gateway_runtime

gateway_router = APIRouter(tags=["gateway"])


def _model_object(name: str, endpoints: tuple[Endpoint, ...]) -> dict[str, object]:
    # "created" is not tracked per deployment by the gateway; 0 keeps OpenAI's integer type.
    model: dict[str, object] = {"id": name, "object": "model", "created": 0, "owned_by": "modelyard"}
    # modelyard's own extension: which engine serves the model and how many replicas are ready
    # (clients that do not know it ignore it; `modelyard bench` records the engine from it).
    extension: dict[str, object] = {"ready_replicas": len(endpoints)}
    if endpoints:
        extension["engine"] = endpoints[0].engine
        extension["engine_version"] = endpoints[0].engine_version
    model["modelyard"] = extension
    return model


@gateway_router.get("/v1/models")
async def list_models(request: Request) -> Response:
    """The deployments the key may use (ready or not), in OpenAI's list shape."""
    runtime = gateway_runtime(request)
    try:
        facts = await authenticate(runtime, request)
    except ModelyardError as error:
        return gateway_error_response(error)
    names = visible_deployments(runtime, facts)
    registry = runtime.context.endpoints
    data = [_model_object(name, registry.endpoints_for(name)) for name in names]
    return JSONResponse({"object": "list", "data": data})


@gateway_router.get("/v1/models/{model:path}")
async def retrieve_model(request: Request, model: str) -> Response:
    runtime = gateway_runtime(request)
    try:
        facts = await authenticate(runtime, request)
        names = visible_deployments(runtime, facts)
        if model not in names:
            hint = f"known models: {', '.join(names)}" if names else "no model is available to this key yet"
            raise ModelNotFound(f"model {model!r} does not exist", hint=hint)
    except ModelyardError as error:
        return gateway_error_response(error)
    return JSONResponse(_model_object(model, runtime.context.endpoints.endpoints_for(model)))


@gateway_router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await forward(request, "/v1/chat/completions")


@gateway_router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await forward(request, "/v1/completions")


@gateway_router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    return await forward(request, "/v1/embeddings")
