"""Reading NeMo ``.nemo`` archives (spec §5 "Distribution", §4: "a loader must read
``model_config.yaml`` inside the ``.nemo`` archive").

A ``.nemo`` file is a tar archive (plain or gzip-compressed) holding at least
``model_config.yaml`` (the model's cfg, a YAML mapping) and ``model_weights.ckpt`` (a
``torch.save`` of the fp32 state dict), possibly under ``./`` and beside other artifacts
(tokenizer files), which are ignored. `read_nemo` returns both without extracting anything to
disk; the weights are read with ``torch.load(weights_only=True)``, so an archive cannot run
code. The model's own loaders check the keys (`nanocodec.loader.split_checkpoint`,
`magpie.loader.load_model`); `nanocodec_config` reads the decoder's arguments from the cfg.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

CONFIG_MEMBER = "model_config.yaml"
WEIGHTS_MEMBER = "model_weights.ckpt"


class NemoArchiveError(ValueError):
    """A ``.nemo`` file that is not a readable tar, lacks a member, or holds a config that is
    not a mapping or weights that are not a state dict of tensors. The message names the file
    and the member."""


@dataclass(frozen=True)
class NemoArchive:
    """What a ``.nemo`` archive holds: ``config`` (the parsed ``model_config.yaml``) and
    ``state_dict`` (key → CPU tensor, as saved: fp32 for NeMo's released checkpoints)."""

    config: dict[str, Any]
    state_dict: dict[str, Tensor]


def _member(archive: tarfile.TarFile, name: str, path: Path) -> bytes:
    """The bytes of member ``name`` (or ``./name``); a regular file only."""
    for info in archive.getmembers():
        if info.name.removeprefix("./") == name:
            if not info.isfile():
                raise NemoArchiveError(f"{path}: {name} is not a regular file in the archive")
            handle = archive.extractfile(info)
            if handle is None:
                raise NemoArchiveError(f"{path}: {name} cannot be read")
            return handle.read()
    raise NemoArchiveError(f"{path}: the archive holds no {name}")


def read_nemo(path: str | Path) -> NemoArchive:
    """Read a ``.nemo`` archive's config and weights.

    Args:
        path: the ``.nemo`` file.
    Returns:
        `NemoArchive`: the config mapping and the state dict (tensors on the CPU). A
        checkpoint saved as ``{"state_dict": {...}}`` is unwrapped.
    Raises:
        FileNotFoundError: no such file.
        NemoArchiveError: not a tar archive, a member missing, the YAML not a mapping, or the
            weights not a mapping of string keys to tensors (or not loadable with
            ``weights_only``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such .nemo file")
    try:
        with tarfile.open(path, "r:*") as archive:
            config_bytes = _member(archive, CONFIG_MEMBER, path)
            weights_bytes = _member(archive, WEIGHTS_MEMBER, path)
    except tarfile.TarError as exc:
        raise NemoArchiveError(f"{path}: not a .nemo (tar) archive: {exc}") from exc
    try:
        config = yaml.safe_load(config_bytes.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise NemoArchiveError(f"{path}: {CONFIG_MEMBER} is not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise NemoArchiveError(f"{path}: {CONFIG_MEMBER} is not a mapping")
    try:
        state = torch.load(io.BytesIO(weights_bytes), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (pickle, zip and unpickler errors alike)
        raise NemoArchiveError(f"{path}: {WEIGHTS_MEMBER} cannot be loaded as weights: "
                               f"{exc}") from exc
    if isinstance(state, Mapping) and set(state) == {"state_dict"}:
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(
            isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        raise NemoArchiveError(f"{path}: {WEIGHTS_MEMBER} is not a state dict of tensors")
    return NemoArchive(config=dict(config), state_dict=dict(state))


def nanocodec_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The NanoCodec decoder's keyword arguments from a codec ``model_config.yaml``: its
    ``audio_decoder`` section without NeMo's ``_target_`` (pass to
    `nanocodec.config.DecoderConfig.from_dict`, which refuses unknown keys). Raises
    `NemoArchiveError` when the section is missing or not a mapping."""
    section = config.get("audio_decoder")
    if not isinstance(section, Mapping):
        raise NemoArchiveError("codec config has no audio_decoder section")
    return {k: v for k, v in section.items() if k != "_target_"}
