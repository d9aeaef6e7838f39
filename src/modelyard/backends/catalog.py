"""The backends modelyard knows: the built-in catalog shipped in the package, plus custom ones.

Built-ins are YAML files in ``modelyard/backends/catalog/`` (one engine family per file, in
``BackendSpec``'s own shape, with the version key standing for the ``version`` field). Custom
backends are what users imported; the service layer reads them from the store and passes them in::

    catalog = BackendCatalog(builtin=load_builtin_backends(), custom=[BackendSpec.model_validate(row.spec)])
    version = catalog.resolve_version("vllm", None)  # the default version
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Sequence
from importlib import resources
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from modelyard.backends.flag_tables import ENGINES_WITH_TABLES
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.errors import AlreadyExists, InvalidInput, InvalidYaml, NotFound

logger = logging.getLogger(__name__)

# A version key in the built-in YAML that stands for "the version of this package installed here".
INSTALLED_VERSION_KEY = "installed"
_INSTALLED_PACKAGE = {"transformers": "transformers"}


def _installed_version(backend_name: str) -> str | None:
    package = _INSTALLED_PACKAGE.get(backend_name)
    if package is None:
        return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _resolve_installed(document: dict[str, Any]) -> dict[str, Any]:
    """Replace the ``installed`` version key by the installed package's version, when there is one."""
    versions = document.get("versions")
    name = str(document.get("name", ""))
    if not isinstance(versions, dict) or INSTALLED_VERSION_KEY not in versions:
        return document
    installed = _installed_version(name)
    if installed is None:
        logger.info("backend %s: its package is not installed; keeping the version 'installed'", name)
        return document
    versions = {installed if key == INSTALLED_VERSION_KEY else key: body for key, body in versions.items()}
    document = {**document, "versions": versions}
    if document.get("default_version") == INSTALLED_VERSION_KEY:
        document["default_version"] = installed
    return document


def _spec_from_document(document: Any, source: str, *, builtin: bool) -> BackendSpec:
    if not isinstance(document, dict):
        raise InvalidYaml(f"{source}: expected a mapping with name, default_version and versions")
    document = _resolve_installed(document)
    versions = document.get("versions")
    if isinstance(versions, dict):
        document = {
            **document,
            "versions": {
                str(key): {"version": str(key), **body} if isinstance(body, dict) else body
                for key, body in versions.items()
            },
        }
    try:
        return BackendSpec.model_validate({**document, "builtin": builtin})
    except ValidationError as error:
        raise InvalidYaml(f"{source}: {error}") from error


def load_builtin_backends() -> list[BackendSpec]:
    """Read the built-in catalog from the package, in name order (parsed once per process)."""
    return list(_load_builtin_backends())


@functools.cache
def _load_builtin_backends() -> tuple[BackendSpec, ...]:
    folder = resources.files("modelyard.backends").joinpath("catalog")
    specs: list[BackendSpec] = []
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".yaml"):
            continue
        source = f"built-in backend file {entry.name}"
        try:
            document = yaml.safe_load(entry.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise InvalidYaml(f"{source}: {error}") from error
        specs.append(_spec_from_document(document, source, builtin=True))
    return tuple(sorted(specs, key=lambda spec: spec.name))


class BackendCatalog:
    """Built-in and custom backends, looked up by name (case-insensitive) and version."""

    def __init__(self, *, builtin: Sequence[BackendSpec], custom: Sequence[BackendSpec] = ()) -> None:
        self._by_key: dict[str, BackendSpec] = {}
        for spec in builtin:
            self._add(spec)
        for spec in custom:
            if spec.builtin:
                raise InvalidInput(
                    f"custom backend {spec.name!r} is marked builtin",
                    hint="custom backends come from imported YAML and are never builtin",
                )
            self._add(spec)

    def _add(self, spec: BackendSpec) -> None:
        key = spec.name.casefold()
        existing = self._by_key.get(key)
        if existing is not None:
            if existing.builtin:
                raise AlreadyExists(
                    f"backend {spec.name!r} would shadow the built-in backend {existing.name!r}",
                    hint="give the custom backend another name, e.g. "
                    f"'{spec.name}-custom'; built-in backends cannot be replaced",
                )
            raise AlreadyExists(
                f"backend {spec.name!r} already exists",
                hint="choose another name or remove the existing one first",
            )
        self._by_key[key] = spec

    def all(self) -> list[BackendSpec]:
        """Every backend: built-ins first, then custom ones, each in name order."""
        return sorted(self._by_key.values(), key=lambda spec: (not spec.builtin, spec.name.casefold()))

    def names(self) -> list[str]:
        return [spec.name for spec in self.all()]

    def get(self, name: str) -> BackendSpec:
        """The backend called ``name``; ``NotFound`` listing the known backends otherwise."""
        spec = self._by_key.get(name.casefold())
        if spec is None:
            raise NotFound(
                f"backend {name!r} does not exist; known: {', '.join(self.names()) or 'none'}",
                hint="import a custom backend with 'modelyard backends import FILE'",
            )
        return spec

    def resolve_version(self, name: str, version: str | None) -> BackendVersion:
        """The version ``version`` of backend ``name`` (``None``: its default version)."""
        spec = self.get(name)
        wanted = spec.default_version if version is None else version
        found = spec.versions.get(wanted)
        if found is None:
            raise NotFound(
                f"backend {spec.name!r} has no version {wanted!r}; known: {', '.join(known_versions(spec))}",
                hint=f"omit the version to use the default ({spec.default_version})",
            )
        return found

    def version_for_checks(self, name: str, version: str | None) -> BackendVersion:
        """``resolve_version``, but any release of a family with flag tables (vLLM, SGLang) is
        accepted: a release the catalog does not list borrows the launch settings of the nearest
        listed one (the newest older, else the oldest) under its own version number, so the
        checks read that release's flag table. Other families still need a listed version."""
        spec = self.get(name)
        if version is None or version in spec.versions or spec.family not in ENGINES_WITH_TABLES:
            return self.resolve_version(name, version)
        wanted = _version_sort_key(version)
        listed = known_versions(spec)
        older = [candidate for candidate in listed if _version_sort_key(candidate) <= wanted]
        nearest = spec.versions[older[-1] if older else listed[0]]
        try:
            return BackendVersion.model_validate({**nearest.model_dump(), "version": version})
        except ValidationError as error:
            raise InvalidInput(
                f"{version!r} is not a version of {spec.name}: {error.errors()[0]['msg']}",
                hint=f"give a release number, e.g. {spec.default_version}",
            ) from error


def _version_sort_key(version: str) -> tuple[int, Any]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def known_versions(spec: BackendSpec) -> list[str]:
    """The versions of ``spec``, oldest first (PEP 440 order where they parse, text order after)."""
    return sorted(spec.versions, key=_version_sort_key)
