"""The offline GLM-4.6V (``glm46v``) processor folder: ``Glm46VProcessor`` and its own classes (``folder_glm4v``)."""

from __future__ import annotations

from pathlib import Path

from .folder_glm4v import build_family

__all__ = ["build"]


def build(target: Path, *, layout: str, video: bool) -> Path:
    """GLM-4.6V's classes (``Glm46VProcessor``, ``Glm46VImageProcessor``, ``Glm46VVideoProcessor``), GLM-4.1V's values."""
    return build_family(target, "glm46v", layout=layout, video=video)
