"""CosyVoice3 voices (spec §9.5, §9.4, §11): precomputed prompt features in a safetensors file.

CAM++, the S3 speech tokenizer and the Qwen tokenizer files are not available here, so a voice is
not built from a recording at start-up: it is a file holding what the front end would compute.

| key | dtype | shape | what |
|---|---|---|---|
| ``prompt_speech_tokens`` | int32 | [P], P >= 1 | prompt speech tokens, each in [0, S) |
| ``prompt_feat`` | float32 | [2P, 80] | 24 kHz prompt mel (channels last), finite |
| ``embedding`` | float32 | [192] | raw speaker embedding (the flow L2-normalises it), finite |
| ``prompt_text_ids`` | int32 | [L] | text ids < 151936, containing ``<|endofprompt|>`` 151646 |

plus the string metadata ``language`` (non-empty) and ``prompt_text`` (the transcript as written).
Any other tensor key is refused. Every problem fails with `VoiceError`, whose message names the
file and the key, so an invalid voice stops start-up naming it (§11: the reference only asserts
151646 at synthesis time).

Random weights (§9.4): a voice served by random-weight models gets an id starting ``random-``
(`voice_id`); the tiny fixture voice (`tiny_voice`) is always served so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from voxflow.models.cosyvoice3.lm import ENDOFPROMPT_ID, QWEN2_VOCAB_SIZE, TINY_LM_CONFIG

if TYPE_CHECKING:
    from voxflow.models.cosyvoice3.token2wav import FlowPrompt

MEL_BINS = 80
EMBEDDING_DIM = 192
TENSOR_KEYS = ("prompt_speech_tokens", "prompt_feat", "embedding", "prompt_text_ids")
METADATA_KEYS = ("language", "prompt_text")
VOICE_SUFFIX = ".safetensors"
RANDOM_PREFIX = "random-"
TINY_VOICE_NAME = "tiny"
# The tiny voice's transcript is unknown: the LM fixture's prompt text ids are random (README §3)
TINY_PROMPT_TEXT = "(tiny fixture: 11 random text ids, no transcript)"
TINY_LANGUAGE = "und"


class VoiceError(ValueError):
    """An invalid voice file; the message names the file and the key."""


@dataclass(frozen=True)
class Voice:
    """One voice: the LM and flow prompt (spec §9.5). Tensors on the CPU, unbatched."""

    name: str
    prompt_speech_tokens: Tensor  # int32 [P]
    prompt_feat: Tensor  # float32 [2P, 80]
    embedding: Tensor  # float32 [192]
    prompt_text_ids: Tensor  # int32 [L], contains ENDOFPROMPT_ID
    language: str
    prompt_text: str
    source: str  # the file it came from, or a description

    @property
    def prompt_tokens(self) -> int:
        """P, prompt speech tokens (25 Hz)."""
        return int(self.prompt_speech_tokens.shape[0])

    def flow_prompt(self, device: torch.device | str = "cpu") -> FlowPrompt:
        """The flow's share, batch 1 (`token2wav.FlowPrompt`)."""
        from voxflow.models.cosyvoice3.token2wav import FlowPrompt

        return FlowPrompt(
            prompt_token=self.prompt_speech_tokens.unsqueeze(0).to(device),
            prompt_feat=self.prompt_feat.unsqueeze(0).to(device),
            embedding=self.embedding.unsqueeze(0).to(device),
        )

    def tensors(self) -> dict[str, Tensor]:
        """The file's tensors."""
        return {
            "prompt_speech_tokens": self.prompt_speech_tokens,
            "prompt_feat": self.prompt_feat,
            "embedding": self.embedding,
            "prompt_text_ids": self.prompt_text_ids,
        }

    def metadata(self) -> dict[str, str]:
        """The file's string metadata."""
        return {"language": self.language, "prompt_text": self.prompt_text}


def voice_id(name: str, random_weights: bool) -> str:
    """The id a voice is served under: ``random-NAME`` with random weights (§9.4)."""
    if random_weights and not name.startswith(RANDOM_PREFIX):
        return RANDOM_PREFIX + name
    return name


def _expect(ok: bool, source: str, key: str, problem: str) -> None:
    if not ok:
        raise VoiceError(f"voice {source}: {key}: {problem}")


def _shape(t: Tensor) -> list[int]:
    return [int(n) for n in t.shape]


