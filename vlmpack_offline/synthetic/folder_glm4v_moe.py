"""The offline GLM-4.5V (``glm4v_moe``) processor folder: GLM-4.1V's with its model type (``folder_glm4v``)."""

from __future__ import annotations

from pathlib import Path

from .folder_glm4v import build_family

__all__ = ["build"]


def build(target: Path, *, layout: str, video: bool) -> Path:
    """GLM-4.5V takes ``Glm4vProcessor`` with GLM-4.1V's settings; only config.json's model type differs."""
    return build_family(target, "glm4v_moe", layout=layout, video=video)
