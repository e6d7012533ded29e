"""Strict state-dict loading for CosyVoice3 (spec §1 item 1, §3).

Works on any ``nn.Module``: the expected inventory is ``module.state_dict()`` (keys, shapes,
dtypes; tensors on the ``meta`` device are fine), so the LM, flow and HiFT modules only need the
reference's key layout. A missing, unexpected or mis-shaped key fails with `StateDictError`,
which lists every problem, naming the key and both shapes.

Sources:

- the tiny fixture state dicts (`TINY_STATE_DICTS`: safetensors, the LM's gzip-compressed);
- a real checkpoint directory holding ``llm.pt``, ``flow.pt`` and ``hift.pt`` (`CHECKPOINT_FILES`),
  read with ``torch.load(..., mmap=True, weights_only=True)``; ``hift.pt`` keys lose a leading
  ``generator.`` and legacy ``weight_g``/``weight_v`` become the parametrization names (§3);
- the full-size manifest (``full_size_state_dict_manifest.json``): key/shape/dtype lists built
  on ``meta`` (no memory), with the exact tensor and parameter counts of §1 checked
  (`FULL_SIZE_COUNTS`).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from voxflow.models.files import reading

# spec §1 item 1 (tensors in the state dict, distinct parameters)
FULL_SIZE_COUNTS: dict[str, tuple[int, int]] = {
    "flow.pt": (330, 332_257_088),
    "hift.pt": (328, 20_779_887),
    "llm.pt": (293, 506_148_480),
}
# spec §1 item 1: the tiny fixture files and their tensor counts
TINY_STATE_DICTS: dict[str, tuple[str, int]] = {
    "flow.pt": ("flow_tiny_state_dict.safetensors", 50),
    "hift.pt": ("hift_tiny_state_dict.safetensors", 328),
    "llm.pt": ("lm_tiny_state_dict.safetensors.gz", 29),
}
CHECKPOINT_FILES = ("llm.pt", "flow.pt", "hift.pt")  # spec §3, §9.3
MANIFEST_NAME = "full_size_state_dict_manifest.json"
# spec §3: state-dict entries that are buffers (not parameters), per file
PERSISTENT_BUFFERS: dict[str, tuple[str, ...]] = {
    "flow.pt": ("decoder.estimator.rotary_embed.inv_freq",),
}
# spec §3: tied entries (alias -> the parameter it shares); the LM's text head is unused
TIED_PARAMETERS: dict[str, dict[str, str]] = {
    "llm.pt": {"llm.model.lm_head.weight": "llm.model.model.embed_tokens.weight"},
}
# Entries a module may leave out (dropped from the state dict only when the module lacks them)
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {
    "llm.pt": ("llm.model.lm_head.weight",),  # tied to embed_tokens, never used (§3)
}
HIFT_PREFIX = "generator."  # spec §3: the released hift.pt may carry it
_LEGACY_WEIGHT_NORM = {
    "weight_g": "parametrizations.weight.original0",
    "weight_v": "parametrizations.weight.original1",
}
_MAX_LISTED = 20


class StateDictError(ValueError):
    """A state dict does not match its module: every missing, unexpected, mis-shaped or
    wrongly typed key, one per line, each with its shape(s) and dtype(s)."""

    def __init__(self, what: str, problems: list[str]) -> None:
        self.what = what
        self.problems = problems
        listed = problems[:_MAX_LISTED]
        more = len(problems) - len(listed)
        lines = "\n  ".join(listed + ([f"... and {more} more"] if more else []))
        super().__init__(f"{what}: {len(problems)} state-dict problem(s):\n  {lines}")


def _describe(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"{list(tensor.shape)} {dtype}"


def check_state_dict(
    state_dict: Mapping[str, object],
    expected: Mapping[str, torch.Tensor],
    *,
    what: str = "state dict",
) -> None:
    """Compare ``state_dict`` with ``expected`` (e.g. ``module.state_dict()``, any device).

    Keys must match exactly and every value must be a tensor of the expected shape. A
    floating-point tensor may differ in dtype (the loader casts it); a non-floating one, or a
    float where an integer is expected, may not. Raises `StateDictError` naming each missing
    key (with the expected shape), unexpected key (with its shape), mis-shaped key (checkpoint
    vs module shape) and dtype mismatch; ``what`` names the source in the message.
    """
    problems: list[str] = []
    for key, ref in expected.items():
        if key not in state_dict:
            problems.append(f"missing key {key!r} (module expects {_describe(ref)})")
    for key, value in state_dict.items():
        if key not in expected:
            shown = _describe(value) if isinstance(value, torch.Tensor) else type(value).__name__
            problems.append(f"unexpected key {key!r} ({shown})")
            continue
        ref = expected[key]
        if not isinstance(value, torch.Tensor):
            problems.append(f"key {key!r} is a {type(value).__name__}, not a tensor")
        elif value.shape != ref.shape:
            problems.append(
                f"mis-shaped key {key!r}: checkpoint {list(value.shape)} vs module "
                f"{list(ref.shape)}"
            )
        elif value.dtype != ref.dtype and not (
            value.dtype.is_floating_point and ref.dtype.is_floating_point
        ):
            problems.append(
                f"key {key!r}: checkpoint dtype {value.dtype} vs module dtype {ref.dtype}"
            )
    if problems:
        raise StateDictError(what, problems)


def drop_optional_keys(
    state_dict: Mapping[str, torch.Tensor], module: nn.Module, optional: Iterable[str]
) -> dict[str, torch.Tensor]:
    """``state_dict`` without those ``optional`` keys the module does not have (e.g. the LM's
    tied, unused ``llm.model.lm_head.weight``, `OPTIONAL_KEYS`). Other keys are untouched."""
    have = module.state_dict().keys()
    dropped = {key for key in optional if key not in have}
    return {key: value for key, value in state_dict.items() if key not in dropped}


def load_strict(
    module: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    *,
    what: str = "state dict",
    assign: bool = False,
    set_later: Iterable[str] = (),
) -> nn.Module:
    """Load ``state_dict`` into ``module`` strictly and return the module.

    First `check_state_dict` against ``module.state_dict()`` (raises `StateDictError`). Floating
    tensors are cast to the module's dtype for that key (the reference copies into float32
    parameters; a float64 F0 predictor gets float64). With ``assign`` (for modules built on
    ``meta``, spec §3) the tensors become the module's parameters and buffers without a copy
    when dtype and device already match (keeping a ``torch.load(mmap=True)`` mapping); they are
    moved to the module's device unless that is ``meta``. Without ``assign`` values are copied
    into the existing tensors. With ``assign``, a parameter or buffer of the module that is on
    ``meta`` and not in the state dict (a non-persistent buffer built on ``meta``) would stay
    unusable: that raises `StateDictError` before anything is loaded, unless its name is in
    ``set_later`` (a buffer the caller sets after loading, e.g. HiFT ``m_source.sine_waves``).
    """
    expected = module.state_dict()
    check_state_dict(state_dict, expected, what=what)
    if assign:
        _check_nothing_left_on_meta(module, state_dict, what, set(set_later))
    ready: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        ref = expected[key]
        device = value.device if ref.device.type == "meta" else ref.device
        ready[key] = value.to(dtype=ref.dtype, device=device)
    module.load_state_dict(ready, strict=True, assign=assign)
    return module


def _check_nothing_left_on_meta(
    module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str, set_later: set[str]
) -> None:
    if any(value.device.type == "meta" for value in state_dict.values()):
        return  # a meta inventory onto a meta module: nothing is materialised anyway
    tensors = [*module.named_parameters(), *module.named_buffers()]
    left = [
        f"{name!r} {_describe(tensor)} is on meta and not in the state dict (a non-persistent "
        "buffer?): build it on a real device before loading"
        for name, tensor in tensors
        if tensor.device.type == "meta" and name not in state_dict and name not in set_later
    ]
    if left:
        raise StateDictError(what, left)


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` file, or of a gzip-compressed one (``.gz``), on the CPU.

    Raises FileNotFoundError if the file is missing.
    """
    from safetensors.torch import load, load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no state dict at {path}")
    with reading(path, "CosyVoice3 checkpoint"):
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return load(f.read())
        return load_file(str(path))


