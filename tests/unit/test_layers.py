"""No upward import (issue 41 item 1): each part of `voxflow` imports only from its own floor or
the floors below it, so the layering docs/architecture.md draws cannot drift.

The floors, lowest first (docs/architecture.md, Layout):
0. plumbing: the package root (its version), errors, records, malloc, logging, failpoints, the
   memory budget and gate, API keys, atomic files, audio formats, text front ends and
   pronunciation lexicons;
1. the stage contract (`voxflow.stages`);
2. model families (`voxflow.models`): stages, text and audio, never the engine;
3. the settings (`voxflow.config`, `voxflow.config_suggest`, `voxflow.shipped_configs`): a
   model's options are its family's settings type;
4. the engine (`voxflow.engine`);
5. the front ends: HTTP (`voxflow.server`) and Home Assistant's Wyoming (`voxflow.wyoming`);
6. Ray Serve (`voxflow.ray`), which deploys the HTTP front end and owns its ``ray:`` section;
7. tools that drive a server from outside: `voxflow.bench`, `voxflow.eval`;
8. the command line and generated docs: `voxflow.cli`, `voxflow.settings_doc`.

Every ``import`` counts, also one inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "voxflow"

FLOORS: dict[str, int] = {
    "errors": 0, "records": 0, "malloc": 0, "logging_setup": 0, "memory_gate": 0,
    "memory_budget": 0, "api_keys": 0, "audio": 0, "text": 0, "failpoints": 0, "__init__": 0,
    "atomic_files": 0, "lexicons": 0,
    "stages": 1,
    "models": 2,
    "config": 3, "config_suggest": 3, "shipped_configs": 3,
    "engine": 4,
    "server": 5, "wyoming": 5, "jobs": 5,
    "ray": 6,
    "bench": 7, "eval": 7,
    "cli": 8, "settings_doc": 8, "__main__": 8,
}


def _part(module: str) -> str:
    """``voxflow.engine.scheduler`` -> ``engine``; ``voxflow`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        out.append((".".join(rel.parts), path))
    return out


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every voxflow import of the file, relative ones resolved."""
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, base))
    return [(line, name) for line, name in found
            if name == "voxflow" or name.startswith("voxflow.")]


def test_every_part_of_the_package_has_a_floor():
    parts = {_part(module) for module, _ in _modules()}
    assert parts - FLOORS.keys() == set(), "give each new part of voxflow a floor in FLOORS"


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v))
def test_no_module_imports_from_a_higher_floor(module, path):
    floor = FLOORS[_part(module)]
    upward = [f"line {line}: {name} (floor {FLOORS[_part(name)]})"
              for line, name in _imports(module, path)
              if _part(name) in FLOORS and FLOORS[_part(name)] > floor]
    assert upward == [], f"{module} (floor {floor}) imports upward: {upward}"
