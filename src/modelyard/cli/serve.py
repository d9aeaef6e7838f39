"""``modelyard serve``: the server, the gateway and the controller in one process.

The port is bound first and the API answers within seconds; the demo model is prepared in the
background (progress printed here and in ``GET /api/v1/system``). Everything heavy is imported
inside ``serve``, so that other commands never pay for it.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from modelyard.cli.context import cli_context, stderr
from modelyard.settings import (
    DEFAULT_HOST,
    DEFAULT_PLACEMENT_HEADROOM_BYTES,
    DEFAULT_PORT,
    DEFAULT_RAY_PORT,
    ENV_DATABASE_URL,
    ENV_PLACEMENT_HEADROOM,
    Settings,
    parse_placement_headroom,
)

if TYPE_CHECKING:
    from modelyard.cluster.server_cluster import ServerCluster
    from modelyard.server.context import ServerContext

DEMO_WATCH_INTERVAL_SECONDS = 0.5


def _print_banner(settings: Settings, password: str | None) -> None:
    from modelyard import __version__

    url = settings.server_url
    stderr.print(f"[bold]modelyard {__version__}[/bold] data directory {settings.data_dir}")
    stderr.print(f"  console          {url}/")
    stderr.print(f"  OpenAI base URL  {url}/v1")
    stderr.print(f"  REST API         {url}/api/v1  (docs at {url}/api/docs)")
    stderr.print("  API key          modelyard keys create NAME")
    if password is not None:
        stderr.print(
            f"  admin password   [bold]{password}[/bold]  (shown once; stored in "
            f"{settings.admin_password_file}; the CLI on this host needs neither: it uses "
            f"{settings.cli_token_file}; change it with `modelyard password`)"
        )
    elif not settings.admin_password_file.is_file():
        # The database already has its admin (e.g. a shared PostgreSQL) but this data directory
        # never received the password: people need it from where it was created.
        stderr.print(
            f"  [yellow]admin password   not in {settings.admin_password_file}[/yellow]: the database "
            "already had an admin; copy the admin-password file from the data directory that created "
            "it (the CLI on this host works without it)",
            highlight=False,
        )


def _print_cluster(cluster: ServerCluster) -> None:
    from modelyard.cluster.token import join_instructions

    settings = cluster.settings
    where = "started here" if cluster.head is not None and not cluster.head.reused else "running"
    stderr.print(f"  cluster          Ray head at {cluster.address} ({where}; token authentication on)")
    stderr.print(
        f"  join a worker    {join_instructions(cluster.address, settings.cluster_token_file)}",
        highlight=False,
    )
    stderr.print("  workers          modelyard workers", highlight=False)


def _say(text: str, started_at: float) -> None:
    stderr.print(f"  [{time.monotonic() - started_at:6.1f} s] {text}", highlight=False)


async def _watch_demo(context: ServerContext, started_at: float) -> None:
    """Print the demo instance's transitions until it is running (or the server stops)."""
    import asyncio

    from sqlalchemy import select
    from sqlalchemy.orm import selectinload

    from modelyard.demo.prepare import DEMO_DEPLOYMENT_NAME
    from modelyard.store.tables import Deployment

    last_seen: tuple[str, str] | None = None
    while True:
        with context.database.session() as session:
            deployment = session.scalar(
                select(Deployment)
                .where(Deployment.name == DEMO_DEPLOYMENT_NAME)
                .options(selectinload(Deployment.instances))
            )
            if deployment is None or deployment.desired_state != "running":
                return
            instance = deployment.instances[0] if deployment.instances else None
            current = (instance.state, instance.reason) if instance else ("pending", "waiting for placement")
        if current != last_seen:
            _say(f"demo: {current[0]} - {current[1]}", started_at)
            last_seen = current
        if current[0] == "running":
            base = context.settings.server_url
            stderr.print(
                f"[green]demo is running[/green] {time.monotonic() - started_at:.1f} s after start. Try:\n"
                "  KEY=$(modelyard keys create me --rotate)\n"
                f'  curl {base}/v1/chat/completions -H "Authorization: Bearer $KEY" '
                "-H 'Content-Type: application/json' "
                '-d \'{"model": "demo", "messages": [{"role": "user", "content": "Hello!"}]}\'',
                highlight=False,
            )
            return
        await asyncio.sleep(DEMO_WATCH_INTERVAL_SECONDS)


