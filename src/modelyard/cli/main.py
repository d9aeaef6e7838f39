"""The ``modelyard`` command: the global options, and the table of commands.

Each command group lives in its own module with a ``register(app)`` function. To add one, add its
name to ``COMMANDS`` with the module(s) whose ``register`` adds it and its one-line help (its
docstring's first line: ``tests/cli/test_cli_startup.py`` checks that they agree). A module is
imported only when one of its commands runs (``cli/lazy.py``), so keep heavy imports (the server,
the bench, torch) out of this file and out of ``cli/context.py``, ``cli/errors.py``, ``cli/lazy.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from modelyard import __version__
from modelyard.cli.context import CliContext
from modelyard.cli.lazy import CommandEntry, LazyGroup
from modelyard.settings import DEFAULT_URL, ENV_DATA_DIR, ENV_URL

_SERVER = "Run and operate a server"
_MODELS = "Models and engines"
_TOOLS = "Check, estimate and benchmark (no server needed)"

COMMANDS: dict[str, CommandEntry] = {
    "serve": CommandEntry(
        ("modelyard.cli.serve",),
        "Run the server: REST API, OpenAI-compatible gateway, console and the engines' controller.",
        _SERVER,
    ),
    "deploy": CommandEntry(
        ("modelyard.cli.deployments",),
        "Deploy a model and wait until it answers (unless --no-wait).",
        _SERVER,
    ),
    "ps": CommandEntry(
        ("modelyard.cli.deployments",),
        "Deployments and their instances: state, reason, port, GPUs, pid, restarts, uptime.",
        _SERVER,
    ),
    "logs": CommandEntry(
        ("modelyard.cli.deployments",),
        (
            "An engine's log (the current start's, or an earlier one's with --start or --previous);"
            " its control characters shown, never obeyed (ESC as ^[, a progress bar's \\r as a new"
            " line)."
        ),
        _SERVER,
    ),
    "scale": CommandEntry(
        ("modelyard.cli.deployments",),
        "Set the number of replicas and wait until they run (unless --no-wait).",
        _SERVER,
    ),
    "autoscale": CommandEntry(
        ("modelyard.cli.autoscale",),
        "Show a deployment's autoscale and the autoscaler's last decision, set it, or turn it off.",
        _SERVER,
    ),
    "stop": CommandEntry(
        ("modelyard.cli.deployments",),
        "Stop every instance and wait until they are stopped (unless --no-wait); the deployment stays.",
        _SERVER,
    ),
    "start": CommandEntry(
        ("modelyard.cli.deployments",),
        "Start a stopped deployment and wait until it runs (unless --no-wait).",
        _SERVER,
    ),
    "rm": CommandEntry(
        ("modelyard.cli.deployments",),
        "Remove a deployment: its instances are stopped, then it is gone.",
        _SERVER,
    ),
    "verify": CommandEntry(
        ("modelyard.cli.verify",),
        "Run the verification suite again; a passing instance goes back into rotation.",
        _SERVER,
    ),
    "gpus": CommandEntry(
        ("modelyard.cli.gpus",),
        "The server host's GPUs, as NVML reads them now: memory, load, temperature, power, PCIe link.",
        _SERVER,
    ),
    "workers": CommandEntry(
        ("modelyard.cli.workers",),
        (
            "The hosts engines run on: their GPUs, state (ready, lost), Docker (nvidia, cdi, no GPU"
            " runtime, unreachable, not installed), engine port range, labels, when last seen."
        ),
        _SERVER,
    ),
    "worker": CommandEntry(
        ("modelyard.cli.workers",),
        "This host in a modelyard cluster: join one (see `modelyard workers` for the list).",
        _SERVER,
    ),
    "keys": CommandEntry(("modelyard.cli.keys",), "API keys for the gateway (/v1).", _SERVER),
    "usage": CommandEntry(
        ("modelyard.cli.usage",),
        "Requests, tokens, errors and time to first token (p50, p90) by project, user, key or deployment,"
        " as the gateway metered them.",
        _SERVER,
    ),
    "password": CommandEntry(("modelyard.cli.account",), "Change the admin password.", _SERVER),
    "audit": CommandEntry(
        ("modelyard.cli.teams",),
        "Who created, changed, scaled, stopped or removed what, and when; who made or revoked which key.",
        _SERVER,
    ),
    "users": CommandEntry(
        ("modelyard.cli.teams",), "Accounts and their roles (admin, operator, member).", _SERVER
    ),
    "projects": CommandEntry(
        ("modelyard.cli.teams",),
        "Projects: they own deployments and keys; their members see them; quotas for all their keys.",
        _SERVER,
    ),
    "models": CommandEntry(
        ("modelyard.cli.models", "modelyard.cli.model_transfers"),
        "Model directories the server can deploy.",
        _MODELS,
    ),
    "tasks": CommandEntry(
        ("modelyard.cli.tasks",),
        "Model tasks: pulls from hubs, bundle imports and exports, pushes to workers.",
        _MODELS,
    ),
    "presets": CommandEntry(
        ("modelyard.cli.presets",),
        "Tested deployment recipes: flags, parsers, memory knob, the GPUs they fit.",
        _MODELS,
    ),
    "backends": CommandEntry(
        ("modelyard.cli.backends", "modelyard.cli.registry_credentials"),
        "Inference engines and their versions.",
        _MODELS,
    ),
    "doctor": CommandEntry(
        ("modelyard.cli.doctor",),
        "Find what would break a deployment before it starts, and explain failures after.",
        _TOOLS,
    ),
    "estimate": CommandEntry(
        ("modelyard.cli.estimate",),
        "Estimate weights, KV cache and overheads per GPU, and whether the context fits.",
        _TOOLS,
    ),
    "bench": CommandEntry(
        ("modelyard.cli.bench",),
        "Benchmark OpenAI-compatible endpoints (vLLM, SGLang, transformers serve, the gateway).",
        _TOOLS,
    ),
    "tune": CommandEntry(
        ("modelyard.cli.tune",),
        "Find the engine and parameters that serve a workload best within SLOs (successive halving).",
        _SERVER,
    ),
}


class ModelyardGroup(LazyGroup):
    entries = COMMANDS


app = typer.Typer(
    name="modelyard",
    cls=ModelyardGroup,
    help="Deploy, verify, benchmark and operate LLM inference engines behind one OpenAI-compatible gateway.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"modelyard {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: str = typer.Option(DEFAULT_URL, "--url", envvar=ENV_URL, help="The modelyard server to talk to."),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        envvar=ENV_DATA_DIR,
        help=(
            "The server's data directory (default ~/.local/share/modelyard); "
            "the CLI on the server's host reads its CLI token there."
        ),
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages to stderr."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(processName)s[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    ctx.obj = CliContext(url=url.rstrip("/"), data_dir=data_dir)


def main() -> None:
    """Console-script entry point (errors: one line on stderr, or JSON with --json; see cli/errors.py)."""
    app()


if __name__ == "__main__":
    main()
