"""The pull before a container starts: the ``pulling`` stage of an instance.

A start of a backend version with an image goes through here first (``launch.start_instance``):
the image is made ready under the version's pull policy (``runtimes/image_pull.py``) in the
instance's slow task, so a pull of minutes never holds up the reconcile pass or any other
deployment. While it pulls, the instance is ``starting`` with ``image_pull.state = "pulling"``
and its reason and ``image_pull`` say the layers and bytes so far (written at most once a
second, without an event each time); when it is done, one event says what came down and how
long it took, and the next pass places and launches the container. A failed pull is this
instance's ``error`` with the registry's answer and the usual back-off; nothing else waits on it.

On a cluster (the Ray runtime) the pull runs on the worker the replica was placed on, against
that worker's own dockerd (``RayRuntime.prepare_image``: a task pinned to the node); the
credential is opened here, on the server, and handed over for that one pull. Its reason and
events say the worker ("pulling image X on worker W", "pulled X: N layers, M MB in T s on
worker W"); a failure names the image, the worker and the registry's answer. The pull counts
for the node it ran on: placed elsewhere by the next pass, the start pulls there first.

The registry credential a version names is read from the store and opened here, for the one
request that presents it; it is in no argv, log line, event or API answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from modelyard.backends.spec import BackendVersion
from modelyard.control.context import ControlContext
from modelyard.control.failures import fail_start
from modelyard.control.instance_store import DeploymentView, InstanceView
from modelyard.control.transitions import ImagePulled, PullingImage
from modelyard.errors import ImagePullFailed, ModelyardError
from modelyard.runtimes.base import Runtime
from modelyard.runtimes.docker import DockerRuntime
from modelyard.runtimes.image_pull import (
    PullProgress,
    PullResult,
    RegistryAuth,
    ReportedProgress,
    credential_server,
    image_present,
    prepare_image,
    registry_matches,
)
from modelyard.runtimes.ray_runtime import RayRuntime

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_SECONDS = 1.0


def image_ready(
    context: ControlContext,
    deployment: DeploymentView,
    instance: InstanceView,
    version: BackendVersion,
    runtime: Runtime,
    *,
    node_id: str | None = None,
) -> bool:
    """True when this start may launch now; False when its pull step was started (the instance's
    task, which pokes the controller when it is done). ``node_id``: the Ray node rank 0 was
    placed on (the image is pulled there)."""
    if not version.runs_in_container:
        return True
    start_number = instance.start_count + 1
    if context.live.of(instance.id).image_ready_for == (start_number, node_id):
        return True
    if isinstance(runtime, RayRuntime) and node_id is not None:
        work = _prepare_on_worker(context, instance, version, runtime, start_number, node_id)
    elif isinstance(runtime, DockerRuntime):
        mounts = [mount.to_json() for mount in runtime.mounts(deployment.model_path)]
        work = _prepare(context, instance, version, runtime, start_number, mounts)
    else:
        return True
    context.tasks.spawn(instance.id, work, "bring-up")
    return False


def open_registry_auth(context: ControlContext, version: BackendVersion) -> RegistryAuth | None:
    """The version's registry credential, opened (call it in a thread: it reads the store); None
    when the version names none. What a pull on another node is handed (a ``RegistryAuth``
    pickles; its password is in no repr), so that the worker's own dockerd is asked with it."""
    name = version.registry_credential
    if name is None:
        return None
    image = version.image or ""
    stored = context.store.registry_credential(name)
    if stored is None:
        raise ImagePullFailed(
            f"cannot pull image {image}: the backend version names registry credential {name!r}, "
            "which is no longer stored",
            hint=f"add it again: `modelyard backends credentials add {name} --registry "
            f"{credential_server(image)} --username USER --password-stdin`",
        )
    registry, username, sealed_password = stored
    if not registry_matches(registry, image):
        raise ImagePullFailed(
            f"cannot pull image {image}: registry credential {name!r} is for {registry}, not for the "
            f"image's registry {credential_server(image)}",
            hint="name a credential for the image's registry in the backend version",
        )
    return RegistryAuth(
        server_address=credential_server(image),
        username=username,
        password=context.secrets.reveal(sealed_password),
        name=name,
    )


class _ProgressWriter:
    """Writes a pull's progress onto the instance, at most once per interval (no event); the
    last progress of a burst is written when the interval has passed, even if dockerd then goes
    quiet (a slow layer), so what ``ps`` shows is never older than one interval."""

    def __init__(
        self, context: ControlContext, instance_id: int, policy: str, worker: str | None = None
    ) -> None:
        self._context = context
        self._instance_id = instance_id
        self._policy = policy
        # The worker whose dockerd pulls (on a cluster); None: this host's.
        self._worker = worker
        self._last_write = 0.0
        # The latest (reason, image_pull) not written yet.
        self._latest: tuple[str, dict[str, Any]] | None = None
        self._flush: asyncio.Task[None] | None = None
        self._flush_sleeping = False

    async def __call__(self, progress: PullProgress | ReportedProgress) -> None:
        where = "" if self._worker is None else f" on worker {self._worker}"
        self._latest = (
            f"pulling image {progress.image}{where}: {progress.describe()}",
            {
                "state": "pulling",
                "policy": self._policy,
                **progress.to_json(),
                **({} if self._worker is None else {"worker": self._worker}),
            },
        )
        wait_seconds = self._last_write + PROGRESS_INTERVAL_SECONDS - time.monotonic()
        if wait_seconds <= 0:
            await self._write()
        elif self._flush is None or self._flush.done():
            self._flush_sleeping = True
            self._flush = asyncio.create_task(self._write_after(wait_seconds))

    async def _write_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._flush_sleeping = False
        await self._write()

    async def _write(self) -> None:
        latest, self._latest = self._latest, None
        if latest is None:
            return
        self._last_write = time.monotonic()
        reason, image_pull = latest
        await asyncio.to_thread(
            self._context.store.record_pull_progress, self._instance_id, image_pull, reason
        )

    async def close(self) -> None:
        """The pull ended: nothing more is written, and a write under way has landed (so that it
        cannot overwrite the result that follows)."""
        self._latest = None
        flush, self._flush = self._flush, None
        if flush is None:
            return
        if self._flush_sleeping:
            flush.cancel()
        await asyncio.gather(flush, return_exceptions=True)


