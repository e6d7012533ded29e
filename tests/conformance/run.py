"""Run the conformance suite: one voxflow server, then pytest in each client venv against it.

    .venv/bin/python tests/conformance/run.py [--venv NAME ...] [-- PYTEST ARGS]

(`make conformance` creates the venvs first.) The server is `.venv/bin/voxflow serve --config
configs/multi.yaml` on a free port (`voxflow_server.start`); each venv
`.venv-conformance/NAME` runs the test modules listed for it in `VENVS` with `VOXFLOW_URL`
(and `VOXFLOW_WYOMING_PORT`, its Wyoming listener) set.
Prints a pass/fail line per check and per venv, and `conformance: N passed, M failed`;
exits non-zero when any check failed, a venv is missing, or a venv ran no check.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import voxflow_server  # noqa: E402

REPO = HERE.parents[1]
VENV_ROOT = REPO / ".venv-conformance"
COMMON = ["test_versions.py", "test_pipecat.py", "test_livekit.py", "test_openai_sdk.py"]
# venv name (requirements-NAME.txt) -> the modules it runs; the replays need only httpx and
# run once, in the newest venv
VENVS = {
    "latest": [*COMMON, "test_replays.py"],
    "openai2": COMMON,
    "homeassistant": ["home_assistant/test_home_assistant.py"],
}
OWN_CONFIG = {"homeassistant": HERE / "home_assistant"}
"""Venvs whose tests have their own folder and pytest.ini (and none of the suite's conftest)."""
VENV_TIMEOUT_S = 900


def junit_results(path: Path) -> list[tuple[str, str]]:
    """(test id, outcome) for each test case of a pytest junit-xml file."""
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.py::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        results.append((name, outcome))
    return results


def run_venv(name: str, url: str, wyoming_port: int, out_dir: Path,
             extra: list[str]) -> list[tuple[str, str]]:
    """pytest in .venv-conformance/NAME against `url`; its results (a failed pseudo-check when
    the venv is missing or pytest reported nothing)."""
    python = VENV_ROOT / name / "bin" / "python"
    if not python.exists():
        return [(f"{name}: venv {python.parent.parent} is missing (make conformance)", "failed")]
    junit = out_dir / f"{name}.xml"
    root = OWN_CONFIG.get(name, HERE)
    command = [str(python), "-m", "pytest", "-c", str(root / "pytest.ini"),
               "--rootdir", str(root), "--confcutdir", str(root), "-v", f"--junitxml={junit}",
               *[str(HERE / module) for module in VENVS[name]], *extra]
    print(f"\n=== conformance venv {name}: {' '.join(command)}", flush=True)
    env = {**os.environ, "VOXFLOW_URL": url, "VOXFLOW_WYOMING_PORT": str(wyoming_port)}
    started = time.monotonic()
    try:
        code = subprocess.run(command, cwd=REPO, env=env, timeout=VENV_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        return [(f"{name}: pytest ran past {VENV_TIMEOUT_S} s", "failed")]
    print(f"=== venv {name}: pytest exit {code} in {time.monotonic() - started:.1f} s",
          flush=True)
    results = junit_results(junit) if junit.exists() else []
    if not results or (code != 0 and all(o != "failed" for _, o in results)):
        results.append((f"{name}: pytest exited {code}", "failed"))
    return results


def main(argv: list[str] | None = None) -> int:
    """Start the server, run every venv, print the summary; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", action="append", choices=list(VENVS),
                        help="only this venv (repeatable; default: all)")
    parser.add_argument("pytest_args", nargs="*", help="passed to every pytest (after --)")
    args = parser.parse_args(argv)
    names = args.venv or list(VENVS)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="voxflow-conformance-") as tmp:
        out_dir = Path(tmp)
        server = voxflow_server.start(log_dir=out_dir)
        print(f"voxflow serve ready at {server.url} after {time.monotonic() - started:.1f} s",
              flush=True)
        results: dict[str, list[tuple[str, str]]] = {}
        try:
            for name in names:
                results[name] = run_venv(name, server.url, server.wyoming_port, out_dir,
                                         args.pytest_args)
        finally:
            alive = server.process.poll() is None
            tail = server.log_tail(60)
            server.stop()
        failed_any = any(o == "failed" for r in results.values() for _, o in r)
        if failed_any or not alive:
            print(f"\n--- voxflow server log (last lines){'' if alive else ', it DIED'}:\n"
                  f"{tail}")
    print("\n=== conformance summary")
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for name, cases in results.items():
        counts = {k: sum(1 for _, o in cases if o == k) for k in totals}
        for key in totals:
            totals[key] += counts[key]
        print(f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['skipped']} skipped")
        for case, outcome in cases:
            if outcome != "passed":
                print(f"  {outcome.upper()} {case}")
    if not alive:
        totals["failed"] += 1
        print("the voxflow server exited during the run")
    print(f"wall time {time.monotonic() - started:.1f} s")
    print(f"conformance: {totals['passed']} passed, {totals['failed']} failed")
    ok = totals["failed"] == 0 and totals["skipped"] == 0 and totals["passed"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
