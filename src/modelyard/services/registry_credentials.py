"""Registry credentials: a username and a sealed password per registry, named by backend versions.

A backend version that pulls its image from a registry that wants a login names a stored
credential in ``registry_credential`` (its ``modelyard:`` mapping in the backend YAML). The
password is sealed with the data directory's key (``store/secret_box.py``) as it is stored, never
shown again (listings say ``MASK``), and opened only by the controller for the one pull request
that presents it (``runtimes/image_pull.py``: the ``X-Registry-Auth`` header to dockerd's socket).

Usage::

    add_credential(session, box, "lab", registry="127.0.0.1:5000", username="ci", password=secret)
    check_backend_references(session, specs)   # InvalidInput for a version naming an unknown one
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.backends.spec import CREDENTIAL_NAME_PATTERN, BackendSpec, image_registry_host
from modelyard.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from modelyard.runtimes.image_pull import registry_matches
from modelyard.secret_names import MASK
from modelyard.store.secret_box import SecretBox
from modelyard.store.tables import CustomBackend, RegistryCredential, utc_now

# host[:port]: what a registry is called in an image reference ("registry.example.com:5000").
_REGISTRY_PATTERN = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?$")
MAXIMUM_SECRET_CHARACTERS = 4096


def _check_text(value: str, what: str, example: str) -> None:
    if not value:
        raise InvalidInput(f"the {what} is empty", hint=f"give one, e.g. {example}")
    if len(value) > MAXIMUM_SECRET_CHARACTERS:
        raise InvalidInput(f"the {what} has {len(value)} characters; at most {MAXIMUM_SECRET_CHARACTERS}")
    if any(ord(character) < 32 or ord(character) == 127 for character in value):
        raise InvalidInput(
            f"the {what} holds a control character (a newline?)",
            hint="give it on one line; --password-stdin drops only the final newline",
        )


def check_registry(registry: str) -> str:
    """``registry`` when it is a host with an optional port, as image references name it."""
    if "://" in registry or "/" in registry:
        host = registry.split("://", 1)[-1].split("/", 1)[0]
        raise InvalidInput(
            f"registry {registry!r} is not a host: give the host (and port) only, as in the image "
            f"reference ({host!r} for images named {host}/REPOSITORY:TAG)"
        )
    if not _REGISTRY_PATTERN.match(registry):
        raise InvalidInput(
            f"registry {registry!r} is not a host name with an optional port",
            hint="e.g. registry.example.com, 127.0.0.1:5000 or docker.io",
        )
    return registry


def check_credential_name(name: str) -> str:
    if not CREDENTIAL_NAME_PATTERN.match(name):
        raise InvalidInput(
            f"credential name {name!r} is not valid: use letters, digits and - _ . (starting with a "
            "letter or digit, at most 64 characters)",
            hint="e.g. lab-registry",
        )
    return name


def credential_to_json(row: RegistryCredential, used_by: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": row.name,
        "registry": row.registry_host,
        "username": row.username,
        "password": MASK,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        # The backend versions that name it ("backend version"), from the stored custom backends.
        "used_by": used_by if used_by is not None else [],
    }


def _find(session: Session, name: str) -> RegistryCredential | None:
    return session.scalar(select(RegistryCredential).where(RegistryCredential.name == name))


def references(session: Session) -> dict[str, list[str]]:
    """Credential name -> the custom backend versions that name it (``"backend version"``)."""
    used: dict[str, list[str]] = {}
    for row in session.scalars(select(CustomBackend).order_by(CustomBackend.name)):
        spec = BackendSpec.model_validate(row.spec)
        for version in spec.versions.values():
            if version.registry_credential:
                used.setdefault(version.registry_credential, []).append(f"{spec.name} {version.version}")
    return used


def list_credentials(session: Session) -> list[dict[str, Any]]:
    used = references(session)
    rows = session.scalars(select(RegistryCredential).order_by(RegistryCredential.name))
    return [credential_to_json(row, used.get(row.name, [])) for row in rows]


def add_credential(
    session: Session,
    box: SecretBox,
    name: str,
    *,
    registry: str,
    username: str,
    password: str,
    replace: bool = False,
) -> dict[str, Any]:
    """Store (or with ``replace``, overwrite) a credential; the password sealed before it is stored."""
    check_credential_name(name)
    check_registry(registry)
    _check_text(username, "username", "'ci-bot'")
    _check_text(password, "password", "the registry's password or access token")
    row = _find(session, name)
    if row is not None and not replace:
        raise AlreadyExists(
            f"a registry credential named {name!r} exists (for {row.registry_host}, user {row.username!r})",
            hint='pass --replace (REST: "replace": true) to overwrite it, or choose another name',
        )
    if row is not None:
        used = references(session).get(name, [])
        if used and row.registry_host != registry:
            raise Conflict(
                f"credential {name!r} is for {row.registry_host} and backend versions use it there "
                f"({', '.join(used)}); it cannot move to {registry}",
                hint="add a credential of another name for the other registry",
            )
        row.registry_host, row.username, row.password = registry, username, box.seal(password)
        row.updated_at = utc_now()
    else:
        row = RegistryCredential(
            name=name, registry_host=registry, username=username, password=box.seal(password)
        )
        session.add(row)
    session.commit()
    return credential_to_json(row, references(session).get(name, []))


def remove_credential(session: Session, name: str) -> None:
    row = _find(session, name)
    if row is None:
        raise NotFound(
            f"no registry credential named {name!r}", hint="see `modelyard backends credentials list`"
        )
    used = references(session).get(name, [])
    if used:
        raise Conflict(
            f"registry credential {name!r} is named by backend version(s) {', '.join(used)}",
            hint="import those backends without registry_credential (or remove them) first",
        )
    session.delete(row)
    session.commit()


def check_backend_references(session: Session, specs: Iterable[BackendSpec]) -> None:
    """Every ``registry_credential`` of ``specs`` names a stored credential for its image's registry."""
    stored = {row.name: row for row in session.scalars(select(RegistryCredential))}
    for spec in specs:
        for version in spec.versions.values():
            name = version.registry_credential
            if name is None:
                continue
            row = stored.get(name)
            image = version.image or ""
            registry = image_registry_host(image) or "docker.io"
            if row is None:
                known = ", ".join(sorted(stored)) or "none stored"
                raise InvalidInput(
                    f"backend {spec.name!r} version {version.version!r} names registry credential "
                    f"{name!r}, which is not stored (stored: {known})",
                    hint=f"add it first: `modelyard backends credentials add {name} --registry {registry} "
                    "--username USER --password-stdin`",
                )
            if not registry_matches(row.registry_host, image):
                raise InvalidInput(
                    f"backend {spec.name!r} version {version.version!r}: credential {name!r} is for "
                    f"{row.registry_host}, but the image {image} comes from {registry}",
                    hint=f"name a credential for {registry}, or fix the image's registry host",
                )
