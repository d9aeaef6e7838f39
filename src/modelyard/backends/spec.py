"""A backend is an engine family (vLLM, SGLang, transformers, a custom server) with versions.

This file is the contract between the catalog (built-in YAML, user YAML in GPUStack's shape)
and the code that launches engines (``modelyard.control``) and checks their flags
(``modelyard.doctor``). A ``BackendVersion`` says everything needed to start one engine
process and to know when it is ready:

- how to launch: ``executable`` (a program on PATH or next to the running Python) *or*
  ``image`` + ``entrypoint`` (a container);
- ``run_command``: the argument template, with ``{{model_path}}``, ``{{port}}``,
  ``{{worker_ip}}``, ``{{model_name}}``, ``{{gpu_ids}}``; rendered into an argv list, never a shell string;
- ``env``: default environment, KEY -> VALUE, kept apart from the arguments;
- ``health_path`` / ``metrics_path``; ``reasoning_field``;
- ``served_model_name``: which template value the engine answers to in ``"model"``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ReasoningField = Literal["reasoning", "reasoning_content"]
EngineFamily = Literal["vllm", "sglang", "transformers", "custom"]


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
    # The "model" value the engine accepts: the deployment name (engines started with
    # --served-model-name) or the model path (transformers serve pins the positional path).
    served_model_name: Literal["model_name", "model_path"] = "model_name"
    # True when the engine can use GPUs; False for CPU-only servers.
    supports_gpu: bool = True
    # Where stop signals go first: the whole process group (vLLM) or the launcher (SGLang).
    stop_signal_target: Literal["group", "launcher"] = "group"
    # Seconds to wait after SIGTERM before SIGKILL of what is left of the process group.
    stop_grace_seconds: float = 30.0
    description: str = ""

    @model_validator(mode="after")
    def _one_launch_method(self) -> BackendVersion:
        if not self.executable and not self.image:
            raise ValueError(f"version {self.version!r}: give either 'executable' or 'image' to launch it")
        if self.executable and self.image:
            raise ValueError(f"version {self.version!r}: give 'executable' or 'image', not both")
        return self

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

    @model_validator(mode="after")
    def _default_version_exists(self) -> BackendSpec:
        if self.default_version not in self.versions:
            known = ", ".join(sorted(self.versions)) or "none"
            raise ValueError(f"default_version {self.default_version!r} is not one of the versions ({known})")
        for key, version in self.versions.items():
            if key != version.version:
                raise ValueError(f"version key {key!r} differs from its 'version' field {version.version!r}")
        return self
