"""The console in a real browser: Debian's headless Chromium driven by Playwright, against a real
``modelyard serve`` (a subprocess on a free port and a temporary data directory).

One server and one browser serve the whole session; each test gets a fresh browser context
(its own cookies), signed in through the real ``/login`` form. Every page a test opens is
watched: a console error, an uncaught exception, a failed request or an HTTP error answer fails
the test, unless the test declared that answer (``watch.expect(404, "/verify")``).

Engines: the reference server playing vLLM (``modelyard.bench.reference_server``, the engine
double), imported as a custom backend (as a process, and in a container of the Docker runtime:
the test skeleton image with this host's Python mounted, as ``tests/runtimes`` runs it), and
transformers serve with the trained tiny model for the playground. Model pulls come from the
Hugging Face Hub DOUBLE (``modelyard.testing.hub_doubles``; no hub is reachable here), which the
server reaches through ``HF_ENDPOINT``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Playwright,
    Request,
    Response,
    sync_playwright,
)

from model_cache import ModelCache
from modelyard.testing.container_image import host_python_mounts, import_skeleton_image, project_source_folder
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.hub_doubles import HuggingFaceHubDouble, RepositoryDouble
from modelyard.testing.ports import reserved_port

CHROMIUM = "/usr/bin/chromium"
# A closed network: nothing may try to reach the internet (updates, sync, QUIC probes).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STARTUP_SECONDS = 120.0
WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 390, "height": 844}
DOUBLE_BACKEND = "vllm-double"
CONTAINER_BACKEND = "vllm-double-in-docker"
HUB_REPOSITORY = "modelyard-test/tiny-qwen3"


def free_port() -> int:
    """A port for a child ``modelyard serve`` to bind (``testing/ports.py``: no race under -n)."""
    return reserved_port()


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.2)


def double_backend_yaml() -> str:
    """The engine double as a GPUStack-shaped custom backend with vLLM's command line."""
    return (
        f"backend_name: {DOUBLE_BACKEND}\n"
        "description: the reference server playing vLLM (a test double)\n"
        'default_version: "1.0"\n'
        "health_check_path: /health\n"
        "modelyard:\n"
        "  family: vllm\n"
        "version_configs:\n"
        '  "1.0":\n'
        f"    run_command: {sys.executable} -m modelyard.bench.reference_server vllm serve {{{{model_path}}}}"
        " --host {{worker_ip}} --port {{port}} --served-model-name {{model_name}}\n"
        "    custom_framework: cpu\n"
        "    modelyard:\n"
        "      reasoning_field: reasoning\n"
        "      stop_grace_seconds: 5\n"
    )


def container_backend_yaml(image: str) -> str:
    """The engine double in a container: GPUStack YAML with an image and an entrypoint."""
    return (
        f"backend_name: {CONTAINER_BACKEND}\n"
        "description: the reference server playing vLLM in a container (a test double)\n"
        'default_version: "1.0"\n'
        "health_check_path: /health\n"
        "modelyard:\n"
        "  family: vllm\n"
        "version_configs:\n"
        '  "1.0":\n'
        f"    image_name: {image}\n"
        "    entrypoint: python3 -m modelyard.bench.reference_server\n"
        "    run_command: vllm serve {{model_path}} --host {{worker_ip}} --port {{port}}"
        " --served-model-name {{model_name}}\n"
        "    custom_framework: cpu\n"
        "    env:\n"
        f"      PYTHONPATH: {project_source_folder()}\n"
        f"      PATH: {Path(sys.executable).parent}:/usr/bin\n"
        "    modelyard:\n"
        "      reasoning_field: reasoning\n"
        "      stop_grace_seconds: 5\n"
    )


