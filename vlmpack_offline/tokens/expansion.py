"""How one ``<|image_pad|>`` / ``<|video_pad|>`` in the rendered chat becomes the processor's text.

Mirrors ``replace_image_token`` / ``replace_video_token`` of transformers'
Qwen2-VL, Qwen2.5-VL and Qwen3-VL processors::

    image (all three), video (Qwen2/2.5-VL):   <|image_pad|> -> <|image_pad|> * (t*h*w / merge**2)
    video (Qwen3-VL), one block per temporal patch i of the T/2 patches:
        <|video_pad|> -> "<{ts_i:.1f} seconds>" <|vision_start|> <|video_pad|> * (h*w / merge**2) <|vision_end|>
        ts_i = mean of the timestamps of the first and last frame of patch i

Two forms of the same rule: ``replacement_text`` builds the string (``materialize``),
``replacement_size`` counts its tokens without building it (``count``). Pads and
vision markers are special tokens, so the tokenizer splits the text at them and
the pieces in between tokenize alone: that is what makes the count exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

from .media_info import MediaInfo, VideoMedia, grid_thw
from .rules import ModelRules

__all__ = ["SpecialTokens", "Expander"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecialTokens:
    image_pad: str = "<|image_pad|>"  # one per image in the rendered chat, expanded by the processor
    video_pad: str = "<|video_pad|>"  # one per video
    vision_start: str = "<|vision_start|>"  # opens a Qwen3-VL per-frame block
    vision_end: str = "<|vision_end|>"  # closes it

    @classmethod
    def of(cls, tokenizer) -> SpecialTokens:
        """The tokens the processor would use: the tokenizer's attributes where it has them (as HF does)."""
        names = {
            "image_pad": "image_token",
            "video_pad": "video_token",
            "vision_start": "vision_start_token",
            "vision_end": "vision_end_token",
        }
        found = {field: getattr(tokenizer, attr, None) for field, attr in names.items()}
        return cls(**{field: value for field, value in found.items() if isinstance(value, str) and value})


@dataclass(frozen=True, slots=True, kw_only=True)
class _Size:
    tokens: int  # tokens of the whole replacement text
    media_tokens: int  # pad tokens among them


class Expander:
    """Replacement text and token size of each media item, for one model family and tokenizer."""

    def __init__(self, rules: ModelRules, tokenizer) -> None:
        self.rules = rules
        self.tokenizer = tokenizer
        self.special = SpecialTokens.of(tokenizer)
        self._text_tokens = lru_cache(maxsize=65536)(self._count_text)

    def _count_text(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def pad_for(self, media: MediaInfo) -> str:
        return self.special.video_pad if isinstance(media, VideoMedia) else self.special.image_pad

    def _qwen3_video_blocks(self, media: VideoMedia) -> tuple[list[float], int]:
        t, h, w = grid_thw(self.rules, media)
        s = media.sampling
        # transformers' own timestamp rule (averages first/last frame of each temporal patch)
        stamps = Qwen3VLProcessor._calculate_timestamps(
            None, list(s.frame_indices), s.native_fps, self.rules.temporal_patch_size
        )
        return stamps[:t], h * w // self.rules.merge_size**2

    def replacement_text(self, media: MediaInfo) -> str:
        """The exact string the HF processor puts in place of this item's pad."""
        if isinstance(media, VideoMedia) and self.rules.qwen3:
            stamps, per_frame = self._qwen3_video_blocks(media)
            sp = self.special
            return "".join(
                f"<{ts:.1f} seconds>{sp.vision_start}{sp.video_pad * per_frame}{sp.vision_end}"
                for ts in stamps
            )
        t, h, w = grid_thw(self.rules, media)
        return self.pad_for(media) * (t * h * w // self.rules.merge_size**2)

    def replacement_size(self, media: MediaInfo) -> _Size:
        """Tokens of ``replacement_text(media)`` without building it."""
        if isinstance(media, VideoMedia) and self.rules.qwen3:
            stamps, per_frame = self._qwen3_video_blocks(media)
            text = sum(self._text_tokens(f"<{ts:.1f} seconds>") for ts in stamps)
            return _Size(tokens=text + len(stamps) * (per_frame + 2), media_tokens=len(stamps) * per_frame)
        t, h, w = grid_thw(self.rules, media)
        n = t * h * w // self.rules.merge_size**2
        return _Size(tokens=n, media_tokens=n)
