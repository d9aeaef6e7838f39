"""Assets that ship in the package and are served by this server, never from a CDN:

- ``/console/static/``: the console's own CSS and scripts (``modelyard/console/static``);
- ``/console/vendor/plotly.min.js``: plotly.js from the ``plotly`` Python package, and
  ``/console/vendor/plotly.css``: its styles as a stylesheet (``plotly_styles.py``);
- ``/api/docs``: Swagger UI, with its files from the ``swagger-ui-bundle`` package.
"""

from __future__ import annotations

from pathlib import Path

import plotly
import swagger_ui_bundle
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, HTMLResponse, Response

from modelyard.server.console.plotly_styles import bundle_css
from modelyard.server.console.templates import STATIC_DIRECTORY

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
SWAGGER_DIRECTORY = Path(swagger_ui_bundle.swagger_ui_path)


def install_assets(app: FastAPI, *, openapi_url: str) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC_DIRECTORY), name="console-static")
    app.mount("/api/docs/assets", StaticFiles(directory=SWAGGER_DIRECTORY), name="swagger-assets")

    @app.get("/console/vendor/plotly.min.js", include_in_schema=False)
    async def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="text/javascript")

    @app.get("/console/vendor/plotly.css", include_in_schema=False)
    async def plotly_css() -> Response:
        return Response(bundle_css(PLOTLY_JS), media_type="text/css")

    @app.get("/api/docs", include_in_schema=False)
    async def api_docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title="modelyard REST API",
            swagger_js_url="/api/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/api/docs/assets/swagger-ui.css",
            swagger_favicon_url="/api/docs/assets/favicon-32x32.png",
        )
