"""Issue 38 item 9: `/docs` and `/redoc` load their scripts and styles from this server (the
files fastapi-offline ships), not from a CDN, so they work on a machine without internet; the
files are open without a key, as the pages are."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from voxflow.config import load_settings
from voxflow.server.app import create_app

KEY = "sk-docs-test-key"


def client(**server) -> TestClient:
    settings = load_settings(None, {f"server.{k}": v for k, v in server.items()}, environ={})
    return TestClient(create_app(settings), raise_server_exceptions=False)


def assets(html: str) -> list[str]:
    """Every script, stylesheet and icon a page loads (src= and href=)."""
    return re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: ?'([^']+)'", html)


def test_the_docs_pages_load_nothing_from_another_host() -> None:
    c = client()
    for page in ("/docs", "/redoc"):
        html = c.get(page).text
        loaded = assets(html)
        assert loaded, page
        assert not [u for u in loaded if "://" in u or u.startswith("//")], (page, loaded)
    swagger = assets(c.get("/docs").text)
    assert "/docs/assets/swagger-ui-bundle.js" in swagger
    assert "/docs/assets/swagger-ui.css" in swagger
    assert "/docs/assets/redoc.standalone.js" in assets(c.get("/redoc").text)


def test_the_assets_are_served_and_open_without_a_key() -> None:
    keyed = client(api_keys=[KEY])
    for name, kind in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css"),
                       ("redoc.standalone.js", "javascript"), ("favicon.png", "image/png")):
        r = keyed.get(f"/docs/assets/{name}")
        assert r.status_code == 200, name
        assert kind in r.headers["content-type"] and len(r.content) > 1000, name
    # only GET of the assets is open; anything else under /docs still needs the key
    assert keyed.post("/docs/assets/swagger-ui.css").status_code == 401
    assert keyed.get("/docs/assets/missing.js").status_code == 404
