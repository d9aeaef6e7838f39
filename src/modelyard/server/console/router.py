"""``install_console(app)``: the console's sign-in, pages and assets on the server's app."""

from __future__ import annotations

import os

from fastapi import FastAPI

from modelyard.server.console import assets, pages, signin
from modelyard.server.context import ServerContext
from modelyard.server.oidc import routes as oidc_routes
from modelyard.server.oidc.provider import OidcProvider
from modelyard.server.oidc.settings import OidcSettings
from modelyard.server.session_options import SessionOptions
from modelyard.server.sessions import SessionStore


def install_console(app: FastAPI, *, openapi_url: str) -> None:
    context = app.state.context
    assert isinstance(context, ServerContext), "create_app() sets app.state.context first"
    # Read here, before the server starts: a bad MODELYARD_SESSION_* value is one error line.
    app.state.console_sessions = SessionStore(context.database, SessionOptions.from_environment(os.environ))
    oidc = OidcSettings.from_environment(os.environ)
    app.state.oidc_provider = OidcProvider(oidc) if oidc is not None else None
    assets.install_assets(app, openapi_url=openapi_url)
    app.include_router(signin.router)
    app.include_router(oidc_routes.router)
    app.include_router(pages.router)
