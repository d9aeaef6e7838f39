"""The session's OpenID Connect provider (a pytest plugin, named in ``tests/conftest.py``).

Under ``.ci/run`` the provider runs already (``scripts/test-oidc-provider.sh start`` exports
``MODELYARD_TEST_OIDC_URL`` and ``MODELYARD_TEST_OIDC_DIR``); run by hand, the fixture starts one
itself for the session. Without Django and django-oidc-provider (the ``test`` extra) the tests
that need it are skipped, except under CI, where that fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port

SERVE_SCRIPT = Path(__file__).resolve().parent / "serve.py"
URL_VARIABLE = "MODELYARD_TEST_OIDC_URL"
DIRECTORY_VARIABLE = "MODELYARD_TEST_OIDC_DIR"
STARTUP_SECONDS = 60.0
# The provider's users (serve.py): alice is in modelyard-admins, bob in staff, carol in
# modelyard-operators, dave and erin in modelyard-members.
PROVIDER_PASSWORD = "provider-password"


@dataclass(frozen=True)
class TestProvider:
    """A running django-oidc-provider: its issuer URL and the directory of its database."""

    __test__ = False  # not a test class

    url: str
    directory: Path

    def add_client(self, client_id: str, secret: str, redirect_uri: str) -> None:
        """Register (or update) a confidential client allowed the one redirect URI."""
        subprocess.run(
            [
                sys.executable,
                str(SERVE_SCRIPT),
                "add-client",
                "--",  # a generated secret may begin with "-"
                str(self.directory),
                client_id,
                secret,
                redirect_uri,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def set_groups(self, username: str, *groups: str) -> None:
        """Put the provider's user ``username`` in ``groups`` only (its next ID token says so)."""
        subprocess.run(
            [sys.executable, str(SERVE_SCRIPT), "set-groups", "--", str(self.directory), username, *groups],
            check=True,
            capture_output=True,
            timeout=120,
        )


def wait_for_discovery(url: str, process: subprocess.Popen[bytes] | None, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the test OIDC provider exited:\n{log.read_text(errors='replace')}")
        try:
            if (
                httpx.get(
                    f"{url}/.well-known/openid-configuration", timeout=5, verify=shared_tls_context()
                ).status_code
                == 200
            ):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the test OIDC provider did not answer within {STARTUP_SECONDS:.0f} s")


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestProvider]:
    url, directory = os.environ.get(URL_VARIABLE), os.environ.get(DIRECTORY_VARIABLE)
    if url and directory:
        yield TestProvider(url, Path(directory))
        return
    if os.environ.get("CI"):
        pytest.fail(
            f"{URL_VARIABLE} is not set under CI: start the provider with scripts/test-oidc-provider.sh"
        )
    pytest.importorskip("oidc_provider", reason="the test extra's django-oidc-provider is not installed")
    folder = tmp_path_factory.mktemp("oidc-provider")
    port = reserved_port()
    log = folder / "provider.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, str(SERVE_SCRIPT), "run", str(folder), str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_discovery(url, process, log)
        yield TestProvider(url, folder)
    finally:
        process.terminate()
        process.wait(timeout=30)
