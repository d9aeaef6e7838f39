"""``modelyard workers`` (the hosts engines run on) and ``modelyard worker join`` (this host
becomes one of them)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import typer

from modelyard.cli.client import ApiClient
from modelyard.cli.context import stderr, stdout
from modelyard.cli.output import Column, print_json, print_table

worker_app = typer.Typer(
    help="This host in a modelyard cluster: join one (see `modelyard workers` for the list).",
    no_args_is_help=True,
)


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / (1 << 30):.1f}"


def _seen(timestamp: float | None) -> str:
    if timestamp is None:
        return "never"
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


_DOCKER_SHOWN = {
    ("ready", "nvidia"): "nvidia",
    ("ready", "cdi"): "cdi",
    ("ready", "none"): "no GPU runtime",
    ("unreachable", "none"): "unreachable",
    ("not-installed", "none"): "not installed",
}


def _docker(worker: dict[str, Any]) -> str:
    docker = worker.get("docker")
    if not docker:
        return "-"
    return _DOCKER_SHOWN.get((str(docker["engine"]), str(docker["gpus"])), str(docker["engine"]))


def _gpu_rows(worker: dict[str, Any]) -> list[list[Any]]:
    # modelyard's own labels (the name, Docker, engine ports) have columns of their own.
    shown = {key: value for key, value in worker["labels"].items() if not key.startswith("modelyard.io/")}
    labels = ",".join(f"{key}={value}" for key, value in shown.items()) or None
    first = [
        worker["name"],
        worker["state"],
        worker["address"],
        _docker(worker),
        worker.get("engine_ports") or "any",
        labels,
        _seen(worker["last_seen_at"]),
    ]
    blank = ["", "", "", "", "", "", ""]
    if not worker["gpus"]:
        return [[*first, None, worker.get("probe_problem") or "no GPU", None, None, None]]
    rows = []
    for number, gpu in enumerate(worker["gpus"]):
        used = f"{_gib(gpu['memory_used_bytes'])}/{_gib(gpu['memory_total_bytes'])}"
        rows.append(
            [
                *(first if number == 0 else blank),
                gpu["index"],
                gpu["name"],
                used,
                "-" if gpu.get("utilization_percent") is None else f"{gpu['utilization_percent']}%",
                "-" if gpu.get("temperature_celsius") is None else f"{gpu['temperature_celsius']} C",
            ]
        )
    return rows


def workers(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The hosts engines run on: their GPUs, state (ready, lost), Docker (nvidia, cdi, no GPU runtime,
    unreachable, not installed), engine port range, labels, when last seen."""
    answer: dict[str, Any] = ApiClient.from_context(ctx).get("/workers")
    if as_json:
        print_json(answer)
        return
    rows = [row for worker in answer["workers"] for row in _gpu_rows(worker)]
    print_table(
        [
            "WORKER",
            "STATE",
            "ADDRESS",
            "DOCKER",
            Column("ENGINE PORTS", optional=True),
            Column("LABELS", optional=True),
            Column("LAST SEEN", optional=True),
            "GPU",
            "NAME",
            "USED/TOTAL GiB",
            "UTIL",
            "TEMP",
        ],
        rows,
    )
    if answer.get("cluster"):
        stdout.print(f"cluster head {answer['cluster']}", highlight=False)


def _token(token: str | None, token_file: Path | None) -> tuple[str, str]:
    from modelyard.cluster.token import ENV_CLUSTER_TOKEN, read_token_file
    from modelyard.errors import InvalidInput

    if token is not None:
        return token, "--token"
    if token_file is not None:
        read = read_token_file(token_file)
        if read is None:
            raise InvalidInput(
                f"the token file {token_file} does not exist or is empty",
                hint="copy <data-dir>/cluster-token from the head's host",
            )
        return read, str(token_file)
    configured = os.environ.get(ENV_CLUSTER_TOKEN)
    if configured:
        return configured, ENV_CLUSTER_TOKEN
    raise InvalidInput(
        "joining needs the cluster's token",
        hint=f"--token-file FILE (a copy of <data-dir>/cluster-token on the head's host; `modelyard serve "
        f"--cluster` shows the command), --token TOKEN or ${ENV_CLUSTER_TOKEN}",
    )


@worker_app.command("join")
def join(
    ctx: typer.Context,
    address: str = typer.Argument(
        ...,
        help="The cluster head's HOST:PORT, as `modelyard serve --cluster` printed it (default port 6379).",
    ),
    token: str | None = typer.Option(
        None, "--token", help="The cluster token (visible in `ps` while joining: prefer --token-file)."
    ),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="A file holding the cluster token (a copy of <data-dir>/cluster-token on the head).",
    ),
    name: str | None = typer.Option(
        None, "--name", help="This worker's name in `modelyard workers` (default: host name)."
    ),
    labels: list[str] = typer.Option(
        [], "--label", help="A label for placement selectors, KEY=VALUE (repeatable), e.g. --label zone=a."
    ),
    num_gpus: int | None = typer.Option(
        None, "--num-gpus", min=0, help="GPUs this host offers (default: every GPU NVML reads here)."
    ),
    node_ip: str | None = typer.Option(
        None,
        "--node-ip",
        help="This host's address the head reaches (default: Ray's guess: the default route's interface).",
    ),
    ray_arguments: list[str] = typer.Option(
        [],
        "--ray-arg",
        help="One more option of ray start, e.g. --ray-arg=--node-manager-port=8076 (repeatable; "
        "fixed ports for a firewall).",
    ),
    engine_ports: str | None = typer.Option(
        None,
        "--engine-ports",
        help="Every engine port on this host from this range, A-B (e.g. 30000-30099: firewalls between "
        "hosts); default: any free port.",
    ),
    verbose: bool = typer.Option(False, "--verbose", help="Show Ray's own output."),
) -> None:
    """Join this host to a cluster and stay in the foreground while it is in (Ctrl-C leaves).

    Runs `ray start --address HOST:PORT --block` with the token, this host's GPUs and labels.
    The server then shows the host in `modelyard workers` and places replicas on it.
    """
    from modelyard.cluster.join import docker_line, plan_join, run_join
    from modelyard.cluster.ray_processes import parse_labels

    value, source = _token(token, token_file)
    plan = plan_join(
        address,
        value,
        name=name,
        labels=parse_labels(labels),
        gpus=num_gpus,
        token_source=source,
        node_ip=node_ip,
        ray_arguments=tuple(ray_arguments),
        engine_ports=engine_ports,
    )
    ports = f"engine ports {plan.engine_ports}" if plan.engine_ports else "engine ports: any free port"
    stderr.print(
        f"joining the cluster at {plan.head_address} as {plan.name!r} "
        f"with {plan.gpus} GPU(s) ({plan.gpus_source}); {ports}\n{docker_line(plan.docker)}",
        highlight=False,
    )
    code = run_join(plan, say=lambda text: stderr.print(text, highlight=False), verbose=verbose)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``modelyard workers`` and ``modelyard worker join`` to the root app."""
    app.command("workers")(workers)
    app.add_typer(worker_app, name="worker")
