"""``install_console(app)``: the console's sign-in, pages and assets on the server's app."""

from __future__ import annotations

from fastapi import FastAPI

from modelyard.server.console import assets, pages, signin
from modelyard.server.sessions import SessionStore


def install_console(app: FastAPI, *, openapi_url: str) -> None:
    app.state.console_sessions = SessionStore()
    assets.install_assets(app, openapi_url=openapi_url)
    app.include_router(signin.router)
    app.include_router(pages.router)
