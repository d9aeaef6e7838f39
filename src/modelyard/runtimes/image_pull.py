"""Pulling a backend's image before its container starts, through the Docker Engine API.

The pull talks to dockerd over its socket (``POST /images/create``), not through ``docker pull``:
the registry credential travels in the ``X-Registry-Auth`` header of that one request, so the
password is never in an argv (``ps``), a ``config.json`` on disk, the environment of a child, a log
line or an event; and the answer is a stream of JSON progress messages with bytes per layer, which
``PullProgress`` adds up for ``modelyard ps`` and the console.

The daemon is a parameter (``DockerDaemon``), so the same function pulls on this host's dockerd,
on another one's socket (a worker's, from the Ray supervisor of that node), or on a test's.

Usage::

    daemon = DockerDaemon.from_docker_host(os.environ.get("DOCKER_HOST"))
    auth = RegistryAuth(server_address="127.0.0.1:5000", username="me", password=secret)
    result = await prepare_image("127.0.0.1:5000/vllm:0.25", "if-missing", daemon=daemon, auth=auth,
                                 on_progress=show)     # None when the host had it already
    result.describe()   # 'pulled 127.0.0.1:5000/vllm:0.25: 3 layers, 52.4 MB in 1.8 s'

A failed pull raises ``ImagePullFailed`` naming the image, quoting the registry's answer as
dockerd relays it (``unauthorized: authentication required``, ``manifest unknown``, ``connect:
connection refused``) and saying what to do.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from modelyard.backends.spec import PullPolicy, image_registry_host
from modelyard.errors import ImagePullFailed

DEFAULT_SOCKET = "/var/run/docker.sock"
CONNECT_TIMEOUT_SECONDS = 10.0
# dockerd sends a progress message at least every few seconds while a pull moves.
SILENCE_TIMEOUT_SECONDS = 300.0
# Docker Hub's name in credentials (what `docker login` writes for it).
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"
# What a credential for Docker Hub may give as its registry.
DOCKER_HUB_NAMES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
_DONE_STATUSES = ("pull complete", "already exists")


@dataclass(frozen=True)
class DockerDaemon:
    """Where a Docker engine answers: its Unix socket, or ``tcp://host:port`` (no TLS)."""

    socket_path: str | None = DEFAULT_SOCKET
    tcp_url: str | None = None

    @classmethod
    def from_docker_host(cls, docker_host: str | None) -> DockerDaemon:
        """From ``DOCKER_HOST``'s syntax (``unix:///run/docker.sock``, ``tcp://10.0.0.2:2375``);
        None or empty: the default socket."""
        if not docker_host:
            return cls()
        if docker_host.startswith("unix://"):
            return cls(socket_path=docker_host.removeprefix("unix://"))
        if docker_host.startswith("tcp://"):
            return cls(socket_path=None, tcp_url="http://" + docker_host.removeprefix("tcp://"))
        raise ImagePullFailed(
            f"DOCKER_HOST {docker_host!r} is neither unix://PATH nor tcp://HOST:PORT",
            hint="set DOCKER_HOST to dockerd's socket, e.g. unix:///var/run/docker.sock",
        )

    def describe(self) -> str:
        return f"unix://{self.socket_path}" if self.socket_path else str(self.tcp_url)

    def client(self, *, read_timeout_seconds: float) -> httpx.AsyncClient:
        timeout = httpx.Timeout(read_timeout_seconds, connect=CONNECT_TIMEOUT_SECONDS)
        if self.socket_path:
            transport = httpx.AsyncHTTPTransport(uds=self.socket_path)
            return httpx.AsyncClient(transport=transport, base_url="http://docker", timeout=timeout)
        return httpx.AsyncClient(base_url=str(self.tcp_url), timeout=timeout, trust_env=False)


@dataclass(frozen=True)
class RegistryAuth:
    """A registry credential, opened only for one pull (the password is in no repr)."""

    server_address: str
    username: str
    password: str = field(repr=False)
    # The stored credential's name, for messages.
    name: str = ""

    def header(self) -> str:
        """``X-Registry-Auth``: base64url of the JSON ``docker login`` would send."""
        data = {"username": self.username, "password": self.password, "serveraddress": self.server_address}
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode("ascii")


