"""A backend is an engine family (vLLM, SGLang, transformers, a custom server) with versions.

This file is the contract between the catalog (built-in YAML, user YAML in GPUStack's shape)
and the code that launches engines (``modelyard.control``) and checks their flags
(``modelyard.doctor``). A ``BackendVersion`` says everything needed to start one engine
process and to know when it is ready:

- how to launch: ``executable`` (a program on PATH or next to the running Python) *or*
  ``image`` + ``entrypoint`` (a container);
- ``run_command``: the argument template, with ``{{model_path}}``, ``{{port}}``,
  ``{{worker_ip}}``, ``{{model_name}}``, ``{{gpu_ids}}`` (comma-separated), ``{{gpu_count}}``;
  rendered into an argv list (``modelyard.backends.render``), never a shell string;
- ``env``: default environment, KEY -> VALUE, kept apart from the arguments;
- ``health_path`` / ``metrics_path``; ``reasoning_field``;
- ``api_paths``: the ``/v1`` routes the engine serves, which the gateway passes through (the
  others get a 404 naming the engine);
- ``served_model_name``: which template value the engine answers to in ``"model"``;
- ``cpu_parameters``: arguments added when an instance gets no GPU (``--device cpu``);
- ``cpu_threads_env``: variables set to the engine's share of the host's cores when an instance
  gets no GPU (``OMP_NUM_THREADS`` for torch), unless the deployment or the server sets them;
- ``install_hint``: how to install the program when it is missing;
- ``pull_policy`` and ``registry_credential`` (image versions only): when the image is pulled
  before a container starts (``never``, ``if-missing``, ``always``; unset: ``if-missing`` for an
  image that names a registry host such as ``registry.example.com/vllm:0.25``, ``never`` for one
  that does not) and the stored registry credential the pull presents
  (``runtimes/image_pull.py``, ``services/registry_credentials.py``).

Placeholders may also name a variable of the merged environment (``{{MY_VAR}}``), as in GPUStack.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from modelyard.backends.arguments import ENV_NAME_PATTERN

ReasoningField = Literal["reasoning", "reasoning_content"]
# External API (backend YAML, REST, CLI): when an image is pulled before its container starts.
PullPolicy = Literal["never", "if-missing", "always"]
PULL_POLICIES: tuple[PullPolicy, ...] = ("never", "if-missing", "always")
# A stored registry credential's name (``registry_credential`` of a version refers to one).
CREDENTIAL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
EngineFamily = Literal["vllm", "sglang", "transformers", "custom"]

# Backend names appear in URLs and on the command line; versions in YAML keys and pip pins.
BACKEND_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
API_PATH_PATTERN = re.compile(r"^/v1(/[a-z0-9_]+)+$")

# The routes assumed when a backend version lists none (every OpenAI-compatible server has these).
DEFAULT_API_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


class MultiNodeFlags(BaseModel):
    """How the engine runs one replica over several nodes (a gang; only rank 0 serves HTTP).

    Templates with ``{{nnodes}}``, ``{{node_rank}}``, ``{{master_addr}}`` and ``{{master_port}}``
    (rank 0's node and a free port there), appended to every rank's arguments; ``worker_ranks``
    is added for ranks above 0 (vLLM's ``--headless``)."""

    model_config = ConfigDict(extra="forbid")

    all_ranks: str
    worker_ranks: str = ""


class BackendVersion(BaseModel):
    """One launchable version of an engine."""

    model_config = ConfigDict(extra="forbid")

    version: str
    # Launch by program...
    executable: str | None = None
    # ...or by container image (with an optional entrypoint override).
    image: str | None = None
    entrypoint: list[str] = Field(default_factory=list)
    run_command: str
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"
    reasoning_field: ReasoningField = "reasoning_content"
    # The /v1 routes the engine answers (POST), passed through by the gateway; a request for
    # another one gets a 404 naming the engine. Read from the engines' own route tables.
    api_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_API_PATHS))
    # The "model" value the engine accepts: the deployment name (engines started with
    # --served-model-name) or the model path (transformers serve pins the positional path).
    served_model_name: Literal["model_name", "model_path"] = "model_name"
    # True when the engine can use GPUs; False for CPU-only servers.
    supports_gpu: bool = True
    # Where stop signals go first: the whole process group (vLLM) or the launcher (SGLang).
    stop_signal_target: Literal["group", "launcher"] = "group"
    # Seconds to wait after SIGTERM before SIGKILL of what is left of the process group.
    stop_grace_seconds: float = Field(default=30.0, ge=0)
    # The environment variable the engine reads its own API key from (vLLM: VLLM_API_KEY). A
    # deployment's `--api-key VALUE` is passed there instead of on the command line, which any
    # local user can read (backends/key_variable.py). None: the flag stays where it is.
    api_key_variable: str | None = None
    description: str = ""
    # Arguments the renderer appends when the instance has no GPU (e.g. ["--device", "cpu"]),
    # unless the deployment's own parameters already give that flag.
    cpu_parameters: list[str] = Field(default_factory=list)
    # Variables set to the engine's share of the host's usable cores when the instance has no
    # GPU (``control/cpu_threads.py``), unless the deployment's env or the server's sets them.
    cpu_threads_env: list[str] = Field(default_factory=list)
    # What to tell a user whose machine lacks ``executable`` (e.g. "pip install vllm==0.25.0").
    install_hint: str = ""
    # The engine's own multi-node flags (None: a replica runs on one node only).
    multi_node: MultiNodeFlags | None = None
    # When the image is pulled before a container starts (None: ``default_pull_policy(image)``).
    pull_policy: PullPolicy | None = None
    # The name of the stored registry credential the pull presents (None: an anonymous pull).
    registry_credential: str | None = None

    @field_validator("version")
    @classmethod
    def _version_is_a_word(cls, version: str) -> str:
        if not VERSION_PATTERN.match(version):
            raise ValueError(
                f"version {version!r} is not valid: use letters, digits and . _ + - (e.g. '0.25.0', 'v1')"
            )
        return version

    @field_validator("run_command")
    @classmethod
    def _run_command_splits(cls, run_command: str) -> str:
        try:
            shlex.split(run_command)
        except ValueError as error:
            raise ValueError(
                f"run_command cannot be split with shell quoting rules ({error}): {run_command!r}"
            ) from error
        return run_command

    @field_validator("health_path", "metrics_path")
    @classmethod
    def _path_is_absolute(cls, path: str | None) -> str | None:
        if path is not None and not path.startswith("/"):
            raise ValueError(f"{path!r} must start with '/' (e.g. '/health')")
        return path

    @field_validator("api_paths")
    @classmethod
    def _api_paths_are_v1_routes(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not API_PATH_PATTERN.match(path):
                raise ValueError(
                    f"api path {path!r} is not a /v1 route: use paths such as '/v1/chat/completions'"
                )
        return paths

    @field_validator("env")
    @classmethod
    def _env_names_are_valid(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME_PATTERN.match(name):
                raise ValueError(
                    f"env name {name!r} is not valid: use letters, digits and '_', not starting with a digit"
                )
        return env

    @field_validator("cpu_threads_env")
    @classmethod
    def _thread_variables_are_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not ENV_NAME_PATTERN.match(name):
                raise ValueError(
                    f"cpu_threads_env name {name!r} is not valid: use letters, digits and '_', not "
                    "starting with a digit (e.g. OMP_NUM_THREADS)"
                )
        return names

    @field_validator("pull_policy", mode="before")
    @classmethod
    def _pull_policy_is_known(cls, policy: object) -> object:
        if policy is not None and policy not in PULL_POLICIES:
            raise ValueError(
                f"pull_policy {policy!r} is not one of {', '.join(PULL_POLICIES)} (never: use the image "
                "on the host as it is; if-missing: pull it when the host lacks it; always: pull before "
                "every start)"
            )
        return policy

    @field_validator("registry_credential")
    @classmethod
    def _credential_is_a_name(cls, name: str | None) -> str | None:
        if name is not None and not CREDENTIAL_NAME_PATTERN.match(name):
            raise ValueError(
                f"registry_credential {name!r} is not a credential name: use letters, digits and "
                "- _ . (at most 64 characters), as given to `modelyard backends credentials add`"
            )
        return name

    @model_validator(mode="after")
    def _one_launch_method(self) -> BackendVersion:
        if not self.executable and not self.image:
            raise ValueError(f"version {self.version!r}: give either 'executable' or 'image' to launch it")
        if self.executable and self.image:
            raise ValueError(f"version {self.version!r}: give 'executable' or 'image', not both")
        if self.entrypoint and not self.image:
            raise ValueError(
                f"version {self.version!r}: 'entrypoint' overrides a container image's; it needs 'image'"
            )
        for name in ("pull_policy", "registry_credential"):
            if getattr(self, name) is not None and not self.image:
                raise ValueError(
                    f"version {self.version!r}: {name!r} is about pulling a container image; this "
                    f"version runs the program {self.executable!r}: remove {name!r}, or give an image"
                )
        if self.registry_credential is not None and self.pull_policy == "never":
            raise ValueError(
                f"version {self.version!r}: registry_credential {self.registry_credential!r} is only "
                "presented to pull, and pull_policy 'never' never pulls: use 'if-missing' or 'always', "
                "or remove the credential"
            )
        return self

    @property
    def effective_pull_policy(self) -> PullPolicy:
        """``pull_policy``, or its default for this version's image."""
        if self.pull_policy is not None:
            return self.pull_policy
        return default_pull_policy(self.image or "")

    @property
    def runs_in_container(self) -> bool:
        return self.image is not None


class BackendSpec(BaseModel):
    """An engine family and its versions. ``default_version`` is used when a deployment names none."""

    model_config = ConfigDict(extra="forbid")

    name: str
    family: EngineFamily = "custom"
    description: str = ""
    builtin: bool = False
    default_version: str
    versions: dict[str, BackendVersion]
    # Parameters a new deployment of this backend starts with (GPUStack's default_backend_param).
    default_backend_parameters: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name_is_a_word(cls, name: str) -> str:
        if not BACKEND_NAME_PATTERN.match(name):
            raise ValueError(
                f"backend name {name!r} is not valid: use letters, digits and - _ . "
                "(starting with a letter or digit, at most 128 characters)"
            )
        return name

    @model_validator(mode="after")
    def _default_version_exists(self) -> BackendSpec:
        if self.default_version not in self.versions:
            known = ", ".join(sorted(self.versions)) or "none"
            raise ValueError(f"default_version {self.default_version!r} is not one of the versions ({known})")
        for key, version in self.versions.items():
            if key != version.version:
                raise ValueError(f"version key {key!r} differs from its 'version' field {version.version!r}")
        return self


def image_registry_host(image: str) -> str | None:
    """The registry host an image reference names (``127.0.0.1:5000/tiny:1`` -> ``127.0.0.1:5000``),
    or None for a name without one (``vllm/vllm-openai:v0.25.0``, ``tiny:1``: Docker Hub or this
    host). Docker's own rule: the first path segment is a host when it has a ``.`` or a ``:`` or
    is ``localhost``."""
    first, slash, _ = image.partition("/")
    if not slash:
        return None
    if "." in first or ":" in first or first == "localhost":
        return first
    return None


def default_pull_policy(image: str) -> PullPolicy:
    """``if-missing`` for an image of a named registry, ``never`` otherwise (a name without a
    registry host is used as this host has it: no surprise pull from Docker Hub)."""
    return "if-missing" if image_registry_host(image) is not None else "never"
