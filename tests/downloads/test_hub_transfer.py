"""The hub library against the hub doubles: listing, resume, stalls, hash checks, retries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from modelyard.hub.download import PARTIAL_FOLDER, download_files, part_path
from modelyard.hub.files import RepoListing
from modelyard.hub.huggingface import HuggingFaceSource
from modelyard.hub.modelscope import ModelScopeSource
from modelyard.hub.reference import parse_model_reference
from modelyard.hub.source import HubSource
from modelyard.hub.transfer import StopSignal, TransferFailed
from modelyard.testing.hub_doubles import HuggingFaceHubDouble, ModelScopeDouble, RepositoryDouble

from .conftest import FAST_TRANSFER, REPO_ID, SHARD_1, SHARD_2


@dataclass
class RecordingObserver:
    """Keeps what a download reported (the observer a test passes in, as the manager passes its own)."""

    failures: list[tuple[str, str]] = field(default_factory=list)
    restarts: list[tuple[str, str]] = field(default_factory=list)
    resumed_from: dict[str, int] = field(default_factory=dict)
    verified: dict[str, str] = field(default_factory=dict)
    received: int = 0

    def file_started(self, path: str, bytes_on_disk: int) -> None:
        self.resumed_from[path] = bytes_on_disk

    def bytes_received(self, path: str, count: int) -> None:
        self.received += count

    def file_restarted(self, path: str, reason: str) -> None:
        self.restarts.append((path, reason))

    def attempt_failed(self, path: str, reason: str, retry_in_seconds: float) -> None:
        self.failures.append((path, reason))

    def file_verified(self, path: str, sha256: str) -> None:
        self.verified[path] = sha256


def _pull(
    source: HubSource, target: Path, scheme: str = "hf"
) -> tuple[RepoListing, dict[str, str], RecordingObserver]:
    listing = source.list_files(parse_model_reference(f"{scheme}://{REPO_ID}"))
    observer = RecordingObserver()
    hashes = download_files(source, listing, listing.files, target, FAST_TRANSFER, observer, StopSignal())
    return listing, hashes, observer


def _same_files(tiny_model: Path, target: Path) -> None:
    expected = sorted(
        path.relative_to(tiny_model).as_posix() for path in tiny_model.rglob("*") if path.is_file()
    )
    found = sorted(path.relative_to(target).as_posix() for path in target.rglob("*") if path.is_file())
    assert found == expected
    for relative in expected:
        assert (target / relative).read_bytes() == (tiny_model / relative).read_bytes(), relative
    assert not (target / PARTIAL_FOLDER).exists()


def test_clean_pull_from_hugging_face_checks_every_file_against_the_hub(
    hf_hub: HuggingFaceHubDouble, repository: RepositoryDouble, tiny_model: Path, tmp_path: Path
) -> None:
    listing, hashes, observer = _pull(HuggingFaceSource(endpoint=hf_hub.endpoint), tmp_path / "model")
    _same_files(tiny_model, tmp_path / "model")
    assert listing.commit == repository.commit
    by_path = {file.path: file for file in listing.files}
    # LFS files carry the hub's SHA-256; small files kept in git carry their git blob id.
    assert by_path[SHARD_1].sha256 == repository.files[SHARD_1].sha256
    assert by_path["config.json"].sha256 is None and by_path["config.json"].git_blob_id
    assert hashes == {path: served.sha256 for path, served in repository.files.items()}
    info = [request for request in hf_hub.log.requests if request.path.startswith("/api/models/")]
    assert len(info) == 1 and "blobs=true" in info[0].path
    # Every file was fetched once, from its first byte, at the resolved commit.
    downloads = hf_hub.log.downloads()
    assert sorted(request.file for request in downloads if request.file) == sorted(repository.files)
    assert all(request.range is None for request in downloads)
    assert observer.failures == [] and observer.restarts == []


def test_clean_pull_from_modelscope(
    modelscope_hub: ModelScopeDouble, repository: RepositoryDouble, tiny_model: Path, tmp_path: Path
) -> None:
    listing, hashes, _ = _pull(ModelScopeSource(endpoint=modelscope_hub.endpoint), tmp_path / "model", "ms")
    _same_files(tiny_model, tmp_path / "model")
    assert listing.revision == "master"
    assert all(file.sha256 for file in listing.files)
    assert hashes[SHARD_2] == repository.files[SHARD_2].sha256


def test_a_dropped_connection_resumes_with_a_range_request_not_from_zero(
    hf_hub: HuggingFaceHubDouble, repository: RepositoryDouble, tiny_model: Path, tmp_path: Path
) -> None:
    hf_hub.faults.drop_after(SHARD_1, 30_000)
    _, _, observer = _pull(HuggingFaceSource(endpoint=hf_hub.endpoint), tmp_path / "model")
    _same_files(tiny_model, tmp_path / "model")
    served = hf_hub.log.for_file(SHARD_1)
    assert [request.range for request in served] == [None, "bytes=30000-"]
    assert [request.status for request in served] == [200, 206]
    # Not a byte was sent twice: 30,000 before the drop, the rest after it.
    assert sum(request.bytes_sent for request in served) == repository.files[SHARD_1].size
    size = repository.files[SHARD_1].size
    assert observer.failures[0] == (
        SHARD_1,
        f"the connection dropped at byte 30000 of {size} (RemoteProtocolError)",
    )


def test_a_stalled_hub_is_retried_after_the_stall_timeout(
    hf_hub: HuggingFaceHubDouble, tiny_model: Path, tmp_path: Path
) -> None:
    hold = hf_hub.faults.hold_after(SHARD_2, 20_000)  # never released: the hub goes silent
    _, _, observer = _pull(HuggingFaceSource(endpoint=hf_hub.endpoint), tmp_path / "model")
    _same_files(tiny_model, tmp_path / "model")
    assert hold.reached.is_set()
    assert [request.range for request in hf_hub.log.for_file(SHARD_2)] == [None, "bytes=20000-"]
    assert (SHARD_2, "no bytes for 0.4 s") in observer.failures


def test_a_flipped_byte_is_detected_and_the_file_fetched_again(
    hf_hub: HuggingFaceHubDouble, tiny_model: Path, tmp_path: Path
) -> None:
    hf_hub.faults.corrupt(SHARD_1, times=1)
    _, _, observer = _pull(HuggingFaceSource(endpoint=hf_hub.endpoint), tmp_path / "model")
    _same_files(tiny_model, tmp_path / "model")
    # The bad copy was deleted and the file fetched again from its first byte.
    assert [request.range for request in hf_hub.log.for_file(SHARD_1)] == [None, None]
    assert len(observer.restarts) == 1
    path, reason = observer.restarts[0]
    assert path == SHARD_1 and reason.startswith("SHA-256 ") and "expected" in reason


def test_a_persistent_hash_mismatch_fails_naming_the_file(
    hf_hub: HuggingFaceHubDouble, tmp_path: Path
) -> None:
    hf_hub.faults.corrupt(SHARD_1, times=None)
    target = tmp_path / "model"
    with pytest.raises(TransferFailed) as failure:
        _pull(HuggingFaceSource(endpoint=hf_hub.endpoint), target)
    assert failure.value.path == SHARD_1
    assert "SHA-256" in failure.value.reason and "after 2 downloads" in failure.value.reason
    assert len(hf_hub.log.for_file(SHARD_1)) == 2
    assert not (target / SHARD_1).exists() and not part_path(target, SHARD_1).exists()


def test_a_busy_hub_is_retried_with_back_off(
    hf_hub: HuggingFaceHubDouble, tiny_model: Path, tmp_path: Path
) -> None:
    hf_hub.faults.fail_with("config.json", 503, times=2)
    _, _, observer = _pull(HuggingFaceSource(endpoint=hf_hub.endpoint), tmp_path / "model")
    _same_files(tiny_model, tmp_path / "model")
    assert [status for status in (request.status for request in hf_hub.log.for_file("config.json"))] == [
        503,
        503,
        200,
    ]
    assert [reason for path, reason in observer.failures if path == "config.json"] == [
        "the hub answered 503 Service Unavailable"
    ] * 2


def test_the_token_goes_to_the_hub_and_never_to_its_cdn(hf_hub: HuggingFaceHubDouble, tmp_path: Path) -> None:
    _pull(HuggingFaceSource(endpoint=hf_hub.endpoint, token="hf_test_token_not_real"), tmp_path / "model")
    hub_requests = [request for request in hf_hub.log.requests if request.server == "hub"]
    cdn_requests = [request for request in hf_hub.log.requests if request.server == "cdn"]
    assert cdn_requests and hub_requests
    assert all(
        request.headers.get("authorization") == "Bearer hf_test_token_not_real" for request in hub_requests
    )
    assert all("authorization" not in request.headers for request in cdn_requests)


def test_unknown_repository_and_revision_are_clear_errors(hf_hub: HuggingFaceHubDouble) -> None:
    from modelyard.errors import NotFound

    source = HuggingFaceSource(endpoint=hf_hub.endpoint)
    with pytest.raises(NotFound, match="no repository 'modelyard-test/nope'"):
        source.list_files(parse_model_reference("hf://modelyard-test/nope"))
    with pytest.raises(NotFound, match="no revision 'v9'"):
        source.list_files(parse_model_reference(f"hf://{REPO_ID}@v9"))
