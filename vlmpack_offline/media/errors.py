"""The one error media readers raise: it carries the manifest drop reason."""

from __future__ import annotations

__all__ = ["MediaError", "CORRUPT_MEDIA", "UNSUPPORTED_ASPECT"]

CORRUPT_MEDIA = "corrupt_media"
UNSUPPORTED_ASPECT = "unsupported_aspect"


class MediaError(ValueError):
    """A media part cannot be used; ``reason`` is the drop reason recorded in the manifest."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
