"""A CosyVoice3 voice from a prompt recording and its transcript (spec §4 "Prompt features").

`decode_audio` reads the upload (soundfile: WAV, FLAC, OGG; PyAV for the rest: MP3, M4A, ...)
into mono float32; `check_prompt_audio` refuses what cannot make a voice (shorter than
`MIN_SECONDS`, longer than `MAX_SECONDS` (the speech tokenizer's 30 s limit, spec §11), silent
or all but silent); soxr resamples it to 16 kHz (speech tokens, speaker embedding) and 24 kHz
(the prompt mel). `PromptEncoder` runs the two ONNX models the reference ships beside its
checkpoint, `SPEAKER_MODEL` (CAM++: 80-bin mean-normalised Kaldi fbank -> 192-d embedding) and
`TOKENIZER_MODEL` (S3 tokenizer v3: 128-bin Whisper log-mel -> 25 Hz speech tokens), then
`align_prompt` keeps 2 mel frames per token.

Every problem with the upload raises `PromptAudioError` (a ValueError: the server answers 400);
a folder without the ONNX models raises `MissingPromptModels`, naming the files.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from voxflow.models.cosyvoice3.features import (
    FBANK_SAMPLE_RATE,
    MEL_SAMPLE_RATE,
    align_prompt,
    prompt_feat,
    speaker_fbank,
    whisper_log_mel,
)
from voxflow.models.cosyvoice3.voices import EMBEDDING_DIM, Voice

SPEAKER_MODEL = "campplus.onnx"
TOKENIZER_MODEL = "speech_tokenizer_v3.onnx"
PROMPT_MODELS = (SPEAKER_MODEL, TOKENIZER_MODEL)
MIN_SECONDS = 1.0  # under 25 speech tokens a prompt says too little of the voice
MAX_SECONDS = 30.0  # the speech tokenizer's limit (spec §4, §11)
SILENT_PEAK = 1e-3  # -60 dBFS: nothing audible anywhere
QUIET_RMS_DBFS = -50.0  # the whole recording this quiet: background noise, no speech
MAX_TRANSCRIPT_CHARS = 1000


class PromptAudioError(ValueError):
    """The upload cannot make a voice (undecodable, too short or long, silent); says why."""


class TranscriptError(PromptAudioError):
    """The transcript of a recording is empty or too long."""


class MissingPromptModels(PromptAudioError):
    """The speaker-embedding or speech-tokenizer ONNX model is not there; names the files."""


def missing_prompt_models(folder: Path | None) -> list[str]:
    """The `PROMPT_MODELS` not in `folder` (all of them when there is no folder)."""
    if folder is None:
        return list(PROMPT_MODELS)
    return [name for name in PROMPT_MODELS if not (folder / name).is_file()]


def decode_audio(data: bytes) -> tuple[npt.NDArray[np.float32], int]:
    """Decode an audio file's bytes to (samples (N,) float32 mono in [-1, 1], rate in Hz).

    Channels are averaged. Raises PromptAudioError when neither soundfile nor PyAV can read it.
    """
    import soundfile as sf

    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        return np.ascontiguousarray(samples.mean(axis=1), dtype=np.float32), int(rate)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        pass
    return _decode_av(data)


def _decode_av(data: bytes) -> tuple[npt.NDArray[np.float32], int]:
    import av

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise PromptAudioError("the file holds no audio stream")
            stream = container.streams.audio[0]
            rate = int(stream.codec_context.sample_rate or 0)
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate or None)
            pieces = []
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray().reshape(-1))
                    rate = out.sample_rate
    except PromptAudioError:
        raise
    except Exception as exc:  # noqa: BLE001 (PyAV raises many kinds for bad input)
        raise PromptAudioError("the file could not be decoded as audio (WAV, FLAC, OGG, MP3, "
                               "M4A and the like are read)") from exc
    if not pieces or rate <= 0:
        raise PromptAudioError("the file decodes to no audio samples")
    return np.concatenate(pieces).astype(np.float32), rate


def check_prompt_audio(samples: npt.NDArray[np.float32], rate: int) -> None:
    """Refuse a recording that cannot make a voice.

    Args:
        samples: (N,) float32 mono; rate: Hz.
    Raises:
        PromptAudioError: not finite, shorter than MIN_SECONDS, longer than MAX_SECONDS,
            silent (peak under SILENT_PEAK) or too quiet (RMS under QUIET_RMS_DBFS).
    """
    if rate < FBANK_SAMPLE_RATE:
        raise PromptAudioError(f"the recording's sample rate is {rate} Hz; at least "
                               f"{FBANK_SAMPLE_RATE} Hz is needed (spec §11)")
    seconds = samples.size / rate
    if seconds < MIN_SECONDS:
        raise PromptAudioError(f"the recording is {seconds:.2f} s long; at least "
                               f"{MIN_SECONDS:g} s of speech is needed (3-10 s works best)")
    if seconds > MAX_SECONDS:
        raise PromptAudioError(f"the recording is {seconds:.1f} s long; at most "
                               f"{MAX_SECONDS:g} s is accepted (the speech tokenizer's limit)")
    if not np.isfinite(samples).all():
        raise PromptAudioError("the recording holds NaN or infinite samples")
    peak = float(np.abs(samples).max())
    if peak < SILENT_PEAK:
        raise PromptAudioError("the recording is silent")
    rms_dbfs = 20 * np.log10(max(float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))),
                                 1e-12))
    if rms_dbfs < QUIET_RMS_DBFS:
        raise PromptAudioError(f"the recording is too quiet ({rms_dbfs:.0f} dBFS RMS; at least "
                               f"{QUIET_RMS_DBFS:g} dBFS is needed)")


def resample(samples: npt.NDArray[np.float32], rate: int, target: int) -> npt.NDArray[np.float32]:
    """`samples` at `rate` Hz resampled to `target` Hz with soxr (high quality), float32."""
    import soxr

    if rate == target:
        return samples
    return np.asarray(soxr.resample(samples, rate, target, quality="HQ"), dtype=np.float32)


def check_transcript(text: str) -> str:
    """The transcript stripped; raises TranscriptError if empty or over MAX_TRANSCRIPT_CHARS."""
    text = text.strip()
    if not text:
        raise TranscriptError("the transcript ('text') must not be empty")
    if len(text) > MAX_TRANSCRIPT_CHARS:
        raise TranscriptError(f"the transcript is {len(text)} characters long; at most "
                               f"{MAX_TRANSCRIPT_CHARS} are accepted")
    return text


@dataclass
class PromptEncoder:
    """The two ONNX prompt models of a checkpoint folder (CPU sessions, one thread each)."""

    speaker: object  # onnxruntime.InferenceSession of SPEAKER_MODEL
    tokenizer: object  # onnxruntime.InferenceSession of TOKENIZER_MODEL

    @classmethod
    def load(cls, folder: Path | None) -> PromptEncoder:
        """Open both models in `folder`.

        Raises:
            MissingPromptModels: a model file is missing (names every missing one).
        """
        missing = missing_prompt_models(folder)
        if missing or folder is None:
            where = f"in {folder.name}/" if folder is not None else "(no prompt_models_dir " \
                    "and no checkpoint directory configured)"
            raise MissingPromptModels(
                f"this model cannot build a voice from audio: the speaker-embedding and "
                f"speech-tokenizer ONNX models {', '.join(missing)} are missing {where}. Upload a "
                "precomputed prompt-feature file as 'features' instead, or set the model's "
                "prompt_models_dir")
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        return cls(
            ort.InferenceSession(str(folder / SPEAKER_MODEL), options, providers=providers),
            ort.InferenceSession(str(folder / TOKENIZER_MODEL), options, providers=providers),
        )

    def speech_tokens(self, wave16k: torch.Tensor) -> npt.NDArray[np.int32]:
        """(N,) float 16 kHz -> (P,) int32 speech tokens (25 Hz) from the tokenizer model."""
        mel = whisper_log_mel(wave16k).numpy()  # (1, 128, T)
        inputs = self.tokenizer.get_inputs()  # type: ignore[attr-defined]
        feed = {inputs[0].name: mel}
        if len(inputs) > 1:
            feed[inputs[1].name] = np.array([mel.shape[2]], dtype=np.int32)
        out = self.tokenizer.run(None, feed)[0]  # type: ignore[attr-defined]
        return np.asarray(out).reshape(-1).astype(np.int32)

    def embedding(self, wave16k: torch.Tensor) -> npt.NDArray[np.float32]:
        """(N,) float 16 kHz -> (192,) float32 raw speaker embedding from the speaker model."""
        feat = speaker_fbank(wave16k).unsqueeze(0).numpy()  # (1, frames, 80)
        name = self.speaker.get_inputs()[0].name  # type: ignore[attr-defined]
        out = np.asarray(self.speaker.run(None, {name: feat})[0]).reshape(-1)  # type: ignore[attr-defined]
        if out.size != EMBEDDING_DIM:
            raise PromptAudioError(f"{SPEAKER_MODEL} gave {out.size} values, expected "
                                   f"{EMBEDDING_DIM}: not the CosyVoice3 speaker model")
        return out.astype(np.float32)

    def build_voice(self, name: str, data: bytes, prompt_text: str, prompt_text_ids: list[int],
                    language: str) -> Voice:
        """A voice from an audio file's bytes (not yet validated: `write_voice_atomic` does).

        Args:
            name: the voice name; data: the file's bytes; prompt_text: its transcript;
            prompt_text_ids: the LM prompt ids of the transcript (with <|endofprompt|>);
            language: the voice's language tag.
        Raises:
            PromptAudioError: undecodable, too short or long, silent; or no speech tokens.
        """
        samples, rate = decode_audio(data)
        check_prompt_audio(samples, rate)
        wave16 = torch.from_numpy(resample(samples, rate, FBANK_SAMPLE_RATE))
        wave24 = torch.from_numpy(resample(samples, rate, MEL_SAMPLE_RATE))
        with torch.inference_mode():
            tokens = torch.from_numpy(self.speech_tokens(wave16))
            embedding = torch.from_numpy(self.embedding(wave16))
            feat = prompt_feat(wave24)[0]  # (frames, 80)
        feat, tokens = align_prompt(feat, tokens)
        if tokens.numel() == 0:
            raise PromptAudioError("the speech tokenizer gave no tokens for this recording")
        return Voice(
            name=name,
            prompt_speech_tokens=tokens.to(torch.int32).contiguous(),
            prompt_feat=feat.float().contiguous(),
            embedding=embedding.float(),
            prompt_text_ids=torch.tensor(prompt_text_ids, dtype=torch.int32),
            language=language,
            prompt_text=prompt_text,
            source="upload",
        )
