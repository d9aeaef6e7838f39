"""``modelyard keys create|list|revoke``: API keys for the OpenAI-compatible gateway."""

from __future__ import annotations

from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stderr, stdout
from modelyard.cli.markup import escape
from modelyard.cli.output import Column, print_json, print_table

keys_app = typer.Typer(help="API keys for the gateway (/v1).", no_args_is_help=True)


@keys_app.command("create")
def create(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="A name for the key (who or what uses it)."),
    allow: list[str] | None = typer.Option(
        None, "--allow", help="Limit the key to this deployment (repeatable). Default: every deployment."
    ),
    rotate: bool = typer.Option(
        False,
        "--rotate",
        help="If NAME exists, give it a new secret (the old one stops working) instead of refusing.",
    ),
    rpm: int | None = typer.Option(None, "--rpm", min=1, help="At most this many requests per minute."),
    tpm: int | None = typer.Option(
        None, "--tpm", min=1, help="At most this many tokens (prompt + completion) per minute."
    ),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="At most this many at once."),
    quota: int | None = typer.Option(
        None, "--quota", min=1, help="At most this many tokens per --quota-period."
    ),
    quota_period: str = typer.Option("month", "--quota-period", help="day or month (UTC calendar)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"key": ..., "name": ...} only.'),
) -> None:
    """Create a key and print it. It is shown this once; only a hash is stored."""
    client = ApiClient.from_context(ctx)
    created: dict[str, Any] | None = None
    if rotate:
        if allow:
            fail(
                "--allow cannot be changed by --rotate",
                "revoke the key and create it again to change --allow",
            )
        created = client.post_if_exists(f"/keys/{name}/rotate")
    if created is None:
        body: dict[str, Any] = {"name": name, "allowed_deployments": allow or None}
        limits = {
            "requests_per_minute": rpm,
            "tokens_per_minute": tpm,
            "max_concurrent_requests": concurrency,
        }
        body.update({field: value for field, value in limits.items() if value is not None})
        if quota is not None:
            body.update(token_quota=quota, quota_period=quota_period)
        created = client.post("/keys", body)
    if as_json:
        print_json({"key": created["key"], "name": created["name"]})
        return
    typer.echo(created["key"])
    scope = (
        ", ".join(created["allowed_deployments"]) if created["allowed_deployments"] else "every deployment"
    )
    stderr.print(
        f"key {escape(name)!r} for {escape(scope)}; it is shown only this once: store it now.",
        highlight=False,
    )


@keys_app.command("list")
def list_keys(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The keys (never the keys themselves: their prefixes)."""
    keys: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/keys")
    if as_json:
        print_json(keys)
        return
    print_table(
        ["NAME", "PREFIX", "DEPLOYMENTS", "STATE", "CREATED", "LAST USED", Column("LIMITS", wraps=True)],
        [
            [
                key["name"],
                key["prefix"] + "...",
                ", ".join(key["allowed_deployments"]) if key["allowed_deployments"] else "all",
                "active" if key["active"] else "revoked",
                key["created_at"][:19].replace("T", " "),
                key["last_used_at"][:19].replace("T", " ") if key["last_used_at"] else None,
                _limits_text(key),
            ]
            for key in keys
        ],
    )


def _limits_text(key: dict[str, Any]) -> str | None:
    """``10 rpm, 5000 tpm, 4 at once, 120/1000000 tokens this month`` (None: no limits)."""
    limits = key.get("limits") or {}
    use = key.get("use") or {}
    parts = [
        f"{limits[field]} {unit}"
        for field, unit in (
            ("requests_per_minute", "rpm"),
            ("tokens_per_minute", "tpm"),
            ("max_concurrent_requests", "at once"),
        )
        if limits.get(field) is not None
    ]
    if limits.get("token_quota") is not None:
        used = use.get("quota_used_tokens")
        spent = f"{used}/" if used is not None else ""
        parts.append(f"{spent}{limits['token_quota']} tokens this {limits.get('quota_period')}")
    return ", ".join(parts) or None


@keys_app.command("revoke")
def revoke(ctx: typer.Context, name: str = typer.Argument(..., help="The key's name.")) -> None:
    """Revoke a key: the gateway refuses it from now on."""
    ApiClient.from_context(ctx).delete(f"/keys/{name}")
    stdout.print(f"revoked key {name}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard keys ...`` to the root app."""
    app.add_typer(keys_app, name="keys")
