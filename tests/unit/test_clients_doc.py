"""Issue 38 item 10: docs/clients.md has a section for each app people plug voxflow into, each
saying where the base URL, model and voice go; its Python snippets compile and its links lead
to files of the repository (the behaviour it describes is checked by tests/conformance)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "clients.md"
APPS = ["Pipecat", "LiveKit Agents", "The OpenAI SDK and the OpenAI Agents SDK", "Open WebUI",
        "LibreChat", "SillyTavern", "LobeChat", "Home Assistant"]


def sections() -> dict[str, str]:
    """Level-2 heading -> its text, up to the next level-2 heading."""
    parts = re.split(r"^## (.+)$", PAGE.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("app", APPS)
def test_each_app_says_where_the_url_model_and_voice_go(app):
    text = sections()[app]
    assert "HOST:8000" in text, app  # where voxflow's address goes
    assert re.search(r"\bmodel\b", text) and re.search(r"\bvoice", text), app
    assert "Sends" in text or "sends" in text, app  # what the app sends
    assert "Gets" in text or "answers" in text or "audio-" in text, app  # and gets


def test_the_python_snippets_compile():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 3
    for block in blocks:
        compile(block, str(PAGE), "exec")


def test_relative_links_name_files_of_the_repository():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", PAGE.read_text(encoding="utf-8"))
    assert links
    for link in links:
        assert (PAGE.parent / link).exists(), link
