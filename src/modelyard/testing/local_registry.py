"""A real container registry on loopback, for tests and measurements: Debian's ``docker-registry``
(the CNCF distribution registry, ``/usr/bin/docker-registry serve CONFIG``) with htpasswd auth,
and images built here and pushed to it.

dockerd treats registries on 127.0.0.0/8 as insecure (plain HTTP) without any configuration
(``docker info`` lists them under "Insecure Registries"), so no TLS is needed. Images are built
from files on this machine (``docker import`` of a tar: the test skeleton, plus a payload of
``payload_bytes`` random bytes, so that the layer is new to dockerd and a pull really downloads
it), pushed with ``docker push`` under a temporary ``DOCKER_CONFIG`` (the login is written there,
never into the user's ``~/.docker``), and removed from dockerd again, so that only the registry
has them.

Usage::

    with LocalRegistry.start(tmp_path, username="ci", password=secret) as registry:
        tag = registry.push_new_image("modelyard-test/tiny:1")    # "127.0.0.1:PORT/modelyard-test/tiny:1"

For other hosts (network namespaces), ``start`` takes the command that enters the host
(``prefix=["ip", "netns", "exec", NS]``), the address to listen on (``listen_host="0.0.0.0"``) and
the one this process reaches it at (``probe_host``); ``push_new_image(..., docker_host=SOCKET)``
pushes through that host's dockerd, to its loopback (insecure there by default).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from modelyard.testing.container_image import skeleton_tar
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import free_port, wait_until

REGISTRY_EXECUTABLE = "/usr/bin/docker-registry"
START_SECONDS = 30.0
CONFIG_TEMPLATE = """\
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: {listen_host}:{port}
  secret: modelyard-test-{port}
auth:
  htpasswd:
    realm: modelyard-test
    path: {htpasswd}
"""


def image_tar(payload_bytes: int = 64 * 1024) -> bytes:
    """The test skeleton plus ``/modelyard-payload`` of random bytes (a layer no one has yet)."""
    skeleton = io.BytesIO(skeleton_tar())
    built = io.BytesIO()
    with tarfile.open(fileobj=skeleton) as source, tarfile.open(fileobj=built, mode="w") as target:
        for member in source.getmembers():
            target.addfile(member)
        entry = tarfile.TarInfo("modelyard-payload")
        entry.size = payload_bytes
        target.addfile(entry, io.BytesIO(os.urandom(payload_bytes)))
    return built.getvalue()


@dataclass
class LocalRegistry:
    root: Path
    port: int
    username: str
    password: str = field(repr=False)
    process: subprocess.Popen[bytes] | None = None
    # Where this process asks it whether it answers (its host's loopback unless it runs elsewhere).
    probe_host: str = "127.0.0.1"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "registry.log"

    @classmethod
    @contextmanager
    def start(
        cls,
        root: Path,
        *,
        username: str,
        password: str,
        prefix: tuple[str, ...] = (),
        listen_host: str = "127.0.0.1",
        probe_host: str = "127.0.0.1",
    ) -> Iterator[LocalRegistry]:
        """Run a registry on a free port until the block ends (loopback, unless told otherwise)."""
        root.mkdir(parents=True, exist_ok=True)
        registry = cls(
            root=root, port=free_port(), username=username, password=password, probe_host=probe_host
        )
        htpasswd = subprocess.run(
            ["htpasswd", "-Bbn", username, password], capture_output=True, check=True
        ).stdout
        (root / "htpasswd").write_bytes(htpasswd)
        config = root / "config.yml"
        config.write_text(
            CONFIG_TEMPLATE.format(
                root=root / "storage",
                listen_host=listen_host,
                port=registry.port,
                htpasswd=root / "htpasswd",
            )
        )
        with registry.log_path.open("wb") as log_file:
            registry.process = subprocess.Popen(
                [*prefix, REGISTRY_EXECUTABLE, "serve", str(config)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(registry.answering, START_SECONDS, f"the registry at {registry.host} answering")
            yield registry
        finally:
            registry.process.terminate()
            registry.process.wait(timeout=30)

    def answering(self) -> bool:
        try:
            response = httpx.get(
                f"http://{self.probe_host}:{self.port}/v2/",
                timeout=2,
                trust_env=False,
                verify=shared_tls_context(),
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 401  # it asks for the login: auth is on

    def _docker(
        self, *arguments: str, config: Path, stdin: bytes | None = None, docker_host: str | None = None
    ) -> str:
        daemon = ["-H", docker_host] if docker_host else []
        result = subprocess.run(
            ["docker", "--config", str(config), *daemon, *arguments],
            input=stdin,
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"docker {arguments[0]} failed: {result.stderr.decode(errors='replace')}")
        return result.stdout.decode(errors="replace")

    def push_new_image(
        self, repository_and_tag: str, *, payload_bytes: int = 64 * 1024, docker_host: str | None = None
    ) -> str:
        """Build a new image, push it here as ``repository_and_tag``, and remove it from dockerd
        (``docker_host``: that dockerd's, on the registry's host, instead of this one's)."""
        reference = f"{self.host}/{repository_and_tag}"
        config = self.root / "docker-config"
        config.mkdir(exist_ok=True)
        try:
            self._docker(
                "import",
                "-",
                reference,
                config=config,
                stdin=image_tar(payload_bytes),
                docker_host=docker_host,
            )
            self._docker(
                "login",
                "--username",
                self.username,
                "--password-stdin",
                self.host,
                config=config,
                stdin=self.password.encode(),
                docker_host=docker_host,
            )
            self._docker("push", reference, config=config, docker_host=docker_host)
            self._docker("image", "rm", reference, config=config, docker_host=docker_host)
        finally:
            shutil.rmtree(config, ignore_errors=True)  # the login's config.json goes with it
        return reference

    def tag_pushed(self, reference: str, new_tag: str) -> str:
        """Give an image this registry has another tag (its manifest put again under ``new_tag``)."""
        repository, _, tag = reference.removeprefix(f"{self.host}/").rpartition(":")
        accept = "application/vnd.docker.distribution.manifest.v2+json"
        auth = (self.username, self.password)
        with httpx.Client(
            base_url=f"http://{self.host}", auth=auth, trust_env=False, verify=shared_tls_context()
        ) as client:
            manifest = client.get(f"/v2/{repository}/manifests/{tag}", headers={"Accept": accept})
            manifest.raise_for_status()
            put = client.put(
                f"/v2/{repository}/manifests/{new_tag}",
                content=manifest.content,
                headers={"Content-Type": manifest.headers["content-type"]},
            )
            put.raise_for_status()
        return f"{self.host}/{repository}:{new_tag}"
