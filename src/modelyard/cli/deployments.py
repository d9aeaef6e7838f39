"""``modelyard deploy|ps|logs|scale|stop|start|rm``: deployments and their instances."""

from __future__ import annotations

import time
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr, stdout
from modelyard.cli.image_pulls import print_image_pulls
from modelyard.cli.markup import escape
from modelyard.cli.output import Column, format_duration, print_fields, print_json, print_table
from modelyard.cli.terminal_text import TerminalText
from modelyard.cli.waiting import (
    POLL_SECONDS,
    wait_until_running,
    wait_until_scaled,
    wait_until_stopped,
)

DEFAULT_WAIT_SECONDS = 900


def _path(name: str, suffix: str = "") -> str:
    return f"/deployments/{name}{suffix}"


def _parse_gpu_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        fail(f"--gpu-ids {text!r} is not a list of GPU indices", "write it like --gpu-ids 0,1")
    if not ids:
        fail("--gpu-ids is empty", "write it like --gpu-ids 0,1")
    return ids


def _print_warnings(deployment: dict[str, Any]) -> None:
    for warning in deployment.get("warnings", []):
        fix = f" fix: {warning['fix']}" if warning.get("fix") else ""
        stderr.print(
            f"[yellow]{warning.get('severity', 'warning')}[/yellow] {warning.get('check_id', '')}: "
            f"{warning.get('message', '')}{fix}",
            highlight=False,
        )


def _parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key.strip() or not value.strip():
            fail(f"--worker-label {item!r} is not KEY=VALUE (e.g. --worker-label zone=a)")
        labels[key.strip()] = value.strip()
    return labels


