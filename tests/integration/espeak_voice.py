"""Speak texts with espeak-ng's own formant voice (en-us), a clearly different speaker from joe.

``python espeak_voice.py TEXTS_FILE OUT_DIR`` writes ``OUT_DIR/NNN.wav`` (16-bit, espeak's rate)
for each non-blank line. It runs as its own process because espeak-ng is one global C state and
the test process already uses piper's bundled copy. Needs `espeakng-loader` (a voxflow
dependency); exits 3 when espeak-ng cannot be loaded.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

SYNCHRONOUS = 0x02  # espeak_AUDIO_OUTPUT: AUDIO_OUTPUT_SYNCHRONOUS
CHARS_UTF8 = 1
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                            ctypes.c_void_p)


def main(texts_file: str, out_dir: str) -> int:
    try:
        import espeakng_loader

        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        rate = lib.espeak_Initialize(SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0)
    except (ImportError, OSError):
        return 3
    if rate <= 0 or lib.espeak_SetVoiceByName(b"en-us") != 0:
        return 3
    pieces: list[np.ndarray] = []

    def collect(wav, n, events) -> int:
        if n > 0:
            pieces.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0

    keep = CALLBACK(collect)  # must outlive the synthesis calls
    lib.espeak_SetSynthCallback(keep)
    lines = [t.strip() for t in Path(texts_file).read_text().splitlines() if t.strip()]
    for i, text in enumerate(lines):
        pieces.clear()
        data = text.encode()
        lib.espeak_Synth(ctypes.c_char_p(data), len(data) + 1, 0, 0, 0, CHARS_UTF8, None, None)
        lib.espeak_Synchronize()
        sf.write(Path(out_dir) / f"{i:03d}.wav", np.concatenate(pieces), rate, subtype="PCM_16")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
