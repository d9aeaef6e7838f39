"""Waiting for a deployment to reach what was asked (deploy, start, stop, scale), as ``kubectl rollout
status`` does: each instance transition printed on stderr, a failed instance or the timeout ends
the wait with one error line, Ctrl-C ends the wait (not what the server does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr
from modelyard.cli.markup import escape

POLL_SECONDS = 1.0


def _path(name: str) -> str:
    return f"/deployments/{name}"


def instance_line(instance: dict[str, Any]) -> str:
    reason = f": {instance['reason']}" if instance["reason"] else ""
    return f"replica {instance['replica_index']} (instance {instance['id']}) {instance['state']}{reason}"


def _seconds_until(moment: str) -> float:
    return (datetime.fromisoformat(moment) - datetime.now(UTC)).total_seconds()


def what_happens_next(name: str, instance: dict[str, Any]) -> str:
    """What the controller does next with an instance in error, as its record says."""
    next_start = instance.get("next_start_at")
    if next_start:
        seconds = max(0.0, _seconds_until(next_start))
        return (
            f"the controller restarts it in {seconds:.0f} s, with a longer wait after each failed start "
            f"(`modelyard ps {name}` follows it, `modelyard stop {name}` stops it)"
        )
    if any(result.get("status") == "failed" for result in instance.get("verification") or []):
        return (
            f"it stays out of rotation and is not retried: fix the deployment, then `modelyard verify "
            f"{name}` runs the verification again"
        )
    return f"`modelyard ps {name}` shows whether the controller restarts it"


def _watch(
    client: ApiClient,
    name: str,
    timeout_seconds: float,
    *,
    goal: str,
    desired_state: str,
    reached: Callable[[dict[str, Any]], bool],
    errors_fail: bool,
) -> dict[str, Any]:
    """Poll ``name`` until ``reached``; print each instance transition; ``fail`` when an instance
    fails (``errors_fail``), when someone changes the desired state, or at the timeout. Ctrl-C ends
    the wait with exit status 130, and the server goes on."""
    try:
        return _poll(client, name, timeout_seconds, goal, desired_state, reached, errors_fail)
    except KeyboardInterrupt:
        stderr.print(
            f"stopped waiting; {escape(name)} goes on in the background (modelyard ps)", highlight=False
        )
        raise typer.Exit(130) from None


def _poll(
    client: ApiClient,
    name: str,
    timeout_seconds: float,
    goal: str,
    desired_state: str,
    reached: Callable[[dict[str, Any]], bool],
    errors_fail: bool,
) -> dict[str, Any]:
    seen: dict[int, tuple[str, str]] = {}
    deadline = time.monotonic() + timeout_seconds
    with stderr.status(f"waiting for {escape(name)} to {goal}") as status:
        while True:
            deployment: dict[str, Any] = client.get(_path(name))
            for instance in deployment["instances"]:
                current = (instance["state"], instance["reason"])
                if seen.get(instance["id"]) != current:
                    seen[instance["id"]] = current
                    stderr.print(escape(instance_line(instance)), highlight=False)
                if errors_fail and instance["state"] == "error":
                    if instance.get("diagnosis"):
                        stderr.print(
                            f"[red]diagnosis:[/red] {escape(instance['diagnosis'])}", highlight=False
                        )
                    fail(
                        f"{name} replica {instance['replica_index']} failed: "
                        f"{instance['reason'] or 'no reason recorded'}",
                        f"see `modelyard logs {name} --instance {instance['id']}`; "
                        + what_happens_next(name, instance),
                    )
            if reached(deployment):
                return deployment
            if deployment["desired_state"] != desired_state:
                fail(f"{name} is now {deployment['state']} (someone else changed it meanwhile)")
            if time.monotonic() > deadline:
                fail(
                    f"{name} did not {goal} within {timeout_seconds:.0f} s (state {deployment['state']})",
                    f"it goes on in the background: watch `modelyard ps {name}`",
                )
            running = sum(1 for instance in deployment["instances"] if instance["state"] == "running")
            status.update(
                f"waiting for {escape(name)} to {goal}: {running}/{deployment['replicas']} replicas running"
            )
            time.sleep(POLL_SECONDS)


def wait_until_running(client: ApiClient, name: str, timeout_seconds: float) -> dict[str, Any]:
    """Poll until every replica runs; ``fail`` on an instance error or the timeout."""
    return _watch(
        client,
        name,
        timeout_seconds,
        goal="start",
        desired_state="running",
        reached=lambda deployment: deployment["state"] == "running",
        errors_fail=True,
    )


def wait_until_stopped(client: ApiClient, name: str, timeout_seconds: float) -> dict[str, Any]:
    """Poll until no instance of ``name`` runs."""
    return _watch(
        client,
        name,
        timeout_seconds,
        goal="stop",
        desired_state="stopped",
        reached=lambda deployment: deployment["state"] == "stopped",
        errors_fail=False,
    )


def wait_until_scaled(client: ApiClient, name: str, timeout_seconds: float) -> dict[str, Any]:
    """Poll until ``name`` has exactly its number of replicas, all running (none: idle)."""
    return _watch(
        client,
        name,
        timeout_seconds,
        goal="scale",
        desired_state="running",
        reached=lambda deployment: (
            len(deployment["instances"]) == deployment["replicas"]
            and deployment["state"] in ("running", "idle")
        ),
        errors_fail=True,
    )
