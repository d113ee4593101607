"""How one pad in the rendered chat becomes the processor's text: asks the model's family.

The rules live in ``vlmpack_offline/families/`` (``qwen.py``: Qwen2/2.5-VL, Qwen3-VL timestamps).
Two forms of the same rule: ``replacement_text`` builds the string (``materialize``),
``replacement_size`` counts its tokens without building it (``count``); ``compact_many`` is the
rendered text as ``count`` tokenizes it. Pads and vision markers are special tokens, so the
tokenizer splits the text at them and the pieces in between tokenize alone: that is what makes
the count exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from ..families import Size, SpecialTokens, family_of
from .media_info import MediaInfo
from .rules import ModelRules

__all__ = ["SpecialTokens", "Expander"]


class Expander:
    """Replacement text and token size of each media item, for one model family and tokenizer."""

    def __init__(self, rules: ModelRules, tokenizer) -> None:
        self.rules = rules
        self.tokenizer = tokenizer
        self.family = family_of(rules)  # None: text-only counting, no media
        self.special = self.family.special_tokens(tokenizer) if self.family else SpecialTokens.of(tokenizer)
        self._text_tokens = lru_cache(maxsize=65536)(self._count_text)

    def _count_text(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def pad_for(self, media: MediaInfo) -> str:
        return {"video": self.special.video_pad, "audio": self.special.audio_pad}.get(media.kind, self.special.image_pad)

    def _require_family(self):
        if self.family is None:
            raise ValueError(f"model_type {self.rules.model_type!r} has no family module: media cannot be expanded")
        return self.family

    def compact_many(self, texts: list[str]) -> list[str]:
        """The rendered texts as ``count`` tokenizes them (the same list when the family keeps them)."""
        if self.family is None:
            return texts
        return [self.family.compact_text(text, self.special) for text in texts]

    def in_sample(self, media: Sequence[MediaInfo]) -> Sequence[MediaInfo]:
        """The sample's items as its family expands them within their sample (``Family.in_sample``,
        optional); the items themselves for a family whose items expand alone."""
        hook = getattr(self.family, "in_sample", None)
        return media if hook is None else hook(self.rules, media)

    def replacement_text(self, media: MediaInfo) -> str:
        """The exact string the HF processor puts in place of this item's pad."""
        return self._require_family().replacement_text(self.rules, self.special, media)

    def replacement_size(self, media: MediaInfo) -> Size:
        """Tokens of ``replacement_text(media)`` without building it."""
        return self._require_family().replacement_size(self.rules, media, self._text_tokens)
