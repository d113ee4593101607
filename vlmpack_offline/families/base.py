"""The one interface every model family implements, and the records it returns.

A family says how its HF processor turns the one media token the chat template
renders (the *pad*) into the tokens the model sees, as a function of the image
size or the video sampling alone, so the scan can count without running the
processor::

    rendered chat   ... <pad> ...                      (one pad per media item)
    compact text    compact_text(rendered)             (what the counter tokenizes)
    expanded text   pad -> replacement_text(item)      (what the processor produces)
    count           len(tokenize(compact)) + sum(replacement_size(item).tokens - 1)

``replacement_size(item).tokens`` is the number of tokens that stand in the expanded
sequence where the compact text has the item's one pad token. Media tokens are
special tokens, so the tokenizer splits the text at them: every piece in between
tokenizes alone, which is what makes the arithmetic exact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigError

if TYPE_CHECKING:  # the tokens package imports the families, not the other way round
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["SpecialTokens", "Size", "Family", "encoder_blocks", "first_setting", "tokenizer_token", "vision_patch_size"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecialTokens:
    image_pad: str = "<|image_pad|>"  # one per image in the rendered chat, expanded by the processor
    video_pad: str = "<|video_pad|>"  # one per video
    vision_start: str = "<|vision_start|>"  # opens a Qwen3-VL per-frame block
    vision_end: str = "<|vision_end|>"  # closes it (Gemma3: the end-of-image token)
    image_soft: str = ""  # Gemma3: the soft token an image pad expands to (image_seq_length times)
    audio_pad: str = "<|audio_pad|>"  # one per audio item, expanded by the processor (its ``audio_token``)

    @classmethod
    def of(cls, tokenizer) -> SpecialTokens:
        """The tokens the processor would use: the tokenizer's attributes where it has them (as HF does)."""
        names = {
            "image_pad": "image_token",
            "video_pad": "video_token",
            "audio_pad": "audio_token",
            "vision_start": "vision_start_token",
            "vision_end": "vision_end_token",
        }
        found = {field: getattr(tokenizer, attr, None) for field, attr in names.items()}
        return cls(**{field: value for field, value in found.items() if isinstance(value, str) and value})


def first_setting(sources: tuple[dict, ...], name: str):
    """``name`` from the first of ``sources`` that sets it (not None), else None: e.g.
    ``(model.processor_kwargs, the folder's settings)``, as ``from_pretrained`` lets kwargs win."""
    return next((source[name] for source in sources if source.get(name) is not None), None)


def encoder_blocks(blocks: int, patches: int, *, prepended: int = 0) -> dict[str, int]:
    """``Size``'s encoder fields for ``blocks`` blocks of ``patches`` patches each, with ``prepended`` more
    tokens in each block's attention (a class token): ``Size(tokens=..., **encoder_blocks(4, 600))``."""
    return {"encoder_patches": blocks * patches, "encoder_attention": blocks * (patches + prepended) ** 2}


def vision_patch_size(path: Path, default: int) -> int:
    """The vision encoder's patch edge from the folder's ``config.json`` (``vision_config.patch_size``: a model
    repository has it), else ``default``; for a family whose processor settings do not carry it."""
    config_file = Path(path) / "config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    except (OSError, ValueError):
        config = {}  # an unreadable config.json is the model_type check's to report (tokens/rules.py)
    vision = config.get("vision_config") if isinstance(config, dict) else None
    value = vision.get("patch_size") if isinstance(vision, dict) else None
    if value is None:
        return default
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(
            f"{config_file}: vision_config.patch_size is {value!r}; vlmpack counts the encoder's patches of a square "
            f"patch edge in pixels (e.g. 14 or [14, 14]). Fix it in {config_file}"
        )
    return value


def tokenizer_token(tokenizer, attribute: str, default: str) -> str:
    """The tokenizer's own name for a media token (``image_token`` ...) where its folder gives one, else the
    processor's default: the order the family processors read them in."""
    value = getattr(tokenizer, attribute, None)
    return value if isinstance(value, str) and value else default


