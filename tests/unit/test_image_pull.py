"""What a pull's progress says, read from dockerd's own messages, and the names a pull goes by.

The messages are those dockerd 20.10 sent for real pulls from the loopback registry (a new layer
downloaded, a layer already present, an image already up to date); the pulls themselves run
against a real registry in ``tests/runtimes/test_image_registry.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from modelyard.backends.spec import default_pull_policy, image_registry_host
from modelyard.errors import ImagePullFailed
from modelyard.runtimes.image_pull import (
    DockerDaemon,
    PullProgress,
    RegistryAuth,
    credential_server,
    registry_matches,
    split_reference,
)

NEW_LAYER: list[dict[str, Any]] = [
    {"status": "Pulling from try/tiny", "id": "1"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "94fd0d5b8b9b"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "0a1b2c3d4e5f"},
    {
        "status": "Downloading",
        "progressDetail": {"current": 1_048_576, "total": 4_194_304},
        "id": "94fd0d5b8b9b",
    },
]
REST_OF_IT: list[dict[str, Any]] = [
    {
        "status": "Downloading",
        "progressDetail": {"current": 4_194_304, "total": 4_194_304},
        "id": "94fd0d5b8b9b",
    },
    {"status": "Verifying Checksum", "progressDetail": {}, "id": "94fd0d5b8b9b"},
    {"status": "Download complete", "progressDetail": {}, "id": "94fd0d5b8b9b"},
    {"status": "Extracting", "progressDetail": {"current": 410, "total": 4_194_304}, "id": "94fd0d5b8b9b"},
    {"status": "Pull complete", "progressDetail": {}, "id": "94fd0d5b8b9b"},
    {"status": "Already exists", "progressDetail": {}, "id": "0a1b2c3d4e5f"},
    {"status": "Digest: sha256:7aba2f31136a959ccbb454822ccd3e3565e08ed3ae4d4b51c8de5f84d7f621a7"},
    {"status": "Status: Downloaded newer image for 127.0.0.1:5055/try/tiny:1"},
]


def progress_of(messages: list[dict[str, Any]]) -> PullProgress:
    progress = PullProgress("127.0.0.1:5055/try/tiny:1")
    for message in messages:
        progress.feed(message)
    return progress


def test_half_way_the_progress_counts_layers_and_the_bytes_so_far() -> None:
    progress = progress_of(NEW_LAYER)
    assert (progress.layers_done, progress.layers_total) == (0, 2)
    assert progress.downloaded_bytes == 1_048_576
    assert progress.total_bytes is None  # one layer has not said its size yet
    assert progress.describe() == "0/2 layers, 1.0 MB"


def test_at_the_end_every_layer_is_done_and_the_digest_and_status_are_kept() -> None:
    progress = progress_of(NEW_LAYER + REST_OF_IT)
    assert (progress.layers_done, progress.layers_total, progress.layers_present) == (2, 2, 1)
    assert progress.downloaded_bytes == progress.total_bytes == 4_194_304
    assert progress.digest.startswith("sha256:7aba2f")
    assert progress.status == "Status: Downloaded newer image for 127.0.0.1:5055/try/tiny:1"
    assert progress.describe() == "2/2 layers, 4.2 MB of 4.2 MB"


def test_extracting_does_not_count_as_downloaded_bytes() -> None:
    progress = progress_of(NEW_LAYER + REST_OF_IT[:4])
    assert progress.downloaded_bytes == 4_194_304


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("127.0.0.1:5000/team/engine:1", ("127.0.0.1:5000/team/engine", "1")),
        ("registry.example.com/vllm", ("registry.example.com/vllm", "latest")),
        ("localhost:5000/vllm@sha256:abc", ("localhost:5000/vllm@sha256:abc", "")),
        ("vllm/vllm-openai:v0.25.0", ("vllm/vllm-openai", "v0.25.0")),
    ],
)
def test_a_reference_splits_into_the_name_and_tag_dockerd_is_asked_for(
    image: str, expected: tuple[str, str]
) -> None:
    assert split_reference(image) == expected


@pytest.mark.parametrize(
    ("image", "host", "policy"),
    [
        ("127.0.0.1:5000/team/engine:1", "127.0.0.1:5000", "if-missing"),
        ("registry.example.com/vllm:1", "registry.example.com", "if-missing"),
        ("localhost/vllm:1", "localhost", "if-missing"),
        ("vllm/vllm-openai:v0.25.0", None, "never"),
        ("modelyard-test-skeleton:2", None, "never"),
    ],
)
def test_the_default_policy_pulls_only_images_that_name_a_registry(
    image: str, host: str | None, policy: str
) -> None:
    assert image_registry_host(image) == host
    assert default_pull_policy(image) == policy


def test_a_docker_hub_image_takes_a_docker_hub_credential() -> None:
    assert credential_server("vllm/vllm-openai:v0.25.0") == "https://index.docker.io/v1/"
    assert registry_matches("docker.io", "vllm/vllm-openai:v0.25.0")
    assert not registry_matches("docker.io", "127.0.0.1:5000/vllm:1")
    assert registry_matches("127.0.0.1:5000", "127.0.0.1:5000/vllm:1")


def test_the_auth_header_is_what_docker_login_sends_and_the_password_is_in_no_repr() -> None:
    import base64

    auth = RegistryAuth(server_address="127.0.0.1:5000", username="ci", password="p@ss/word+1", name="lab")
    decoded = json.loads(base64.urlsafe_b64decode(auth.header()))
    assert decoded == {"username": "ci", "password": "p@ss/word+1", "serveraddress": "127.0.0.1:5000"}
    assert "p@ss" not in repr(auth) and "p@ss" not in str(auth)


def test_docker_host_is_read_in_the_clis_syntax() -> None:
    assert DockerDaemon.from_docker_host(None).describe() == "unix:///var/run/docker.sock"
    assert DockerDaemon.from_docker_host("unix:///run/other.sock").socket_path == "/run/other.sock"
    assert DockerDaemon.from_docker_host("tcp://10.0.0.2:2375").describe() == "http://10.0.0.2:2375"
    with pytest.raises(ImagePullFailed, match="neither unix://PATH nor tcp://HOST:PORT"):
        DockerDaemon.from_docker_host("ssh://somewhere")