def docker_problem() -> str | None:
    """Why the Docker runtime cannot run here; None when it can."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"dockerd is not usable: {probe.stderr.strip().splitlines()[-1:] or 'no output'}"
    return None


@dataclass
class ConsoleServer:
    """A running ``modelyard serve``; ``api`` is an httpx client with the admin's Basic auth."""

    url: str
    data_dir: Path
    password: str
    process: subprocess.Popen[bytes]
    log_path: Path
    api: httpx.Client
    hub: HuggingFaceHubDouble
    # Why container backends cannot run here (no Docker); None when they can.
    docker_problem: str | None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def deployment(self, name: str) -> dict[str, Any] | None:
        response = self.api.get(f"/api/v1/deployments/{name}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def wait_running(self, name: str, replicas: int = 1, seconds: float = 90.0) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def running() -> bool:
            deployment = self.deployment(name)
            if deployment is None:
                return False
            found.update(deployment)
            states = [instance["state"] for instance in deployment["instances"]]
            return states.count("running") >= replicas

        try:
            wait_until(running, seconds, f"{name} running with {replicas} replica(s)")
        except AssertionError as error:
            raise AssertionError(f"{error}; last seen: {found}") from error
        return found


@pytest.fixture(scope="session")
def hub(test_models: ModelCache, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HuggingFaceHubDouble]:
    """The Hugging Face Hub DOUBLE serving the tiny test model in seven shards."""
    model = test_models.copy("tiny-qwen3-small-shards", tmp_path_factory.mktemp("hub-model") / "tiny-qwen3")
    with HuggingFaceHubDouble([RepositoryDouble.from_directory(HUB_REPOSITORY, model)]) as double:
        yield double
        double.faults.release_all()


@contextlib.contextmanager
def serve_console(
    root: Path, hub: HuggingFaceHubDouble, environment: dict[str, str] | None = None, docker: bool = True
) -> Iterator[ConsoleServer]:
    """``modelyard serve`` in a subprocess on a free port, its data under ``root``; stopped after.
    ``environment`` adds variables (the NVML double's); ``docker`` mounts this host's Python for
    the Docker runtime's engines when Docker runs here."""
    data_dir = root / "data"
    port = free_port()
    log_path = root / "serve.log"
    variables = {
        **os.environ,
        "MODELYARD_DATA_DIR": str(data_dir),
        "MODELYARD_URL": f"http://127.0.0.1:{port}",
        # Pulls go to the hub double; engines load local directories only.
        "HF_ENDPOINT": hub.endpoint,
        "OMP_NUM_THREADS": "1",
        "NO_COLOR": "1",
        **(environment or {}),
    }
    variables.pop("HF_HUB_OFFLINE", None)
    arguments = ["serve", "--no-demo", "--port", str(port)]
    problem = docker_problem() if docker else "this server runs no containers"
    if problem is None:
        import_skeleton_image()
        for mount in host_python_mounts():
            arguments += ["--docker-volume", f"{mount.host_path}:{mount.engine_path}:ro"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "modelyard.cli.main", *arguments],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=variables,
            cwd=root,
        )
    url = f"http://127.0.0.1:{port}"
    password_file = data_dir / "admin-password"

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"modelyard serve exited: {log_path.read_text()}")
        try:
            return (
                password_file.is_file()
                and httpx.get(f"{url}/login", timeout=2, verify=shared_tls_context()).status_code == 200
            )
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, STARTUP_SECONDS, "modelyard serve to answer")
        password = password_file.read_text().strip()
        with httpx.Client(
            base_url=url, auth=("admin", password), timeout=30, verify=shared_tls_context()
        ) as api:
            yield ConsoleServer(url, data_dir, password, process, log_path, api, hub, problem)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def console_server(
    tmp_path_factory: pytest.TempPathFactory, hub: HuggingFaceHubDouble
) -> Iterator[ConsoleServer]:
    """The server most tests share: no GPU (this host has none), Docker when it runs here."""
    with serve_console(tmp_path_factory.mktemp("console"), hub) as server:
        yield server


@pytest.fixture(scope="session")
def double_backend(console_server: ConsoleServer) -> str:
    """The engine double imported as a custom backend (through the REST API, once)."""
    response = console_server.api.post("/api/v1/backends/import", content=double_backend_yaml())
    assert response.status_code == 201, response.text
    return DOUBLE_BACKEND


