"""Candidates as deployments of a modelyard server, measured through its gateway (``/v1``), as a
user's traffic would reach them: the ``Deployer`` of ``modelyard tune``.

Each candidate is a deployment ``tune-<tune id>-<candidate id>`` made with the REST API (the
server's own preflight runs, its controller starts the engine), waited for until every instance
runs, and deleted (and waited for, until its GPUs' memory is back: ``gpu_release.py``) before the
next one starts, so the GPUs are free. A refusal or
a failed start is ``CandidateStartFailed`` with the server's reason. The gateway key
``tune-<tune id>`` is created (or rotated, when a rerun finds it) at the start of each session and
revoked at its end; its secret is never written down.

With ``metrics_token_file`` (the server's ``<data-dir>/metrics-token``, readable when the server
runs on this host), each endpoint also names the server's ``/metrics`` and the labels of its
deployment, so a measurement can read the engine's speculative acceptance there.

    api = HttpServerApi("http://127.0.0.1:8080", token=cli_token)
    with ServerDeployer(api, tune_id, model="qwen3-8b") as deployer:
        endpoint = deployer.start(candidate)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from modelyard.errors import ModelyardError
from modelyard.tune.contract import CandidateStartFailed
from modelyard.tune.endpoint import Endpoint
from modelyard.tune.gpu_release import gpu_memory_used, wait_for_release
from modelyard.tune.space import Candidate

API_PREFIX = "/api/v1"
POLL_SECONDS = 0.5


class ServerUnreachable(ModelyardError):
    http_status = 502
    code = "no_server"


@dataclass
class HttpServerApi:
    """The REST API with admin credentials (a password, or the CLI token)."""

    url: str
    password: str | None = None
    token: str | None = None
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token and not self.password else {}
        auth = httpx.BasicAuth("admin", self.password) if self.password else None
        self._http = httpx.Client(
            base_url=self.url.rstrip("/") + API_PREFIX, auth=auth, headers=headers, timeout=self.timeout_s
        )

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as error:
            raise ServerUnreachable(
                f"talking to the modelyard server at {self.url} failed: {type(error).__name__}",
                hint="is `modelyard serve` running there (--url)? rerun the same tune to resume",
            ) from error
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = {"error": {"message": response.text[:200]}}
        return response.status_code, data

    def close(self) -> None:
        self._http.close()


def _error_text(data: Any) -> tuple[str, str | None]:
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return str(data)[:300], None
    message = str(error.get("message", "refused"))
    findings = (
        (error.get("details") or {}).get("findings") if isinstance(error.get("details"), dict) else None
    )
    if findings:
        first = next((f for f in findings if f.get("severity") == "error"), findings[0])
        if str(first.get("message")) not in message:
            message += f": {first.get('check_id')}: {first.get('message')}"
        elif first.get("check_id"):
            message += f" ({first.get('check_id')})"
    return message, error.get("hint")


@dataclass
class ServerDeployer:
    api: HttpServerApi
    tune_id: str
    model: str
    skip_verification: bool = True
    start_timeout_s: float = 1800.0
    gpu_ids: list[int] | None = None
    clock: Callable[[], float] = field(default=time.monotonic)
    on_leftovers: Callable[[list[str]], None] | None = None
    """Told the names of the deployments an interrupted session left, once they are removed."""
    metrics_token_file: Path | None = None
    """The server's scrape token file; None: the engines' samples are not read."""
    release_timeout_s: float = 120.0
    """How long a removal waits for its GPUs' memory to come back before the next start."""
    _used_before: dict[int, int] = field(default_factory=dict)
    _key: str | None = None
    _cleaned: bool = False

    @property
    def key_name(self) -> str:
        return f"tune-{self.tune_id}"

    def deployment_name(self, candidate: Candidate) -> str:
        return f"tune-{self.tune_id[:6]}-{candidate.candidate_id[:8]}"

    def _api_key(self) -> str:
        if self._key is None:
            status, data = self.api.request("POST", "/keys", {"name": self.key_name})
            if status == 409:
                status, data = self.api.request("POST", f"/keys/{self.key_name}/rotate")
            if status >= 400 or not isinstance(data, dict) or "key" not in data:
                message, hint = _error_text(data)
                raise ModelyardError(f"could not make the tune's gateway key: {message}", hint=hint)
            self._key = str(data["key"])
        return self._key

    def _wait_gone(self, name: str) -> None:
        deadline = self.clock() + self.start_timeout_s
        while self.clock() < deadline:
            status, _ = self.api.request("GET", f"/deployments/{name}")
            if status == 404:
                return
            time.sleep(POLL_SECONDS)
        raise ModelyardError(
            f"deployment {name} was not gone within {self.start_timeout_s:.0f} s of its removal",
            hint=f"see `modelyard ps {name}`; rerun the tune once it is gone",
        )

    def remove_leftovers(self) -> list[str]:
        """Delete the deployments of this tune still on the server (a killed session's), and wait
        until they are gone; their names."""
        status, data = self.api.request("GET", "/deployments")
        prefix = f"tune-{self.tune_id[:6]}-"
        names = [
            str(item["name"])
            for item in (data if status == 200 and isinstance(data, list) else [])
            if str(item.get("name", "")).startswith(prefix)
        ]
        for name in names:
            status, _ = self.api.request("DELETE", f"/deployments/{name}")
            if status != 404:
                self._wait_gone(name)
        if names and self.on_leftovers is not None:
            self.on_leftovers(names)
        return names

    def start(self, candidate: Candidate) -> Endpoint:
        name = self.deployment_name(candidate)
        key = self._api_key()
        if not self._cleaned:
            self.remove_leftovers()
            self._cleaned = True
        body: dict[str, Any] = {
            "model": self.model,
            "name": name,
            "backend": candidate.engine.backend,
            "backend_version": candidate.engine.version,
            "gpus_per_replica": candidate.gpu_count,
            "backend_parameters": candidate.arguments,
            "skip_verification": self.skip_verification,
        }
        if candidate.env:
            body["env"] = dict(candidate.env)  # the server seals the secret ones
        if self.gpu_ids is not None:
            body["gpu_ids"] = self.gpu_ids[: candidate.gpu_count]
            body.pop("gpus_per_replica")
        self._used_before = gpu_memory_used(self.api, body.get("gpu_ids"))
        status, data = self.api.request("POST", "/deployments", body)
        if status >= 400:
            message, hint = _error_text(data)
            raise CandidateStartFailed(f"the server refused the deployment: {message}", hint=hint)
        deadline = self.clock() + self.start_timeout_s
        while True:
            status, data = self.api.request("GET", f"/deployments/{name}")
            instances = data.get("instances", []) if isinstance(data, dict) else []
            failed = [i for i in instances if i.get("state") == "error"]
            if failed:
                reason = failed[0].get("diagnosis") or failed[0].get("reason") or "engine failed"
                raise CandidateStartFailed(f"the engine failed to start: {reason}")
            if instances and all(i.get("state") == "running" for i in instances):
                return self._endpoint(name, key)
            if self.clock() > deadline:
                states = ", ".join(str(i.get("reason") or i.get("state")) for i in instances) or "no instance"
                raise CandidateStartFailed(
                    f"not running within {self.start_timeout_s:.0f} s ({states})",
                    hint="raise --start-timeout if the engine loads slowly",
                )
            time.sleep(POLL_SECONDS)

    def _metrics_token(self) -> str | None:
        path = self.metrics_token_file
        if path is None:
            return None
        if not path.is_file():
            # The server makes its scrape token at the first scrape (refused without it).
            try:
                httpx.get(self.api.url.rstrip("/") + "/metrics", timeout=self.api.timeout_s)
            except httpx.HTTPError:
                return None
        try:
            return path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def _endpoint(self, name: str, key: str) -> Endpoint:
        root = self.api.url.rstrip("/")
        token = self._metrics_token()
        return Endpoint(
            base_url=f"{root}/v1",
            model=name,
            api_key=key,
            metrics_url=f"{root}/metrics" if token else None,
            metrics_token=token,
            metrics_labels=(("deployment", name),),
        )

    def stop(self, candidate: Candidate) -> None:
        name = self.deployment_name(candidate)
        status, _ = self.api.request("DELETE", f"/deployments/{name}")
        if status != 404:
            self._wait_gone(name)
        wait_for_release(self.api, self._used_before, timeout_s=self.release_timeout_s, clock=self.clock)
        self._used_before = {}

    def close(self) -> None:
        if self._key is not None:
            self.api.request("DELETE", f"/keys/{self.key_name}")
            self._key = None

    def __enter__(self) -> ServerDeployer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
