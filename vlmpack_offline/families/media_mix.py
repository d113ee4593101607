"""Model types whose forward takes images or videos in one call, never both.

Molmo2's ``Molmo2Model.forward`` (transformers/models/molmo2/modeling_molmo2.py) raises ``pixel_values and
pixel_values_videos are provided at the same time``. A pack is one forward call, so for such a model a pack
must hold image samples or video samples, not both, and no sample may hold both: otherwise the scan, bucket,
plan and write accept what the first training step refuses. So::

    scan     a sample with images and videos is dropped as unsupported_media, naming the forward's rule
    scan,    packing.group_by: none (packs of any mix) is a ConfigError naming the fix (media_type), said
    bucket   before anything is read

``ONE_MEDIA_KIND`` lists the types; tests/test_media_mix.py finds every such check in the installed
transformers' modeling sources, so a new one cannot be missed silently.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ConfigError
from ..reasons import DropError, Reason

__all__ = ["ONE_MEDIA_KIND", "check_group_by", "check_media_kinds"]

# model_type -> where its forward refuses images and videos together
ONE_MEDIA_KIND: dict[str, str] = {
    "molmo2": "Molmo2Model.forward (transformers/models/molmo2/modeling_molmo2.py) refuses pixel_values and "
    "pixel_values_videos in one call",
}


def check_media_kinds(model_type: str, kinds: Iterable[str]) -> None:
    """Raise ``DropError`` (``unsupported_media``) for a sample holding images and videos where the model's
    forward takes only one kind per call."""
    where = ONE_MEDIA_KIND.get(model_type)
    if where is not None and {"image", "video"} <= set(kinds):
        raise DropError(Reason.UNSUPPORTED_MEDIA, f"this sample holds images and videos, and {where}: keep "
                        "images and videos in separate samples")  # fmt: skip


def check_group_by(model_type: str, group_by: str) -> None:
    """Raise ``ConfigError`` where packs of any media mix would reach a forward that takes one kind per call."""
    where = ONE_MEDIA_KIND.get(model_type)
    if where is not None and group_by != "media_type":
        raise ConfigError(f"packing.group_by: {group_by}: a {model_type} pack is one forward call, and {where}; "
                          "set packing.group_by: media_type (one media type per pack)")
