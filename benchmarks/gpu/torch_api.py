"""Static check that the GPU path names only PyTorch APIs the target torch has.

The GPU machine runs torch 2.11; development here is on a newer torch. This script walks the
Python files of the GPU path with `ast` (default: every .py under voxflow/ and benchmarks/gpu/,
and benchmarks/nanocodec_cpu.py; or the files and folders given as arguments), collects every
dotted name rooted in torch and resolves it against a torch:

    .venv/bin/python benchmarks/gpu/torch_api.py                 # against the torch importing it
    .venv/bin/python benchmarks/gpu/torch_api.py --json out.json
    .venv/bin/python benchmarks/gpu/torch_api.py --source-tree torch-2.11-src   # no import

What is collected: `torch.x.y` attribute chains (loads and stores, e.g. setting
`torch.backends.cudnn.allow_tf32`), through import aliases in the scope they are bound in
(`import torch`, `import torch.nn.functional as F`, `from torch import nn, Tensor`,
`from torch.nn import functional as F`, `from torch.profiler import profile`, ...; a local
name that shadows an alias is honoured); the imports themselves (`torch.nn.functional`,
`torch.profiler.profile`); plain module paths (`torch.cuda.graphs`); `getattr(torch, "name")`
with a literal name and no default; and names inside string annotations. `getattr` with a
default and `hasattr` are taken as guards and not collected. `safetensors.torch` and other
modules merely named torch are not torch.

How a name is resolved (default mode): `importlib.import_module` on progressively longer
prefixes (`torch`, `torch.cuda`, `torch.cuda.graphs`, ...; lazy submodules get imported this
way), then `getattr` for the rest. A prefix that is a module but fails to import (a missing
dependency) is a miss, with the error. An attribute whose access raises something other than
AttributeError (a CUDA-only property on a CPU build, say) is listed as unverified, not missing.
CUDA-specific names such as `torch.cuda.CUDAGraph`, `torch.cuda.graph`, `torch.cuda.Stream`
exist in CPU builds too (as stubs), so this mode runs the same on a CPU box and on the device.

`--source-tree DIR` resolves against torch's Python sources instead, without importing torch
(DIR holds `torch/`, e.g. the `torch/**/*.py` and `*.pyi` files unzipped from a wheel). This is
how a newer dev torch can be checked for names added after the device's torch. A name is found
when its module file exists (`.py`, `.pyi` or package), or it is bound at module level in that
module or its `.pyi` stub (def, class, assignment, annotation, import, listed in `__all__`),
following `from X import *` (honouring `__all__`) and a module replaced by a class instance
(`sys.modules[__name__] = CudnnModule(...)`, as torch.backends does). torch._C and friends are
read from their stubs (`torch/_C/__init__.pyi`, `_VariableFunctions.pyi`, ...), which is also
where `torch.cat` or `torch.float32` come from via `torch/__init__.py`'s star imports. Past the
first non-module component the check goes on through class bodies (and resolvable bases) and
through `x = SomeClass()` instances; a name reached through anything else (an object, a class
with `__getattr__`, `torch.ops.<namespace>.<op>`, a base class that cannot be followed) is
unverified rather than missing. A module-level `__getattr__` (torch's own serves lazy modules
and deprecated names) counts a name only if its body or the containers it reads mention it.
The torch._C stubs lack a few C names (sub-byte dtypes such as `torch.int4`, TorchScript
internals, IPU/XLA autocast calls): a miss in a module that star-imports a stub says so in its
reason, and should be confirmed by hand. Checked against the installed 2.13 sources, this mode
finds every public name of torch, torch.nn, torch.nn.functional, torch.cuda, torch.backends.cuda,
torch.profiler and friends except 45 such C-only names.

Limits: attributes reached through objects (`tensor.foo()`, `module.weight.foo`,
`torch.randn(2).foo`, `x = torch.cuda; x.foo`) cannot be resolved statically and are not
checked; nor are signatures (a keyword argument added in a later release passes here). Code
under `if hasattr(torch, ...)` is checked like any other. The other half of the check is the
GPU run itself exercising the code on torch 2.11.

Output: the torch version, how many distinct names were checked, and each name that does not
resolve with file:line of every use. Exit status 1 if any name is missing, 0 if none, 2 if a
file could not be read or parsed. `--json PATH` writes
{"torch": version, "checked": n, "missing": {name: ["file:line", ...]},
 "unverified": {name: reason}}.
Needs only the standard library (and torch, in the default mode).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PATHS = ("voxflow", "benchmarks/gpu", "benchmarks/nanocodec_cpu.py")
SKIP_DIRS = {"__pycache__", ".venv", ".git", "build", "dist"}

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _is_torch(dotted: str | None) -> bool:
    return bool(dotted) and (dotted == "torch" or dotted.startswith("torch."))


# ---------------------------------------------------------------------------------------------
# Collection


def _walk_scope(node: ast.AST):
    """Nodes of one scope: nested scopes are yielded themselves but not entered."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, _SCOPES):
            yield from _walk_scope(child)