@dataclass(frozen=True, slots=True, kw_only=True)
class Size:
    """What one media item costs: its tokens in the sequence, and its runs through the encoders: the vision
    encoder's patches and attention blocks for an image or video, the audio encoder's for an audio item or a video's
    own track (the frames its layers run on, after its conv front end, and the sum over the windows it attends
    within of frames**2). The plan prices the two encoders apart (``packing/cost.py``).

    The encoder fields feed the plan's compute cost (its vision-encoder term). ``encoder_attention``
    sums ``n**2`` over the blocks the encoder attends within, ``n`` the tokens of one block: the patches
    of one frame or temporal patch (Qwen-VL, GLM-4V), tile (InternVL, LLaVA-OneVision), crop (Gemma3),
    image (Pixtral), chunk of frames (Kimi-K2.5), plus a class token where the encoder prepends one
    (InternViT). A Qwen-VL video of 4 temporal patches of 20 x 30 patches: 2400 patches, 4 * 600**2.
    """

    tokens: int  # tokens standing where the compact text has the item's one pad token
    media_tokens: int  # the model's media (soft / pad) tokens among them
    encoder_patches: int = 0  # patches the vision encoder runs for this item, before any merge or pooling
    encoder_attention: int = 0  # sum over its independent full-attention blocks of (tokens in the block)**2
    audio_frames: int = 0  # the audio encoder's frames for an audio item, or a video's track (load_audio_from_video)
    audio_attention: int = 0  # and its attention windows' frames**2


class Family(Protocol):
    """One VLM family's expansion rules; instances are registered by HF ``model_type``."""

    name: str  # shown by ``vlmpack scan``, e.g. "qwen-vl"
    model_types: frozenset[str]  # the HF model_type values this module counts
    takes_video: bool  # False: a video item is dropped as unsupported_media
    # ``takes_audio: bool`` (optional, False when absent): an audio item for a family without it is dropped as
    # unsupported_media, naming the family
    positions: str  # "mrope" (3-D rope index from the media grids) or "1d" (0..n-1)

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        """Extra ``ModelRules`` fields from the folder: ``image`` the image processor settings (either
        layout, {} when none), ``kwargs`` model.processor_kwargs (they win, as in ``from_pretrained``),
        ``processor`` the top level of ``processor_config.json``. Raises ``ConfigError`` on what it
        cannot count."""
        ...

    def special_tokens(self, tokenizer) -> SpecialTokens:
        """The pads the chat template renders, as the family's processor names them."""
        ...

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        """The rendered text as the counter tokenizes it (identity when pads expand to pads alone)."""
        ...

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        """Raise ``DropError`` at probe time for an item this family's processor refuses."""
        ...

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        """The exact string the HF processor puts in place of this item's pad."""
        ...

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        """Tokens of ``replacement_text`` (see the module doc) without building it, and the item's patches and
        attention blocks in the vision encoder (``Size``)."""
        ...

    # Optional: ``in_sample(rules, media) -> tuple[MediaInfo, ...]``, the sample's items (in order) as the
    # processor sees them within their sample, handed to replacement_size / replacement_text instead of
    # the bare items; for a family whose count of an item depends on the rest of its sample (LLaVA-OneVision:
    # a sample's only image is tiled, the images of a multi-image sample are not). Without it each item
    # expands alone (``tokens.expansion.Expander.in_sample``).
    #
    # The other optional members (looked up with getattr, so a family states only what differs):
    # - ``describe(rules) -> str``: the words after "fast path" in ``vlmpack scan``'s summary.
    # - ``no_video_reason: str``: why a video is dropped (``takes_video`` False), shown with the drop.
    # - ``sample_video(rules, info, video, *, part) -> VideoSampling``: the frames and size of a video when
    #   the family's processor samples them its own way (GLM-4V from VideoMetadata; LLaVA-OneVision at the
    #   tile size); else the shared sampler (``media.sample_video``).
    # - ``video_defaults() -> VideoConfig``: the family's own video recipe, under the folder's settings and
    #   ``video:`` (GLM-4V: its processor's, ``sampler: hf_processor``, which no ``video:`` may change;
    #   LLaVA-OneVision: 32 frames); else qwen-vl-utils' recipe.
    # - ``video_fields: frozenset[str]``: the ``video:`` fields its video count reads (Kimi-K2.5: ``fps``;
    #   InternVL, LLaVA-OneVision: the frame choice, not the pixel bounds); ``vlmpack scan`` refuses a config
    #   that sets any other, which would silently not apply (any at all for a family without video).
    # - ``turn_end_tokens: tuple[str, ...]``: the tokens the model emits to end its turn where its template writes
    #   none after an answer (GLM: the next turn's ``<|user|>``); one that directly follows an assistant turn
    #   (past whitespace) is labelled with it, so the model learns to stop. A last turn has none to label.
    # - ``images_per_sample: bool``: the loader runs a sub-sample's images through one processor call
    #   (LLaVA-OneVision's ``batch_num_images``) instead of one call per image.
