"""The console's Jinja2 templates (``modelyard/console/templates``) and what every page gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

import modelyard.console
from modelyard import __version__
from modelyard.services.password_policy import MINIMUM_PASSWORD_LENGTH

CONSOLE_DIRECTORY = Path(modelyard.console.__file__).parent
STATIC_DIRECTORY = CONSOLE_DIRECTORY / "static"

templates = Jinja2Templates(directory=CONSOLE_DIRECTORY / "templates")
# Facts the server owns that pages state (the account form's length rule): never a second copy.
templates.env.globals["minimum_password_length"] = MINIMUM_PASSWORD_LENGTH

# Console pages run only our own scripts and styles, from this server; frames only from it too.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; frame-ancestors 'self'; form-action 'self'; base-uri 'none'"
)

# (page key, path, label): the navigation, in order.
NAVIGATION: tuple[tuple[str, str, str], ...] = (
    ("dashboard", "/", "Dashboard"),
    ("models", "/models", "Models"),
    ("backends", "/backends", "Backends"),
    ("deployments", "/deployments", "Deployments"),
    ("workers", "/workers", "Workers"),
    ("playground", "/playground", "Playground"),
    ("benchmarks", "/benchmarks", "Benchmarks"),
    ("tunes", "/tunes", "Tunes"),
    ("keys", "/keys", "API keys"),
    ("usage", "/usage", "Usage"),
    ("audit", "/audit", "Audit log"),
)


def render(
    request: Request,
    template: str,
    *,
    title: str,
    page: str,
    status_code: int = 200,
    csrf_token: str = "",
    username: str | None = None,
    **values: Any,
) -> Response:
    """A console page with the navigation, the CSRF token and the security headers."""
    response = templates.TemplateResponse(
        request,
        template,
        {
            "title": title,
            "page": page,
            "navigation": NAVIGATION,
            "csrf_token": csrf_token,
            "username": username,
            "version": __version__,
            **values,
        },
        status_code=status_code,
    )
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response