def _scope_nodes(node: ast.AST):
    """Nodes in the scope `node` opens (its decorators, bases and defaults belong outside)."""
    if isinstance(node, ast.Lambda):
        tops: list[ast.AST] = [node.body]
    elif isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        tops = list(node.body)
    else:
        tops = list(ast.iter_child_nodes(node))
    for top in tops:
        yield top
        if not isinstance(top, _SCOPES):
            yield from _walk_scope(top)


def _arg_names(args: ast.arguments) -> list[str]:
    every = args.posonlyargs + args.args + args.kwonlyargs
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return [a.arg for a in every]


def _import_bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """(local name, torch path or None) for each name an import statement binds."""
    out: list[tuple[str, str | None]] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out.append((alias.asname, alias.name if _is_torch(alias.name) else None))
            else:
                top = alias.name.split(".")[0]
                out.append((top, top if _is_torch(alias.name) else None))
        return out
    module = node.module if not node.level else None
    for alias in node.names:
        if alias.name != "*":
            path = f"{module}.{alias.name}" if _is_torch(module) else None
            out.append((alias.asname or alias.name, path))
    return out


def _scope_bindings(node: ast.AST) -> dict[str, str | None]:
    """Names bound in the scope of `node`: to a torch path if a torch import binds them there,
    else to None (the name shadows an outer alias)."""
    torch_names: dict[str, str] = {}
    other: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        other.update(_arg_names(node.args))
    for child in _scope_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            for name, path in _import_bindings(child):
                if path:
                    torch_names[name] = path
                else:
                    other.add(name)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            other.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(child.name)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            other.add(child.name)
    bindings: dict[str, str | None] = dict.fromkeys(other)
    bindings.update(torch_names)
    return bindings