def validate_voice(
    tensors: Mapping[str, Tensor],
    metadata: Mapping[str, str] | None,
    *,
    speech_token_size: int,
    source: str,
) -> None:
    """Check every key, dtype, shape and value range of a voice; raise `VoiceError` naming one."""
    for key in TENSOR_KEYS:
        _expect(key in tensors, source, key, "missing")
    extra = sorted(set(tensors) - set(TENSOR_KEYS))
    _expect(not extra, source, extra[0] if extra else "", f"unexpected key (expected only "
            f"{', '.join(TENSOR_KEYS)})")
    meta = dict(metadata or {})
    for key in METADATA_KEYS:
        _expect(key in meta, source, key, "missing metadata string")
    _expect(meta["language"].strip() != "", source, "language", "empty")

    tokens = tensors["prompt_speech_tokens"]
    key = "prompt_speech_tokens"
    _expect(tokens.dtype == torch.int32, source, key, f"dtype {tokens.dtype}, expected int32")
    _expect(tokens.dim() == 1 and tokens.numel() >= 1, source, key,
            f"shape {_shape(tokens)}, expected [P] with P >= 1")
    lo, hi = int(tokens.min()), int(tokens.max())
    _expect(lo >= 0 and hi < speech_token_size, source, key,
            f"values in [{lo}, {hi}], expected [0, {speech_token_size}) (S = {speech_token_size})")
    p = int(tokens.shape[0])

    for key, shape in (("prompt_feat", [2 * p, MEL_BINS]), ("embedding", [EMBEDDING_DIM])):
        t = tensors[key]
        _expect(t.dtype == torch.float32, source, key, f"dtype {t.dtype}, expected float32")
        what = "[2P, 80]" if key == "prompt_feat" else "[192]"
        _expect(_shape(t) == shape, source, key,
                f"shape {_shape(t)}, expected {what} = {shape} (P = {p})")
        _expect(bool(torch.isfinite(t).all()), source, key, "holds NaN or infinity")

    ids = tensors["prompt_text_ids"]
    key = "prompt_text_ids"
    _expect(ids.dtype == torch.int32, source, key, f"dtype {ids.dtype}, expected int32")
    _expect(ids.dim() == 1 and ids.numel() >= 1, source, key,
            f"shape {_shape(ids)}, expected [L] with L >= 1")
    lo, hi = int(ids.min()), int(ids.max())
    _expect(lo >= 0 and hi < QWEN2_VOCAB_SIZE, source, key,
            f"values in [{lo}, {hi}], expected [0, {QWEN2_VOCAB_SIZE})")
    _expect(bool((ids == ENDOFPROMPT_ID).any()), source, key,
            f"no <|endofprompt|> ({ENDOFPROMPT_ID}): the LM needs it (spec §11)")


def load_voice(path: Path, *, speech_token_size: int, name: str | None = None) -> Voice:
    """Read and validate one voice file; the name defaults to the file name without suffix."""
    from safetensors import SafetensorError, safe_open

    source = str(path)
    try:
        with safe_open(source, framework="pt") as f:
            metadata = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (OSError, SafetensorError) as exc:
        raise VoiceError(f"voice {source}: not a readable safetensors file: {exc}") from exc
    validate_voice(tensors, metadata, speech_token_size=speech_token_size, source=source)
    return Voice(
        name=name if name is not None else path.name.removesuffix(VOICE_SUFFIX),
        prompt_speech_tokens=tensors["prompt_speech_tokens"],
        prompt_feat=tensors["prompt_feat"],
        embedding=tensors["embedding"],
        prompt_text_ids=tensors["prompt_text_ids"],
        language=metadata["language"],
        prompt_text=metadata["prompt_text"],
        source=source,
    )


def save_voice(voice: Voice, path: Path, *, speech_token_size: int) -> None:
    """Write a voice file (validated first, so a bad voice is never written)."""
    from safetensors.torch import save_file

    validate_voice(voice.tensors(), voice.metadata(), speech_token_size=speech_token_size,
                   source=str(path))
    tensors = {k: v.contiguous() for k, v in voice.tensors().items()}
    save_file(tensors, str(path), metadata=voice.metadata())


def load_voices_dir(
    directory: Path, *, speech_token_size: int, random_weights: bool
) -> dict[str, Voice]:
    """Every ``NAME.safetensors`` in `directory`, by served id (``random-NAME`` if random)."""
    if not directory.is_dir():
        raise VoiceError(f"voices_dir {directory}: not a directory")
    voices: dict[str, Voice] = {}
    for path in sorted(directory.glob("*" + VOICE_SUFFIX)):
        voice = load_voice(path, speech_token_size=speech_token_size)
        voices[voice_id(voice.name, random_weights)] = voice
    return voices


def tiny_voice(fixtures_dir: Path) -> Voice:
    """The tiny fixture voice (spec §9.5): the flow fixture's ``in.prompt_token`` (P = 7),
    ``in.prompt_feat`` and ``in.embedding``, and the LM fixture's ``in.prompt_text``.

    One token set serves LM and flow, as in the reference; the LM fixture's 12
    ``in.prompt_speech_token`` are an unrelated set and not used. Served as ``random-tiny``.
    """
    from safetensors.torch import load_file

    flow = load_file(str(fixtures_dir / "flow_tiny_fixtures.safetensors"))
    lm = load_file(str(fixtures_dir / "lm_tiny_fixtures.safetensors"))
    source = f"tiny fixture voice ({fixtures_dir})"
    tensors = {
        "prompt_speech_tokens": flow["in.prompt_token"][0].to(torch.int32),
        "prompt_feat": flow["in.prompt_feat"][0].float(),
        "embedding": flow["in.embedding"][0].float(),
        "prompt_text_ids": lm["in.prompt_text"][0].to(torch.int32),
    }
    metadata = {"language": TINY_LANGUAGE, "prompt_text": TINY_PROMPT_TEXT}
    validate_voice(tensors, metadata, speech_token_size=TINY_LM_CONFIG.speech_token_size,
                   source=source)
    return Voice(name=TINY_VOICE_NAME, language=TINY_LANGUAGE, prompt_text=TINY_PROMPT_TEXT,
                 source=source, **tensors)
