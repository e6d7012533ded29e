"""voxflow: a serving engine for text-to-speech models with an OpenAI-compatible speech API."""

__version__ = "0.1.0"