class _Collector(ast.NodeVisitor):
    """Collects (torch dotted name, line) for one module."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, dict[str, str | None]]] = []
        self.refs: list[tuple[str, int]] = []

    # scopes -----------------------------------------------------------------------------------
    def _lookup(self, name: str) -> str | None:
        for depth, (kind, names) in enumerate(reversed(self.scopes)):
            if kind == "class" and depth > 0:
                continue
            if name in names:
                return names[name]
        return None

    def _in_scope(self, kind: str, node: ast.AST, parts: list) -> None:
        self.scopes.append((kind, _scope_bindings(node)))
        for part in parts:
            self.visit(part)
        self.scopes.pop()

    def visit_Module(self, node: ast.Module) -> None:
        self._in_scope("module", node, node.body)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in node.decorator_list + node.args.defaults + node.args.kw_defaults:
            if expr is not None:
                self.visit(expr)
        for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [
                node.args.vararg, node.args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self._visit_annotation(arg.annotation)
        if node.returns is not None:
            self._visit_annotation(node.returns)
        self._in_scope("function", node, node.body)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in node.args.defaults + node.args.kw_defaults:
            if expr is not None:
                self.visit(expr)
        self._in_scope("function", node, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(expr)
        self._in_scope("class", node, node.body)

    def _visit_comprehension(self, node: ast.AST) -> None:
        self._in_scope("function", node, list(ast.iter_child_nodes(node)))

    visit_ListComp = _visit_comprehension
    visit_SetComp = _visit_comprehension
    visit_DictComp = _visit_comprehension
    visit_GeneratorExp = _visit_comprehension

    # annotations ------------------------------------------------------------------------------
    def _visit_annotation(self, node: ast.expr) -> None:
        self.visit(node)
        for const in ast.walk(node):
            if isinstance(const, ast.Constant) and isinstance(const.value, str):
                try:
                    tree = ast.parse(const.value.strip(), mode="eval")
                except SyntaxError:
                    continue
                for sub in ast.walk(tree):
                    if hasattr(sub, "lineno"):
                        sub.lineno = const.lineno
                self.visit(tree.body)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self._visit_annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    # references -------------------------------------------------------------------------------
    def _dotted(self, node: ast.expr) -> str | None:
        """The torch path a Name/Attribute chain denotes, or None."""
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self._lookup(node.id)
        if not base:
            return None
        return ".".join([base, *reversed(attrs)])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted:
            self.refs.append((dotted, node.lineno))
            return
        inner: ast.expr = node
        while isinstance(inner, ast.Attribute):
            inner = inner.value
        self.visit(inner)

    def visit_Call(self, node: ast.Call) -> None:
        func, args = node.func, node.args
        if (isinstance(func, ast.Name) and func.id == "getattr" and len(args) == 2
                and not node.keywords and isinstance(args[1], ast.Constant)
                and isinstance(args[1].value, str)):
            base = self._dotted(args[0])
            if base:
                self.refs.append((f"{base}.{args[1].value}", node.lineno))
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _is_torch(alias.name):
                self.refs.append((alias.name, node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not _is_torch(node.module):
            return
        for alias in node.names:
            name = node.module if alias.name == "*" else f"{node.module}.{alias.name}"
            self.refs.append((name, node.lineno))


def python_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_absolute() and not path.exists():
            path = ROOT / raw
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.py")
                            if not SKIP_DIRS.intersection(p.relative_to(path).parts))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(raw)
    return list(dict.fromkeys(files))


def _shown(path: Path) -> str:
    for base in (Path.cwd(), ROOT):
        try:
            return str(path.resolve().relative_to(base))
        except ValueError:
            pass
    return str(path)


def collect(files: list[Path]) -> tuple[dict[str, list[str]], list[str]]:
    """{torch name: ["file:line", ...]} over `files`, and the files that could not be read."""
    uses: dict[str, list[str]] = defaultdict(list)
    errors: list[str] = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
            errors.append(f"{_shown(path)}: {exc}")
            continue
        collector = _Collector()
        collector.visit(tree)
        for name, line in collector.refs:
            where = f"{_shown(path)}:{line}"
            if where not in uses[name]:
                uses[name].append(where)
    return dict(uses), errors


# ---------------------------------------------------------------------------------------------
# Resolution against the importing torch


def _import_prefix(parts: list[str]) -> tuple[object, int, str | None]:
    """Import the longest module prefix; (module, parts used, error if a module failed)."""
    obj = importlib.import_module(parts[0])
    used = 1
    while used < len(parts):
        prefix = ".".join(parts[: used + 1])
        try:
            obj = importlib.import_module(prefix)
        except ModuleNotFoundError as exc:
            if exc.name == prefix:
                break
            return obj, used, f"import {prefix}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a module that exists but fails to import
            return obj, used, f"import {prefix}: {type(exc).__name__}: {exc}"
        used += 1
    return obj, used, None


def resolve_runtime(name: str) -> tuple[str, str]:
    """("ok" | "missing" | "unverified", reason)."""
    parts = name.split(".")
    obj, used, error = _import_prefix(parts)
    if error:
        return "missing", error
    for depth in range(used, len(parts)):
        attr = parts[depth]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = getattr(obj, attr)
            continue
        except AttributeError:
            pass
        except Exception as exc:  # noqa: BLE001 - exists, but cannot be read on this build
            return "unverified", f"{'.'.join(parts[: depth + 1])}: {type(exc).__name__}: {exc}"
        module_name = getattr(obj, "__name__", None) if hasattr(obj, "__path__") else None
        try:
            obj = importlib.import_module(f"{module_name}.{attr}") if module_name else None
        except ImportError:
            obj = None
        if obj is None:
            return "missing", f"no attribute {attr!r} on {'.'.join(parts[:depth])}"
    return "ok", ""


# ---------------------------------------------------------------------------------------------
# Resolution against a torch source tree

# Descriptors: ("module", modname) | ("class", modname, ClassDef) | ("obj", modname, ClassDef)
#   | ("from", source module, name) | ("import", modname) | ("instance", modname, class name)
#   | ("value",)
_CONTAINERS = (ast.Set, ast.List, ast.Tuple, ast.Dict)


def _statements(body: list[ast.stmt]):
    """Statements of a module or class body, through if/try/with/for/while blocks."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, field, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _statements(handler.body)


