"""Which requests' audio each family calls fixed (`ModelFamily.fixed_audio`), the audio cache's
rule. The claims rest on determinism tests: unseeded Piper differs per request
(tests/integration/test_audio_cache_served.py), unseeded whole Kokoro repeats byte for byte
(tests/integration/test_kokoro.py), seeded requests repeat for every family (test_api.py,
test_kokoro.py, test_cosyvoice3.py, test_magpie_family.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from voxflow.models.base import ModelFamily
from voxflow.models.kokoro.model import KokoroFamily


@pytest.mark.parametrize("family", ["piper", "cosyvoice3", "magpie"])
def test_sampling_families_fix_seeded_requests_only(family):
    from voxflow.models.registry import family_class

    cls = family_class(family)
    assert cls.fixed_audio is ModelFamily.fixed_audio  # the default: no override
    fake = SimpleNamespace()
    assert [cls.fixed_audio(fake, seeded, streamed)  # type: ignore[arg-type]
            for seeded, streamed in ((True, True), (True, False), (False, False), (False, True))
            ] == [True, True, False, False]


def test_kokoro_fixes_all_but_streamed_unseeded_requests_with_deadline_cuts():
    cuts = SimpleNamespace(settings=SimpleNamespace(deadline_cuts=True))
    assert KokoroFamily.fixed_audio(cuts, True, True)  # type: ignore[arg-type]
    assert KokoroFamily.fixed_audio(cuts, False, False)  # type: ignore[arg-type]
    assert not KokoroFamily.fixed_audio(cuts, False, True)  # type: ignore[arg-type]
    no_cuts = SimpleNamespace(settings=SimpleNamespace(deadline_cuts=False))
    assert KokoroFamily.fixed_audio(no_cuts, False, True)  # type: ignore[arg-type]
