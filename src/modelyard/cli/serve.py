"""``modelyard serve``: the server, the gateway and the controller in one process."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import typer
import uvicorn
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from modelyard import __version__
from modelyard.cli.context import cli_context, stderr
from modelyard.demo.prepare import DEMO_DEPLOYMENT_NAME, is_prepared, prepare_demo_model
from modelyard.demo.register import register_demo
from modelyard.errors import InvalidInput
from modelyard.hardware.gpus import read_gpu_inventory
from modelyard.server.context import ServerContext
from modelyard.server.door.limits import RequestLimits
from modelyard.services.users import ensure_admin
from modelyard.settings import DEFAULT_HOST, DEFAULT_PORT, ENV_DATABASE_URL, Settings
from modelyard.store.database import Database
from modelyard.store.tables import Deployment

DEMO_WATCH_INTERVAL_SECONDS = 0.5


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise InvalidInput(
                f"cannot listen on {host}:{port}: {error.strerror}",
                hint="is another modelyard already running? pick another port with --port",
            ) from error


def _print_banner(settings: Settings, password: str | None) -> None:
    url = settings.server_url
    stderr.print(f"[bold]modelyard {__version__}[/bold] data directory {settings.data_dir}")
    stderr.print(f"  console          {url}/")
    stderr.print(f"  OpenAI base URL  {url}/v1")
    stderr.print(f"  REST API         {url}/api/v1  (docs at {url}/api/docs)")
    stderr.print("  API key          modelyard keys create NAME")
    if password is not None:
        stderr.print(
            f"  admin password   [bold]{password}[/bold]  (shown once; stored in "
            f"{settings.admin_password_file}, which the CLI on this host reads; "
            "change it with `modelyard password`)"
        )
    elif not settings.admin_password_file.is_file():
        # The database already has its admin (e.g. a shared PostgreSQL) but this data directory
        # never received the password: the CLI here cannot log in by itself.
        stderr.print(
            f"  [yellow]admin password   not in {settings.admin_password_file}[/yellow]: the database "
            "already had an admin; give the CLI its password with MODELYARD_PASSWORD, or copy the "
            "admin-password file from the data directory that created it",
            highlight=False,
        )


async def _watch_demo(context: ServerContext, started_at: float) -> None:
    """Print the demo instance's transitions until it is running (or the server stops)."""
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
            elapsed = time.monotonic() - started_at
            stderr.print(f"  [{elapsed:6.1f} s] demo: {current[0]} - {current[1]}", highlight=False)
            last_seen = current
        if current[0] == "running":
            base = context.settings.server_url
            stderr.print(
                f"[green]demo is running[/green] {time.monotonic() - started_at:.1f} s after start. Try:\n"
                "  KEY=$(modelyard keys create me --json"
                " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"key\"])')\n"
                f'  curl {base}/v1/chat/completions -H "Authorization: Bearer $KEY" '
                "-H 'Content-Type: application/json' "
                '-d \'{"model": "demo", "messages": [{"role": "user", "content": "Hello!"}]}\'',
                highlight=False,
            )
            return
        await asyncio.sleep(DEMO_WATCH_INTERVAL_SECONDS)


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
        False, "--access-log", help="Log every HTTP request (never their bodies)."
    ),
) -> None:
    """Run the server: REST API, OpenAI-compatible gateway, console and the engines' controller."""
    started_at = time.monotonic()
    options = cli_context(ctx)
    settings = Settings(
        data_dir=(data_dir or options.resolved_data_dir).expanduser().resolve(),
        host=host,
        port=port,
        database_url_override=database_url,
        deploy_demo=not no_demo,
    )
    _check_port_free(host, port)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with stderr.status("opening the database and applying migrations"):
        database = Database.open(settings.database_url)
    password = ensure_admin(database, settings.admin_password_file)
    _print_banner(settings, password)
    if settings.deploy_demo:
        _prepare_demo(settings, database)
    limits = RequestLimits.from_environment(os.environ)
    context = ServerContext(settings=settings, database=database, limits=limits)

    async def on_started(running: ServerContext) -> None:
        if settings.deploy_demo:
            asyncio.get_running_loop().create_task(_watch_demo(running, started_at))

    from modelyard.server.app import create_app
    from modelyard.server.door.http_protocol import bounded_http_protocol

    app = create_app(context, on_started=on_started)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=access_log,
        timeout_graceful_shutdown=5,
        # The request line and headers are bounded inside the HTTP parser (server/door/).
        http=bounded_http_protocol(limits),
    )
    stderr.print(f"  listening on {settings.server_url}")
    try:
        uvicorn.Server(config).run()
    finally:
        database.close()


def _prepare_demo(settings: Settings, database: Database) -> None:
    if not is_prepared(settings.models_dir):
        with stderr.status("preparing the demo model (first start only)") as status:

            def on_stage(stage: str) -> None:
                status.update(f"preparing the demo model (first start only): {stage}")

            directory = prepare_demo_model(settings.models_dir, on_stage)
        stderr.print(f"  demo model prepared in {directory}")
    else:
        from modelyard.demo.prepare import demo_model_directory

        directory = demo_model_directory(settings.models_dir)
    if register_demo(database, directory, read_gpu_inventory()):
        stderr.print("  deployment 'demo' created (transformers serve on CPU)")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
