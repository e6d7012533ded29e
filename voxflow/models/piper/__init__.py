"""Piper VITS voices (ONNX), phonemized with piper-tts's bundled espeak-ng."""
