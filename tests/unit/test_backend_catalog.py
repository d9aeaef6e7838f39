"""The built-in backend catalog and lookups by name and version."""

from __future__ import annotations

import importlib.metadata

import pytest

from modelyard.backends.catalog import BackendCatalog, known_versions, load_builtin_backends
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.errors import AlreadyExists, InvalidInput, NotFound


@pytest.fixture(scope="module")
def catalog() -> BackendCatalog:
    return BackendCatalog(builtin=load_builtin_backends())


def custom_backend(name: str) -> BackendSpec:
    version = BackendVersion(version="1.0", executable="my-server", run_command="--port {{port}}")
    return BackendSpec(name=name, default_version="1.0", versions={"1.0": version})


def test_builtin_catalog_has_the_three_engine_families(catalog: BackendCatalog) -> None:
    assert [spec.name for spec in catalog.all()] == ["sglang", "transformers", "vllm"]
    assert all(spec.builtin for spec in catalog.all())


def test_vllm_has_the_pinned_versions_and_a_newer_default(catalog: BackendCatalog) -> None:
    spec = catalog.get("vllm")
    assert {"0.19.1", "0.25.0"} <= set(spec.versions)
    assert known_versions(spec)[-1] == spec.default_version
    assert spec.default_version not in {"0.19.1", "0.25.0"}


def test_sglang_has_the_pinned_versions_and_a_newer_default(catalog: BackendCatalog) -> None:
    spec = catalog.get("sglang")
    assert {"0.5.10.post1", "0.5.17"} <= set(spec.versions)
    assert known_versions(spec)[-1] == spec.default_version
    assert spec.versions["0.5.17"].stop_signal_target == "launcher"


def test_transformers_version_is_the_installed_one(catalog: BackendCatalog) -> None:
    installed = importlib.metadata.version("transformers")
    assert list(catalog.get("transformers").versions) == [installed]
    assert catalog.resolve_version("transformers", None).version == installed


def test_reasoning_fields_follow_each_engine(catalog: BackendCatalog) -> None:
    assert catalog.resolve_version("vllm", "0.25.0").reasoning_field == "reasoning"
    assert catalog.resolve_version("sglang", None).reasoning_field == "reasoning_content"
    assert catalog.resolve_version("transformers", None).reasoning_field == "reasoning_content"


def test_transformers_answers_to_the_model_path_and_has_no_metrics(catalog: BackendCatalog) -> None:
    version = catalog.resolve_version("transformers", None)
    assert version.served_model_name == "model_path"
    assert version.metrics_path is None


def test_unknown_backend_lists_the_known_ones(catalog: BackendCatalog) -> None:
    with pytest.raises(NotFound, match=r"backend 'tgi' does not exist; known: sglang, transformers, vllm"):
        catalog.get("tgi")


def test_unknown_version_lists_the_known_versions_in_order(catalog: BackendCatalog) -> None:
    newest = catalog.get("vllm").default_version
    with pytest.raises(NotFound, match=rf"no version '0.9'; known: 0.19.1, 0.25.0, {newest}"):
        catalog.resolve_version("vllm", "0.9")


def test_names_are_found_whatever_their_case(catalog: BackendCatalog) -> None:
    assert catalog.get("vLLM").name == "vllm"


def test_custom_backend_is_listed_after_the_builtins() -> None:
    catalog = BackendCatalog(builtin=load_builtin_backends(), custom=[custom_backend("my-engine")])
    assert catalog.names() == ["sglang", "transformers", "vllm", "my-engine"]
    assert catalog.resolve_version("my-engine", None).executable == "my-server"


def test_custom_backend_cannot_shadow_a_builtin() -> None:
    with pytest.raises(AlreadyExists, match="shadow the built-in backend 'vllm'"):
        BackendCatalog(builtin=load_builtin_backends(), custom=[custom_backend("VLLM")])


def test_two_custom_backends_cannot_share_a_name() -> None:
    with pytest.raises(AlreadyExists, match="'mine' already exists"):
        BackendCatalog(builtin=[], custom=[custom_backend("mine"), custom_backend("mine")])


def test_custom_backend_marked_builtin_is_refused() -> None:
    spec = custom_backend("mine").model_copy(update={"builtin": True})
    with pytest.raises(InvalidInput, match="marked builtin"):
        BackendCatalog(builtin=[], custom=[spec])
