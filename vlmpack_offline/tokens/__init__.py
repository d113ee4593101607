"""Exact token counts for VLM samples, shared by scan (``count``) and the loader (``materialize``).

::

    rules.py       ModelRules from the processor directory + model.processor_kwargs
    media_info.py  probe_media(bytes) -> ImageMedia | VideoMedia | AudioMedia (the family refuses what it cannot take)
    expansion.py   how the processor expands one pad: asks the family (``vlmpack_offline/families/``)
    counter.py     TokenCounter.count_many / count / materialize (fast path: a family module, or text-only)
    slow.py        SlowCounter: runs the HF processor for any other family
    factory.py     make_counter(config): picks the fast or slow path
    tokenizer_snapshot.py  the counting tokenizer saved once per folder, read back without transformers' classes

Names are imported on first use: ``counter`` imports transformers (its Jinja chat-template renderer), which a
module that reads rules or the snapshot alone does not need.
"""

from .._lazy import lazy_names

_WHERE = {
    "Count": "counter", "Materialized": "counter", "TokenCounter": "counter", "load_tokenizer": "counter",
    "Expander": "expansion", "SpecialTokens": "expansion", "make_counter": "factory",
    "ImageMedia": "media_info", "AudioMedia": "media_info", "MediaInfo": "media_info", "VideoMedia": "media_info", "grid_thw": "media_info",
    "media_token_count": "media_info", "probe_media": "media_info",
    "FAST_FAMILIES": "rules", "ModelRules": "rules", "load_model_rules": "rules",
}  # fmt: skip


__getattr__ = lazy_names(__name__, globals(), _WHERE)

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
    "AudioMedia",
    "MediaInfo",
    "grid_thw",
    "media_token_count",
    "probe_media",
    "FAST_FAMILIES",
    "ModelRules",
    "load_model_rules",
]