def read_tiny_state_dicts(fixtures_dir: str | Path) -> dict[str, dict[str, torch.Tensor]]:
    """The tiny random-weight state dicts of the fixtures, keyed like a checkpoint directory.

    Returns ``{"flow.pt": ..., "hift.pt": ..., "llm.pt": ...}`` (float32 CPU tensors,
    reference key layout). Raises `StateDictError` if a file holds the wrong number of tensors
    (`TINY_STATE_DICTS`: 50, 328, 29) and FileNotFoundError if one is missing.
    """
    out: dict[str, dict[str, torch.Tensor]] = {}
    for name, (filename, count) in TINY_STATE_DICTS.items():
        state = read_safetensors(Path(fixtures_dir) / filename)
        if len(state) != count:
            raise StateDictError(filename, [f"{len(state)} tensors, expected {count}"])
        out[name] = state
    return out


def normalize_hift_keys(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``hift.pt`` keys in the reference module's layout (spec §3).

    A leading ``generator.`` is removed, and legacy ``<conv>.weight_g`` / ``<conv>.weight_v``
    become ``<conv>.parametrizations.weight.original0`` / ``.original1`` (g [out, 1, 1], v).
    Values are not copied. Raises `StateDictError` if two keys end up with the same name.
    """
    out: dict[str, torch.Tensor] = {}
    clashes: list[str] = []
    for key, value in state_dict.items():
        name = key.removeprefix(HIFT_PREFIX)
        owner, _, leaf = name.rpartition(".")
        if leaf in _LEGACY_WEIGHT_NORM:
            name = (owner + "." if owner else "") + _LEGACY_WEIGHT_NORM[leaf]
        if name in out:
            clashes.append(f"key {key!r} clashes with another key as {name!r}")
        out[name] = value
    if clashes:
        raise StateDictError("hift.pt", clashes)
    return out


def read_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """One checkpoint file, ``torch.load(path, map_location="cpu", mmap=True, weights_only=True)``.

    Tensors stay memory-mapped until loaded with ``assign=True``. ``hift.pt`` keys are passed
    through `normalize_hift_keys`. Raises FileNotFoundError if missing, `StateDictError` if
    the file is not a flat ``{str: tensor}`` mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file {path}")
    with reading(path, "CosyVoice3 checkpoint"):
        loaded = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    if not isinstance(loaded, Mapping):
        raise StateDictError(str(path), [f"holds a {type(loaded).__name__}, not a state dict"])
    bad = [
        f"key {key!r} holds a {type(value).__name__}, not a tensor"
        for key, value in loaded.items()
        if not isinstance(key, str) or not isinstance(value, torch.Tensor)
    ]
    if bad:
        raise StateDictError(str(path), bad)
    state = dict(loaded)
    return normalize_hift_keys(state) if path.name == "hift.pt" else state


def read_checkpoint_dir(directory: str | Path) -> dict[str, dict[str, torch.Tensor]]:
    """``llm.pt``, ``flow.pt`` and ``hift.pt`` of a checkpoint directory (spec §3, §9.3).

    Returns ``{"llm.pt": ..., "flow.pt": ..., "hift.pt": ...}``, each read with
    `read_checkpoint` (memory-mapped CPU tensors). Raises FileNotFoundError naming every
    missing file.
    """
    directory = Path(directory)
    missing = [name for name in CHECKPOINT_FILES if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint directory {directory} lacks {', '.join(missing)}")
    return {name: read_checkpoint(directory / name) for name in CHECKPOINT_FILES}


def load_checkpoint(
    module: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    name: str,
    *,
    assign: bool = True,
    set_later: Iterable[str] = (),
) -> nn.Module:
    """Load one checkpoint file's state dict (``name``: ``llm.pt``, ``flow.pt`` or ``hift.pt``)
    into ``module`` with `load_strict`, after dropping the `OPTIONAL_KEYS` the module lacks.
    ``assign`` defaults to True (spec §3: modules built on ``meta``); ``set_later`` as in
    `load_strict`. Raises `StateDictError`."""
    state = drop_optional_keys(state_dict, module, OPTIONAL_KEYS.get(name, ()))
    return load_strict(module, state, what=name, assign=assign, set_later=set_later)


@dataclass(frozen=True)
class TensorSpec:
    """One state-dict entry of the manifest: key, shape and dtype."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


@dataclass(frozen=True)
class ManifestEntry:
    """One file of ``full_size_state_dict_manifest.json`` (fixture README §6).

    ``keys`` in the reference module's ``state_dict()`` order; ``num_tensors`` state-dict
    entries, ``num_params`` distinct parameters (tied ones once, buffers excluded),
    ``num_state_elements`` elements over all entries.
    """

    name: str
    class_name: str
    num_tensors: int
    num_params: int
    num_state_elements: int
    keys: tuple[TensorSpec, ...]


def read_manifest(path: str | Path) -> dict[str, ManifestEntry]:
    """The full-size manifest: ``{"flow.pt": ..., "hift.pt": ..., "llm.pt": ...}``.

    ``path`` is the JSON file or the fixtures directory holding it. Raises ValueError on a
    dtype torch does not know, KeyError on a missing field.
    """
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    with reading(path, "CosyVoice3 manifest"):
        doc = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, ManifestEntry] = {}
    for name in CHECKPOINT_FILES:
        entry = doc[name]
        specs = []
        for item in entry["keys"]:
            dtype = getattr(torch, item["dtype"], None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{name}: key {item['key']!r} has unknown dtype {item['dtype']!r}")
            specs.append(TensorSpec(item["key"], tuple(int(s) for s in item["shape"]), dtype))
        out[name] = ManifestEntry(
            name=name,
            class_name=entry["class"],
            num_tensors=int(entry["num_tensors"]),
            num_params=int(entry["num_params"]),
            num_state_elements=int(entry["num_state_elements"]),
            keys=tuple(specs),
        )
    return out


def meta_state_dict(specs: Iterable[TensorSpec]) -> dict[str, torch.Tensor]:
    """Empty tensors on the ``meta`` device with each spec's shape and dtype (no memory), in
    order: an expected inventory for `check_state_dict`."""
    return {s.key: torch.empty(s.shape, dtype=s.dtype, device="meta") for s in specs}


def skeleton_module(
    state: Mapping[str, torch.Tensor],
    *,
    buffers: Iterable[str] = (),
    tied: Mapping[str, str] | None = None,
) -> nn.Module:
    """A plain module whose ``state_dict()`` has exactly ``state``'s keys, shapes and dtypes.

    Submodules follow the dotted names; each entry is a parameter holding ``state``'s tensor
    (no copy; meta tensors stay on ``meta``), or a persistent buffer if listed in ``buffers``.
    ``tied`` maps an alias key to the key whose parameter it shares (so ``parameters()`` counts
    it once while ``state_dict()`` lists both). Used to count a manifest on ``meta`` and to test
    loading without the real model classes. Keys may come in any order (safetensors files do
    not keep one). Raises ValueError if a name is both a module and a tensor, or an alias's
    target is missing or of another shape.
    """
    tied = dict(tied or {})
    root = nn.Module()
    buffer_keys = set(buffers)
    placed: dict[str, nn.Parameter] = {}
    aliases: list[tuple[nn.Module, str, str, torch.Tensor]] = []
    for key, tensor in state.items():
        *path, leaf = key.split(".")
        owner = root
        for part in path:
            child = owner._modules.get(part)
            if child is None:
                if part in owner._parameters or part in owner._buffers:
                    raise ValueError(f"{key!r}: {part!r} is a tensor and a module")
                child = nn.Module()
                owner.add_module(part, child)
            owner = child
        if leaf in owner._modules:
            raise ValueError(f"{key!r} is a module and a tensor")
        if key in tied:
            aliases.append((owner, leaf, key, tensor))  # after every parameter is placed
        elif key in buffer_keys:
            owner.register_buffer(leaf, tensor, persistent=True)
        else:
            placed[key] = nn.Parameter(tensor, requires_grad=False)
            owner.register_parameter(leaf, placed[key])
    for owner, leaf, key, tensor in aliases:
        target = placed.get(tied[key])
        if target is None or target.shape != tensor.shape:
            raise ValueError(f"tied key {key!r}: no parameter {tied[key]!r} of its shape")
        owner.register_parameter(leaf, target)
    return root


def manifest_skeleton(entry: ManifestEntry) -> nn.Module:
    """`skeleton_module` of a full-size manifest entry on ``meta``, with the file's persistent
    buffers (`PERSISTENT_BUFFERS`) and tied parameters (`TIED_PARAMETERS`) (spec §3)."""
    return skeleton_module(
        meta_state_dict(entry.keys),
        buffers=PERSISTENT_BUFFERS.get(entry.name, ()),
        tied=TIED_PARAMETERS.get(entry.name),
    )


def count_module(module: nn.Module) -> tuple[int, int]:
    """(state-dict entries, distinct parameter elements) of a module, tied parameters once."""
    return len(module.state_dict()), sum(p.numel() for p in module.parameters())


def check_full_size_manifest(entry: ManifestEntry) -> nn.Module:
    """Build ``entry`` on ``meta`` and check its exact counts (spec §1 item 1); return the module.

    Checked: the number of keys and of state-dict entries, distinct parameter elements (tied
    once, buffers excluded) and all elements against both the manifest's own fields and
    `FULL_SIZE_COUNTS` (flow 330 / 332,257,088; hift 328 / 20,779,887; llm 293 / 506,148,480).
    Raises `StateDictError` listing every count that differs.
    """
    module = manifest_skeleton(entry)
    tensors, params = count_module(module)
    elements = sum(t.numel() for t in module.state_dict().values())
    want_tensors, want_params = FULL_SIZE_COUNTS[entry.name]
    checks = [
        ("manifest keys", len(entry.keys), want_tensors),
        ("distinct keys", len({s.key for s in entry.keys}), want_tensors),
        ("state-dict tensors", tensors, want_tensors),
        ("manifest num_tensors", entry.num_tensors, want_tensors),
        ("parameters", params, want_params),
        ("manifest num_params", entry.num_params, want_params),
        ("state-dict elements", elements, entry.num_state_elements),
    ]
    problems = [f"{label} {got:,}, expected {want:,}" for label, got, want in checks if got != want]
    if problems:
        raise StateDictError(entry.name, problems)
    return module
