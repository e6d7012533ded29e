"""The playground: a web page at ``/`` that speaks through this server's own API.

Three static files from ``voxflow/server/static`` (no build step, nothing from a CDN, so the
page works offline): ``/`` (index.html), ``/playground.js`` and ``/playground.css``. They are
open without an API key (`voxflow.server.auth.OPEN_PATHS` includes `PAGE_PATHS`): the page
itself holds no secret, and it asks for a key when ``/health`` says one is needed or an API
call answers 401 (docs/api.md, "Playground").
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent / "static"

PAGE_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/playground.js": ("playground.js", "text/javascript; charset=utf-8"),
    "/playground.css": ("playground.css", "text/css; charset=utf-8"),
}
"""URL path -> (file in `STATIC_DIR`, content type)."""

PAGE_PATHS = frozenset(PAGE_FILES)
"""The page's paths, served without an API key."""


def _file_route(file: Path, media_type: str):
    async def serve() -> FileResponse:
        # no-cache: the browser revalidates (ETag), so an upgraded server's page is used
        return FileResponse(file, media_type=media_type, headers={"Cache-Control": "no-cache"})

    return serve


def install_playground(app: FastAPI) -> None:
    """Serve the page's files on `app` (GET only, not in /docs)."""
    for path, (name, media_type) in PAGE_FILES.items():
        app.add_api_route(path, _file_route(STATIC_DIR / name, media_type), methods=["GET"],
                          include_in_schema=False)


__all__ = ["PAGE_FILES", "PAGE_PATHS", "STATIC_DIR", "install_playground"]
