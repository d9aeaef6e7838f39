"""Backends as users see them: the built-in catalog plus the custom backends in the store.

Custom backends arrive as GPUStack-shaped YAML (``modelyard.backends.gpustack``) and are stored
in ``custom_backends`` in modelyard's own spec shape. Importing a backend that exists already
replaces it, unless that would remove a version a deployment still uses.

Usage::

    spec = get_backend(session, "vllm")
    version = resolve_version(spec, None)  # its default version
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.backends.catalog import BackendCatalog, known_versions, load_builtin_backends
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.errors import Conflict, InvalidYaml, NotFound
from modelyard.services.names import commit_new
from modelyard.services.registry_credentials import check_backend_references
from modelyard.store.tables import CustomBackend, Deployment, utc_now


@functools.cache
def builtin_backends() -> tuple[BackendSpec, ...]:
    """The package's catalog, read once per process."""
    return tuple(load_builtin_backends())


def catalog(session: Session) -> BackendCatalog:
    custom = [BackendSpec.model_validate(row.spec) for row in session.scalars(select(CustomBackend))]
    return BackendCatalog(builtin=builtin_backends(), custom=custom)


def list_backends(session: Session) -> list[BackendSpec]:
    return catalog(session).all()


def get_backend(session: Session, name: str) -> BackendSpec:
    return catalog(session).get(name)


def resolve_version(spec: BackendSpec, version: str | None) -> BackendVersion:
    """``version`` of ``spec`` (None: the default); ``NotFound`` listing the versions otherwise."""
    wanted = spec.default_version if version is None else version
    found = spec.versions.get(wanted)
    if found is None:
        raise NotFound(
            f"backend {spec.name!r} has no version {wanted!r}; known: {', '.join(known_versions(spec))}",
            hint=f"omit --version to use the default ({spec.default_version}), "
            "or import a backend YAML that adds it",
        )
    return found


def backend_to_json(spec: BackendSpec, usage: dict[str, list[str]] | None = None) -> dict[str, Any]:
    data = spec.model_dump(mode="json")
    data["versions"] = [
        {
            **spec.versions[version].model_dump(mode="json"),
            "effective_pull_policy": _pull_policy(spec, version),
        }
        for version in known_versions(spec)
    ]
    if usage is not None:
        data["deployments"] = usage.get(spec.name.casefold(), [])
    return data


def _pull_policy(spec: BackendSpec, version: str) -> str | None:
    """The pull policy a container version runs with (its own, or the default for its image)."""
    found = spec.versions[version]
    return found.effective_pull_policy if found.runs_in_container else None


def deployments_by_backend(session: Session) -> dict[str, list[str]]:
    usage: dict[str, list[str]] = {}
    for name, backend in session.execute(
        select(Deployment.name, Deployment.backend).order_by(Deployment.name)
    ):
        usage.setdefault(backend.casefold(), []).append(name)
    return usage


def _parse_yaml(text: str) -> list[BackendSpec]:
    from modelyard.backends.gpustack import gpustack_problems, parse_gpustack_yaml, problem_to_json

    try:
        parsed: Any = parse_gpustack_yaml(text)
    except InvalidYaml as error:
        # The message names the first problem; the details list them all (the console marks each line).
        error.details = {"problems": [problem_to_json(problem) for problem in gpustack_problems(text)]}
        raise
    specs = [parsed] if isinstance(parsed, BackendSpec) else list(parsed)
    if not specs:
        raise InvalidYaml("the YAML holds no backend", hint="give backend_name and version_configs")
    return specs


def _versions_in_use(session: Session, name: str) -> set[str]:
    rows = session.scalars(select(Deployment.backend_version).where(Deployment.backend == name))
    return set(rows)


def import_backends(session: Session, yaml_text: str) -> list[BackendSpec]:
    """Store the backends in ``yaml_text`` (GPUStack shape) as custom backends, all or none."""
    specs = [spec.model_copy(update={"builtin": False}) for spec in _parse_yaml(yaml_text)]
    names = [spec.name.casefold() for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidYaml(f"the YAML defines backend {', '.join(duplicates)} more than once")
    existing = {row.name.casefold(): row for row in session.scalars(select(CustomBackend))}
    kept = [BackendSpec.model_validate(row.spec) for key, row in existing.items() if key not in names]
    # Building the catalog checks the new names against the built-ins and each other.
    BackendCatalog(builtin=builtin_backends(), custom=[*kept, *specs])
    check_backend_references(session, specs)
    for spec in specs:
        row = existing.get(spec.name.casefold())
        if row is None:
            session.add(CustomBackend(name=spec.name, spec=spec.model_dump(mode="json")))
            continue
        missing = sorted(_versions_in_use(session, row.name) - set(spec.versions))
        if missing:
            raise Conflict(
                f"importing {spec.name!r} would remove version(s) {', '.join(missing)} "
                "that deployments still use",
                hint="keep those versions in the YAML, or remove the deployments first",
            )
        row.spec = spec.model_dump(mode="json")
        row.updated_at = utc_now()
    commit_new(session, "backend", ", ".join(spec.name for spec in specs))
    return specs


def export_backend(session: Session, name: str) -> str:
    """The backend in GPUStack's YAML shape, ready for ``import`` elsewhere."""
    from modelyard.backends.gpustack import to_gpustack_yaml

    return str(to_gpustack_yaml(get_backend(session, name)))


def remove_backend(session: Session, name: str) -> None:
    """Remove a custom backend; refused for built-ins and while deployments use it."""
    spec = get_backend(session, name)
    if spec.builtin:
        raise Conflict(f"backend {spec.name!r} is built in and cannot be removed")
    users = deployments_by_backend(session).get(spec.name.casefold(), [])
    if users:
        raise Conflict(
            f"backend {spec.name!r} is used by {', '.join(users)}",
            hint="remove those deployments first",
        )
    row = session.scalar(select(CustomBackend).where(CustomBackend.name == spec.name))
    if row is not None:
        session.delete(row)
        session.commit()
