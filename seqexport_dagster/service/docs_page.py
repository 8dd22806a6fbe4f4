"""``/docs``: the interactive API page (Swagger UI 5), served from files shipped in a Python package.

FastAPI's default page loads Swagger UI from a CDN, which an operator's network (or a customer's
browser policy) may block, and which would run third-party code fetched at view time next to a page
where a token is typed. The assets come from the pinned ``swagger-ui-bundle-v2`` package instead and
are mounted read-only under ``/docs/assets``; the page reads ``/openapi.json`` of this server. Both
are outside ``/v1``, so they need no token; the operations they describe do.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH: Final = "/docs"
ASSETS_PATH: Final = "/docs/assets"


def add_docs_page(app: FastAPI) -> None:
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS_PATH, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs_page() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            # Swagger UI's default validator badge is an image from validator.swagger.io: off.
            swagger_ui_parameters={"validatorUrl": None},
        )
