"""What a report says about where it ran: CPU, cores, threads, packages, git commit.

A number without the machine that produced it cannot be compared with anything; these records
go into every bench JSON next to the results (the load seen by the idle gate is recorded there
too).
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("voxflow", "numpy", "onnxruntime", "piper-tts", "fastapi", "uvicorn", "httpx",
            "soundfile", "av", "soxr", "psutil", "flask", "torch", "faster-whisper",
            "ctranslate2", "resemblyzer", "jiwer")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "ORT_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape the numbers (absent ones left out)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def git_state(folder: Path | str | None = None) -> dict[str, Any]:
    """The commit checked out in `folder` (default: the working directory) and whether tracked
    files differ from it; empty when it is not a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
                "folder": str(Path(folder or ".").resolve())}
    except (OSError, subprocess.SubprocessError):
        return {}


def gpu_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


def machine_record() -> dict[str, Any]:
    """CPU model, core counts, memory, GPUs, OS, Python, thread variables, package versions."""
    import psutil

    return {
        "cpu_model": cpu_model(),
        "logical_cores": psutil.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpu_names(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "thread_variables": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "packages": package_versions(),
    }
