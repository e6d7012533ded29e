"""The stage contract: what a model family's stages receive, return and may keep.

Imported by both `voxflow.engine` (which runs stages) and `voxflow.models` (which implements
them); it imports neither. See docs/architecture.md, "Stage contract".
"""
