"""The controller: makes the running engines match the deployments the user asked for.

One asyncio task runs a reconcile pass (``reconcile.py``) every ``tick_seconds``, or at once when
``poke`` is called after the API changed desired state. At start the controller re-adopts the
engines a previous server left running and stops the orphans (``adoption.py``); from time to
time it sweeps for orphans again. Its parts:

- ``reconcile.py``: the pass, one guarded step per instance;
- ``launch.py``: placement, rendering, intent (the launch token), the runtime's start;
- ``bring_up.py``: readiness, verification, publication to the gateway;
- ``stopping.py``: stops, failed bring-ups, engines that exited by themselves;
- ``adoption.py``: re-adoption and the orphan sweep;
- ``states.py``: the state machine (enforced by ``instance_store.py``);
- ``placement.py`` / ``scheduler.py``: GPUs; ``context.py``: what they share.

The GPU inventory and the clock are injected, so the controller runs in tests with the GPUs and
time of the test's choosing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

import httpx

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.spec import BackendSpec
from modelyard.control.adoption import adopt_survivors, sweep_orphans
from modelyard.control.context import Clock, ControlContext, ControllerOptions, SystemClock, TaskBoard
from modelyard.control.endpoints import EndpointRegistry
from modelyard.control.instance_store import InstanceStore
from modelyard.control.live import LiveInstances
from modelyard.control.owner import server_owner_id
from modelyard.control.reconcile import reconcile_deployment
from modelyard.control.scheduler import Scheduler, Worker, cluster_inventory, local_worker
from modelyard.control.stopping import stop_instance
from modelyard.hardware.gpus import GpuInventory, read_gpu_inventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.secret_box import SecretBox

logger = logging.getLogger(__name__)

__all__ = ["Controller", "ControllerOptions"]

InventorySource = Callable[[], GpuInventory]
# A cluster's workers with their GPUs (cluster/workers.py); None: this host is the only worker.
WorkersSource = Callable[[], list[Worker]]


class Controller:
    def __init__(
        self,
        *,
        settings: Settings,
        database: Database,
        endpoints: EndpointRegistry,
        runtimes: RuntimeSet | None = None,
        options: ControllerOptions | None = None,
        inventory_source: InventorySource = read_gpu_inventory,
        workers_source: WorkersSource | None = None,
        clock: Clock | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self._inventory_source = inventory_source
        self._workers_source = workers_source
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._inventory_read_at = float("-inf")
        self._inventory_stale = False
        self._swept_at = 0.0
        self._warned_backends: set[str] = set()
        # What the custom backends were when the catalog was last built (None: never built).
        self._catalog_stamp: tuple[object, ...] | None = None
        scheduler = Scheduler()
        live = LiveInstances(scheduler)
        self._context = ControlContext(
            settings=settings,
            store=InstanceStore(database),
            endpoints=endpoints,
            runtimes=runtimes or RuntimeSet(),
            options=options or ControllerOptions(),
            clock=clock or SystemClock(),
            owner=server_owner_id(settings.data_dir),
            client=httpx.AsyncClient(timeout=httpx.Timeout(30.0), trust_env=False),
            tasks=TaskBoard(live, on_done=self._wake),
            poke=self._wake,
            secrets=SecretBox.for_data_dir(settings.data_dir),
            scheduler=scheduler,
            live=live,
        )
        if environment is not None:
            self._context.environment = environment

    # -- the API's view -------------------------------------------------------------------

    def poke(self) -> None:
        """The API changed desired state: a pass now, on the workers as they are now (a worker that
        joined a second ago is placed on, not only after the next periodic read)."""
        self._inventory_stale = True
        self._wakeup.set()

    def _wake(self) -> None:
        """A task of the controller's own ended: a pass now."""
        self._wakeup.set()

    def gpu_inventory(self) -> GpuInventory:
        return self._context.inventory

    @property
    def catalog(self) -> BackendCatalog:
        """The backends the controller launches from, as of its last pass."""
        return self._context.catalog

    @property
    def runtimes(self) -> RuntimeSet:
        return self._context.runtimes

    # -- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        context = self._context
        await self._refresh_inventory(force=True)
        await asyncio.to_thread(self._refresh_catalog)
        deployments = await asyncio.to_thread(context.store.load_deployments)
        context.live.seen(deployments)
        await adopt_survivors(context, deployments)
        self._swept_at = context.clock.monotonic()
        self._loop_task = asyncio.create_task(self._run(), name="modelyard-controller")

    async def shutdown(self, *, stop_engines: bool = True) -> None:
        """Stop the loop; with ``stop_engines``, stop every engine (they start again with the server)."""
        context = self._context
        self._stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await context.tasks.cancel_all()
        if stop_engines:
            await asyncio.gather(
                *(
                    stop_instance(context, instance_id, "the server shut down")
                    for instance_id in context.live.engines()
                ),
                return_exceptions=True,
            )
        for runtime in context.runtimes.all():
            await runtime.close()
        await context.client.aclose()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self.reconcile()
            except Exception:
                logger.exception("reconcile pass failed; trying again at the next tick")
            # asyncio.timeout, not wait_for: wait_for (3.11) can swallow a cancellation that
            # arrives as the event is set, and the loop would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._context.options.tick_seconds):
                    await self._wakeup.wait()
            self._wakeup.clear()

    # -- one pass -------------------------------------------------------------------------

    async def reconcile(self) -> None:
        context = self._context
        await self._refresh_inventory()
        deployments = await asyncio.to_thread(context.store.load_deployments)
        await asyncio.to_thread(self._refresh_catalog)
        context.live.seen(deployments)
        for deployment in deployments:
            try:
                await reconcile_deployment(context, deployment)
            except Exception:
                logger.exception("deployment %s: reconcile failed; the others go on", deployment.name)
        if context.clock.monotonic() - self._swept_at >= context.options.orphan_sweep_seconds:
            self._swept_at = context.clock.monotonic()
            await sweep_orphans(context)

    async def _refresh_inventory(self, *, force: bool = False) -> None:
        context = self._context
        now = context.clock.monotonic()
        force = force or self._inventory_stale
        self._inventory_stale = False
        if force or now - self._inventory_read_at >= context.options.gpu_refresh_seconds:
            if self._workers_source is not None:
                workers = await asyncio.to_thread(self._workers_source)
                context.inventory = cluster_inventory(workers)
            else:
                context.inventory = await asyncio.to_thread(self._inventory_source)
                workers = [local_worker(context.inventory, context.options.worker_ip)]
            context.scheduler.set_workers(workers)
            self._inventory_read_at = now

    def held_state(self) -> dict[str, list[int]]:
        """What the controller holds in memory, by kind: instance ids (``demands``: deployment
        ids); see ``LiveInstances.held``. Empty once every deployment is removed."""
        return self._context.live.held()

    def workers(self) -> list[Worker]:
        """The workers as last read (one, ``local``, on a single host)."""
        return self._context.scheduler.workers

    def _refresh_catalog(self) -> None:
        """Build the catalog once, and again only after a custom backend was added, edited or
        removed (through the API or the database): not every tick. The stamp is read first, so a
        write during the build makes the next tick build again."""
        stamp = self._context.store.custom_backends_stamp()
        if stamp != self._catalog_stamp:
            self._context.catalog = self._load_catalog()
            self._catalog_stamp = stamp

    def _load_catalog(self) -> BackendCatalog:
        """The built-in catalog and every custom backend that still validates (a broken one is
        logged once and left out: its deployments wait, the others go on)."""
        custom = []
        for raw in self._context.store.load_custom_backends():
            try:
                custom.append(BackendSpec.model_validate(raw))
            except ValueError as error:
                name = str(raw.get("name", "?"))
                if name not in self._warned_backends:
                    self._warned_backends.add(name)
                    logger.error("custom backend %r is not valid any more and is skipped: %s", name, error)
        return BackendCatalog(builtin=load_builtin_backends(), custom=custom)