def _strings(node: ast.AST | None) -> list[str]:
    if node is None:
        return []
    return [n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


class _ModuleInfo:
    def __init__(self, name: str, is_package: bool) -> None:
        self.name = name
        self.is_package = is_package
        self.bindings: dict[str, list[tuple]] = defaultdict(list)
        self.all_names: set[str] = set()
        self.has_all = False
        self.stars: list[str] = []
        self.getattr_names: set[str] | None = None  # names a module __getattr__ mentions
        self.replaced_by: str | None = None
        self.assigned: dict[str, ast.expr] = {}

    def bind(self, name: str, desc: tuple) -> None:
        self.bindings[name].append(desc)

    def source_of(self, module: str | None, level: int) -> str:
        if not level:
            return module or ""
        base = self.name.split(".")
        base = base if self.is_package else base[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join(base + ([module] if module else []))

    def add_import(self, stmt: ast.Import | ast.ImportFrom) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                self.bind(local, ("import", alias.name if alias.asname else local))
            return
        source = self.source_of(stmt.module, stmt.level)
        for alias in stmt.names:
            if alias.name == "*":
                self.stars.append(source)
            else:
                self.bind(alias.asname or alias.name, ("from", source, alias.name))

    def add_target(self, target: ast.expr, value: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                self.bind(target.id, ("instance", self.name, value.func.id))
            else:
                self.bind(target.id, ("value",))
            if value is not None:
                self.assigned[target.id] = value
            if target.id == "__all__":
                self.has_all = True
                self.all_names.update(_strings(value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.add_target(elt.value if isinstance(elt, ast.Starred) else elt, None)
        elif (isinstance(target, ast.Subscript) and isinstance(value, ast.Call)
              and isinstance(value.func, ast.Name) and ast.unparse(target).startswith(
                  "sys.modules[")):
            self.replaced_by = value.func.id

    def add_all_call(self, stmt: ast.Expr) -> None:
        call = stmt.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "__all__"):
            self.all_names.update(s for arg in call.args for s in _strings(arg))

    def add_getattr(self, func: ast.FunctionDef) -> None:
        names = set(_strings(func))
        for node in ast.walk(func):
            if isinstance(node, ast.Name) and isinstance(self.assigned.get(node.id), _CONTAINERS):
                names.update(_strings(self.assigned[node.id]))
        self.getattr_names = (self.getattr_names or set()) | names

    def add(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.bind(stmt.name, ("value",))
        elif isinstance(stmt, ast.ClassDef):
            self.bind(stmt.name, ("class", self.name, stmt))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self.add_import(stmt)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self.add_target(target, stmt.value)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            self.add_target(stmt.target, stmt.value)
        elif isinstance(stmt, ast.Expr):
            self.add_all_call(stmt)


def _class_body(node: ast.ClassDef) -> dict[str, tuple]:
    names: dict[str, tuple] = {}
    for stmt in _statements(node.body):
        if isinstance(stmt, ast.ClassDef):
            names[stmt.name] = ("nested", stmt)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[stmt.name] = ("value",)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names[sub.id] = ("value",)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names[stmt.target.id] = ("value",)
    return names


_MODULE_DUNDERS = {"__file__", "__name__", "__path__", "__spec__", "__doc__", "__dict__",
                   "__loader__", "__package__", "__all__"}
_TRIVIAL_BASES = {"object", "Generic", "Protocol", "NamedTuple", "TypedDict", "Enum", "IntEnum",
                  "ABC", "Exception", "RuntimeError", "ValueError", "int", "str", "dict"}
_MAX_DEPTH = 40


class SourceTree:
    """Resolves torch names against a tree of torch .py / .pyi sources."""

    def __init__(self, root: Path) -> None:
        root = root.resolve()
        if root.name == "torch" and (root / "__init__.py").exists():
            root = root.parent
        if not (root / "torch" / "__init__.py").exists():
            raise FileNotFoundError(f"{root}: no torch/__init__.py")
        self.root = root
        self._modules: dict[str, _ModuleInfo] = {}
        self._bodies: dict[int, dict[str, tuple]] = {}
        self._cache: dict[tuple, object] = {}
        self._paths: dict[str, tuple[list[Path], bool]] = {}

    def version(self) -> str:
        path = self.root / "torch" / "version.py"
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body if path.exists() else []:
            targets = [getattr(stmt, "target", None), *getattr(stmt, "targets", [])]
            if any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets):
                return ast.literal_eval(stmt.value)
        return "unknown"

    def _files(self, name: str) -> tuple[list[Path], bool]:
        if name not in self._paths:
            self._paths[name] = self._find_files(name)
        return self._paths[name]

    def _find_files(self, name: str) -> tuple[list[Path], bool]:
        base = self.root.joinpath(*name.split("."))
        package = [base / "__init__.py", base / "__init__.pyi"]
        if any(p.exists() for p in package):
            return [p for p in package if p.exists()], True
        return [p for p in (base.with_suffix(".py"), base.with_suffix(".pyi")) if p.exists()], False

    def is_module(self, name: str) -> bool:
        return bool(name) and bool(self._files(name)[0])

    def module(self, name: str) -> _ModuleInfo:
        if name not in self._modules:
            files, package = self._files(name)
            info = _ModuleInfo(name, package)
            getattrs = []
            for path in files:
                tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
                for stmt in _statements(tree.body):
                    info.add(stmt)
                    if isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__":
                        getattrs.append(stmt)
            for func in getattrs:
                info.add_getattr(func)
            self._modules[name] = info
        return self._modules[name]

    def class_body(self, node: ast.ClassDef) -> dict[str, tuple]:
        if id(node) not in self._bodies:
            self._bodies[id(node)] = _class_body(node)
        return self._bodies[id(node)]

    # descriptors ------------------------------------------------------------------------------
    def module_attr(self, mod: str, name: str, depth: int) -> tuple[list[tuple], str | None]:
        """Descriptors for `mod.name`, and why the lookup may be incomplete (None if not)."""
        key = (mod, name)
        if key not in self._cache:
            self._cache[key] = ([], None)  # breaks import cycles
            self._cache[key] = self._module_attr(mod, name, depth)
        return self._cache[key]

    def _module_attr(self, mod: str, name: str, depth: int) -> tuple[list[tuple], str | None]:
        info = self.module(mod)
        found = list(info.bindings.get(name, []))
        if self.is_module(f"{mod}.{name}"):
            found.append(("module", f"{mod}.{name}"))
        unsure = None
        for star in info.stars if depth < _MAX_DEPTH else []:
            if not self.is_module(star):
                unsure = f"star import from {star}"
                continue
            sinfo = self.module(star)
            if (name in sinfo.all_names) if sinfo.has_all else not name.startswith("_"):
                found += self.module_attr(star, name, depth + 1)[0]
        if not found and (name in info.all_names or name in _MODULE_DUNDERS):
            found.append(("value",))
        if not found and info.replaced_by:
            for cls in self.deref(("instance", mod, info.replaced_by), depth + 1):
                found += self.step(cls, name, depth + 1)[0]
        if not found and info.getattr_names is not None and name in info.getattr_names:
            found.append(("value",))
        return found, unsure

    def class_attr(self, mod: str, node: ast.ClassDef, name: str,
                   depth: int) -> tuple[list[tuple], str | None]:
        key = (id(node), name)
        if key not in self._cache:
            self._cache[key] = ([], None)
            self._cache[key] = self._class_attr(mod, node, name, depth)
        return self._cache[key]

    def _class_attr(self, mod: str, node: ast.ClassDef, name: str,
                    depth: int) -> tuple[list[tuple], str | None]:
        body = self.class_body(node)
        if name in body:
            kind = body[name]
            return [("class", mod, kind[1]) if kind[0] == "nested" else kind], None
        unsure = None
        if "__getattr__" in body or "__getattribute__" in body:
            unsure = f"class {node.name} has __getattr__"
        elif node.keywords:
            unsure = f"class {node.name} has a metaclass"
        found: list[tuple] = []
        for base in node.bases if depth < _MAX_DEPTH else []:
            base = base.value if isinstance(base, ast.Subscript) else base
            classes = [d for desc in self.expr(mod, base, depth + 1)
                       for d in self.deref(desc, depth + 1) if d[0] == "class"]
            if not classes and ast.unparse(base).split(".")[-1] not in _TRIVIAL_BASES:
                unsure = unsure or f"base {ast.unparse(base)} of {node.name} not followed"
            for cls in classes:
                more, why = self.class_attr(cls[1], cls[2], name, depth + 1)
                found += more
                unsure = unsure or why
        return found, unsure

    def expr(self, mod: str, node: ast.expr, depth: int) -> list[tuple]:
        if isinstance(node, ast.Name):
            return self.module_attr(mod, node.id, depth)[0]
        if isinstance(node, ast.Attribute):
            return [d for desc in self.expr(mod, node.value, depth)
                    for d in self.step(desc, node.attr, depth + 1)[0]]
        return []

    def deref(self, desc: tuple, depth: int) -> list[tuple]:
        """Module / class / obj descriptors that `desc` stands for (empty if unknown)."""
        key = ("deref", desc)
        if key not in self._cache:
            self._cache[key] = []  # breaks cycles
            self._cache[key] = list(dict.fromkeys(self._deref(desc, depth)))
        return self._cache[key]

    def _deref(self, desc: tuple, depth: int) -> list[tuple]:
        kind = desc[0]
        if kind in ("module", "class", "obj") or depth > _MAX_DEPTH:
            return [desc] if kind in ("module", "class", "obj") else []
        if kind == "import":
            return [("module", desc[1])] if self.is_module(desc[1]) else []
        if kind == "from":
            source, name = desc[1], desc[2]
            if self.is_module(f"{source}.{name}"):
                return [("module", f"{source}.{name}")]
            if not self.is_module(source):
                return []
            found = self.module_attr(source, name, depth + 1)[0]
            return [d for f in found for d in self.deref(f, depth + 1)]
        if kind == "instance":
            found = self.module_attr(desc[1], desc[2], depth + 1)[0]
            return [("obj", d[1], d[2]) for f in found for d in self.deref(f, depth + 1)
                    if d[0] == "class"]
        return []

    def step(self, desc: tuple, name: str, depth: int) -> tuple[list[tuple], str | None]:
        """Descriptors for `<desc>.name`, and why the answer may be incomplete."""
        targets = self.deref(desc, depth)
        if not targets:
            return [], "attribute of an object"
        found: list[tuple] = []
        unsure = None
        for target in targets:
            if target[0] == "module":
                more, why = self.module_attr(target[1], name, depth + 1)
            else:
                more, why = self.class_attr(target[1], target[2], name, depth + 1)
                why = why or ("instance attribute?" if target[0] == "obj" else None)
            found += more
            unsure = unsure or why
        return found, unsure

    def _stub_star(self, mod: str) -> bool:
        """Whether `mod` star-imports a module known only from .pyi stubs (a C extension)."""
        return any(all(p.suffix == ".pyi" for p in self._files(star)[0])
                   for star in self.module(mod).stars if self.is_module(star))

    def resolve(self, dotted: str) -> tuple[str, str]:
        """("ok" | "missing" | "unverified", reason)."""
        status, reason = self._resolve(dotted)
        if status != "ok":
            # The caches cut import cycles short, so an answer cached mid-cycle may lack a path:
            # a miss is confirmed from clean caches, where only this query's own cycles are cut.
            self._cache.clear()
            status, reason = self._resolve(dotted)
        return status, reason

    def _resolve(self, dotted: str) -> tuple[str, str]:
        parts = dotted.split(".")
        used = 1
        while used < len(parts) and self.is_module(".".join(parts[: used + 1])):
            used += 1
        descs: list[tuple] = [("module", ".".join(parts[:used]))]
        for depth in range(used, len(parts)):
            found: list[tuple] = []
            unsure = None
            for desc in descs:
                more, why = self.step(desc, parts[depth], 0)
                found += more
                unsure = unsure or why
            if not found:
                where = ".".join(parts[:depth])
                if unsure:
                    return "unverified", f"{where}: {unsure}"
                stubs = [d[1] for d in descs if d[0] == "module" and self._stub_star(d[1])]
                hint = f"; {stubs[0]} star-imports C stubs, which miss a few C names" \
                    if stubs else ""
                return "missing", f"no {parts[depth]!r} in {where}{hint}"
            descs = found
        return "ok", ""


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help=f"files / folders (default: {DEFAULT_PATHS})")
    parser.add_argument("--json", metavar="PATH", help="write the result as JSON")
    parser.add_argument("--source-tree", metavar="DIR",
                        help="resolve against torch sources under DIR instead of importing torch")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every name checked")
    args = parser.parse_args(argv)

    try:
        files = python_files(args.paths or [str(ROOT / p) for p in DEFAULT_PATHS])
    except FileNotFoundError as exc:
        print(f"ERROR no such file or folder: {exc}", file=sys.stderr)
        return 2
    uses, errors = collect(files)
    if args.source_tree:
        tree = SourceTree(Path(args.source_tree))
        version, where, resolve = tree.version(), f"sources {tree.root}", tree.resolve
    else:
        import torch

        version, where, resolve = torch.__version__, str(Path(torch.__file__).parent), \
            resolve_runtime

    print(f"torch {version} ({where})")
    missing: dict[str, list[str]] = {}
    unverified: dict[str, str] = {}
    for name in sorted(uses):
        status, reason = resolve(name)
        if args.verbose:
            print(f"  {status:10} {name}  {reason}".rstrip())
        if status == "missing":
            missing[name] = uses[name]
            print(f"MISSING {name}  ({reason})")
            for use in uses[name]:
                print(f"    {use}")
        elif status == "unverified":
            unverified[name] = reason
    for error in errors:
        print(f"ERROR {error}", file=sys.stderr)

    print(f"{len(uses)} distinct torch names checked in {len(files)} file(s): "
          f"{len(missing)} missing, {len(unverified)} unverified")
    for name, reason in unverified.items():
        print(f"  unverified {name}  ({reason})")
    if args.json:
        result = {"torch": version, "checked": len(uses), "missing": missing,
                  "unverified": unverified}
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 2 if errors else 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
