"""Turn a backend version and one instance's placement into the argv and environment to start it.

The template (``run_command``, and ``entrypoint`` for containers) is split with shell quoting
rules FIRST and the ``{{placeholders}}`` are filled inside each token AFTER, so a model path
with spaces stays one argument. The result is an argv list and an environment mapping; nothing
is ever run through a shell::

    launch = render_launch(
        catalog.resolve_version("vllm", "0.25.0"),
        model_path="/models/Qwen3-8B", port=8001, worker_ip="127.0.0.1", model_name="qwen3-8b",
        gpu_ids=[0, 1], backend_parameters=["--max-model-len", "8192"], env={},
    )
    launch.argv  # ['/venv/bin/vllm', 'serve', '/models/Qwen3-8B', '--host', '127.0.0.1', ...]
    launch.env   # {'VLLM_NO_USAGE_STATS': '1', 'CUDA_VISIBLE_DEVICES': '0,1'}

``LaunchCommand.env`` holds only what modelyard sets; the runtime starts the process with its
own environment updated by it. For container versions the command is the entrypoint and its
arguments inside the container; the Docker runtime wraps it in ``docker run``, passing the
variables by name (``-e KEY``) so that their values never appear in an argv.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from modelyard.backends.arguments import check_env_name
from modelyard.backends.key_variable import api_key_into_environment
from modelyard.backends.launch_limits import check_launchable
from modelyard.backends.spec import BackendVersion
from modelyard.errors import EngineStartFailed, InvalidInput

# The values every template may use; any other placeholder must name an environment variable.
PLATFORM_PLACEHOLDERS = ("model_path", "port", "worker_ip", "model_name", "gpu_ids", "gpu_count")
GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FLAG = re.compile(r"^--?[A-Za-z][A-Za-z0-9_.-]*")
_PYTHON_NAMES = ("python3", "python")


@dataclass(frozen=True)
class LaunchCommand:
    """What to start: ``program`` then ``arguments`` (no shell), with ``env`` laid over the
    runtime's environment. For a container version ``image`` is set and ``program`` is the
    entrypoint override (empty: the image's own); the runtime (``runtimes/docker.py``) turns
    it into a container."""

    program: list[str]
    arguments: list[str]
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None

    @property
    def in_container(self) -> bool:
        return self.image is not None

    @property
    def argv(self) -> list[str]:
        """The engine's own command line (inside the container for an image)."""
        return [*self.program, *self.arguments]

    @property
    def display(self) -> str:
        """The argv as one quoted line, for logs and ``modelyard ps``; never for execution."""
        return shlex.join(self.argv)


def flag_name(token: str) -> str | None:
    """The flag a token sets, with ``_`` read as ``-``: ``--max_model_len=8192`` -> ``--max-model-len``.

    Tokens that are not flags (values, positional arguments, negative numbers) give ``None``.
    """
    match = _FLAG.match(token)
    if match is None:
        return None
    return match.group(0).replace("_", "-")


def resolve_executable(name: str, *, install_hint: str = "", search_path: str | None = None) -> str:
    """Find the program ``name``: next to the running Python first, then on PATH.

    ``python3`` and ``python`` fall back to the running interpreter. A name with a ``/`` is
    used as given when it is an executable file. ``search_path`` stands for ``$PATH``.
    """
    if os.sep in name or (os.altsep and os.altsep in name):
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        raise EngineStartFailed(
            f"executable {name!r} does not exist or cannot be run",
            hint=install_hint or "check the path in the backend's run_command",
        )
    python_folder = str(Path(sys.executable).parent)
    found = shutil.which(name, path=python_folder) or shutil.which(
        name, path=os.environ.get("PATH", os.defpath) if search_path is None else search_path
    )
    if found:
        return found
    if name in _PYTHON_NAMES and sys.executable:
        return sys.executable
    to_do = (
        f"{install_hint} or put {name!r} on PATH" if install_hint else f"install it or put {name!r} on PATH"
    )
    raise EngineStartFailed(f"executable {name!r} not found next to {python_folder} or on PATH: {to_do}")


def _fill(token: str, values: Mapping[str, str], where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if not _IDENTIFIER.match(name):
            raise InvalidInput(
                f"{where}: placeholder {match.group(0)!r} is not a name", hint="write e.g. {{model_path}}"
            )
        if name not in values:
            raise InvalidInput(
                f"{where} uses the unknown placeholder {{{{{name}}}}}",
                hint=f"use one of {', '.join(PLATFORM_PLACEHOLDERS)}, or set {name} in the env of the "
                "backend version or the deployment",
            )
        return values[name]

    return _PLACEHOLDER.sub(replace, token)


def _render_template(text: str, values: Mapping[str, str], where: str) -> list[str]:
    try:
        tokens = shlex.split(text, posix=True)
    except ValueError as error:
        raise InvalidInput(f"{where} cannot be split ({error}): {text!r}") from error
    return [_fill(token, values, where) for token in tokens]


def _flags(arguments: list[str]) -> set[str]:
    return {name for name in map(flag_name, arguments) if name is not None}


def _check_parameters(template_arguments: list[str], backend_parameters: list[str]) -> None:
    template_flags = _flags(template_arguments)
    repeated = [
        parameter
        for parameter in backend_parameters
        if (name := flag_name(parameter)) and name in template_flags
    ]
    if repeated:
        names = ", ".join(sorted({flag_name(parameter) or parameter for parameter in repeated}))
        raise InvalidInput(
            f"backend parameters repeat {names}, which the platform sets from the deployment",
            hint="remove them from the backend parameters; modelyard chooses the port, host, model path "
            "and served name itself",
        )


def _merged_env(version: BackendVersion, env: Mapping[str, str], gpu_ids: list[int]) -> dict[str, str]:
    for name in env:
        check_env_name(name, "deployment env")
    if GPU_VARIABLE in env:
        raise InvalidInput(
            f"the deployment env sets {GPU_VARIABLE}, which the platform sets from the GPUs it assigns",
            hint="remove it from env; choose GPUs with the deployment's gpu_ids or gpus per replica",
        )
    merged = {**version.env, **env}
    merged[GPU_VARIABLE] = ",".join(str(gpu_id) for gpu_id in gpu_ids)
    return merged


def _prepare(
    version: BackendVersion,
    *,
    model_path: str,
    port: int,
    worker_ip: str,
    model_name: str,
    gpu_ids: list[int],
    backend_parameters: list[str],
    env: Mapping[str, str],
) -> tuple[list[str], list[str], dict[str, str]]:
    """Everything but finding programs: (entrypoint, arguments, env), or ``InvalidInput``."""
    if gpu_ids and not version.supports_gpu:
        raise InvalidInput(
            f"backend version {version.version} runs on CPU only but was given GPUs {gpu_ids}",
            hint="deploy it with no GPUs",
        )
    merged_env = _merged_env(version, env, gpu_ids)
    # The engine's own key by environment where it reads one: any local user can read an argv.
    backend_parameters, merged_env = api_key_into_environment(
        version.api_key_variable, backend_parameters, merged_env
    )
    values = {
        **{name: value for name, value in merged_env.items() if name != GPU_VARIABLE},
        "model_path": model_path,
        "port": str(port),
        "worker_ip": worker_ip,
        "model_name": model_name,
        "gpu_ids": merged_env[GPU_VARIABLE],
        "gpu_count": str(len(gpu_ids)),
    }
    entrypoint = [
        _fill(token, values, f"entrypoint of version {version.version}") for token in version.entrypoint
    ]
    template_arguments = _render_template(
        version.run_command, values, f"run_command of version {version.version}"
    )
    _check_parameters(template_arguments, backend_parameters)
    arguments = [*template_arguments, *backend_parameters]
    if (
        not gpu_ids
        and version.cpu_parameters
        and not (_flags(version.cpu_parameters) & _flags(backend_parameters))
    ):
        arguments += version.cpu_parameters
    check_launchable([*entrypoint, *arguments], merged_env)
    return entrypoint, arguments, merged_env


def check_launch(
    version: BackendVersion,
    *,
    backend_parameters: list[str],
    env: Mapping[str, str],
    gpu_count: int = 0,
    model_path: str = "/model",
) -> None:
    """Check a deployment's parameters and env against ``version`` before it is stored.

    Raises what ``render_launch`` would (unknown placeholder, a repeated platform flag, a bad env
    name, GPUs for a CPU-only version, control characters or an argument list the kernel would
    refuse) without looking for the program, which may be installed later.
    """
    _prepare(
        version,
        model_path=model_path,
        port=8000,
        worker_ip="127.0.0.1",
        model_name="model",
        gpu_ids=list(range(gpu_count)),
        backend_parameters=backend_parameters,
        env=env,
    )


def render_launch(
    version: BackendVersion,
    *,
    model_path: str,
    port: int,
    worker_ip: str,
    model_name: str,
    gpu_ids: list[int],
    backend_parameters: list[str],
    env: Mapping[str, str],
    search_path: str | None = None,
) -> LaunchCommand:
    """Render ``version`` for one instance.

    Raises ``InvalidInput`` for an unknown placeholder, a parameter that repeats a flag the
    template sets, GPUs given to a CPU-only version or a bad env name; ``EngineStartFailed``
    when the program cannot be found. ``search_path`` stands for ``$PATH``.
    """
    entrypoint, arguments, merged_env = _prepare(
        version,
        model_path=model_path,
        port=port,
        worker_ip=worker_ip,
        model_name=model_name,
        gpu_ids=gpu_ids,
        backend_parameters=backend_parameters,
        env=env,
    )
    if version.runs_in_container:
        return LaunchCommand(program=entrypoint, arguments=arguments, env=merged_env, image=version.image)
    assert version.executable is not None
    program = resolve_executable(
        version.executable, install_hint=version.install_hint, search_path=search_path
    )
    return LaunchCommand(program=[program], arguments=arguments, env=merged_env)