@dataclass
class LayerProgress:
    status: str = ""
    current_bytes: int = 0
    total_bytes: int | None = None
    present: bool = False  # "Already exists": nothing to download

    @property
    def done(self) -> bool:
        return self.status.lower() in _DONE_STATUSES


@dataclass
class PullProgress:
    """What a pull has done so far, from dockerd's messages (one ``LayerProgress`` per layer)."""

    image: str
    started_monotonic: float = field(default_factory=time.monotonic)
    layers: dict[str, LayerProgress] = field(default_factory=dict)
    status: str = ""
    digest: str = ""

    def feed(self, message: dict[str, Any]) -> None:
        status = str(message.get("status") or "")
        layer_id = message.get("id")
        if status.startswith("Digest:"):
            self.digest = status.removeprefix("Digest:").strip()
            return
        if not layer_id or status.startswith("Pulling from"):
            if status:
                self.status = status
            return
        layer = self.layers.setdefault(str(layer_id), LayerProgress())
        detail = message.get("progressDetail") or {}
        lowered = status.lower()
        if lowered == "downloading" and isinstance(detail, dict):
            layer.current_bytes = int(detail.get("current") or layer.current_bytes)
            if detail.get("total"):
                layer.total_bytes = int(detail["total"])
        elif lowered == "download complete" and layer.total_bytes is not None:
            layer.current_bytes = layer.total_bytes
        elif lowered == "already exists":
            layer.present = True
        if not layer.done:  # "Extracting" after "Pull complete" cannot happen; keep done sticky
            layer.status = status

    @property
    def layers_total(self) -> int:
        return len(self.layers)

    @property
    def layers_done(self) -> int:
        return sum(1 for layer in self.layers.values() if layer.done)

    @property
    def layers_present(self) -> int:
        return sum(1 for layer in self.layers.values() if layer.present)

    @property
    def downloaded_bytes(self) -> int:
        return sum(layer.current_bytes for layer in self.layers.values())

    @property
    def total_bytes(self) -> int | None:
        """The bytes to download, once every layer to fetch has said its size (None before)."""
        fetched = [layer for layer in self.layers.values() if not layer.present]
        if any(layer.total_bytes is None and not layer.done for layer in fetched):
            return None
        return sum(layer.total_bytes or layer.current_bytes for layer in fetched)

    @property
    def elapsed_seconds(self) -> float:
        return time.monotonic() - self.started_monotonic

    def describe(self) -> str:
        """``2/3 layers, 41.0 MB of 52.4 MB`` (``of ...`` once every size is known)."""
        text = f"{self.layers_done}/{self.layers_total} layers, {format_bytes(self.downloaded_bytes)}"
        total = self.total_bytes
        if total is not None and self.layers_total:
            text += f" of {format_bytes(total)}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "layers_done": self.layers_done,
            "layers_total": self.layers_total,
            "layers_present": self.layers_present,
            "downloaded_bytes": self.downloaded_bytes,
            "total_bytes": self.total_bytes,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
        }


@dataclass(frozen=True)
class ReportedProgress:
    """A pull's progress as another node reported it (``PullProgress.describe``/``to_json``)."""

    image: str
    text: str
    data: dict[str, Any]

    def describe(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        return dict(self.data)


@dataclass(frozen=True)
class PullResult:
    """A finished pull: what came down, how long it took, and dockerd's last word."""

    image: str
    layers_total: int
    layers_present: int
    downloaded_bytes: int
    seconds: float
    digest: str
    status: str

    @property
    def up_to_date(self) -> bool:
        """The host had the registry's image already (dockerd asked, nothing came down)."""
        return "up to date" in self.status.lower()

    def describe(self) -> str:
        if self.up_to_date and not self.downloaded_bytes:
            return f"pulled {self.image}: up to date with the registry, checked in {self.seconds:.1f} s"
        fetched = self.layers_total - self.layers_present
        text = f"pulled {self.image}: {fetched} layer{'s' if fetched != 1 else ''}"
        if self.layers_present:
            text += f" ({self.layers_present} already here)"
        return f"{text}, {format_bytes(self.downloaded_bytes)} in {self.seconds:.1f} s"

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "layers_total": self.layers_total,
            "layers_present": self.layers_present,
            "downloaded_bytes": self.downloaded_bytes,
            "seconds": round(self.seconds, 3),
            "digest": self.digest,
            "status": self.status,
        }


