"""Backend images pulled from a real registry before their containers start, through ``modelyard
serve`` and a real Docker engine, as a user deploys them.

The registry is Debian's ``docker-registry`` with htpasswd auth on loopback
(``testing/local_registry.py``); its images are built here, pushed, and removed from dockerd, so
the first start must pull. The backend is GPUStack YAML whose versions name the registry's
images, a pull policy and a stored credential; the engine is the project's engine double, run on
this host's Python mounted into the image. In order, on one server: right credentials (pull, then
start, then chat); wrong credentials (the registry's answer, nothing stored lost, the other
deployment untouched, then fixed by storing the right password); a tag the registry lacks; policy
``never`` with an image the host lacks (no request reaches the registry); ``always`` pulling
before every start; and the password in no file, log, event, answer or command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from modelyard.testing.container_image import host_python_mounts, project_source_folder
from modelyard.testing.gated_proxy import GatedProxy
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.local_registry import REGISTRY_EXECUTABLE, LocalRegistry
from modelyard.testing.serve_process import ServeProcess, wait_until

pytestmark = pytest.mark.slow

RUNNING_SECONDS = 120.0
PASSWORD = f"registry-password-{uuid.uuid4().hex}"
WRONG_PASSWORD = f"wrong-password-{uuid.uuid4().hex}"
USERNAME = "modelyard-ci"
CREDENTIAL = "lab"
# Random bytes: the layer is about as big compressed, and the relay holds it after the first MiB.
PAYLOAD_BYTES = 4 * 2**20
HOLD_AFTER_BYTES = 2**20


@dataclass(frozen=True)
class Images:
    first: str  # pushed, then removed from dockerd
    second: str  # the same image under another tag
    missing_tag: str  # a tag the registry does not have
    absent: str  # a repository never pushed


def version_yaml(image: str, extension: str) -> str:
    """One entry of version_configs: the engine double in ``image``, on this host's Python."""
    return f"""\
    image_name: {image}
    entrypoint: python3 -m modelyard.bench.reference_server
    run_command: vllm serve {{{{model_path}}}} --host {{{{worker_ip}}}} --port {{{{port}}}}
      --served-model-name {{{{model_name}}}}
    custom_framework: cpu
    env:
      PYTHONPATH: {project_source_folder()}
      PATH: {Path(sys.executable).parent}:/usr/bin
    modelyard: {{{extension}}}
"""


def backend_yaml(images: Images) -> str:
    version = version_yaml
    credential = f"registry_credential: {CREDENTIAL}"
    return f"""\
backend_name: registry-engine
default_version: pull
health_check_path: /health
version_configs:
  pull:
{version(images.first, credential)}
  second:
{version(images.second, credential)}
  missing:
{version(images.missing_tag, credential)}
  never:
{version(images.absent, "pull_policy: never")}
  always:
{version(images.first, f"pull_policy: always, {credential}")}
"""


@dataclass
class RegistryServe:
    process: ServeProcess
    registry: LocalRegistry
    images: Images
    key: str
    # Every answer the tests read, searched for the password at the end.
    answers: list[str]
    # Images pulled into dockerd, removed at the end.
    images_to_remove: list[str]
    # How the server was started (to start it again after a SIGKILL).
    arguments: list[str]

    def api(self) -> httpx.Client:
        return self.process.api()

    def get(self, path: str) -> Any:
        with self.api() as client:
            response = client.get(f"/api/v1{path}")
        self.answers.append(response.text)
        return response.json()

    def deploy(self, name: str, version: str) -> None:
        body = {
            "model": "tiny",
            "name": name,
            "backend": "registry-engine",
            "backend_version": version,
            "skip_verification": True,
        }
        with self.api() as client:
            response = client.post("/api/v1/deployments", json=body)
        self.answers.append(response.text)
        assert response.status_code == 201, response.text

    def instance(self, name: str) -> dict[str, Any]:
        instances = self.get(f"/deployments/{name}").get("instances") or [{}]
        return dict(instances[0])

    def reasons(self, name: str) -> list[str]:
        return [event["reason"] for event in self.get(f"/deployments/{name}/events")]

    def store_credential(self, password: str, *, replace: bool) -> None:
        """Through the CLI, the password on stdin (as a user types it)."""
        arguments = ["backends", "credentials", "add", CREDENTIAL, "--registry", self.registry.host]
        arguments += ["--username", USERNAME, "--password-stdin", *(["--replace"] if replace else [])]
        result = cli(self.process, *arguments, stdin=password)
        assert result.returncode == 0, result.stderr
        self.answers.append(result.stdout + result.stderr)

    def chat(self, name: str) -> httpx.Response:
        return httpx.post(
            f"{self.process.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {self.key}"},
            json={"model": name, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4},
            timeout=30,
            trust_env=False,
            verify=shared_tls_context(),
        )


