"""The CLI's client for the REST API: admin credentials, one-line errors, exit status 1.

Credentials, the first that is there: ``MODELYARD_PASSWORD`` (HTTP Basic ``<user>:<password>``,
the user ``MODELYARD_USER``, by default ``admin``),
the CLI token in ``<data-dir>/cli-token`` (``Authorization: Bearer``, written by ``modelyard
serve`` on this host: no password check per command), the password in
``<data-dir>/admin-password``. Any failure is reported as one error (``modelyard.cli.errors``: a line
on stderr, or a JSON object on stdout with ``--json``) with the server's message, hint, code and
details, and ends the command with exit status 1. httpx is imported when a client is made.

Usage::

    client = ApiClient.from_context(ctx)
    deployments = client.get("/deployments")
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from modelyard.cli.context import CliContext, cli_context, stderr
from modelyard.cli.errors import errors_as_json, fail
from modelyard.cli.markup import escape

if TYPE_CHECKING:
    import httpx

__all__ = ["ENV_PASSWORD", "ApiClient", "fail", "read_admin_password", "read_cli_token"]

ENV_PASSWORD = "MODELYARD_PASSWORD"
# Who signs in with MODELYARD_PASSWORD (another user than the admin: the CLI token is the admin's).
ENV_USER = "MODELYARD_USER"
ADMIN_USERNAME = "admin"
API_PREFIX = "/api/v1"
REQUEST_TIMEOUT_SECONDS = 60.0
# What a server URL may end with when it was copied from what the server prints: the OpenAI base
# URL ("/v1") or the API's ("/api/v1"). The longest first.
_COPIED_SUFFIXES = (API_PREFIX, "/v1")
_said_stripped: set[str] = set()


def server_root(url: str) -> str:
    """The server's root URL: a trailing ``/v1`` or ``/api/v1`` is dropped, and said once on stderr
    (``MODELYARD_URL=http://host:8080/v1``, the OpenAI base URL ``serve`` prints, is accepted)."""
    root = url.rstrip("/")
    for suffix in _COPIED_SUFFIXES:
        if root.endswith(suffix):
            root = root[: -len(suffix)]
            if url not in _said_stripped:
                _said_stripped.add(url)
                stderr.print(
                    f"note: using {escape(root)} as the server URL ({escape(suffix)} dropped from "
                    f"{escape(url)}: the CLI wants the server's root, as `modelyard serve` prints it)",
                    highlight=False,
                )
            break
    return root


def read_cli_token(data_dir: Path) -> str | None:
    """The server's CLI token, when this user can read it in ``data_dir``."""
    try:
        return (data_dir / "cli-token").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def read_admin_password(data_dir: Path) -> tuple[str | None, str]:
    """The admin password and where it came from (for messages)."""
    from_environment = os.environ.get(ENV_PASSWORD)
    if from_environment:
        return from_environment, f"${ENV_PASSWORD}"
    password_file = data_dir / "admin-password"
    try:
        return password_file.read_text(encoding="utf-8").strip() or None, str(password_file)
    except FileNotFoundError:
        return None, f"${ENV_PASSWORD} or {password_file} (not found)"
    except PermissionError:
        return None, f"{password_file} (not readable by this user)"


class ApiClient:
    """A thin httpx client for ``/api/v1`` that turns every failure into ``fail``."""

    def __init__(
        self,
        base_url: str,
        password: str | None,
        password_source: str = "",
        *,
        token: str | None = None,
    ) -> None:
        import httpx

        self.base_url = server_root(base_url)
        self.password_source = password_source
        headers: dict[str, str] = {}
        auth: httpx.Auth | None = None
        if password:
            auth = httpx.BasicAuth(os.environ.get(ENV_USER) or ADMIN_USERNAME, password)
        elif token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url + API_PREFIX, auth=auth, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS
        )
        self._has_password = password is not None or token is not None

    @classmethod
    def from_cli(cls, context: CliContext) -> ApiClient:
        data_dir = context.resolved_data_dir
        if not os.environ.get(ENV_PASSWORD):
            token = read_cli_token(data_dir)
            if token is not None:
                return cls(context.url, None, str(data_dir / "cli-token"), token=token)
        password, source = read_admin_password(data_dir)
        return cls(context.url, password, source)

    @classmethod
    def from_context(cls, ctx: typer.Context) -> ApiClient:
        return cls.from_cli(cli_context(ctx))

    def close(self) -> None:
        self._http.close()

    def _fail_for(self, response: httpx.Response) -> NoReturn:
        message = f"the server answered {response.status_code}"
        hint: str | None = None
        code: str | None = None
        details: Any = None
        try:
            error = response.json()["error"]
            message, hint, details = error["message"], error.get("hint"), error.get("details")
            code = error.get("code")
        except (ValueError, KeyError, TypeError):
            if response.text.strip():
                message += f": {response.text.strip()[:200]}"
        if response.status_code == 401:
            if not self._has_password:
                hint = f"no admin password found in {self.password_source}; set {ENV_PASSWORD}"
            else:
                hint = (
                    f"the credentials from {self.password_source} were refused (is --url the server "
                    f"of that data directory?); set {ENV_PASSWORD} to the admin's current password"
                )
        if isinstance(details, dict) and not errors_as_json():
            for finding in details.get("findings", []):
                severity = finding.get("severity", "")
                colour = "red" if severity == "error" else "yellow"
                fix = f" fix: {finding['fix']}" if finding.get("fix") else ""
                check = finding.get("check_id", "")
                stderr.print(
                    f"[{colour}]{severity}[/{colour}] {escape(check)}: "
                    f"{escape(str(finding.get('message', '')))}{escape(fix)}",
                    highlight=False,
                )
        fail(message, hint, code=code, details=details)

    def _send(self, method: str, path: str, *, missing_ok: bool = False, **arguments: Any) -> httpx.Response:
        import httpx

        try:
            response = self._http.request(method, path, **arguments)
        except httpx.ConnectError:
            fail(
                f"no modelyard server at {self.base_url}: start it with `modelyard serve` or pass --url",
                code="no_server",
            )
        except httpx.TimeoutException:
            fail(
                f"the server at {self.base_url} did not answer within {REQUEST_TIMEOUT_SECONDS:.0f} s",
                code="timeout",
            )
        except httpx.HTTPError as error:
            fail(f"talking to {self.base_url} failed: {error}", code="transport_error")
        if response.status_code >= 400 and not (missing_ok and response.status_code == 404):
            self._fail_for(response)
        return response

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except json.JSONDecodeError:
            fail(
                f"the server at {self.base_url} answered something that is not JSON",
                "is --url a modelyard server?",
                code="not_json",
            )

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._json(self._send("GET", path, params=params))

    def get_or_none(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """The JSON answer, or None when no server answers or it answers an error: for what a
        command can do without (the estimate's correction by the server's recorded starts)."""
        import httpx

        try:
            response = self._http.request("GET", path, params=params, timeout=5.0)
        except httpx.HTTPError:
            return None
        if response.status_code >= 400:
            return None
        try:
            return response.json()
        except json.JSONDecodeError:
            return None

    def get_if_exists(self, path: str) -> Any:
        """Like ``get``, but None when the server answers 404."""
        response = self._send("GET", path, missing_ok=True)
        return None if response.status_code == 404 else self._json(response)

    def post_if_exists(self, path: str, body: Any = None) -> Any:
        """Like ``post``, but None when the server answers 404 (the thing does not exist)."""
        response = self._send("POST", path, missing_ok=True, json=body)
        return None if response.status_code == 404 else self._json(response)

    def get_text(self, path: str, params: dict[str, Any] | None = None) -> str:
        return self._send("GET", path, params=params).text

    def post(self, path: str, body: Any = None, *, content: bytes | None = None) -> Any:
        if content is not None:
            return self._json(self._send("POST", path, content=content))
        return self._json(self._send("POST", path, json=body))

    def put(self, path: str, body: Any) -> Any:
        return self._json(self._send("PUT", path, json=body))

    def patch(self, path: str, body: Any) -> Any:
        return self._json(self._send("PATCH", path, json=body))

    def delete(self, path: str) -> Any:
        return self._json(self._send("DELETE", path))

    def stream(self, path: str, params: dict[str, Any] | None = None) -> Iterator[bytes]:
        """The response body in chunks as they arrive; no read timeout (for ``logs -f``)."""
        import httpx

        timeout = httpx.Timeout(REQUEST_TIMEOUT_SECONDS, read=None)
        try:
            with self._http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    self._fail_for(response)
                yield from response.iter_raw()
        except httpx.ConnectError:
            fail(
                f"no modelyard server at {self.base_url}: start it with `modelyard serve` or pass --url",
                code="no_server",
            )
        except httpx.RemoteProtocolError:
            fail(f"the server at {self.base_url} closed the connection", code="transport_error")
