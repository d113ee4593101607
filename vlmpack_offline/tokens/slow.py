"""The slow path: count any family without a module in ``families/`` by running its HF processor.

Used only when ``model_type`` is not in ``FAST_FAMILIES``: the processor decides
how media expand (Pixtral, LLaVA, ...), so we run it on every sample.
Images are passed as opened by PIL (no EXIF transpose), videos as the frames the processor's
own rule picks, so the loader can feed the processor exactly the same inputs::

    frames          the video processor's own sample_frames, with its defaults, the folder's settings and
                    model.processor_kwargs, merged as the processor's __call__ merges them, on the reader's
                    frame count and rate (video.reader): ``families/processor_frames.processor_rule``. A video
                    the rule refuses (Gemma4's 32 frames of a shorter clip) is dropped as unsupported_media
                    naming the rule and the numbers. No video: field but reader applies: setting one is a
                    ConfigError (families/processor_frames.check_processor_video_fields)
    videos          those frames decoded at the reader's size (the processor resizes them itself), with
                    do_sample_frames=False and video_metadata = VideoMetadata(total_num_frames, fps,
                    frames_indices, width, height) per video: the processor's own call on the whole video
                    would pick the same frames and read the same timestamps (frames_indices / fps)
    audio           decoded to mono at the feature extractor's sampling_rate (media/audio.py decode_audio: the
                    loader's own decode), passed as ``audio=``
    media_tokens    ids among the processor's image / video / audio token ids (the tokens its
                    model marks as media: Gemma3's soft tokens, Pixtral's [IMG] [IMG_BREAK] [IMG_END])
    unsupported     a video for a processor without a video processor (an image for one without an
                    image processor, an audio for one without a feature extractor and audio token) is
                    dropped as unsupported_media at probe time, not ignored
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import Config
from ..conversation import Conversation
from ..errors import ConfigError
from ..families.processor_frames import check_processor_video_fields, processor_rule
from ..media import decode_frames, open_image, probe_video
from ..reasons import DropError, Reason
from ..remote_code import load_pretrained, trusted
from .counter import Count, render_or_drop, require_labels
from .media_info import AudioMedia, VideoMedia, probe_media
from .processor_parts import audio_extractor
from .rules import ModelRules, load_model_rules, resolve_video
from .spans import ChatRenderer

__all__ = ["RawMedia", "SlowCounter", "video_metadata"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RawMedia:
    kind: str  # "image", "video" or "audio"
    data: bytes  # the part's bytes, decoded when counted
    part: str  # part name, for messages
    video: VideoMedia | None = None  # frame sampling, for videos
    audio: AudioMedia | None = None  # the stream's length and rate, for audio


class SlowCounter:
    """Same interface as ``TokenCounter.probe`` / ``count_many`` / ``count``, backed by ``AutoProcessor``."""

    def __init__(self, rules: ModelRules, config: Config) -> None:
        from transformers import AutoProcessor

        kwargs = {
            k: v for k, v in config.model.processor_kwargs.items() if k != "pretrained_model_name_or_path"
        }
        log.warning(
            "model_type %r has no family module (vlmpack_offline/families): counting tokens by running its HF processor on "
            "decoded media (slow path, expect ~100x fewer samples/s)",
            rules.model_type,
        )
        try:
            kwargs["trust_remote_code"] = trusted(kwargs)
            self.processor = load_pretrained(AutoProcessor.from_pretrained, rules.processor_path, **kwargs)
        except ConfigError:
            raise
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
        self._media_ids = _media_token_ids(self.processor)
        self._takes = {
            kind: getattr(self.processor, f"{kind}_processor", None) is not None for kind in ("image", "video")
        }
        self.audio_extractor = audio_extractor(self.processor)
        self._takes["audio"] = self.audio_extractor is not None
        self.reader = resolve_video(self.video, rules.video, factor=rules.factor).reader
        # the frames of each video: the processor's own rule (None: it has no video processor)
        self.frame_rule = processor_rule(self.processor, path=rules.processor_path, kwargs=config.model.processor_kwargs)
        if self.frame_rule is not None:  # the video: fields it never reads (load_model_rules said so before loading)
            check_processor_video_fields(self.video, model_type=rules.model_type, rule=self.frame_rule)

    @classmethod
    def from_config(cls, config: Config) -> SlowCounter:
        return cls(load_model_rules(config.model), config)

    def probe(self, kind: str, data: bytes, *, part: str = "") -> RawMedia:
        if kind in self._takes and not self._takes[kind]:
            raise DropError(
                Reason.UNSUPPORTED_MEDIA,
                f"{part or kind}: the {self.rules.model_type} processor ({type(self.processor).__name__}) has no "
                f"{'feature extractor and audio token' if kind == 'audio' else kind + ' processor'}, so this {kind} "
                "cannot be fed to the model; drop it from the sample",
            )
        if kind == "video":  # the processor's own frames, at the reader's size
            video = probe_video(data, reader=self.reader, part=part or kind)
            sampling = self.frame_rule.sampling(video, tile=None, part=part or kind)
            return RawMedia(kind=kind, data=data, part=part or kind, video=VideoMedia(sampling=sampling, span=video.span))
        if kind == "audio":
            audio = probe_media(kind, data, rules=self.rules, video=self.video, part=part, check_grid=False)
            return RawMedia(kind=kind, data=data, part=part or kind, audio=audio)
        probe_media(kind, data, rules=self.rules, video=self.video, part=part, check_grid=False)  # an image's header
        return RawMedia(kind=kind, data=data, part=part or kind)

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
        videos = [m.video.sampling for m in media if m.kind == "video" and m.video]
        kwargs: dict = {}
        if videos:  # frames are sampled already: the processor must neither re-sample nor guess the timing
            kwargs = {  # at the reader's size (the sampling's): the processor resizes them itself
                "videos": [decode_frames(m.data, m.video.sampling) for m in media if m.kind == "video" and m.video],
                "video_metadata": [video_metadata(sampling) for sampling in videos],
                "do_sample_frames": False,
            }
        audio = [m for m in media if m.kind == "audio"]
        if audio:
            from ..media.audio import decode_audio

            audio = [decode_audio(m.data, sampling_rate=self.audio_extractor.sampling_rate, part=m.part) for m in audio]
            kwargs["audio"] = audio
        try:
            out = self.processor(text=[rendered], images=images or None, **kwargs)
        except Exception as exc:
            raise DropError(Reason.CORRUPT_MEDIA, f"the HF processor failed on this sample: {exc}") from None
        ids = list(out["input_ids"][0])
        return Count(token_len=len(ids), media_tokens=sum(1 for i in ids if i in self._media_ids))


def video_metadata(sampling):
    """The ``transformers.video_utils.VideoMetadata`` of frames our sampler chose (``frames_indices``
    into the source's ``total_num_frames`` at its native ``fps``), at the size they are decoded to."""
    from transformers.video_utils import VideoMetadata

    total = sampling.total_frames or (max(sampling.frame_indices) + 1)
    return VideoMetadata(
        total_num_frames=total,
        fps=sampling.native_fps,
        width=sampling.resized_width,
        height=sampling.resized_height,
        duration=total / sampling.native_fps if sampling.native_fps else None,
        frames_indices=list(sampling.frame_indices),
    )


def _media_token_ids(processor) -> set[int]:
    """The ids the processor marks as media in ``mm_token_type_ids``: its ``image_token_ids`` and
    ``video_token_ids`` (with a family's extra ones, e.g. Pixtral's break/end), else ``*_token_id``."""
    ids: set = set()
    for kind in ("image", "video", "audio"):
        listed = getattr(processor, f"{kind}_token_ids", None)
        ids.update(listed if isinstance(listed, list | tuple) else [getattr(processor, f"{kind}_token_id", None)])
    return {i for i in ids if isinstance(i, int)}