def cli(process: ServeProcess, *arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelyard.cli.main", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        env=process.environment(),
        check=False,
    )


def image_on_host(reference: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", reference], capture_output=True, check=False).returncode
        == 0
    )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, skeleton_image: str) -> Iterator[LocalRegistry]:
    missing = [tool for tool in (REGISTRY_EXECUTABLE, "htpasswd") if shutil.which(tool) is None]
    if missing:
        problem = (
            f"{', '.join(missing)} not installed (Debian: apt-get install docker-registry apache2-utils)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"the registry tests are required under CI: {problem} (.ci/run installs them)")
        pytest.skip(problem)
    with LocalRegistry.start(
        tmp_path_factory.mktemp("registry"), username=USERNAME, password=PASSWORD
    ) as started:
        yield started


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, registry: LocalRegistry, tiny_model_dir: Path
) -> Iterator[RegistryServe]:
    unique = uuid.uuid4().hex[:12]
    first = registry.push_new_image(f"modelyard-test/engine-{unique}:1")
    images = Images(
        first=first,
        second=registry.tag_pushed(first, "2"),
        missing_tag=first.rsplit(":", 1)[0] + ":missing",
        absent=f"{registry.host}/modelyard-test/absent-{unique}:1",
    )
    root = tmp_path_factory.mktemp("registry-serve")
    arguments = ["--no-demo"]
    for mount in host_python_mounts():
        arguments += ["--docker-volume", f"{mount.host_path}:{mount.engine_path}:ro"]
    process = ServeProcess(data_dir=root / "data")
    process.start(*arguments)
    process.wait_until_answering()
    with process.api() as client:
        assert (
            client.post("/api/v1/models", json={"path": str(tiny_model_dir), "name": "tiny"}).status_code
            == 201
        )
        key = client.post("/api/v1/keys", json={"name": "registry-test"}).json()["key"]
    served = RegistryServe(
        process,
        registry,
        images,
        key,
        answers=[],
        images_to_remove=[images.first, images.second],
        arguments=arguments,
    )
    served.store_credential(PASSWORD, replace=False)
    with process.api() as client:
        imported = client.post("/api/v1/backends/import", content=backend_yaml(images))
    assert imported.status_code == 201, imported.text
    try:
        yield served
    finally:
        process.stop()
        for reference in served.images_to_remove:
            subprocess.run(["docker", "image", "rm", "--force", reference], capture_output=True, check=False)


def test_right_credentials_pull_the_image_then_start_it(server: RegistryServe) -> None:
    assert not image_on_host(server.images.first)
    server.deploy("pulled", "pull")
    wait_until(lambda: server.instance("pulled").get("state") == "running", RUNNING_SECONDS, "pulled running")
    instance = server.instance("pulled")
    pull = instance["image_pull"]
    assert pull["state"] == "pulled" and pull["image"] == server.images.first
    assert pull["layers_total"] == 1 and pull["downloaded_bytes"] > 0 and pull["digest"].startswith("sha256:")
    reasons = server.reasons("pulled")
    pulling = next(index for index, reason in enumerate(reasons) if reason.startswith("pulling image"))
    pulled = next(index for index, reason in enumerate(reasons) if reason.startswith("pulled "))
    launched = next(
        index for index, reason in enumerate(reasons) if "launching on the docker runtime" in reason
    )
    assert pulling < pulled < launched, reasons
    assert f"pulled {server.images.first}: 1 layer" in reasons[pulled]
    assert image_on_host(server.images.first)
    assert server.chat("pulled").status_code == 200


def test_ps_and_backends_show_say_what_the_pull_brought_and_each_policy(server: RegistryServe) -> None:
    shown = cli(server.process, "ps", "pulled")
    assert shown.returncode == 0, shown.stderr
    assert "image pulls" in shown.stdout and "pulled" in shown.stdout
    server.answers.append(shown.stdout)
    backend = cli(server.process, "backends", "show", "registry-engine")
    assert backend.returncode == 0, backend.stderr
    shown_versions: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in backend.stdout.splitlines():
        label, _, value = line.partition("  ")
        if label == "version":
            current = shown_versions.setdefault(value.strip(), {})
        elif label in ("pull policy", "registry credential"):
            current[label] = value.strip()
    default = "if-missing (default for this image)"
    assert shown_versions == {
        "pull": {"pull policy": default, "registry credential": CREDENTIAL},
        "second": {"pull policy": default, "registry credential": CREDENTIAL},
        "missing": {"pull policy": default, "registry credential": CREDENTIAL},
        "never": {"pull policy": "never", "registry credential": "none"},
        "always": {"pull policy": "always", "registry credential": CREDENTIAL},
    }, backend.stdout


