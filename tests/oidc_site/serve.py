"""Start the test provider, or register a client with it.

    python tests/oidc_site/serve.py run DIRECTORY PORT     # prepares DIRECTORY on first use, then serves
    python tests/oidc_site/serve.py add-client DIRECTORY CLIENT_ID SECRET REDIRECT_URI
    python tests/oidc_site/serve.py set-groups DIRECTORY USERNAME [GROUP ...]

Its users (password ``provider-password`` for each): ``alice`` (group ``modelyard-admins``),
``bob`` (group ``staff``), ``carol`` (``modelyard-operators``), ``dave`` and ``erin``
(``modelyard-members``). Clients need no consent screen (``require_consent`` off).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

USERS = {
    "alice": ["modelyard-admins"],
    "bob": ["staff"],
    "carol": ["modelyard-operators"],
    "dave": ["modelyard-members"],
    "erin": ["modelyard-members"],
}
PASSWORD = "provider-password"


def _setup(directory: Path, url: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    directory.mkdir(parents=True, exist_ok=True)
    secret_file = directory / "django-secret"
    if not secret_file.is_file():
        secret_file.write_text(secrets.token_urlsafe(48))
    os.environ["OIDC_SITE_DIRECTORY"] = str(directory)
    os.environ["OIDC_SITE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "oidc_site.settings"
    import django

    django.setup()


def _prepare(directory: Path) -> None:
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from oidc_provider.models import RSAKey

    call_command("migrate", verbosity=0, interactive=False)
    if not RSAKey.objects.exists():
        call_command("creatersakey")
    for username, groups in USERS.items():
        if User.objects.filter(username=username).exists():
            continue
        user = User.objects.create_user(username, email=f"{username}@example.org", password=PASSWORD)
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])


def add_client(client_id: str, secret: str, redirect_uri: str) -> None:
    from oidc_provider.models import Client, ResponseType

    code, _ = ResponseType.objects.get_or_create(
        value="code", defaults={"description": "code (Authorization Code Flow)"}
    )
    client, _ = Client.objects.update_or_create(
        client_id=client_id,
        defaults={
            "name": client_id,
            "client_type": "confidential",
            "client_secret": secret,
            "jwt_alg": "RS256",
            "require_consent": False,
            "reuse_consent": True,
            "_redirect_uris": redirect_uri,
        },
    )
    client.response_types.set([code])


def set_groups(username: str, groups: list[str]) -> None:
    from django.contrib.auth.models import Group, User

    user = User.objects.get(username=username)
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("directory", type=Path)
    run.add_argument("port", type=int)
    register = commands.add_parser("add-client")
    register.add_argument("directory", type=Path)
    register.add_argument("client_id")
    register.add_argument("secret")
    register.add_argument("redirect_uri")
    regroup = commands.add_parser("set-groups")
    regroup.add_argument("directory", type=Path)
    regroup.add_argument("username")
    regroup.add_argument("groups", nargs="*")
    arguments = parser.parse_args()
    if arguments.command == "run":
        url = f"http://127.0.0.1:{arguments.port}"
        (arguments.directory / "url").parent.mkdir(parents=True, exist_ok=True)
        _setup(arguments.directory, url)
        _prepare(arguments.directory)
        (arguments.directory / "url").write_text(url)
        from django.core.management import call_command

        call_command("runserver", f"127.0.0.1:{arguments.port}", use_reloader=False, use_threading=True)
    elif arguments.command == "set-groups":
        _setup(arguments.directory, (arguments.directory / "url").read_text().strip())
        set_groups(arguments.username, arguments.groups)
    else:
        _setup(arguments.directory, (arguments.directory / "url").read_text().strip())
        add_client(arguments.client_id, arguments.secret, arguments.redirect_uri)


if __name__ == "__main__":
    main()
