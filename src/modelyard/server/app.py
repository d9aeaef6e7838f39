"""The server: one FastAPI app holding the REST API and the controller, and starting the gateway.

``create_app`` wires the parts around a ``ServerContext``; its lifespan starts the gateway (in
this process, or its worker processes), the controller (which re-adopts surviving engines) and
the download manager (which resumes interrupted model tasks), and on shutdown stops the
downloads (left queued for the next start), the controller and every engine it runs. ``/v1``
never reaches this app: ``GatewayApp`` (``server/gateway/app.py``) answers it in front
(``server/gateway/serving.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from modelyard import __version__
from modelyard.control.controller import Controller, ControllerOptions
from modelyard.downloads import DownloadManager, DownloadOptions
from modelyard.server.api.router import api_router
from modelyard.server.autoscale_wiring import start_autoscaler
from modelyard.server.console.router import install_console
from modelyard.server.context import ServerContext
from modelyard.server.door.body_limit import BodyLimitMiddleware
from modelyard.server.errors import install_error_handlers
from modelyard.server.gateway.startup import start_gateway
from modelyard.server.metrics.route import metrics_router
from modelyard.server.openapi_docs import install_openapi

if TYPE_CHECKING:
    from modelyard.downloads.push_runner import ModelPusher
    from modelyard.server.model_survey import WorkerModelSurvey

logger = logging.getLogger(__name__)

OPENAPI_URL = "/api/openapi.json"

# Called once the controller runs, e.g. by `modelyard serve` to prepare the demo. It must return at
# once: long work goes into tasks added to ``context.background_tasks`` (cancelled at shutdown).
StartupHook = Callable[[ServerContext], Awaitable[None]]


async def _cancel_background_tasks(context: ServerContext) -> None:
    tasks = list(context.background_tasks)
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    context.background_tasks.clear()


async def _start_model_survey(context: ServerContext) -> tuple[WorkerModelSurvey | None, ModelPusher | None]:
    """On a cluster: the survey of models on the workers, and the pusher that copies them there."""
    if context.cluster is None:
        return None, None
    from modelyard.cluster.model_push import RayModelPusher
    from modelyard.server.model_survey import WorkerModelSurvey

    survey = WorkerModelSurvey(context.database, context.cluster)
    await survey.start()
    context.model_survey = survey
    return survey, RayModelPusher(context.cluster)


def create_app(
    context: ServerContext,
    *,
    controller_options: ControllerOptions | None = None,
    on_started: StartupHook | None = None,
    download_options: DownloadOptions | None = None,
) -> FastAPI:
    # Read here, before the server starts, so that a bad setting is one error line.
    downloads_options = download_options or DownloadOptions.from_environment()
    controller_options = controller_options or ControllerOptions.from_environment(os.environ)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        gateway = await start_gateway(context)
        controller = Controller(
            settings=context.settings,
            database=context.database,
            endpoints=context.endpoints,
            runtimes=context.runtimes,
            options=controller_options,
            workers_source=context.cluster.workers if context.cluster is not None else None,
        )
        # The engines start while the gateway workers import (seconds on a loaded host).
        await controller.start()
        context.controller = controller
        autoscaler = await start_autoscaler(context, controller.poke)
        survey, pusher = await _start_model_survey(context)
        downloads = DownloadManager(
            context.database,
            context.settings.models_dir,
            downloads_options,
            pusher=pusher,
            on_push_done=survey.poke if survey is not None else None,
        )
        await downloads.start()
        context.downloads = downloads
        await gateway.serving()
        if on_started is not None:
            await on_started(context)
        try:
            yield
        finally:
            await downloads.shutdown()
            if survey is not None:
                await survey.shutdown()
            await _cancel_background_tasks(context)
            await autoscaler.shutdown()
            await controller.shutdown(stop_engines=True)
            await gateway.close()

    app = FastAPI(
        title="modelyard",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # served by the console, with Swagger UI's files from the package
        openapi_url=OPENAPI_URL,
        redoc_url=None,
    )
    app.state.context = context
    install_error_handlers(app)
    install_openapi(app)
    # The outermost layer (added last): bodies over their route's limit never reach a route.
    app.add_middleware(BodyLimitMiddleware, limits=context.limits)
    app.include_router(api_router)
    app.include_router(metrics_router)

    install_console(app, openapi_url=OPENAPI_URL)
    return app