@pytest.fixture(scope="session")
def double_deployment(console_server: ConsoleServer, double_backend: str, tiny_model_dir: Path) -> str:
    """A running deployment on the engine double, made through the REST API, for the tests that
    only need something to talk to (keys, benchmarks, pages)."""
    api = console_server.api
    response = api.post("/api/v1/models", json={"name": "tiny-shared", "path": str(tiny_model_dir)})
    assert response.status_code == 201, response.text
    response = api.post(
        "/api/v1/deployments",
        json={"model": "tiny-shared", "name": "chat", "backend": double_backend, "skip_verification": True},
    )
    assert response.status_code == 201, response.text
    console_server.wait_running("chat")
    return "chat"


# Package scope, not session: sync Playwright keeps an asyncio loop running in the main thread
# while it is started, and every async test collected after tests/e2e would then fail with
# "Runner.run() cannot be called from a running event loop".
@pytest.fixture(scope="package")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="package")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    # launch() gives every run a fresh, temporary user data directory.
    browser = playwright_instance.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
    yield browser
    browser.close()


@dataclass
class PageWatch:
    """What went wrong in the browser: console errors, page errors, failed requests, HTTP errors."""

    origin: str
    problems: list[str] = field(default_factory=list)
    expected: list[tuple[int, re.Pattern[str]]] = field(default_factory=list)

    def expect(self, status: int, url_pattern: str) -> None:
        """Declare an HTTP error answer the test provokes on purpose (a refused deploy, ...)."""
        self.expected.append((status, re.compile(url_pattern)))

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            text = message.text
            # Chromium logs every 4xx/5xx fetch as a console error: those are judged by status below.
            if text.startswith("Failed to load resource: the server responded with a status of"):
                return
            self.problems.append(f"console error: {text} ({message.location.get('url')})")

    def on_page_error(self, error: Exception) -> None:
        self.problems.append(f"uncaught exception: {error}")

    def on_request_failed(self, request: Request) -> None:
        failure = request.failure or ""
        # A stream the page closed on purpose (a log it stopped following, a page left).
        if "ERR_ABORTED" in failure:
            return
        self.problems.append(f"request failed: {request.method} {request.url}: {failure}")

    def on_request(self, request: Request) -> None:
        if not request.url.startswith((self.origin, "data:", "about:", "blob:")):
            self.problems.append(f"request outside this server: {request.method} {request.url}")

    def on_response(self, response: Response) -> None:
        if response.status < 400:
            return
        for status, pattern in self.expected:
            if response.status == status and pattern.search(response.url):
                return
        self.problems.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    def attach(self, page: Page) -> None:
        page.on("console", self.on_console)
        page.on("pageerror", self.on_page_error)
        page.on("requestfailed", self.on_request_failed)
        page.on("request", self.on_request)
        page.on("response", self.on_response)


@dataclass
class Console:
    """A signed-in browser context and its first page."""

    context: BrowserContext
    page: Page
    watch: PageWatch
    server: ConsoleServer

    def open(self, path: str) -> Page:
        self.page.goto(self.server.url + path)
        return self.page

    def new_page(self) -> Page:
        page = self.context.new_page()
        self.watch.attach(page)
        return page


def sign_in(page: Page, server: ConsoleServer, password: str | None = None) -> None:
    page.goto(f"{server.url}/login")
    page.get_by_label("Password").fill(password or server.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{server.url}/")


def new_console(
    browser: Browser, server: ConsoleServer, viewport: dict[str, int], signed_in: bool
) -> Console:
    context = browser.new_context(viewport=viewport, base_url=server.url)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    page = context.new_page()
    watch = PageWatch(origin=server.url)
    watch.attach(page)
    if signed_in:
        sign_in(page, server)
    return Console(context, page, watch, server)


@pytest.fixture
def console(browser: Browser, console_server: ConsoleServer) -> Iterator[Console]:
    """A fresh context at 1280 px, signed in through the form; fails on any browser problem."""
    session = new_console(browser, console_server, WIDE, signed_in=True)
    yield session
    session.context.close()
    assert not session.watch.problems, "\n".join(session.watch.problems)


@pytest.fixture
def anonymous_console(browser: Browser, console_server: ConsoleServer) -> Iterator[Console]:
    session = new_console(browser, console_server, WIDE, signed_in=False)
    yield session
    session.context.close()
    assert not session.watch.problems, "\n".join(session.watch.problems)
