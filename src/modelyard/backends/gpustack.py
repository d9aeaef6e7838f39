"""Import and export backends in GPUStack's inference-backend YAML shape.

A GPUStack user can paste what they already have::

    backend_name: TensorRT-LLM-custom
    default_version: 1.2.0rc0
    health_check_path: /health
    version_configs:
      1.2.0rc0:
        image_name: nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc0
        run_command: trtllm-serve {{model_path}} --host {{worker_ip}} --port {{port}}
        custom_framework: cuda

How the keys map (see docs/backends.md):

- A version with ``image_name`` runs in a container: ``entrypoint`` (a string, split with shell
  rules) overrides the image's, ``run_command`` is its arguments.
- A version without ``image_name`` runs a program: the first word of ``entrypoint`` +
  ``run_command`` is the executable, the rest its arguments (``vllm serve {{model_path}} ...``).
- ``default_run_command``, ``default_entrypoint`` and ``default_env`` fill in for versions that
  lack their own (version ``env`` overrides ``default_env`` key by key).
- ``custom_framework``: ``cuda`` (or none) runs on NVIDIA GPUs, ``cpu`` on CPU only.
- ``health_check_path`` (GPUStack's default ``/v1/models``) is every version's health path.
- The served model name is the deployment name when the command uses ``{{model_name}}``,
  else the model path.
- Keys only GPUStack's UI uses (``icon``, ``enabled``, ``is_built_in``, ``parameter_format``,
  ``common_parameters``, ``built_in_frameworks``, ...) are accepted and ignored.
- modelyard's own fields ride in an optional ``modelyard:`` mapping, at the top (``family``) and
  in each version (``metrics_path``, ``reasoning_field``, ...); GPUStack ignores it.

Every error is an ``InvalidYaml`` naming the line and column.
"""

from __future__ import annotations

import io
import logging
import re
import shlex
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from modelyard.backends.arguments import split_backend_parameters
from modelyard.backends.catalog import known_versions
from modelyard.backends.spec import DEFAULT_API_PATHS, BackendSpec, BackendVersion, EngineFamily
from modelyard.backends.yaml_lines import YamlDocument
from modelyard.errors import InvalidInput, InvalidYaml

logger = logging.getLogger(__name__)

GPUSTACK_DEFAULT_HEALTH_PATH = "/v1/models"
_MODEL_NAME_PLACEHOLDER = re.compile(r"\{\{\s*model_name\s*\}\}")
_FRAMEWORK_GPU = {None: True, "": True, "cuda": True, "cpu": False}
# BackendVersion fields that GPUStack has no key for; they ride in the version's "modelyard" mapping.
VERSION_EXTENSION_KEYS = (
    "health_path",
    "metrics_path",
    "reasoning_field",
    "served_model_name",
    "stop_signal_target",
    "stop_grace_seconds",
    "cpu_parameters",
    "cpu_threads_env",
    "install_hint",
    "description",
    "api_paths",
    "multi_node",
    "api_key_variable",
    "pull_policy",
    "registry_credential",
)


_IGNORED_KEYS = frozenset(
    {
        "built_in_frameworks",
        "is_deprecated",
        "is_built_in",
        "backend_source",
        "enabled",
        "icon",
        "parameter_format",
        "common_parameters",
        "id",
        "created_at",
        "updated_at",
        "deleted_at",
        "built_in_version_configs",
        "framework_index_map",
    }
)


