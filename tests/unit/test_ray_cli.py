"""`voxflow serve --ray` without Ray installed: a one-line error naming the extra, before any
model loads (a subprocess refuses to import Ray, whether or not it is installed here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "ray":
            raise ImportError("No module named 'ray'")
sys.meta_path.insert(0, Refuse())
import voxflow.cli
import voxflow.ray.settings, voxflow.ray.proxy
assert not [m for m in sys.modules if m.split(".")[0] == "ray"]
sys.exit(voxflow.cli.main(["serve", "--ray", "--set", "server.port=0"]))
"""


def test_serve_ray_without_ray_names_the_extra_and_loads_nothing():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "voxflow: voxflow serve --ray needs Ray Serve, which is not installed: "
        "pip install 'voxflow[ray]' (in a checkout: pip install -e '.[ray]')")
    assert "Traceback" not in done.stderr
    assert "loaded model" not in done.stderr
