"""The slow path: count any non-Qwen-VL family by running its HF processor on decoded media.

Used only when ``model_type`` is not in ``FAST_FAMILIES``: the processor decides
how media expand (Gemma3, Pixtral, LLaVA, ...), so we run it on every sample.
Images are passed as opened by PIL (no EXIF transpose), videos as the frames of
the shared sampler, so the loader can feed the processor exactly the same inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import Config
from ..conversation import Conversation
from ..errors import ConfigError
from ..media import decode_frames, open_image
from ..reasons import DropError, Reason
from .counter import Count, render_or_drop, require_labels
from .media_info import VideoMedia, probe_media
from .rules import ModelRules, load_model_rules
from .spans import ChatRenderer

__all__ = ["RawMedia", "SlowCounter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RawMedia:
    kind: str  # "image" or "video"
    data: bytes  # the part's bytes, decoded when counted
    part: str  # part name, for messages
    video: VideoMedia | None = None  # frame sampling, for videos


class SlowCounter:
    """Same interface as ``TokenCounter.probe`` / ``count_many`` / ``count``, backed by ``AutoProcessor``."""

    def __init__(self, rules: ModelRules, config: Config) -> None:
        from transformers import AutoProcessor

        kwargs = {
            k: v for k, v in config.model.processor_kwargs.items() if k != "pretrained_model_name_or_path"
        }
        log.warning(
            "model_type %r is not a Qwen-VL family: counting tokens by running its HF processor on "
            "decoded media (slow path, expect ~100x fewer samples/s)",
            rules.model_type,
        )
        try:
            self.processor = AutoProcessor.from_pretrained(rules.processor_path, **kwargs)
        except Exception as exc:
            raise ConfigError(
                f"AutoProcessor.from_pretrained({rules.processor_path!r}) failed: {exc}"
            ) from None
        self.rules = rules
        self.video = config.video
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        template = getattr(self.processor, "chat_template", None) or self.tokenizer.chat_template
        self.chat = ChatRenderer(template, {**self.tokenizer.special_tokens_map, **config.model.chat_template_kwargs})
        self.train_on = config.loss.train_on
        self._media_ids = {
            getattr(self.processor, name, None) for name in ("image_token_id", "video_token_id")
        } - {None}

    @classmethod
    def from_config(cls, config: Config) -> SlowCounter:
        return cls(load_model_rules(config.model), config)

    def probe(self, kind: str, data: bytes, *, part: str = "") -> RawMedia:
        info = probe_media(kind, data, rules=self.rules, video=self.video, part=part, check_grid=False)
        return RawMedia(
            kind=kind, data=data, part=part or kind, video=info if isinstance(info, VideoMedia) else None
        )

    def count_many(
        self, samples: Sequence[tuple[Conversation, Sequence[RawMedia]]]
    ) -> list[Count | DropError]:
        out: list[Count | DropError] = []
        for conversation, media in samples:
            try:
                out.append(self.count(conversation, media))
            except DropError as exc:
                out.append(exc)
        return out

    def count(self, conversation: Conversation, media: Sequence[RawMedia]) -> Count:
        rendered, _ = render_or_drop(self.chat, conversation)
        require_labels(self.chat, conversation, self.train_on)
        images = [open_image(m.data, part=m.part) for m in media if m.kind == "image"]
        videos = [decode_frames(m.data, m.video.sampling) for m in media if m.kind == "video" and m.video]
        try:
            out = self.processor(text=[rendered], images=images or None, videos=videos or None)
        except Exception as exc:
            raise DropError(Reason.CORRUPT_MEDIA, f"the HF processor failed on this sample: {exc}") from None
        ids = list(out["input_ids"][0])
        return Count(token_len=len(ids), media_tokens=sum(1 for i in ids if i in self._media_ids))
