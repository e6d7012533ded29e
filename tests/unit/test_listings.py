"""Listing helpers of /v1/audio/voices (issue 8, item 6): language tags and their case."""

from __future__ import annotations

import pytest

from voxflow.server.listings import tag_case


@pytest.mark.parametrize(("tag", "cased"), [
    ("en-us", "en-US"), ("en_gb", "en-GB"), ("ja", "ja"), ("EN", "en"),
    ("sr-latn", "sr-Latn"), ("zh-hant-tw", "zh-Hant-TW"), ("es-419", "es-419"),
])
def test_tags_are_written_in_bcp47_case(tag, cased):
    assert tag_case(tag) == cased