def test_wrong_credentials_fail_with_the_registrys_answer_and_lose_nothing(server: RegistryServe) -> None:
    server.store_credential(WRONG_PASSWORD, replace=True)
    server.deploy("second", "second")
    wait_until(lambda: server.instance("second").get("state") == "error", RUNNING_SECONDS, "second in error")
    reason = server.instance("second")["reason"]
    assert f"cannot pull image {server.images.second}: the registry answered:" in reason
    assert "unauthorized" in reason and f"refused credential '{CREDENTIAL}'" in reason
    assert "--replace" in reason  # what to do
    # Nothing stored is lost: the credential, the backend and the deployment are all still there.
    [credential] = server.get("/registry-credentials")
    assert credential["used_by"] == [
        f"registry-engine {name}" for name in ("pull", "second", "missing", "always")
    ]
    assert server.get("/backends/registry-engine")["name"] == "registry-engine"
    # The other deployment was not disturbed by the failed pull.
    assert server.instance("pulled")["state"] == "running" and server.chat("pulled").status_code == 200
    server.store_credential(PASSWORD, replace=True)
    wait_until(lambda: server.instance("second").get("state") == "running", RUNNING_SECONDS, "second fixed")


def test_a_tag_the_registry_lacks_is_named_with_manifest_unknown(server: RegistryServe) -> None:
    server.deploy("missing", "missing")
    wait_until(
        lambda: server.instance("missing").get("state") == "error", RUNNING_SECONDS, "missing in error"
    )
    reason = server.instance("missing")["reason"]
    assert f"cannot pull image {server.images.missing_tag}" in reason and "manifest unknown" in reason
    assert "check the repository and tag" in reason
    assert server.instance("missing")["image_pull"]["state"] == "failed"


def test_policy_never_with_an_image_the_host_lacks_asks_for_it_and_pulls_nothing(
    server: RegistryServe,
) -> None:
    server.deploy("never", "never")
    wait_until(lambda: server.instance("never").get("state") == "error", RUNNING_SECONDS, "never in error")
    reason = server.instance("never")["reason"]
    assert f"image {server.images.absent} is not on this host" in reason and "pull_policy is never" in reason
    assert "docker load" in reason
    assert "absent-" not in server.registry.log_path.read_text()  # no request reached the registry


def test_policy_always_pulls_before_every_start(server: RegistryServe) -> None:
    assert image_on_host(server.images.first)  # present: if-missing would not pull
    server.deploy("always", "always")
    wait_until(lambda: server.instance("always").get("state") == "running", RUNNING_SECONDS, "always running")
    before = server.instance("always")
    subprocess.run(["docker", "kill", before["engine_id"]], check=True, capture_output=True)
    wait_until(
        lambda: (
            server.instance("always").get("restart_count", 0) >= 1
            and server.instance("always").get("state") == "running"
        ),
        RUNNING_SECONDS,
        "always running again after docker kill",
    )
    pulls = [
        reason for reason in server.reasons("always") if reason.startswith(f"pulled {server.images.first}")
    ]
    assert len(pulls) == 2, server.reasons("always")
    assert all("up to date with the registry" in reason for reason in pulls)


@contextmanager
def held_pull(server: RegistryServe, name: str) -> Iterator[tuple[GatedProxy, str]]:
    """Deploy ``name`` from a new 4 MiB image behind a relay that holds the registry's answer
    after 1 MiB; yields once the instance shows the pull half-way (the relay, the image)."""
    big = server.registry.push_new_image(
        f"modelyard-test/big-{uuid.uuid4().hex[:12]}:1", payload_bytes=PAYLOAD_BYTES
    )
    with GatedProxy.start("127.0.0.1", server.registry.port, hold_after_bytes=HOLD_AFTER_BYTES) as proxy:
        through_proxy = big.replace(server.registry.host, f"127.0.0.1:{proxy.port}")
        server.images_to_remove.append(through_proxy)
        credential = f"proxy-{name}"
        add = ["backends", "credentials", "add", credential, "--registry", f"127.0.0.1:{proxy.port}"]
        stored = cli(server.process, *add, "--username", USERNAME, "--password-stdin", stdin=PASSWORD)
        assert stored.returncode == 0, stored.stderr
        yaml_text = f"""\
backend_name: {name}-engine
default_version: "1"
health_check_path: /health
version_configs:
  "1":
{version_yaml(through_proxy, f"registry_credential: {credential}")}"""
        with server.api() as client:
            assert client.post("/api/v1/backends/import", content=yaml_text).status_code == 201
            body = {"model": "tiny", "name": name, "backend": f"{name}-engine", "skip_verification": True}
            assert client.post("/api/v1/deployments", json=body).status_code == 201

        def mid_pull() -> bool:
            pull = server.instance(name).get("image_pull") or {}
            return pull.get("state") == "pulling" and int(pull.get("downloaded_bytes") or 0) > 0

        wait_until(mid_pull, RUNNING_SECONDS, f"the pull of {name} half-way")
        yield proxy, through_proxy


