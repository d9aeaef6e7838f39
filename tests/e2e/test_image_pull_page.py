"""A container replica whose image is pulled from a real registry, seen on its deployment page:
the ``pulling`` badge and a progress bar of the bytes while the pull is held half-way (a relay in
front of the registry holds its answer after 1 MiB), then what came down once it is running."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from modelyard.testing.gated_proxy import GatedProxy
from modelyard.testing.local_registry import REGISTRY_EXECUTABLE, LocalRegistry

from .conftest import (
    CONTAINER_BACKEND,
    NARROW,
    WIDE,
    ConsoleServer,
    container_backend_yaml,
    new_console,
    wait_until,
)
from .pages import horizontal_overflow_px, screenshot

NAME = "pulled-in-console"
BACKEND = "registry-console-engine"
PASSWORD = f"console-pull-{uuid.uuid4().hex}"
PAYLOAD_BYTES = 4 * 2**20


@pytest.fixture(scope="module")
def registry(
    console_server: ConsoleServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRegistry]:
    problem = console_server.docker_problem
    missing = [tool for tool in (REGISTRY_EXECUTABLE, "htpasswd") if shutil.which(tool) is None]
    if problem is None and missing:
        problem = (
            f"{', '.join(missing)} not installed (Debian: apt-get install docker-registry apache2-utils)"
        )
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Docker and docker-registry are required under CI: {problem}")
        pytest.skip(problem)
    with LocalRegistry.start(
        tmp_path_factory.mktemp("console-registry"), username="ci", password=PASSWORD
    ) as started:
        yield started


def test_the_instance_card_shows_the_pull_as_it_goes(
    browser: Browser, console_server: ConsoleServer, registry: LocalRegistry, tiny_model_dir: Path
) -> None:
    api = console_server.api
    image = registry.push_new_image(
        f"modelyard-test/console-{uuid.uuid4().hex[:12]}:1", payload_bytes=PAYLOAD_BYTES
    )
    with GatedProxy.start("127.0.0.1", registry.port, hold_after_bytes=2**20) as proxy:
        through_proxy = image.replace(registry.host, f"127.0.0.1:{proxy.port}")
        credential = {
            "name": "console-pull",
            "registry": f"127.0.0.1:{proxy.port}",
            "username": "ci",
            "password": PASSWORD,
        }
        assert api.post("/api/v1/registry-credentials", json=credential).status_code == 201
        yaml_text = container_backend_yaml(through_proxy).replace(
            f"backend_name: {CONTAINER_BACKEND}", f"backend_name: {BACKEND}"
        )
        yaml_text = yaml_text.replace(
            "      stop_grace_seconds: 5\n",
            "      stop_grace_seconds: 5\n      registry_credential: console-pull\n",
        )
        imported = api.post("/api/v1/backends/import", content=yaml_text)
        assert imported.status_code == 201, imported.text
        assert (
            api.post("/api/v1/models", json={"name": "pull-model", "path": str(tiny_model_dir)}).status_code
            == 201
        )
        body = {"model": "pull-model", "name": NAME, "backend": BACKEND, "skip_verification": True}
        assert api.post("/api/v1/deployments", json=body).status_code == 201
        try:
            for viewport in (WIDE, NARROW):
                console = new_console(browser, console_server, viewport, signed_in=True)
                page = console.open(f"/deployments/{NAME}")
                card = page.locator(".instance").first
                expect(card.locator("h3 .badge.pulling")).to_be_visible(timeout=60_000)
                expect(card.locator('[data-field="pull_image"]')).to_have_text(through_proxy)
                expect(card.locator('[data-field="pull_layers"]')).to_have_text("0 of 1")
                expect(card.locator('[data-field="pull_bytes"] progress')).to_be_visible(timeout=30_000)
                expect(card.locator('[data-field="pull_bytes"]')).to_have_text(
                    re.compile(r"^\s*[0-9.]+ (B|kB|MB) of 4\.2 MB$")
                )
                assert horizontal_overflow_px(page) <= 0
                screenshot(page, "deployment-pulling", top=card)
                console.context.close()
                assert not console.watch.problems, "\n".join(console.watch.problems)
            proxy.release()
            console_server.wait_running(NAME)
            console = new_console(browser, console_server, WIDE, signed_in=True)
            page = console.open(f"/deployments/{NAME}")
            card = page.locator(".instance").first
            expect(card.locator('[data-field="pull_state"]')).to_have_text("pulled")
            expect(card.locator('[data-field="pull_layers"]')).to_have_text("1 of 1")
            expect(card.locator("h3 .badge.pulling")).to_have_count(0)
            console.context.close()
            assert not console.watch.problems, "\n".join(console.watch.problems)
        finally:
            proxy.release()
            api.delete(f"/api/v1/deployments/{NAME}")
            wait_until(lambda: console_server.deployment(NAME) is None, 60, f"{NAME} removed")
            subprocess.run(
                ["docker", "image", "rm", "--force", through_proxy], capture_output=True, check=False
            )
