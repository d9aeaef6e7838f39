"""Preparing and deploying the demo in the background of a running server.

``modelyard serve`` binds its port first and starts ``prepare_and_deploy`` as a task once the
server runs: the model is converted (first start only) while ``/api/v1/system`` reports the
progress and the gateway answers 503 "demo is being prepared (42%)" for ``demo``; then the model
and the ``demo`` deployment are registered and the controller is poked to start it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from modelyard.control.endpoints import EndpointRegistry
from modelyard.demo.prepare import (
    DEMO_DEPLOYMENT_NAME,
    DemoModelUnavailable,
    is_prepared,
    preparation_log,
    prepare_demo_model,
)
from modelyard.demo.register import register_demo
from modelyard.demo.status import DemoStatus
from modelyard.errors import ModelyardError
from modelyard.hardware.gpus import GpuInventory
from modelyard.store.database import Database

logger = logging.getLogger(__name__)

# Progress is printed in steps of this many percent (the server's log is no progress bar).
PRINT_STEP_PERCENT = 10


async def prepare_and_deploy(
    *,
    models_dir: Path,
    database: Database,
    endpoints: EndpointRegistry,
    inventory: Callable[[], GpuInventory],
    poke_controller: Callable[[], None],
    status: DemoStatus,
    say: Callable[[str], None],
) -> None:
    """Convert the demo model if needed, register it and its deployment, poke the controller.

    Never raises (a failed demo leaves the server running): a failure is ``status.state ==
    "failed"`` with the message, printed with ``say`` and kept as the gateway's answer for ``demo``.
    """
    status.log_path = preparation_log(models_dir)
    printed = -PRINT_STEP_PERCENT

    def on_progress(percent: int, stage: str) -> None:
        nonlocal printed
        status.update(percent, stage)
        endpoints.set_note(DEMO_DEPLOYMENT_NAME, status.message)
        if percent >= printed + PRINT_STEP_PERCENT or percent == 100:
            say(f"demo: preparing the model {percent:3d}% ({stage})")
            printed = percent

    try:
        if not is_prepared(models_dir):
            on_progress(0, "starting the conversion (first start only)")
        directory = await prepare_demo_model(models_dir, on_progress)
        created = await asyncio.to_thread(register_demo, database, directory, inventory())
    except ModelyardError as error:
        _fail(status, endpoints, say, error)
        return
    except OSError as error:
        _fail(status, endpoints, say, DemoModelUnavailable(f"preparing the demo model failed: {error}"))
        return
    status.state = "deployed"
    status.progress_percent = 100
    status.message = ""
    endpoints.clear_note(DEMO_DEPLOYMENT_NAME)
    if created:
        say("demo: deployment 'demo' created (transformers serve on CPU)")
    poke_controller()


def _fail(
    status: DemoStatus, endpoints: EndpointRegistry, say: Callable[[str], None], error: ModelyardError
) -> None:
    logger.warning("the demo could not be prepared: %s", error)
    status.state = "failed"
    status.message = f"the demo could not be prepared: {error.message}"
    endpoints.set_note(DEMO_DEPLOYMENT_NAME, status.message, coming=False)
    say(f"[red]demo: {error}[/red]")
