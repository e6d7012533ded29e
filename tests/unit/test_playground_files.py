"""The playground's files (issue 14, item 1) on the real app built by `create_app`, without
loading models: served with the right content types, open without an API key, and nothing in
them fetched from another origin (no CDN: the page must work offline)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from voxflow.config import load_settings
from voxflow.server.app import create_app
from voxflow.server.playground import PAGE_FILES, STATIC_DIR


def client(**overrides) -> TestClient:
    settings = load_settings(None, {f"server.{k}": v for k, v in overrides.items()},
                             environ={})
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.mark.parametrize("keys", [[], ["sk-page"]], ids=["no keys", "with keys"])
def test_page_and_assets_are_served_with_their_content_types_and_need_no_key(keys):
    c = client(api_keys=keys)
    expected = {"/": "text/html", "/playground.js": "text/javascript",
                "/playground.css": "text/css"}
    assert set(PAGE_FILES) == set(expected)
    for path, media in expected.items():
        r = c.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["content-type"] == f"{media}; charset=utf-8"
        assert r.content == (STATIC_DIR / PAGE_FILES[path][0]).read_bytes()
        assert len(r.headers["x-request-id"]) == 32
    page = c.get("/").text
    assert 'src="playground.js"' in page and 'href="playground.css"' in page
    if keys:  # the API behind the page still needs the key
        assert c.get("/v1/models").status_code == 401
        assert c.get("/playground.js.map").status_code == 401
        assert c.get("/index.html").status_code == 401


def test_no_file_of_the_page_loads_anything_from_elsewhere():
    files = sorted(STATIC_DIR.iterdir())
    assert {f.name for f in files} == {name for name, _ in PAGE_FILES.values()}
    for file in files:
        text = file.read_text(encoding="utf-8")
        assert not re.search(r"https?://|(?<![\w:])//[\w.-]+\.\w", text), file.name
        assert "@import" not in text, file.name


def test_the_page_is_not_in_the_api_description():
    paths = client().get("/openapi.json").json()["paths"]
    assert not set(PAGE_FILES) & set(paths)
