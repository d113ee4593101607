"""Exact token counts for VLM samples, shared by scan (``count``) and the loader (``materialize``).

::

    rules.py       ModelRules from the processor directory + model.processor_kwargs
    media_info.py  probe_media(bytes) -> ImageMedia | VideoMedia (the family refuses what it cannot take)
    expansion.py   how the processor expands one pad: asks the family (``vlmpack_offline/families/``)
    counter.py     TokenCounter.count_many / count / materialize (fast path: a family module, or text-only)
    slow.py        SlowCounter: runs the HF processor for any other family
    factory.py     make_counter(config): picks the fast or slow path
"""

from .counter import Count, Materialized, TokenCounter, load_tokenizer
from .expansion import Expander, SpecialTokens
from .factory import make_counter
from .media_info import ImageMedia, MediaInfo, VideoMedia, grid_thw, media_token_count, probe_media
from .rules import FAST_FAMILIES, ModelRules, load_model_rules

__all__ = [
    "Count",
    "Materialized",
    "TokenCounter",
    "load_tokenizer",
    "Expander",
    "SpecialTokens",
    "make_counter",
    "ImageMedia",
    "VideoMedia",
    "MediaInfo",
    "grid_thw",
    "media_token_count",
    "probe_media",
    "FAST_FAMILIES",
    "ModelRules",
    "load_model_rules",
]