def deploy(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="A model registered with `modelyard models add`."),
    name: str | None = typer.Option(
        None, "--name", help="Name clients send as 'model' (default: the model's)."
    ),
    backend: str | None = typer.Option(
        None, "--backend", help="The engine (see `modelyard backends list`; default: transformers)."
    ),
    preset: str | None = typer.Option(
        None, "--preset", help="A tested recipe (`modelyard presets list`): backend, version, GPUs, flags."
    ),
    version: str | None = typer.Option(None, "--version", help="The backend version (default: its default)."),
    replicas: int = typer.Option(1, "--replicas", help="How many copies to run."),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs per replica (default: 1 with GPUs, else 0)."),
    gpu_ids: str | None = typer.Option(None, "--gpu-ids", help="Exact GPU indices, e.g. 0,1 (one replica)."),
    args: list[str] | None = typer.Option(
        None, "--args", help="Engine flags, split with shell quoting rules (repeatable)."
    ),
    env: list[str] | None = typer.Option(None, "--env", help="KEY=VALUE for the engine (repeatable)."),
    skip_verification: bool = typer.Option(
        False, "--skip-verification", help="Ready once the health check and one tiny chat pass."
    ),
    routing: str = typer.Option(
        "least-outstanding",
        "--routing",
        help="least-outstanding, or prefix: prompts that begin alike go to the same replica.",
    ),
    gpu_memory: str | None = typer.Option(
        None,
        "--gpu-memory",
        help="Place by memory: auto (the estimate) or a size per GPU (20GiB); may share a GPU.",
    ),
    workers: list[str] = typer.Option(
        [], "--worker", help="On a cluster: only on this worker (repeatable; names from `modelyard workers`)."
    ),
    worker_labels: list[str] = typer.Option(
        [], "--worker-label", help="On a cluster: only on workers with this label, KEY=VALUE (repeatable)."
    ),
    gpu_model: str | None = typer.Option(
        None, "--gpu-model", help="Only on GPUs whose name contains this (H200, L40S)."
    ),
    nodes: int = typer.Option(
        1,
        "--nodes",
        min=1,
        max=16,
        help="A replica over this many hosts (vLLM, SGLang; GPUs split evenly).",
    ),
    rpm: int | None = typer.Option(
        None, "--rpm", min=1, help="At most this many requests per minute, every key together."
    ),
    tpm: int | None = typer.Option(
        None,
        "--tpm",
        min=1,
        help="At most this many tokens (prompt + completion) per minute, every key together.",
    ),
    max_concurrent: int | None = typer.Option(
        None,
        "--max-concurrent",
        "--concurrency",
        min=1,
        help="At most this many requests at once, every key together.",
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the deployment is stored."),
    timeout_seconds: float = typer.Option(
        DEFAULT_WAIT_SECONDS, "--timeout", help="Seconds to wait for running."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the deployment as JSON."),
) -> None:
    """Deploy a model and wait until it answers (unless --no-wait)."""
    if gpus is not None and gpu_ids is not None:
        fail("give either --gpus or --gpu-ids, not both")
    body: dict[str, Any] = {
        "model": model,
        "name": name,
        "backend": backend,
        "backend_version": version,
        "replicas": replicas,
        "gpus_per_replica": gpus,
        "gpu_ids": _parse_gpu_ids(gpu_ids) if gpu_ids is not None else None,
        "backend_parameters": args or [],
        "env": env or [],
        "skip_verification": skip_verification,
        "routing": routing,
    }
    if gpu_memory is not None:
        body["gpu_memory"] = gpu_memory
    if workers:
        body["workers"] = workers
    if worker_labels:
        body["worker_labels"] = _parse_labels(worker_labels)
    if gpu_model is not None:
        body["gpu_model"] = gpu_model
    if nodes != 1:
        body["nodes"] = nodes
    if rpm is not None or tpm is not None or max_concurrent is not None:
        body["limits"] = {
            "requests_per_minute": rpm,
            "tokens_per_minute": tpm,
            "max_concurrent_requests": max_concurrent,
        }
    client = ApiClient.from_context(ctx)
    if preset is not None:
        from modelyard.cli.presets import apply_preset

        body = apply_preset(client, preset, body)
    elif body["backend"] is None:
        body["backend"] = "transformers"
    deployment: dict[str, Any] = client.post("/deployments", body)
    _print_warnings(deployment)
    stderr.print(
        f"deployment {deployment['name']}: {deployment['backend']} {deployment['backend_version']}, "
        f"{deployment['replicas']} replica(s), {deployment['gpus_per_replica']} GPU(s) each",
        highlight=False,
    )
    if not no_wait and deployment["replicas"] > 0:
        created = deployment["name"]
        deployment = wait_until_running(client, created, timeout_seconds)
        stderr.print(f"[green]{deployment['name']} is running[/green]", highlight=False)
    if as_json:
        print_json(deployment)
        return
    if not no_wait:
        stdout.print(
            f"model {deployment['name']!r} answers at {client.base_url}/v1 "
            "(create a key: modelyard keys create NAME)",
            highlight=False,
        )


def _limits_text(limits: dict[str, Any]) -> str:
    """``600 rpm, 32 at once (every key together)``, or ``none``."""
    parts = [
        f"{limits[field]} {unit}"
        for field, unit in (
            ("requests_per_minute", "rpm"),
            ("tokens_per_minute", "tpm"),
            ("max_concurrent_requests", "at once"),
        )
        if limits.get(field) is not None
    ]
    return f"{', '.join(parts)} (every key together)" if parts else "none"


PS_COLUMNS = [
    Column("NAME", max_width=24),
    Column("STATUS"),
    Column("READY"),
    Column("ID"),
    Column("STATE"),
    Column("PORT", optional=True),
    Column("GPUS", optional=True),
    Column("PID", optional=True),
    Column("RESTARTS", optional=True),
    Column("UPTIME", optional=True),
    Column("REASON", wraps=True),
]


def _autoscaled(deployment: dict[str, Any]) -> str:
    autoscale = deployment.get("autoscale")
    return (
        f", autoscaled {autoscale['min']}..{autoscale['max']} on {autoscale['target']['metric']}"
        if autoscale
        else ""
    )


def _instance_rows(deployments: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per instance; the deployment's name, status and ready count on its first row."""
    rows: list[list[Any]] = []
    for deployment in deployments:
        running = sum(1 for instance in deployment["instances"] if instance["state"] == "running")
        first = [deployment["name"], deployment["state"], f"{running}/{deployment['replicas']}"]
        if not deployment["instances"]:
            rows.append([*first, None, None, None, None, None, None, None, None])
        for position, instance in enumerate(deployment["instances"]):
            rows.append(
                [
                    *(first if position == 0 else ["", "", ""]),
                    instance["id"],
                    instance.get("stage") or instance["state"],
                    instance["port"],
                    ",".join(str(gpu) for gpu in instance["gpu_ids"]) or "cpu",
                    instance["pid"],
                    instance["restart_count"],
                    format_duration(instance["uptime_seconds"]),
                    instance["reason"] or None,
                ]
            )
    return rows


def _print_diagnoses(deployments: list[dict[str, Any]]) -> None:
    for deployment in deployments:
        for instance in deployment["instances"]:
            if instance.get("diagnosis"):
                stdout.print(
                    f"[red]diagnosis[/red] {deployment['name']} instance {instance['id']}: "
                    f"{instance['diagnosis']}",
                    highlight=False,
                )


def _print_engines(deployment: dict[str, Any]) -> None:
    """Where each instance's engine runs: runtime, engine, address, and what it sees of the host."""
    rows = []
    for instance in deployment["instances"]:
        if not instance.get("engine"):
            continue
        address = f"{instance['host']}:{instance['port']}"
        if instance.get("engine_port") not in (None, instance["port"]):
            address += f" (engine port {instance['engine_port']})"
        mounts = "; ".join(
            f"{mount['host_path']} -> {mount['engine_path']}" + (" (ro)" if mount.get("read_only") else "")
            for mount in instance.get("mounts") or []
        )
        ranks = (instance.get("placement") or {}).get("ranks") or []
        # On a cluster, the worker(s) it runs on ("node-b", "node-a + node-b" for a gang).
        workers = " + ".join(
            str(rank.get("worker_name")) for rank in ranks if rank.get("worker_name") != "local"
        )
        rows.append(
            [
                instance["id"],
                instance.get("runtime", ""),
                instance["engine"],
                workers or None,
                address,
                mounts or "-",
            ]
        )
    if rows:
        stdout.print()
        print_table(
            ["INSTANCE", "RUNTIME", "ENGINE", "WORKER", "ADDRESS", "MOUNTS (HOST -> ENGINE)"],
            rows,
            title="engines",
        )


def _print_memory_placement(deployment: dict[str, Any]) -> None:
    """Instances placed by memory: the bytes booked per GPU and the knob's value set from them."""
    rows = []
    for instance in deployment["instances"]:
        placement = instance.get("placement") or {}
        if not placement.get("memory_knob"):
            continue
        booked = placement.get("memory_bytes_per_gpu") or 0
        rows.append(
            [
                instance["id"],
                ",".join(str(index) for index in instance.get("gpu_ids") or []),
                f"{booked / 2**30:.1f} GiB",
                f"{placement['memory_knob']} {placement.get('memory_fraction')}",
                placement.get("demand", ""),
            ]
        )
    if rows:
        stdout.print()
        print_table(["INSTANCE", "GPUS", "BOOKED", "KNOB", "ESTIMATE"], rows, title="placed by memory")


def _print_verification(deployment: dict[str, Any]) -> None:
    """The verification suite's results of each instance (run before it took traffic)."""
    rows = [
        [instance["id"], result.get("check_id", ""), result.get("status", ""), result.get("message", "")]
        for instance in deployment["instances"]
        for result in instance.get("verification") or []
    ]
    if rows:
        stdout.print()
        print_table(["INSTANCE", "CHECK", "STATUS", "MESSAGE"], rows, title="verification")


def _event_row(event: dict[str, Any]) -> list[Any]:
    """An instance's transition, or an autoscale decision (``autoscaler``, replicas from → to)."""
    at = event["at"][:19].replace("T", " ")
    if event.get("kind") == "autoscale":
        to = "unplaced" if event["direction"] == "unplaced" else f"{event['to_replicas']} replica(s)"
        return [at, "autoscaler", f"{event['from_replicas']} replica(s)", to, event["reason"]]
    return [at, event["instance_id"], event["from_state"], event["to_state"], event["reason"]]


def ps(
    ctx: typer.Context,
    name: str | None = typer.Argument(None, help="One deployment (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Deployments and their instances: state, reason, port, GPUs, pid, restarts, uptime."""
    client = ApiClient.from_context(ctx)
    deployments: list[dict[str, Any]] = [client.get(_path(name))] if name else client.get("/deployments")
    events: list[dict[str, Any]] = client.get(_path(name, "/events"), {"limit": 10}) if name else []
    if as_json:
        print_json({**deployments[0], "events": events} if name else deployments)
        return
    if name:
        deployment = deployments[0]
        print_fields(
            [
                ("name", deployment["name"]),
                ("model", f"{deployment['model']} ({deployment['model_path']})"),
                ("backend", f"{deployment['backend']} {deployment['backend_version']}"),
                (
                    "desired",
                    f"{deployment['desired_state']}, {deployment['replicas']} replica(s)"
                    + _autoscaled(deployment),
                ),
                ("GPUs", deployment["gpu_ids"] or f"{deployment['gpus_per_replica']} per replica"),
                ("parameters", " ".join(deployment["backend_parameters"])),
                ("env", " ".join(f"{key}={value}" for key, value in deployment["env"].items())),
                ("limits", _limits_text(deployment.get("limits") or {})),
            ]
        )
        stdout.print()
    if not deployments:
        stderr.print("no deployments yet: modelyard deploy MODEL", highlight=False)
        return
    print_table(PS_COLUMNS, _instance_rows(deployments))
    _print_diagnoses(deployments)
    if name:
        _print_engines(deployments[0])
        print_image_pulls(deployments[0])
        _print_memory_placement(deployments[0])
        _print_verification(deployments[0])
    for deployment in deployments:
        _print_warnings(deployment)
    if events:
        stdout.print()
        print_table(
            ["AT", "INSTANCE", "FROM", "TO", "REASON"],
            [_event_row(event) for event in events],
            title="recent events",
        )


def logs(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    instance: int | None = typer.Option(None, "--instance", help="Instance id (see ps; default: the first)."),
    previous: bool = typer.Option(False, "--previous", help="The log of the start before the current one."),
    start: int | None = typer.Option(None, "--start", min=1, help="The log of start N (1: the first)."),
    tail: int | None = typer.Option(None, "--tail", help="Only the last N lines."),
) -> None:
    """An engine's log (the current start's, or an earlier one's with --start or --previous);
    its control characters shown, never obeyed (ESC as ^[, a progress bar's \\r as a new line)."""
    params: dict[str, Any] = {"follow": follow, "previous": previous}
    if instance is not None:
        params["instance"] = instance
    if start is not None:
        params["start"] = start
    if tail is not None:
        params["tail"] = tail
    output = typer.get_binary_stream("stdout")
    # The engine's escape sequences are shown, never obeyed (terminal_text.py); colours only
    # to a terminal that takes them.
    text = TerminalText(keep_colours=stdout.is_terminal and not stdout.no_color)
    seen = bytearray()
    try:
        for chunk in ApiClient.from_context(ctx).stream(_path(name, "/logs"), params):
            output.write(text.feed(chunk).encode())
            output.flush()
            if not follow:
                seen.extend(chunk)
                del seen[:-LOG_DIAGNOSIS_BYTES]
    except KeyboardInterrupt:
        output.write(text.end().encode())
        raise typer.Exit(0) from None
    output.write(text.end().encode())
    if not follow:
        _print_log_diagnosis(seen.decode(errors="replace"))


# How much of a log's end the doctor reads for known failure messages.
LOG_DIAGNOSIS_BYTES = 256 * 1024


def _print_log_diagnosis(text: str) -> None:
    """What the doctor recognises in the log just printed (to stderr, so the log stays clean)."""
    from modelyard.doctor.log_signatures import diagnose_log

    for finding in diagnose_log(text):
        stderr.print(f"[red]diagnosis[/red] [{finding.check_id}] {finding.message}", highlight=False)
        if finding.fix:
            stderr.print(f"  fix: {finding.fix}", highlight=False)


_NO_WAIT_HELP = "Return once the server has the request, without waiting."


def scale(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    replicas: int = typer.Argument(..., help="The number of replicas (0 keeps it without running)."),
    no_wait: bool = typer.Option(False, "--no-wait", help=_NO_WAIT_HELP),
    timeout_seconds: float = typer.Option(DEFAULT_WAIT_SECONDS, "--timeout", help="Seconds to wait."),
    as_json: bool = typer.Option(False, "--json", help="Print the deployment as JSON."),
) -> None:
    """Set the number of replicas and wait until they run (unless --no-wait)."""
    client = ApiClient.from_context(ctx)
    deployment: dict[str, Any] = client.patch(_path(name), {"replicas": replicas})
    if not no_wait:
        deployment = wait_until_scaled(client, name, timeout_seconds)
    if as_json:
        print_json(deployment)
        return
    done = "scaling to" if no_wait else "scaled to"
    stdout.print(f"{escape(name)} {done} {deployment['replicas']} replica(s)", highlight=False)


def stop(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    no_wait: bool = typer.Option(False, "--no-wait", help=_NO_WAIT_HELP),
    timeout_seconds: float = typer.Option(DEFAULT_WAIT_SECONDS, "--timeout", help="Seconds to wait."),
    as_json: bool = typer.Option(False, "--json", help="Print the deployment as JSON."),
) -> None:
    """Stop every instance and wait until they are stopped (unless --no-wait); the deployment stays."""
    client = ApiClient.from_context(ctx)
    deployment: dict[str, Any] = client.post(_path(name, "/stop"))
    if not no_wait:
        deployment = wait_until_stopped(client, name, timeout_seconds)
    if as_json:
        print_json(deployment)
        return
    stdout.print(f"{'stopping' if no_wait else 'stopped'} {escape(name)}", highlight=False)


def start(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    no_wait: bool = typer.Option(False, "--no-wait", help=_NO_WAIT_HELP),
    timeout_seconds: float = typer.Option(DEFAULT_WAIT_SECONDS, "--timeout", help="Seconds to wait."),
    as_json: bool = typer.Option(False, "--json", help="Print the deployment as JSON."),
) -> None:
    """Start a stopped deployment and wait until it runs (unless --no-wait)."""
    client = ApiClient.from_context(ctx)
    deployment: dict[str, Any] = client.post(_path(name, "/start"))
    if not no_wait and deployment["replicas"] > 0:
        deployment = wait_until_running(client, name, timeout_seconds)
    if as_json:
        print_json(deployment)
        return
    stdout.print(f"{'starting' if no_wait else 'started'} {escape(name)}", highlight=False)


def remove(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    wait: bool = typer.Option(False, "--wait", help="Return once its engines are stopped and it is gone."),
    timeout_seconds: float = typer.Option(DEFAULT_WAIT_SECONDS, "--timeout", help="Seconds to wait."),
) -> None:
    """Remove a deployment: its instances are stopped, then it is gone."""
    client = ApiClient.from_context(ctx)
    client.delete(_path(name))
    if not wait:
        stdout.print(f"removing {name} (its instances are being stopped)", highlight=False)
        return
    deadline = time.monotonic() + timeout_seconds
    with stderr.status(f"removing {name}: stopping its instances"):
        while client.get_if_exists(_path(name)) is not None:
            if time.monotonic() > deadline:
                fail(
                    f"{name} is still being removed after {timeout_seconds:.0f} s",
                    f"see `modelyard ps {name}`",
                )
            time.sleep(POLL_SECONDS)
    stdout.print(f"removed {name}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the deployment commands to the root app."""
    app.command("deploy")(deploy)
    app.command("ps")(ps)
    app.command("logs")(logs)
    app.command("scale")(scale)
    app.command("stop")(stop)
    app.command("start")(start)
    app.command("rm")(remove)