async def _demo_in_background(context: ServerContext, started_at: float) -> None:
    from modelyard.demo.background import prepare_and_deploy

    await prepare_and_deploy(
        models_dir=context.settings.models_dir,
        database=context.database,
        endpoints=context.endpoints,
        inventory=context.controller.gpu_inventory,
        poke_controller=context.controller.poke,
        status=context.demo,
        say=lambda text: _say(text, started_at),
    )
    if context.demo.state == "deployed":
        await _watch_demo(context, started_at)


def serve(
    ctx: typer.Context,
    host: str = typer.Option(
        DEFAULT_HOST, "--host", help="Address to listen on (0.0.0.0 for every interface)."
    ),
    port: int = typer.Option(
        DEFAULT_PORT, "--port", min=1, max=65535, help="Port of the API, gateway and console."
    ),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Where the database, engine logs and prepared models live."
    ),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        envvar=ENV_DATABASE_URL,
        help="PostgreSQL URL (postgresql://user:pass@host/db); default: a SQLite file in the data directory.",
    ),
    no_demo: bool = typer.Option(False, "--no-demo", help="Do not prepare and deploy the demo model."),
    access_log: bool = typer.Option(
        False,
        "--access-log",
        help="A line per HTTP answer: client, method, path, status, bytes, duration, request id "
        "(never a body or a header's value); from the gateway workers for /v1.",
    ),
    docker_network: str = typer.Option(
        "host",
        "--docker-network",
        help="Containers on the host's network (host) or with a published loopback port (bridge).",
    ),
    docker_shm_size: str | None = typer.Option(
        None, "--docker-shm-size", help="A private /dev/shm of this size (e.g. 16g) instead of --ipc host."
    ),
    docker_volumes: list[str] = typer.Option(
        [],
        "--docker-volume",
        help="An extra volume for every container, HOST:CONTAINER[:ro|rw] (repeatable; read-only unless rw).",
    ),
    gateway_workers: int | None = typer.Option(
        None,
        "--gateway-workers",
        min=0,
        max=64,
        help="Processes serving /v1 on the port (default: usable cores - 1, 1 to 8; 0: in the main process).",
    ),
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help="Run a cluster: start a Ray head here (token authentication on) that workers join with "
        "`modelyard worker join`; engines run through Ray on the workers. Needs modelyard[ray].",
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="With --cluster: use the Ray head at HOST:PORT instead of starting one (its token in "
        "<data-dir>/cluster-token or $MODELYARD_CLUSTER_TOKEN).",
    ),
    ray_port: int = typer.Option(
        DEFAULT_RAY_PORT,
        "--ray-port",
        min=1,
        max=65535,
        help="With --cluster: the port of the Ray head started here.",
    ),
    ray_head_arguments: list[str] = typer.Option(
        [],
        "--ray-head-arg",
        help="With --cluster: one more option of the head's ray start, e.g. "
        "--ray-head-arg=--node-manager-port=8076 (repeatable; fixed ports for a firewall).",
    ),
    ray_node_ip: str | None = typer.Option(
        None,
        "--ray-node-ip",
        help="With --cluster: this host's address that the workers reach (default: Ray's guess, the "
        "interface of the default route).",
    ),
    engine_ports: str | None = typer.Option(
        None,
        "--engine-ports",
        help="Every engine port on this host from this range, A-B (e.g. 30000-30099: firewalls "
        "between hosts); default: any free port.",
    ),
    placement_headroom_gib: float = typer.Option(
        DEFAULT_PLACEMENT_HEADROOM_BYTES / (1 << 30),
        "--placement-headroom",
        envvar=ENV_PLACEMENT_HEADROOM,
        help="GiB a placement by memory (--gpu-memory) books on each GPU beyond the estimate, outside "
        "the engine's memory knob: room for what the estimate misses (docs/estimate.md).",
    ),
) -> None:
    """Run the server: REST API, OpenAI-compatible gateway, console and the engines' controller."""
    from modelyard.runtimes.engine_ports import PortRange, check_apart, parse_port_range

    started_at = time.monotonic()
    options = cli_context(ctx)
    ports = None if engine_ports is None else parse_port_range(engine_ports, "--engine-ports")
    settings = Settings(
        data_dir=(data_dir or options.resolved_data_dir).expanduser().resolve(),
        host=host,
        port=port,
        database_url_override=database_url,
        deploy_demo=not no_demo,
        docker_network=docker_network,
        docker_shm_size=docker_shm_size,
        docker_volumes=tuple(docker_volumes),
        cluster=cluster or ray_address is not None,
        ray_address=ray_address,
        ray_port=ray_port,
        ray_node_ip=ray_node_ip,
        ray_head_arguments=tuple(ray_head_arguments),
        engine_ports=ports,
        placement_headroom_bytes=parse_placement_headroom(placement_headroom_gib),
    )
    if ports is not None:
        check_apart(ports, {"the server's --port": PortRange(port, port)})
    if settings.cluster:
        # Before the port is bound, and without importing Ray (it reads its token once, at import).
        from modelyard.cluster.head import check_head_ports
        from modelyard.cluster.ray_processes import check_ray_arguments
        from modelyard.runtimes.ray_connection import require_ray

        require_ray()
        check_ray_arguments(settings.ray_head_arguments, "--ray-head-arg")
        if settings.ray_address is None:
            check_head_ports(settings)
    from modelyard.server.startup import bind_listener, check_data_directory, check_database_driver
    from modelyard.store.data_directory import secure_data_directory

    # Files the server makes are its own (0600, folders 0700); older ones are tightened.
    os.umask(0o077)
    check_data_directory(settings.data_dir)
    secure_data_directory(settings.data_dir)
    check_database_driver(settings.database_url)
    # From settings, not the gateway package: importing that costs seconds, and the port waits.
    from modelyard.settings import default_gateway_workers

    workers = default_gateway_workers() if gateway_workers is None else gateway_workers
    # With gateway workers, each has its own socket of the port (SO_REUSEPORT); this is the first.
    listener = bind_listener(host, port, reuse_port=workers > 0)
    try:
        _run(settings, listener, started_at, access_log, workers)
    finally:
        listener.close()


