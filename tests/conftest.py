"""Shared pytest fixtures, and the unit suite's one split.

Modules marked ``slow`` run real networks or processes for seconds each, and `make test-fast`
leaves them out (``-m "not slow"``, issue 41 item 2); `make test` and CI run every test.

Measured at the commit that made the split (`pytest -n 2 --durations=0 tests/unit`, 2-core
Intel Xeon): these modules held 123 of the suite's 170 test-seconds. Whole modules, not single
tests, because a module-scoped fixture (a voice, a checkpoint) charges its load to whichever
of its tests runs first.

The hook lives here, not in a ``tests/unit/conftest.py``: the integration tests import helpers
with ``from conftest import ...``, and pytest leaves the last ``conftest`` it loaded in
``sys.modules`` under that name; a unit conftest, loaded after the integration one, would
shadow it.
"""

import os
import tempfile
from pathlib import Path

import pytest
from tiny_voice import write_tiny_voice

SLOW_MODULES = frozenset({
    # PyTorch nets on tiny or full-size random weights
    "test_nanocodec_stage", "test_nanocodec_decode", "test_nanocodec_stream",
    "test_cosyvoice3_family", "test_cosyvoice3_voice_admin", "test_cosyvoice3_token2wav",
    "test_cosyvoice3_bistream_serving",
    "test_magpie_family", "test_magpie_kv_cache", "test_magpie_decode",
    # the real Kokoro and joe graphs, whole and windowed
    "test_kokoro_family", "test_piper_nchwc", "test_piper_decode", "test_piper_stream_decoder",
    # subprocesses: the GPU script's dry run, the ceiling sweep, an mDNS announcement
    "test_gpu_run", "test_bench_ceiling", "test_wyoming_zeroconf",
})


def pytest_configure(config: pytest.Config) -> None:
    """Point ``XDG_DATA_HOME`` at an empty folder of this run's own, before any engine is
    built: saved voices and lexicons default to ``$XDG_DATA_HOME/voxflow/...``
    (`voxflow.atomic_files`), and a test must never read, or write, the files of the user who
    runs it (servers and Ray workers the tests start inherit it)."""
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="voxflow-test-data-")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of a `SLOW_MODULES` module of tests/unit ``slow``."""
    for item in items:
        if item.path.parent.name == "unit" and item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``--dist loadfile`` (`make test`'s integration tests on two workers): each module
    on one worker, as loadfile does, but every ``test_ray_*`` module on the same one, one
    after another. Those call ``ray.init`` in the test process, and two local Ray clusters
    started at once on one machine mix up their nodes (a replica on node '' in
    test_ray_cluster when they ran side by side). xdist's own ``loadgroup`` would do this
    with marks, but with pytest 9 it groups nothing (it renames ``item._nodeid``, which
    pytest 9 no longer reads). None: xdist's own scheduler."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayModulesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "ray" if Path(module).stem.startswith("test_ray_") else module

    return RayModulesTogether(config, log)


@pytest.fixture(scope="session")
def tiny_voice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session tmp dir holding ``tiny.onnx`` + ``tiny.onnx.json`` (see tests/tiny_voice.py)."""
    d = tmp_path_factory.mktemp("tiny_voice")
    write_tiny_voice(d, name="tiny")
    return d