ProgressCallback = Callable[[PullProgress], Awaitable[None]]


def format_bytes(size_bytes: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


def split_reference(image: str) -> tuple[str, str]:
    """``(fromImage, tag)`` for ``POST /images/create``: a digest stays in the name (tag empty),
    a name without a tag gets ``latest`` (an empty tag would pull every tag of the repository)."""
    if "@" in image:
        return image, ""
    last_segment = image.rsplit("/", 1)[-1]
    if ":" in last_segment:
        name, _, tag = image.rpartition(":")
        return name, tag
    return image, "latest"


def credential_server(image: str) -> str:
    """The registry a credential must be for to pull ``image`` (Docker Hub when none is named)."""
    return image_registry_host(image) or DOCKER_HUB_SERVER


def registry_matches(credential_registry: str, image: str) -> bool:
    """Whether a credential for ``credential_registry`` is the one to present for ``image``."""
    host = image_registry_host(image)
    if host is None:
        return credential_registry in DOCKER_HUB_NAMES
    return host == credential_registry


def _hint(answer: str, image: str, auth: RegistryAuth | None) -> str:
    text = answer.lower()
    registry = credential_server(image)
    if any(word in text for word in ("unauthorized", "authentication required", "no basic auth", "denied")):
        if auth is None:
            return (
                f"the registry {registry} wants credentials: store them (`modelyard backends credentials "
                f"add NAME --registry {registry} --username USER --password-stdin`) and name them in the "
                "backend version's registry_credential"
            )
        return (
            f"the registry refused credential {auth.name or auth.username!r} (user {auth.username!r}): "
            f"store the right password (`modelyard backends credentials add {auth.name or 'NAME'} --registry "
            f"{registry} --username {auth.username} --password-stdin --replace`); the next start pulls again"
        )
    if "manifest unknown" in text or "not found" in text or "does not exist" in text:
        return (
            f"the registry has no {image}: check the repository and tag (`curl http://{registry}/v2/"
            "REPOSITORY/tags/list` lists the tags) or push the image, then fix the backend version's image"
        )
    if "server gave http response to https client" in text:
        return (
            f"dockerd talks HTTPS to {registry}, which answers HTTP: serve TLS there, or add it to "
            '"insecure-registries" in /etc/docker/daemon.json (127.0.0.0/8 is insecure by default)'
        )
    if "x509" in text or "certificate" in text:
        return (
            f"dockerd does not trust {registry}'s certificate: put its CA in "
            f"/etc/docker/certs.d/{registry}/ca.crt"
        )
    if any(
        word in text for word in ("connection refused", "no such host", "i/o timeout", "dial tcp", "no route")
    ):
        return (
            f"dockerd cannot reach the registry {registry}: check the address and that the registry runs; "
            "offline, `docker load` the image on this host and set the version's pull_policy to never"
        )
    return f"see dockerd's log for the pull of {image}, or pull it by hand (`docker pull {image}`) to compare"


def _pull_failed(image: str, answer: str, auth: RegistryAuth | None) -> ImagePullFailed:
    return ImagePullFailed(
        f"cannot pull image {image}: the registry answered: {answer.strip()}", hint=_hint(answer, image, auth)
    )


def _daemon_unreachable(daemon: DockerDaemon, error: httpx.HTTPError) -> ImagePullFailed:
    return ImagePullFailed(
        f"cannot reach the Docker engine at {daemon.describe()}: {type(error).__name__}: {error}",
        hint="start dockerd (or `systemctl start docker`) and let this user use its socket",
    )


def _answer_of(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip() or "no message"
    return str(data.get("message") or data) if isinstance(data, dict) else str(data)


async def image_present(image: str, *, daemon: DockerDaemon) -> bool:
    """Whether ``daemon`` has ``image`` (by name and tag, or digest)."""
    try:
        async with daemon.client(read_timeout_seconds=CONNECT_TIMEOUT_SECONDS) as client:
            response = await client.get(f"/images/{quote(image, safe='')}/json")
    except httpx.HTTPError as error:
        raise _daemon_unreachable(daemon, error) from error
    if response.status_code == 404:
        return False
    if response.status_code != 200:
        raise ImagePullFailed(
            f"dockerd could not say whether it has {image}: {_answer_of(response.content)}",
            hint="check dockerd (`docker info`, its log)",
        )
    return True


async def pull_image(
    image: str,
    *,
    daemon: DockerDaemon,
    auth: RegistryAuth | None = None,
    on_progress: ProgressCallback | None = None,
) -> PullResult:
    """Pull ``image`` into ``daemon`` (with ``auth`` when given), calling ``on_progress`` after
    each progress message; ``ImagePullFailed`` with the registry's answer when it fails."""
    name, tag = split_reference(image)
    parameters = {"fromImage": name, **({"tag": tag} if tag else {})}
    headers = {"X-Registry-Auth": auth.header()} if auth is not None else {}
    progress = PullProgress(image)
    try:
        async with (
            daemon.client(read_timeout_seconds=SILENCE_TIMEOUT_SECONDS) as client,
            client.stream("POST", "/images/create", params=parameters, headers=headers) as response,
        ):
            if response.status_code != 200:
                raise _pull_failed(image, _answer_of(await response.aread()), auth)
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError as error:
                    raise ImagePullFailed(
                        f"cannot pull image {image}: dockerd answered with a line that is not JSON: "
                        f"{line[:200]!r}",
                        hint=f"check {daemon.describe()} is dockerd's API (DOCKER_HOST)",
                    ) from error
                if not isinstance(message, dict):
                    continue
                if message.get("error") or message.get("errorDetail"):
                    detail = message.get("errorDetail") or {}
                    answer = detail.get("message") if isinstance(detail, dict) else None
                    raise _pull_failed(image, str(answer or message.get("error")), auth)
                progress.feed(message)
                if on_progress is not None:
                    await on_progress(progress)
    except httpx.ReadTimeout as error:
        raise ImagePullFailed(
            f"cannot pull image {image}: dockerd said nothing about it for {SILENCE_TIMEOUT_SECONDS:.0f} s",
            hint=f"check that dockerd reaches {credential_server(image)} (`docker pull {image}` by hand)",
        ) from error
    except httpx.HTTPError as error:
        raise _daemon_unreachable(daemon, error) from error
    return PullResult(
        image=image,
        layers_total=progress.layers_total,
        layers_present=progress.layers_present,
        downloaded_bytes=progress.downloaded_bytes,
        seconds=progress.elapsed_seconds,
        digest=progress.digest,
        status=progress.status,
    )


async def prepare_image(
    image: str,
    policy: PullPolicy,
    *,
    daemon: DockerDaemon,
    auth: RegistryAuth | None = None,
    on_progress: ProgressCallback | None = None,
) -> PullResult | None:
    """Make ``image`` ready to run on ``daemon`` under ``policy``: pulled when ``always``, or when
    ``if-missing`` and the daemon lacks it; None when nothing was pulled. With ``never``, an image
    the daemon lacks is an ``ImagePullFailed`` that says how to bring it."""
    if policy != "always" and await image_present(image, daemon=daemon):
        return None
    if policy == "never":
        raise ImagePullFailed(
            f"image {image} is not on this host, and the backend version's pull_policy is never",
            hint=f"`docker load` (or `docker pull`) {image} on this host, or set pull_policy to "
            "if-missing in the version's modelyard mapping and import the backend again",
        )
    return await pull_image(image, daemon=daemon, auth=auth, on_progress=on_progress)