def test_ps_shows_the_pulling_stage_with_layers_and_bytes_while_it_pulls(server: RegistryServe) -> None:
    with held_pull(server, "gated") as (proxy, image):
        instance = server.instance("gated")
        assert instance["stage"] == "pulling" and instance["state"] == "starting"
        pull = instance["image_pull"]
        assert pull["layers_total"] == 1 and pull["layers_done"] == 0
        assert 0 < pull["downloaded_bytes"] < pull["total_bytes"] and pull["total_bytes"] >= PAYLOAD_BYTES
        assert instance["reason"].startswith(f"pulling image {image}: 0/1 layers, ")
        table = cli(server.process, "ps", "gated")
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if line.startswith("gated"))
        assert "pulling" in row.split()
        assert "image pulls" in table.stdout
        server.answers.append(table.stdout)
        # A pull in progress holds up no other deployment.
        assert server.chat("pulled").status_code == 200
        proxy.release()
        wait_until(
            lambda: server.instance("gated").get("state") == "running", RUNNING_SECONDS, "gated running"
        )
    pull = server.instance("gated")["image_pull"]
    assert pull["state"] == "pulled" and pull["downloaded_bytes"] >= PAYLOAD_BYTES


def test_rm_during_a_pull_stops_it_and_leaves_no_container(server: RegistryServe) -> None:
    with held_pull(server, "abandoned") as (proxy, _image):
        removed = cli(server.process, "rm", "abandoned", "--wait")
        assert removed.returncode == 0, removed.stderr
        with server.api() as client:
            assert client.get("/api/v1/deployments/abandoned").status_code == 404
        proxy.release()
    owner = server.process.owner()
    listed = subprocess.run(
        [
            "docker",
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"label=modelyard.owner={owner}",
            "--filter",
            "label=modelyard.deployment=abandoned",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.strip() == ""


def test_a_server_killed_during_a_pull_pulls_again_when_it_starts_and_runs_one_container(
    server: RegistryServe,
) -> None:
    with held_pull(server, "interrupted") as (proxy, image):
        server.process.kill()
        server.process.start(*server.arguments)
        server.process.wait_until_answering()

        def pulling_again() -> bool:
            reasons = server.reasons("interrupted")
            return sum(1 for reason in reasons if reason.startswith(f"pulling image {image}")) >= 2

        wait_until(pulling_again, RUNNING_SECONDS, "the restarted server pulling interrupted again")
        proxy.release()
        wait_until(
            lambda: server.instance("interrupted").get("state") == "running",
            RUNNING_SECONDS,
            "interrupted running",
        )
    listed = subprocess.run(
        [
            "docker",
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"label=modelyard.owner={server.process.owner()}",
            "--filter",
            "label=modelyard.deployment=interrupted",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(listed.stdout.split()) == 1
    assert server.chat("interrupted").status_code == 200


def test_the_password_is_in_no_file_log_event_answer_or_command_line(server: RegistryServe) -> None:
    secrets = (PASSWORD, WRONG_PASSWORD)
    for name in (
        "pulled",
        "second",
        "missing",
        "never",
        "always",
        "gated",
        "interrupted",
    ):  # "abandoned" is gone
        server.reasons(name)
        server.get(f"/deployments/{name}")
        server.answers.append(cli(server.process, "ps", name).stdout)
    server.get("/registry-credentials")
    server.get("/backends/registry-engine")
    server.answers.append(cli(server.process, "backends", "show", "registry-engine").stdout)
    for text in server.answers:
        assert not any(secret in text for secret in secrets)
    assert not any(secret in server.process.log() for secret in secrets)
    files = [path for path in server.process.data_dir.rglob("*") if path.is_file()]
    assert any(path.suffix == ".log" for path in files)
    for path in files:  # the database, every engine log, the server's own files
        content = path.read_bytes()
        assert not any(secret.encode() in content for secret in secrets), path
    for running in psutil.process_iter(["cmdline"]):
        command_line = " ".join(running.info["cmdline"] or [])
        assert not any(secret in command_line for secret in secrets)
    docker_config = Path.home() / ".docker" / "config.json"
    if docker_config.exists():
        assert not any(secret in docker_config.read_text() for secret in secrets)
