"""Audio output: 16-bit conversion, whole-file and streamed encoders, resampling."""

from voxflow.audio.encode import encode_audio, to_int16
from voxflow.audio.formats import FORMATS, content_type
from voxflow.audio.resample import resample
from voxflow.audio.stream import StreamEncoder, open_stream_encoder

__all__ = [
    "FORMATS",
    "StreamEncoder",
    "content_type",
    "encode_audio",
    "open_stream_encoder",
    "resample",
    "to_int16",
]