async def _prepare(
    context: ControlContext,
    instance: InstanceView,
    version: BackendVersion,
    runtime: DockerRuntime,
    start_number: int,
    mounts: list[dict[str, Any]],
) -> None:
    image = version.image or ""
    policy = version.effective_pull_policy
    pulling: dict[str, Any] = {"state": "pulling", "image": image, "policy": policy}
    try:
        auth = await asyncio.to_thread(open_registry_auth, context, version)
        if policy == "always" or (
            policy == "if-missing" and not await image_present(image, daemon=runtime.daemon)
        ):
            announced = PullingImage(
                reason=f"pulling image {image} (pull policy {policy})",
                runtime=runtime.kind,
                image_pull=pulling,
                mounts=mounts,
            )
            await context.transition(instance.id, announced)
        writer = _ProgressWriter(context, instance.id, policy)
        try:
            result = await prepare_image(image, policy, daemon=runtime.daemon, auth=auth, on_progress=writer)
        finally:
            await writer.close()
    except ModelyardError as error:
        logger.warning("instance %s: %s", instance.id, error)
        failed = {"state": "failed", "image": image, "policy": policy, "error": error.message}
        await fail_start(context, instance, f"cannot launch: {error}", image_pull=failed)
        return
    except Exception as error:  # as reconcile's guard does: this instance's error, with back-off
        logger.exception("instance %s: the pull of %s failed", instance.id, image)
        text = f"internal error while pulling image {image}: {type(error).__name__}: {error}"
        failed = {"state": "failed", "image": image, "policy": policy, "error": text}
        await fail_start(context, instance, text, image_pull=failed)
        return
    await _pulled(context, instance.id, policy, result, start_number, None)


async def _pulled(
    context: ControlContext,
    instance_id: int,
    policy: str,
    result: PullResult | None,
    start_number: int,
    node_id: str | None,
    worker: str | None = None,
) -> None:
    """The image is ready (``result``: what came down; None: nothing pulled): said, and the next
    pass launches."""
    if result is None:
        await asyncio.to_thread(context.store.record_pull_progress, instance_id, None)
    else:
        where = {} if worker is None else {"worker": worker}
        said = result.describe() + ("" if worker is None else f" on worker {worker}")
        pulled = {"state": "pulled", "policy": policy, **result.to_json(), **where}
        await context.transition(instance_id, ImagePulled(reason=said, image_pull=pulled))
        logger.info("instance %s: %s", instance_id, said)
    context.live.of(instance_id).image_ready_for = (start_number, node_id)
    context.poke()


async def _prepare_on_worker(
    context: ControlContext,
    instance: InstanceView,
    version: BackendVersion,
    runtime: RayRuntime,
    start_number: int,
    node_id: str,
) -> None:
    """The pull on the worker ``node_id``'s own dockerd, its progress written as on this host's."""
    image = version.image or ""
    policy = version.effective_pull_policy
    worker = node_id[:12]
    try:
        worker = (await runtime.node_names()).get(node_id, worker)
        auth = await asyncio.to_thread(open_registry_auth, context, version)

        async def pulling() -> None:  # the worker lacks the image, or the policy is always
            announced = PullingImage(
                reason=f"pulling image {image} on worker {worker} (pull policy {policy})",
                runtime=runtime.kind,
                image_pull={"state": "pulling", "image": image, "policy": policy, "worker": worker},
                announce=True,
            )
            await context.transition(instance.id, announced)

        writer = _ProgressWriter(context, instance.id, policy, worker)
        try:
            result = await runtime.prepare_image(
                node_id, image, policy, auth, on_progress=writer, on_pulling=pulling
            )
        finally:
            await writer.close()
    except ModelyardError as error:
        logger.warning("instance %s: %s", instance.id, error)
        failed = {
            "state": "failed",
            "image": image,
            "policy": policy,
            "worker": worker,
            "error": error.message,
        }
        await fail_start(context, instance, f"cannot launch: {error}", image_pull=failed)
        return
    except Exception as error:  # as reconcile's guard does: this instance's error, with back-off
        logger.exception("instance %s: the pull of %s on worker %s failed", instance.id, image, worker)
        text = (
            f"internal error while pulling image {image} on worker {worker}: {type(error).__name__}: {error}"
        )
        failed = {"state": "failed", "image": image, "policy": policy, "worker": worker, "error": text}
        await fail_start(context, instance, text, image_pull=failed)
        return
    await _pulled(context, instance.id, policy, result, start_number, node_id, worker)