class _BackendExtension(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    family: EngineFamily = "custom"


class _VersionConfig(BaseModel):
    """One entry of ``version_configs``, as GPUStack writes it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image_name: str | None = None
    run_command: str | None = None
    entrypoint: str | None = None
    env: dict[str, str] | None = None
    custom_framework: str | None = None
    modelyard: dict[str, Any] | None = None
    # Accepted and ignored: GPUStack fills these for its own built-ins.
    built_in_frameworks: Any = None
    is_deprecated: Any = None


class _GpustackBackend(BaseModel):
    """GPUStack's inference backend, as its YAML import and its API write it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    backend_name: str
    version_configs: dict[str, _VersionConfig] = Field(min_length=1)
    default_version: str | None = None
    default_backend_param: list[str] | None = None
    default_run_command: str | None = None
    default_entrypoint: str | None = None
    default_env: dict[str, str] | None = None
    description: str | None = None
    health_check_path: str | None = None
    modelyard: _BackendExtension | None = None
    # Accepted and ignored: UI, marketplace and bookkeeping fields of GPUStack.
    is_built_in: Any = None
    backend_source: Any = None
    enabled: Any = None
    icon: Any = None
    parameter_format: Any = None
    common_parameters: Any = None
    id: Any = None
    created_at: Any = None
    updated_at: Any = None
    deleted_at: Any = None
    built_in_version_configs: Any = None
    framework_index_map: Any = None


def _known_keys(location: tuple[Any, ...]) -> list[str]:
    """The keys GPUStack's shape accepts at ``location`` (for "unknown key" hints)."""
    if location == ():
        return [name for name in _GpustackBackend.model_fields if name not in _IGNORED_KEYS]
    if location == ("modelyard",):
        return list(_BackendExtension.model_fields)
    if len(location) == 2 and location[0] == "version_configs":
        return [name for name in _VersionConfig.model_fields if name not in _IGNORED_KEYS]
    return []


def _infer_served_model_name(command_text: str) -> str:
    return "model_name" if _MODEL_NAME_PLACEHOLDER.search(command_text) else "model_path"


def _extension_defaults(command_text: str, health_check_path: str | None) -> dict[str, Any]:
    """What a version gets when its ``modelyard`` mapping leaves a field out (import and export agree)."""
    return {
        "health_path": health_check_path or GPUSTACK_DEFAULT_HEALTH_PATH,
        "metrics_path": None,
        "reasoning_field": "reasoning_content",
        "served_model_name": _infer_served_model_name(command_text),
        "stop_signal_target": "group",
        "stop_grace_seconds": 30.0,
        "cpu_parameters": [],
        "cpu_threads_env": [],
        "install_hint": "",
        "description": "",
        "api_paths": list(DEFAULT_API_PATHS),
        "multi_node": None,
        "api_key_variable": None,
        "pull_policy": None,
        "registry_credential": None,
    }


def _split_program(command_text: str) -> tuple[str, str]:
    """Split off the program: ``"vllm serve {{model_path}}"`` -> ``("vllm", "serve {{model_path}}")``.

    The arguments keep their text as written; the program may be quoted (``'/opt/my server/run'``).
    """
    stream = io.StringIO(command_text)
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    program = lexer.get_token() or ""
    return program, command_text[stream.tell() :].strip()


def _version_from_config(
    document: YamlDocument, backend: _GpustackBackend, key: str, config: _VersionConfig
) -> BackendVersion:
    path: list[Any] = ["version_configs", key]
    entrypoint_text = (config.entrypoint or backend.default_entrypoint or "").strip()
    run_command = (config.run_command or backend.default_run_command or "").strip()
    command_text = " ".join(part for part in (entrypoint_text, run_command) if part)
    for field, text in (("entrypoint", entrypoint_text), ("run_command", run_command)):
        try:
            shlex.split(text)
        except ValueError as error:
            field_path = [*path, field] if getattr(config, field) else path
            raise document.error(
                field_path, f"{field} cannot be split with shell quoting rules ({error})"
            ) from error
    if config.custom_framework not in _FRAMEWORK_GPU:
        raise document.error(
            [*path, "custom_framework"],
            f"custom_framework {config.custom_framework!r} is not supported",
            hint="modelyard runs engines on NVIDIA GPUs ('cuda') or on CPU ('cpu')",
        )
    fields: dict[str, Any] = {
        "version": key,
        "env": {**(backend.default_env or {}), **(config.env or {})},
        "supports_gpu": _FRAMEWORK_GPU[config.custom_framework],
        **_extension_defaults(command_text, backend.health_check_path),
    }
    extension = config.modelyard or {}
    for name in extension:
        if name not in VERSION_EXTENSION_KEYS:
            raise document.error(
                [*path, "modelyard", name, "[key]"],
                f"unknown key {name!r} in the version's modelyard mapping",
                hint=f"known keys: {', '.join(VERSION_EXTENSION_KEYS)}",
            )
    fields.update(extension)
    if config.image_name:
        fields.update(
            image=config.image_name, entrypoint=shlex.split(entrypoint_text), run_command=run_command
        )
    elif command_text:
        executable, arguments = _split_program(command_text)
        fields.update(executable=executable, run_command=arguments)
    else:
        raise document.error(
            path,
            f"version {key!r} has neither image_name nor a command",
            hint="give run_command starting with the program, e.g. "
            "'my-server --model {{model_path}} --port {{port}}', or an image_name",
        )
    try:
        return BackendVersion.model_validate(fields)
    except ValidationError as error:
        problem = error.errors()[0]
        field = str(problem["loc"][0]) if problem["loc"] else ""
        if field in extension:
            where: list[Any] = [*path, "modelyard", field]
        elif field in ("run_command", "env", "entrypoint") and getattr(config, field):
            where = [*path, field]
        else:
            where = path
        raise document.error(
            where, f"version {key!r}: {problem['msg'].removeprefix('Value error, ')}"
        ) from error


def parse_gpustack_yaml(text: str) -> BackendSpec:
    """Read a backend from GPUStack's YAML shape; ``InvalidYaml`` naming the line on any problem."""
    document = YamlDocument.parse(text, what="backend YAML")
    try:
        backend = _GpustackBackend.model_validate(document.data)
    except ValidationError as error:
        raise document.validation_error(error, known_keys=_known_keys) from error
    versions = {
        key: _version_from_config(document, backend, key, config)
        for key, config in backend.version_configs.items()
    }
    for index, parameter in enumerate(backend.default_backend_param or []):
        try:
            split_backend_parameters(parameter)
        except InvalidInput as error:
            raise document.error(["default_backend_param", index], error.message, hint=error.hint) from error
    if backend.default_version is not None and backend.default_version not in versions:
        raise document.error(
            ["default_version"],
            f"default_version {backend.default_version!r} is not one of the versions",
            hint=f"use one of: {', '.join(versions)}",
        )
    fields: dict[str, Any] = {
        "name": backend.backend_name,
        "family": (backend.modelyard or _BackendExtension()).family,
        "description": backend.description or "",
        "builtin": False,
        "default_version": backend.default_version or "",
        "versions": versions,
        "default_backend_parameters": backend.default_backend_param or [],
    }
    if not backend.default_version:
        partial = BackendSpec.model_construct(**fields)
        fields["default_version"] = known_versions(partial)[-1]
    try:
        return BackendSpec.model_validate(fields)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ["backend_name"] if problem["loc"] and problem["loc"][0] == "name" else []
        raise document.error(where, problem["msg"].removeprefix("Value error, ")) from error


def _version_config(version: BackendVersion, health_check_path: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if version.image:
        config["image_name"] = version.image
        if version.entrypoint:
            config["entrypoint"] = shlex.join(version.entrypoint)
        if version.run_command:
            config["run_command"] = version.run_command
        command_text = " ".join(part for part in (config.get("entrypoint", ""), version.run_command) if part)
    else:
        assert version.executable is not None
        command_text = " ".join(
            part for part in (shlex.quote(version.executable), version.run_command) if part
        )
        config["run_command"] = command_text
    config["custom_framework"] = "cuda" if version.supports_gpu else "cpu"
    if version.env:
        config["env"] = dict(version.env)
    defaults = _extension_defaults(command_text, health_check_path)
    extension = {
        name: getattr(version, name)
        for name in VERSION_EXTENSION_KEYS
        if getattr(version, name) != defaults[name]
    }
    if version.multi_node is not None:
        extension["multi_node"] = version.multi_node.model_dump()
    if extension:
        config["modelyard"] = extension
    return config


def to_gpustack_yaml(spec: BackendSpec) -> str:
    """Write ``spec`` in GPUStack's shape; ``parse_gpustack_yaml`` reads it back to the same spec."""
    health_check_path = spec.versions[spec.default_version].health_path
    document: dict[str, Any] = {"backend_name": spec.name}
    if spec.description:
        document["description"] = spec.description
    document["default_version"] = spec.default_version
    document["health_check_path"] = health_check_path
    if spec.default_backend_parameters:
        document["default_backend_param"] = list(spec.default_backend_parameters)
    if spec.family != "custom":
        document["modelyard"] = {"family": spec.family}
    document["version_configs"] = {
        key: _version_config(version, health_check_path) for key, version in spec.versions.items()
    }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=1000)


def gpustack_problems(text: str) -> list[InvalidYaml]:
    """Every problem of a GPUStack backend YAML, not only the first (empty when it would import).

    A syntax error stops the reading (one problem). Otherwise every shape problem pydantic finds
    is listed; when the shape is right, each version, each default parameter, the default version
    and the backend as a whole are checked on their own, so one bad version hides no other.
    """
    try:
        document = YamlDocument.parse(text, what="backend YAML")
    except InvalidYaml as error:
        return [error]
    try:
        backend = _GpustackBackend.model_validate(document.data)
    except ValidationError as error:
        return _by_line(document.validation_errors(error, known_keys=_known_keys))
    problems: list[InvalidYaml] = []
    for key, config in backend.version_configs.items():
        try:
            _version_from_config(document, backend, key, config)
        except InvalidYaml as error:
            problems.append(error)
    for index, parameter in enumerate(backend.default_backend_param or []):
        try:
            split_backend_parameters(parameter)
        except InvalidInput as error:
            problems.append(document.error(["default_backend_param", index], error.message, hint=error.hint))
    if problems:
        return _by_line(problems)
    try:
        parse_gpustack_yaml(text)
    except InvalidYaml as error:
        return [error]
    return []


def _by_line(problems: list[InvalidYaml]) -> list[InvalidYaml]:
    return sorted(problems, key=lambda problem: (problem.line or 0, problem.column or 0))


def problem_to_json(error: InvalidYaml) -> dict[str, Any]:
    """One problem for an editor: its position, and its message without that position (the
    editor shows "line L, column C" from the fields; the message would say it again)."""
    message = error.message_without_position if error.line is not None else None
    return {
        "line": error.line,
        "column": error.column,
        "message": message or error.message,
        "hint": error.hint,
    }
