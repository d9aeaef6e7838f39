"""The backend spec refuses versions that could not be launched."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from modelyard.backends.spec import BackendSpec, BackendVersion


def test_version_needs_exactly_one_launch_method() -> None:
    with pytest.raises(ValidationError, match="give either 'executable' or 'image'"):
        BackendVersion(version="1", run_command="serve")
    with pytest.raises(ValidationError, match="not both"):
        BackendVersion(version="1", executable="vllm", image="vllm/vllm-openai", run_command="serve")


def test_entrypoint_without_image_is_refused() -> None:
    with pytest.raises(ValidationError, match="'entrypoint' overrides a container image's"):
        BackendVersion(version="1", executable="vllm", entrypoint=["vllm"], run_command="serve")


def test_run_command_that_cannot_be_split_is_refused() -> None:
    with pytest.raises(ValidationError, match="cannot be split"):
        BackendVersion(version="1", executable="srv", run_command="--name 'unclosed")


def test_health_path_must_be_absolute() -> None:
    with pytest.raises(ValidationError, match="must start with '/'"):
        BackendVersion(version="1", executable="srv", run_command="", health_path="health")


def test_backend_name_with_a_space_is_refused() -> None:
    version = BackendVersion(version="1", executable="srv", run_command="")
    with pytest.raises(ValidationError, match="backend name 'my engine' is not valid"):
        BackendSpec(name="my engine", default_version="1", versions={"1": version})


def test_default_version_must_exist() -> None:
    version = BackendVersion(version="1", executable="srv", run_command="")
    with pytest.raises(ValidationError, match=r"default_version '2' is not one of the versions \(1\)"):
        BackendSpec(name="engine", default_version="2", versions={"1": version})
