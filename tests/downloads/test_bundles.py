"""Offline bundles: export on one server, import on another data directory; tampering refused."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from modelyard.hub.bundle import BUNDLE_MANIFEST, BundleRejected, export_bundle, import_bundle
from modelyard.hub.manifest import build_manifest
from modelyard.testing.hub_doubles import HuggingFaceHubDouble

from .conftest import REPO_ID, SHARD_1, PullServer, StartServer


def _flip_byte_of_member(archive: Path, member: str, offset: int = 1000) -> None:
    with tarfile.open(archive) as tar:
        position = tar.getmember(member).offset_data + offset
    with archive.open("r+b") as handle:
        handle.seek(position)
        value = handle.read(1)[0]
        handle.seek(position)
        handle.write(bytes([value ^ 0x01]))


def _pulled(server: PullServer) -> None:
    result = server.cli("models", "pull", f"hf://{REPO_ID}")
    assert result.exit_code == 0, result.output


def test_export_then_import_on_a_second_data_directory(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, tiny_model: Path, tmp_path: Path
) -> None:
    first = start_server("first")
    _pulled(first)
    archive = tmp_path / "carry" / "tiny-qwen3.modelyard.tar"
    archive.parent.mkdir()
    exported = first.cli("models", "export", "tiny-qwen3", str(archive))
    assert exported.exit_code == 0, exported.output
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        document = tar.extractfile(BUNDLE_MANIFEST)
        assert document is not None
        manifest = json.loads(document.read())
    assert names[0] == BUNDLE_MANIFEST
    assert manifest["source"].startswith(f"hf://{REPO_ID}@")
    assert manifest["facts"]["architecture"] == "Qwen3ForCausalLM"
    assert sorted(names[1:]) == sorted(entry["path"] for entry in manifest["files"])

    second = start_server("second")
    imported = second.cli("models", "import", str(archive))
    assert imported.exit_code == 0, imported.output
    assert "every SHA-256 checked against the bundle" in imported.stderr
    model = second.api("GET", "/models/tiny-qwen3").json()
    assert (model["state"], model["source"], model["repo_id"]) == ("valid", "bundle", REPO_ID)
    assert model["path"] == str(second.data_dir / "models" / "tiny-qwen3")
    for entry in manifest["files"]:
        assert (Path(model["path"]) / entry["path"]).read_bytes() == (tiny_model / entry["path"]).read_bytes()
    assert second.api("POST", "/deployments", json={"model": "tiny-qwen3"}).status_code == 201


def test_a_tampered_archive_is_refused_naming_the_file(
    start_server: StartServer, hf_hub: HuggingFaceHubDouble, tmp_path: Path
) -> None:
    first = start_server("first")
    _pulled(first)
    archive = tmp_path / "tiny.modelyard.tar"
    assert first.cli("models", "export", "tiny-qwen3", str(archive)).exit_code == 0
    _flip_byte_of_member(archive, SHARD_1)

    second = start_server("second")
    target = tmp_path / "imported"
    result = second.cli("models", "import", str(archive), "--to", str(target))
    assert result.exit_code == 1
    assert f"{SHARD_1} has SHA-256" in result.stderr and "its manifest says" in result.stderr
    assert second.api("GET", "/models").json() == []
    assert not target.exists()


def test_a_local_model_is_hashed_for_its_bundle(
    start_server: StartServer, tiny_model: Path, tmp_path: Path
) -> None:
    server = start_server()
    assert server.cli("models", "add", str(tiny_model), "--name", "local").exit_code == 0
    archive = tmp_path / "local.modelyard.tar"
    result = server.cli("models", "export", "local", str(archive))
    assert result.exit_code == 0, result.output
    refused = server.cli("models", "export", "local", str(archive))
    assert refused.exit_code == 1 and "already exists" in refused.stderr
    manifest = build_manifest(tiny_model)
    target = tmp_path / "again"
    imported = import_bundle(archive, target)
    assert [file.to_json() for file in imported.files] == [file.to_json() for file in manifest.files]


def test_foreign_missing_and_truncated_members_are_refused(tiny_model: Path, tmp_path: Path) -> None:
    manifest = build_manifest(tiny_model)
    archive = tmp_path / "good.modelyard.tar"
    export_bundle(tiny_model, manifest, archive)

    foreign = tmp_path / "foreign.modelyard.tar"
    foreign.write_bytes(archive.read_bytes())
    with tarfile.open(foreign, "a") as tar:
        tar.add(tiny_model / "config.json", arcname="../escape.json")
    with pytest.raises(BundleRejected, match=re.escape("'../escape.json' is not in its manifest")):
        import_bundle(foreign, tmp_path / "out-foreign")
    assert not (tmp_path / "out-foreign").exists()

    truncated = tmp_path / "truncated.modelyard.tar"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(BundleRejected, match=r"damaged or truncated|missing from the archive"):
        import_bundle(truncated, tmp_path / "out-truncated")
    assert not (tmp_path / "out-truncated").exists()
