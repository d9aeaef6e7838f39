"""``modelyard backends credentials add|list|remove``: registry logins for backend images.

The password is read from stdin (``--password-stdin``) or a hidden prompt, never from a flag,
so that it is in no shell history and no ``ps`` listing; the server seals it as it stores it and
never shows it again.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from modelyard.cli.client import ApiClient, fail
from modelyard.cli.context import stdout
from modelyard.cli.output import print_json, print_table

credentials_app = typer.Typer(
    help="Registry credentials that backend versions name to pull their images.", no_args_is_help=True
)


@credentials_app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The name backend versions give in registry_credential."),
    registry: str = typer.Option(
        ..., "--registry", help="The registry host (and port), as image references name it."
    ),
    username: str = typer.Option(..., "--username", help="The registry user."),
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="Read the password (or access token) from stdin."
    ),
    replace: bool = typer.Option(False, "--replace", help="Overwrite a credential of that name."),
) -> None:
    """Store a registry login (the password sealed; never shown again)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            fail(
                "no password on stdin",
                f"pipe it in: cat token | modelyard backends credentials add {name} ...",
            )
    else:
        password = typer.prompt(f"Password for {username} at {registry}", hide_input=True)
    body = {
        "name": name,
        "registry": registry,
        "username": username,
        "password": password,
        "replace": replace,
    }
    stored: dict[str, Any] = ApiClient.from_context(ctx).post("/registry-credentials", body)
    stdout.print(
        f"stored credential {stored['name']} for {stored['registry']} (user {stored['username']})",
        highlight=False,
    )


@credentials_app.command("list")
def list_credentials(
    ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """The stored credentials (never their passwords) and the backend versions that name them."""
    credentials: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/registry-credentials")
    if as_json:
        print_json(credentials)
        return
    print_table(
        ["NAME", "REGISTRY", "USERNAME", "USED BY", "UPDATED"],
        [
            [
                item["name"],
                item["registry"],
                item["username"],
                ", ".join(item["used_by"]) or None,
                item["updated_at"][:19].replace("T", " "),
            ]
            for item in credentials
        ],
    )


@credentials_app.command("remove")
def remove(ctx: typer.Context, name: str = typer.Argument(..., help="The credential's name.")) -> None:
    """Remove a credential (refused while a backend version names it)."""
    ApiClient.from_context(ctx).delete(f"/registry-credentials/{name}")
    stdout.print(f"removed credential {name}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``credentials`` to ``modelyard backends``."""
    from modelyard.cli.backends import backends_app

    backends_app.add_typer(credentials_app, name="credentials")
