"""``modelyard verify NAME``: run the verification suite again on a deployment's engines.

For an instance kept out of rotation by a failed check (after fixing what the check named, e.g.
a parser flag the engine now has), or to re-check one that runs. The server asks the controller
(``POST /api/v1/deployments/{name}/verify``); this waits, as ``deploy`` does, until every engine
asked has a new result, prints the results, and exits 0 when all passed (the instances are in
rotation), 1 when a check failed (those instances stay out of rotation).
"""

from __future__ import annotations

import time
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr, stdout
from modelyard.cli.markup import escape
from modelyard.cli.output import Column, print_json, print_table
from modelyard.cli.waiting import POLL_SECONDS

DEFAULT_WAIT_SECONDS = 600.0
# The instances the server asks the controller to verify again (request_verification): running,
# kept out of rotation by a failed check, or starting and waiting for a retry of the suite.
_VERIFIABLE = ("running", "error", "starting")


def _verifiable(instance: dict[str, Any]) -> bool:
    if instance.get("engine_id") is None or instance["state"] not in _VERIFIABLE:
        return False
    return instance["state"] != "starting" or instance.get("verified_at") is not None


def _asked(deployment: dict[str, Any]) -> dict[int, str | None]:
    """Instance id -> its ``verified_at`` when the request was made."""
    return {
        instance["id"]: instance.get("verified_at")
        for instance in deployment["instances"]
        if _verifiable(instance)
    }


def _wait_for_results(
    client: ApiClient, name: str, asked: dict[int, str | None], timeout_seconds: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_seconds
    with stderr.status(f"verifying {escape(name)}: {len(asked)} engine(s)"):
        while True:
            deployment: dict[str, Any] = client.get(f"/deployments/{name}")
            instances = {instance["id"]: instance for instance in deployment["instances"]}
            pending = []
            for instance_id, before in asked.items():
                instance = instances.get(instance_id)
                if instance is None:
                    fail(f"{name}: instance {instance_id} is gone (removed or scaled down) before a result")
                if instance.get("verified_at") not in (None, before):
                    continue
                if instance["state"] not in _VERIFIABLE:
                    fail(
                        f"{name}: instance {instance_id} is now {instance['state']}: {instance['reason']}",
                        f"see `modelyard logs {name} --instance {instance_id}`",
                    )
                pending.append(instance_id)
            if not pending:
                return deployment
            if time.monotonic() > deadline:
                fail(
                    f"{name}: no new verification result after {timeout_seconds:.0f} s "
                    f"for instance(s) {', '.join(map(str, pending))}",
                    f"the controller goes on: watch `modelyard ps {name}`",
                )
            time.sleep(POLL_SECONDS)


def _print_results(deployment: dict[str, Any], asked: dict[int, str | None]) -> None:
    rows = [
        [instance["id"], result.get("check_id", ""), result.get("status", ""), result.get("message", "")]
        for instance in deployment["instances"]
        if instance["id"] in asked
        for result in instance.get("verification") or []
    ]
    columns = [
        Column("INSTANCE"),
        Column("CHECK", max_width=28),
        Column("STATUS"),
        Column("MESSAGE", wraps=True),
    ]
    print_table(columns, rows, title=f"verification of {deployment['name']}")


def verify(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The deployment."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the server has the request."),
    timeout_seconds: float = typer.Option(DEFAULT_WAIT_SECONDS, "--timeout", help="Seconds to wait."),
    as_json: bool = typer.Option(False, "--json", help="Print the deployment as JSON."),
) -> None:
    """Run the verification suite again; a passing instance goes back into rotation."""
    client = ApiClient.from_context(ctx)
    before: dict[str, Any] = client.get(f"/deployments/{name}")
    asked = _asked(before)
    deployment: dict[str, Any] = client.post(f"/deployments/{name}/verify")
    if no_wait:
        if as_json:
            print_json(deployment)
        else:
            stdout.print(f"verifying {escape(name)}: {len(asked)} engine(s) asked", highlight=False)
        return
    deployment = _wait_for_results(client, name, asked, timeout_seconds)
    failed = [
        instance
        for instance in deployment["instances"]
        if instance["id"] in asked and instance["state"] != "running"
    ]
    if not as_json:
        _print_results(deployment, asked)
    if failed:
        reasons = "; ".join(f"instance {instance['id']}: {instance['reason']}" for instance in failed)
        retried = all(instance["state"] == "starting" for instance in failed)
        fail(
            f"{name}: verification failed, kept out of rotation ({reasons})",
            f"the engine answered too slowly: the controller runs the suite again as the reason says "
            f"and puts it into rotation once it passes (`modelyard ps {name}` follows it)"
            if retried
            else "fix what the failed check names (an engine flag: remove and deploy again), then verify "
            "again",
            code="verification_failed",
            details={"deployment": deployment},
        )
    if as_json:
        print_json(deployment)
    else:
        stdout.print(f"{escape(name)}: every check passed; in rotation", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard verify`` to the root app."""
    app.command("verify")(verify)
