"""Text normalization and segmentation shared by model families."""

from voxflow.text.normalize import has_speakable_content, normalize_paragraphs, normalize_text
from voxflow.text.segment import segment_text, split_sentences

__all__ = [
    "has_speakable_content",
    "normalize_paragraphs",
    "normalize_text",
    "segment_text",
    "split_sentences",
]
