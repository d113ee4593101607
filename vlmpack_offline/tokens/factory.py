"""Pick the counter for a config: size arithmetic (a family module, the generic path, text only), else the processor."""

from __future__ import annotations

import dataclasses

from ..config import Config, VideoConfig
from ..families import family_for, family_of
from ..media.video import VIDEO_MAX_TOKEN_NUM
from .counter import TokenCounter
from .rules import ModelRules, load_model_rules, video_fields_read

__all__ = ["make_counter", "counting_path", "video_sampling"]


def counting_path(rules: ModelRules) -> str:
    """One line naming the model family and how its tokens are counted (``vlmpack scan`` prints it)."""
    if rules.text_only:
        return f"{rules.model_type}: text only (tokenizer; media samples dropped)"
    family = family_for(rules.model_type)
    if family is None and rules.generic is not None:
        return f"{rules.model_type}: generic fast path ({rules.generic.proof})"
    if family is None:
        return f"{rules.model_type}: slow path (HF processor{'; ' + rules.slow_reason if rules.slow_reason else ''})"
    how = "sizes from headers" if family.name == "qwen-vl" else f"{rules.tokens_per_image} tokens per image"
    if hasattr(family, "describe"):  # a family whose count needs more words (InternVL's tiles)
        how = family.describe(rules)
    return f"{rules.model_type}: fast path ({how})"


def video_sampling(rules: ModelRules) -> str | None:
    """One line with the video settings the count uses, each under its ``video:`` name (``vlmpack scan``
    prints it: a family's own recipe can differ a lot from its HF processor's defaults), or None on the
    slow path and for text only."""
    family = None if rules.text_only else family_of(rules)
    if family is None:
        return None
    if rules.generic is not None and family.takes_video:  # the processor's own rule, whatever video: says
        return f"videos: {family.frame_rule.describe()}, reader {(rules.video or VideoConfig()).reader}"
    if not family.takes_video:
        return f"videos: dropped as unsupported_media ({family.name} takes no video)"
    video = rules.video or VideoConfig()
    if rules.frame_rule is not None and video.sampler == "hf_processor":  # the folder's rule, not video:'s fields
        return f"videos: {rules.frame_rule.describe()}, reader {video.reader}"
    reads = video_fields_read(family, video.sampler)
    values = [f"{f.name} {getattr(video, f.name):g}" if isinstance(getattr(video, f.name), float)
              else f"{f.name} {getattr(video, f.name)}"
              for f in dataclasses.fields(VideoConfig) if f.name in reads and getattr(video, f.name) is not None]  # fmt: skip
    line = "videos (video:, else the folder's settings, else the family's recipe): " + ", ".join(values)
    if video.sampler == "qwen_vl_utils" and video.max_pixels is not None and rules.factor:
        limit = VIDEO_MAX_TOKEN_NUM * rules.factor**2
        if video.max_pixels > limit:  # qwen-vl-utils warns about it for every video; the count follows it
            line += (f"; max_pixels {video.max_pixels} is above qwen-vl-utils' per-frame limit {limit} "
                     f"({VIDEO_MAX_TOKEN_NUM} tokens): frames are capped there, as fetch_video does")
    return line


def make_counter(config: Config, *, snapshot: bool = False, rules: ModelRules | None = None):
    """``TokenCounter`` (fast) or ``SlowCounter``; both offer ``probe``, ``count_many`` and ``count``.

    ``snapshot``: the fast path counts with the tokenizer's snapshot (``tokenizer_snapshot.py``: the same ids,
    without torch), as the scan does; otherwise its tokenizer is transformers' own, as the loader needs it.
    ``rules``: the config's rules where the caller already read them (``load_model_rules``)."""
    rules = rules or load_model_rules(config.model)
    if rules.generic is not None and family_for(rules.model_type) is None:  # tokenized as its processor tokenizes
        family = family_of(rules)
        tokenizer = family.tokenizer  # the processor's: it may add tokens of its own (Gemma4's <|video|>)
        tokenizer.chat_template = tokenizer.chat_template or getattr(family.processor, "chat_template", None)
        return TokenCounter(rules, tokenizer, config.video, config.loss.train_on, config.model.chat_template_kwargs)
    if rules.fast or rules.text_only:
        return TokenCounter.from_config(config, rules, snapshot=snapshot)
    from .slow import SlowCounter

    return SlowCounter(rules, config)
