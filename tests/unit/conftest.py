"""The unit suite's one split: modules marked ``slow`` run real networks or processes for
seconds each, and `make test-fast` leaves them out (``-m "not slow"``, issue 41 item 2);
`make test` and CI run every test.

Measured at the commit that made the split (`pytest -n 2 --durations=0 tests/unit`, 2-core
Intel Xeon): these modules held 123 of the suite's 170 test-seconds. Whole modules, not single
tests, because a module-scoped fixture (a voice, a checkpoint) charges its load to whichever
of its tests runs first.
"""

from __future__ import annotations

import pytest

SLOW_MODULES = frozenset({
    # PyTorch nets on tiny or full-size random weights
    "test_nanocodec_stage", "test_nanocodec_decode", "test_nanocodec_stream",
    "test_cosyvoice3_family", "test_cosyvoice3_voice_admin", "test_cosyvoice3_token2wav",
    "test_cosyvoice3_bistream_serving",
    "test_magpie_family", "test_magpie_kv_cache", "test_magpie_decode",
    # the real Kokoro and joe graphs, whole and windowed
    "test_kokoro_family", "test_piper_nchwc", "test_piper_decode",
    # subprocesses: the GPU script's dry run, the ceiling sweep, an mDNS announcement
    "test_gpu_run", "test_bench_ceiling", "test_wyoming_zeroconf",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of a `SLOW_MODULES` module ``slow``."""
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
