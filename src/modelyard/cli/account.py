"""``modelyard password``: change the admin password."""

from __future__ import annotations

import os
import sys

import typer

from modelyard.cli.client import ENV_PASSWORD, ApiClient, fail, read_admin_password
from modelyard.cli.context import cli_context, stderr, stdout


def password(
    ctx: typer.Context,
    new_password_stdin: bool = typer.Option(
        False, "--new-password-stdin", help="Read the new password from stdin (for scripts)."
    ),
) -> None:
    """Change the admin password. The server also rewrites <data-dir>/admin-password."""
    context = cli_context(ctx)
    current, source = read_admin_password(context.resolved_data_dir)
    if current is None:
        fail(f"no current admin password found in {source}", f"set {ENV_PASSWORD} to the current password")
    if new_password_stdin:
        new = sys.stdin.readline().rstrip("\r\n")
        if not new:
            fail("no new password on stdin", "pipe it in: echo NEW | modelyard password --new-password-stdin")
    else:
        new = typer.prompt("New admin password", hide_input=True, confirmation_prompt=True)
    client = ApiClient.from_cli(context)
    client.put("/auth/password", {"current_password": current, "new_password": new})
    stdout.print("the admin password is changed", highlight=False)
    if os.environ.get(ENV_PASSWORD):
        stderr.print(f"note: {ENV_PASSWORD} still holds the old password; update it", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard password`` to the root app."""
    app.command("password")(password)
