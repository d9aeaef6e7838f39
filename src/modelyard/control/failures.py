"""A failed start: the instance goes to ``error`` with its reason and restarts after back-off.

The delay doubles with each consecutive failure of the instance (``backoff_initial_seconds``,
twice that, ... up to ``backoff_max_seconds``); a start that reaches running resets it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from modelyard.control.context import ControlContext
from modelyard.control.instance_store import InstanceView
from modelyard.control.transitions import KEEP, Keep, StartFailed


async def fail_start(
    context: ControlContext,
    instance: InstanceView,
    reason: str,
    *,
    diagnosis: str | Keep | None = KEEP,
    image_pull: dict[str, Any] | Keep | None = KEEP,
) -> None:
    """The start failed: ``error`` with the reason, and a restart after exponential back-off."""
    live = context.live.of(instance.id)
    live.start_failures += 1
    failures = live.start_failures
    options = context.options
    delay = min(options.backoff_initial_seconds * 2 ** (failures - 1), options.backoff_max_seconds)
    await context.transition(
        instance.id,
        StartFailed(
            reason=f"{reason}; restart {failures} in {delay:.0f} s",
            restart_count=instance.restart_count + 1,
            next_start_at=context.clock.now() + timedelta(seconds=delay),
            diagnosis=diagnosis,
            image_pull=image_pull,
        ),
    )