def _run(
    settings: Settings, listener: socket.socket, started_at: float, access_log: bool, workers: int
) -> None:
    import asyncio
    import os

    from sqlalchemy.exc import SQLAlchemyError

    from modelyard.runtimes.selection import RuntimeSet
    from modelyard.server.app import create_app
    from modelyard.server.auth import ensure_cli_token
    from modelyard.server.context import ServerContext
    from modelyard.server.door.http_protocol import bounded_http_protocol
    from modelyard.server.door.limits import RequestLimits
    from modelyard.server.gateway.serving import run_server
    from modelyard.server.startup import data_directory_error, database_error
    from modelyard.services.users import ensure_admin
    from modelyard.store.database import Database

    try:
        database = Database.open(settings.database_url)
    except SQLAlchemyError as error:
        raise database_error(settings.database_url, settings.data_dir, error) from None
    cluster = None
    try:
        try:
            password = ensure_admin(database, settings.admin_password_file)
            cli_token = ensure_cli_token(settings.cli_token_file)
        except SQLAlchemyError as error:
            raise database_error(settings.database_url, settings.data_dir, error) from None
        except OSError as error:
            raise data_directory_error(settings.data_dir, error) from None
        _print_banner(settings, password)
        runtimes = RuntimeSet.from_settings(settings)
        if settings.cluster:
            from modelyard.cluster.server_cluster import open_cluster

            cluster = open_cluster(settings, say=lambda text: _say(text, started_at))
            runtimes.ray = cluster.runtime
            _print_cluster(cluster)
        limits = RequestLimits.from_environment(os.environ)
        context = ServerContext(
            settings=settings,
            database=database,
            cli_token=cli_token,
            limits=limits,
            runtimes=runtimes,
            cluster=cluster,
        )
        if settings.deploy_demo:
            context.demo.state = "preparing"
            context.demo.message = "demo is being prepared (0%)"

        async def on_started(running: ServerContext) -> None:
            _say(f"listening on {settings.server_url} ({workers} gateway worker(s) for /v1)", started_at)
            if settings.deploy_demo:
                task = asyncio.get_running_loop().create_task(_demo_in_background(running, started_at))
                running.background_tasks.add(task)
                task.add_done_callback(running.background_tasks.discard)

        app = create_app(context, on_started=on_started)
        run_server(
            context,
            app,
            listener=listener,
            gateway_workers=workers,
            access_log=access_log,
            # The request line and headers are bounded inside the HTTP parser (server/door/).
            http_protocol=bounded_http_protocol(limits),
        )
    finally:
        if cluster is not None:
            cluster.close()
        database.close()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
