"""A file the hub gives no hash for is checked by its size only: the model is ``unverified``, not
``valid``; the task says what was checked; ``models`` shows it; a deploy warns and goes ahead.

The hub doubles' ``hide_hash`` fault plays a mirror whose listing has no hash and whose answers
have no ETag (Hugging Face), and a ModelScope listing without ``Sha256``; ``corrupt`` flips a byte
of the file on its way, which a hash would have caught."""

from __future__ import annotations

import json
from pathlib import Path

from modelyard.testing.hub_doubles import HuggingFaceHubDouble, ModelScopeDouble, RepositoryDouble

from .conftest import REPO_ID, SHARD_1, StartServer


def _counts(repository: RepositoryDouble) -> tuple[int, int]:
    """Files the hub gives a SHA-256 for (LFS) and a git blob id for (small files in git)."""
    lfs = sum(1 for file in repository.files.values() if file.lfs)
    return lfs, len(repository.files) - lfs


def test_a_clean_pull_says_how_every_file_was_checked_and_is_valid(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, repository: RepositoryDouble
) -> None:
    server = start_server()
    result = server.cli("models", "pull", f"hf://{REPO_ID}")
    assert result.exit_code == 0, result.output
    lfs, small = _counts(repository)
    assert f"{lfs} files checked by SHA-256, {small} by git blob id" in result.stderr
    assert "not checked" not in result.stderr
    model = server.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "valid"
    assert model["verification"]["verified"] is True
    assert (model["verification"]["sha256_files"], model["verification"]["git_blob_id_files"]) == (lfs, small)
    checks = {entry["path"]: entry["check"] for entry in model["details"]["manifest"]["files"]}
    assert checks[SHARD_1] == "sha256" and checks["config.json"] == "git-blob-id"


def test_a_flipped_byte_in_a_file_a_mirror_gives_no_hash_for_makes_the_model_unverified(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, repository: RepositoryDouble
) -> None:
    server = start_server()
    hf_hub.faults.hide_hash(SHARD_1)
    hf_hub.faults.corrupt(SHARD_1, times=None)
    result = server.cli("models", "pull", f"hf://{REPO_ID}")
    assert result.exit_code == 0, result.output
    lfs, small = _counts(repository)
    assert (
        f"{lfs - 1} files checked by SHA-256, {small} by git blob id, 1 not checked: "
        f"no hash given by the hub, only the size ({SHARD_1}); the model is unverified"
    ) in result.stderr
    # The flipped byte is on disk: only a hash would have seen it.
    model = server.api("GET", "/models/tiny-qwen3").json()
    on_disk = (Path(model["path"]) / SHARD_1).read_bytes()
    assert on_disk != repository.files[SHARD_1].content and len(on_disk) == repository.files[SHARD_1].size
    assert model["state"] == "unverified", model
    assert model["verification"]["unverified_files"] == [SHARD_1]
    assert SHARD_1 in model["reasons"][0] and "not checked by any hash" in model["reasons"][0]
    checks = {entry["path"]: entry["check"] for entry in model["details"]["manifest"]["files"]}
    assert checks[SHARD_1] == "size"
    listed = server.cli("models", "list")
    assert "unverified" in listed.stdout
    shown = server.cli("models", "show", "tiny-qwen3")
    assert "unverified" in shown.stdout and "1 not checked: no hash given by the hub" in shown.stdout

    deployed = server.cli("deploy", "tiny-qwen3", "--backend", "transformers", "--no-wait")
    assert deployed.exit_code == 0, deployed.output
    assert "model.unverified-files" in deployed.stderr and SHARD_1 in deployed.stderr
    deployment = server.api("GET", "/deployments/tiny-qwen3").json()
    warnings = [item for item in deployment["warnings"] if item["check_id"] == "model.unverified-files"]
    assert len(warnings) == 1 and warnings[0]["details"]["unverified_files"] == [SHARD_1]
    assert warnings[0]["severity"] == "warning"


def test_a_modelscope_listing_without_sha256_makes_the_model_unverified(
    start_server: StartServer, modelscope_hub: ModelScopeDouble, repository: RepositoryDouble
) -> None:
    server = start_server()
    modelscope_hub.faults.hide_hash(SHARD_1)
    modelscope_hub.faults.corrupt(SHARD_1, times=None)
    result = server.cli("models", "pull", f"ms://{REPO_ID}", "--json")
    assert result.exit_code == 0, result.output
    task = json.loads(result.stdout)
    assert task["state"] == "completed"
    assert (
        f"{len(repository.files) - 1} files checked by SHA-256, 1 not checked: no hash given by the hub, "
        f"only the size ({SHARD_1}); the model is unverified"
    ) in task["reason"]
    model = server.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "unverified" and model["verification"]["unverified_files"] == [SHARD_1]
    answer = server.api("POST", "/deployments", json={"model": "tiny-qwen3", "backend": "transformers"})
    assert answer.status_code == 201, answer.text
    assert [warning["check_id"] for warning in answer.json()["warnings"]].count("model.unverified-files") == 1


def test_an_unverified_model_stays_unverified_through_a_bundle(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, tmp_path: Path
) -> None:
    source = start_server("source")
    hf_hub.faults.hide_hash("config.json")
    assert source.cli("models", "pull", f"hf://{REPO_ID}").exit_code == 0
    archive = tmp_path / "tiny.modelyard.tar"
    exported = source.cli("models", "export", "tiny-qwen3", str(archive))
    assert exported.exit_code == 0, exported.output
    target = start_server("target")
    imported = target.cli("models", "import", str(archive), "--to", str(tmp_path / "imported"))
    assert imported.exit_code == 0, imported.output
    assert "1 of them had no hash from the hub when pulled: the model is unverified" in imported.stderr
    model = target.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "unverified" and model["verification"]["unverified_files"] == ["config.json"]
