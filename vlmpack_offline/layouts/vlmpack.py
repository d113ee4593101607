"""vlmpack's own layout (``sample_type: vlmpack_packed``, the default): the ``PackedSample`` itself.

Holds every sample the scan accepts: full multi-turn conversations, system prompts, images and
videos mixed. Media parts are numbered over the pack (``m0003.jpg``), see ``packed_format.py``.
"""

from __future__ import annotations

from ..packed_format import media_part_name
from .base import Layout, Shape

__all__ = ["VlmpackLayout"]


class VlmpackLayout(Layout):
    name = "vlmpack_packed"
    published = False
    holds = "every sample the scan accepts (multi-turn, system prompts, images and videos together)"

    def media_part(self, *, sub_index: int, index_in_pack: int, index_in_sub: int, source_part: str, kind: str) -> str:
        return media_part_name(index_in_pack, source_part)

    def refuses(self, shape: Shape) -> str | None:
        return None

    def pack_refusal(self, kinds: list[str]) -> str | None:
        return None
