"""``modelyard audit``, ``modelyard users ...`` and ``modelyard projects ...``: who did what, the
accounts and their roles, the projects and their quotas (``docs/security.md``)."""

from __future__ import annotations

from typing import Any

import typer

from modelyard.cli.client import ApiClient
from modelyard.cli.context import stdout
from modelyard.cli.output import Column, print_json, print_table

users_app = typer.Typer(help="Accounts and their roles (admin, operator, member).", no_args_is_help=True)
projects_app = typer.Typer(
    help="Projects: they own deployments and keys; their members see them; quotas for all their keys.",
    no_args_is_help=True,
)
ROLE_HELP = "admin (everything), operator (deploy, scale, models, backends) or member (playground, own keys)."


def audit(
    ctx: typer.Context,
    actor: str | None = typer.Option(None, "--actor", help="Only what this user did."),
    action: str | None = typer.Option(
        None,
        "--action",
        help="Only this action: create, update, delete, start, stop, scale, revoke, rotate, ...",
    ),
    object_type: str | None = typer.Option(
        None, "--type", help="Only this kind of object: deployment, key, user, project or session."
    ),
    object_name: str | None = typer.Option(None, "--object", help="Only this object (its name)."),
    project: str | None = typer.Option(None, "--project", help="Only what belongs to this project."),
    since: str | None = typer.Option(None, "--since", help="From this time (ISO 8601, e.g. 2026-12-01)."),
    until: str | None = typer.Option(None, "--until", help="Before this time (ISO 8601)."),
    limit: int = typer.Option(
        200, "--limit", min=1, max=1000, help="At most this many events, newest first."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Who created, changed, scaled, stopped or removed what, and when; who made or revoked which key."""
    filters = {
        "actor": actor,
        "action": action,
        "object_type": object_type,
        "object_name": object_name,
        "project": project,
        "since": since,
        "until": until,
    }
    params: dict[str, Any] = {name: value for name, value in filters.items() if value is not None}
    params["limit"] = limit
    events: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/audit", params)["events"]
    if as_json:
        print_json(events)
        return
    print_table(
        ["WHEN", "WHO", "ACTION", "TYPE", "OBJECT", "PROJECT", Column("DETAILS", wraps=True, optional=True)],
        [
            [
                event["at"][:19].replace("T", " "),
                event["actor"],
                event["action"],
                event["object_type"],
                event["object_name"],
                event["project"],
                ", ".join(f"{name}={value}" for name, value in event["details"].items()) or None,
            ]
            for event in events
        ],
    )


@users_app.command("list")
def list_users(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every account: role, state, projects."""
    users: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/users")
    if as_json:
        print_json(users)
        return
    print_table(
        ["USERNAME", "ROLE", "STATE", "PROJECTS", "CREATED"],
        [
            [
                user["username"],
                user["role"],
                "disabled" if user["disabled"] else "enabled",
                ", ".join(user["projects"]) or None,
                user["created_at"][:19].replace("T", " "),
            ]
            for user in users
        ],
    )


@users_app.command("create")
def create_user(
    ctx: typer.Context,
    username: str = typer.Argument(..., help="The new user's name (letters, digits, . _ - @)."),
    role: str = typer.Option("member", "--role", help=ROLE_HELP),
    password: str = typer.Option(
        ...,
        "--password",
        prompt=True,
        hide_input=True,
        confirmation_prompt=True,
        help="Their first password.",
    ),
) -> None:
    """Create an account (an admin's command)."""
    ApiClient.from_context(ctx).post("/users", {"username": username, "password": password, "role": role})
    stdout.print(f"created user {username} ({role})", highlight=False)


@users_app.command("update")
def update_user(
    ctx: typer.Context,
    username: str = typer.Argument(..., help="The user's name."),
    role: str | None = typer.Option(None, "--role", help=ROLE_HELP),
    disable: bool = typer.Option(False, "--disable", help="They can no longer sign in."),
    enable: bool = typer.Option(False, "--enable", help="They can sign in again."),
    reset_password: bool = typer.Option(
        False, "--reset-password", help="Set a new password (asked for); their console sessions end."
    ),
) -> None:
    """Change a user's role, disable or enable them, or reset their password."""
    body: dict[str, Any] = {}
    if role is not None:
        body["role"] = role
    if disable or enable:
        body["disabled"] = disable
    if reset_password:
        body["password"] = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    if not body:
        raise typer.BadParameter("give --role, --disable, --enable or --reset-password")
    ApiClient.from_context(ctx).patch(f"/users/{username}", body)
    stdout.print(f"updated user {username}", highlight=False)


@users_app.command("rm")
def remove_user(ctx: typer.Context, username: str = typer.Argument(..., help="The user's name.")) -> None:
    """Remove an account (its keys stay, without an owner)."""
    ApiClient.from_context(ctx).delete(f"/users/{username}")
    stdout.print(f"removed user {username}", highlight=False)


def _quota_text(quotas: dict[str, Any]) -> str | None:
    parts = [
        f"{quotas[field]} {unit}"
        for field, unit in (
            ("tokens_per_day", "tokens/day"),
            ("tokens_per_month", "tokens/month"),
            ("max_concurrent_requests", "at once"),
        )
        if quotas.get(field) is not None
    ]
    return ", ".join(parts) or None


@projects_app.command("list")
def list_projects(
    ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")
) -> None:
    """The projects you see: members, what they own, their quotas."""
    projects: list[dict[str, Any]] = ApiClient.from_context(ctx).get("/projects")
    if as_json:
        print_json(projects)
        return
    print_table(
        ["NAME", "MEMBERS", "DEPLOYMENTS", "KEYS", Column("QUOTAS", wraps=True)],
        [
            [
                project["name"],
                ", ".join(project["members"]) or None,
                project["deployments"],
                project["keys"],
                _quota_text(project["quotas"]),
            ]
            for project in projects
        ],
    )


def _quotas(day: int | None, month: int | None, concurrency: int | None) -> dict[str, int]:
    values = {"tokens_per_day": day, "tokens_per_month": month, "max_concurrent_requests": concurrency}
    return {name: value for name, value in values.items() if value is not None}


@projects_app.command("create")
def create_project(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The project's name."),
    description: str = typer.Option("", "--description", help="What the project is for."),
    tokens_per_day: int | None = typer.Option(
        None, "--tokens-per-day", min=1, help="Tokens per UTC day, all keys."
    ),
    tokens_per_month: int | None = typer.Option(
        None, "--tokens-per-month", min=1, help="Tokens per UTC month, all keys."
    ),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Requests at once, all keys."),
) -> None:
    """Create a project (an admin's command)."""
    body = {
        "name": name,
        "description": description,
        "quotas": _quotas(tokens_per_day, tokens_per_month, concurrency),
    }
    ApiClient.from_context(ctx).post("/projects", body)
    stdout.print(f"created project {name}", highlight=False)


@projects_app.command("quotas")
def set_quotas(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The project's name."),
    tokens_per_day: int | None = typer.Option(
        None, "--tokens-per-day", min=1, help="Tokens per UTC day, all keys."
    ),
    tokens_per_month: int | None = typer.Option(
        None, "--tokens-per-month", min=1, help="Tokens per UTC month, all keys."
    ),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Requests at once, all keys."),
) -> None:
    """Replace the project's quotas (those not given are lifted)."""
    ApiClient.from_context(ctx).patch(
        f"/projects/{name}", {"quotas": _quotas(tokens_per_day, tokens_per_month, concurrency)}
    )
    stdout.print(f"set the quotas of project {name}", highlight=False)


@projects_app.command("add-member")
def add_member(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The project's name."),
    username: str = typer.Argument(..., help="The user to add."),
) -> None:
    """Add a user to a project: they see its deployments, keys and usage."""
    ApiClient.from_context(ctx).put(f"/projects/{name}/members/{username}", None)
    stdout.print(f"{username} is a member of project {name}", highlight=False)


@projects_app.command("remove-member")
def remove_member(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The project's name."),
    username: str = typer.Argument(..., help="The user to take out."),
) -> None:
    """Take a user out of a project."""
    ApiClient.from_context(ctx).delete(f"/projects/{name}/members/{username}")
    stdout.print(f"{username} is no longer a member of project {name}", highlight=False)


@projects_app.command("rm")
def remove_project(ctx: typer.Context, name: str = typer.Argument(..., help="The project's name.")) -> None:
    """Remove an empty project (not 'default')."""
    ApiClient.from_context(ctx).delete(f"/projects/{name}")
    stdout.print(f"removed project {name}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``modelyard audit``, ``modelyard users ...`` and ``modelyard projects ...``."""
    app.command("audit")(audit)
    app.add_typer(users_app, name="users")
    app.add_typer(projects_app, name="projects")
