"""The generic fast path: any processor folder counted from header sizes with the processor's own code.

A ``model_type`` without a module in this package is counted here when its folder's processor can say
how an item of a given size expands (``generic_fields.py``) and the folder passed its proof
(``tokens/proof.py``): no pixel is decoded and torchvision is not needed::

    processor   built from its parts (tokens/processor_parts.py); a video processor whose module needs
                torchvision is replaced by its written-out rule (video_rules.py)
    image       fields from the size (generic_fields.py) -> processor.replace_image_token(fields, 0)
    video       frames: the video processor's own sample_frames on the reader's numbers, with the keywords
                the processor's call hands it (processor_frames.processor_rule); a refusal is a drop naming
                the rule. Fields from (frames, height, width) + VideoMetadata(frames_indices) ->
                processor.replace_video_token(fields, 0, **videos_kwargs)
    audio       the lengths of every clip in the processor call (the sample's clips, ``in_sample``) at the feature
                extractor's rate -> the processor's own _process_audio with a stand-in feature extractor that
                returns its frame mask from lengths (audio_rules.py) -> each clip's replacement
    video+audio with ``load_audio_from_video`` (Qwen-Omni; ``audio_in_video_setting``): a video's own track is
                one more clip of that call (the sample's clips and tracks in item order, as the loader passes
                them with ``audio_from_video_indices``), and the video's replacement is the processor's own
                _process_videos -> replace_video_with_audio_token with the call's audio fields
                (``video_with_audio_text``); a video without an audio stream stays a plain video, as the
                processor leaves it
    text        the chat template + the processor's tokenizer (the processor may add tokens of its own: the
                special tokens its call puts around every text, measured once, ``text_edges``)
    count       len(tokenize(replacement)), cached per size key (audio: per call's lengths); media tokens = the
                replacement's ids among the processor's image / video / audio token ids (what its
                mm_token_type_ids mark)

The replacement is what the processor's own ``__call__`` splices in for the item (start / end / row /
timestamp tokens included), so a family changed upstream stays counted right; the proof at folder load
checks it against the real processor on generated media before the path is used.

The ``video:`` section's sampling fields are not read (the processor samples with its own settings: set
``fps`` / ``num_frames`` ... in the folder or ``model.processor_kwargs``); only ``video.reader`` is.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..reasons import DropError, Reason
from .audio_rules import (
    AUDIO_IN_VIDEO_KEYS,
    AudioEncoder,
    audio_encoder_for,
    audio_in_video_setting,
    audio_rule_for,
    video_with_audio_text,
)
from .base import Size, SpecialTokens
from .generic_fields import ItemFields, adapter_for

if TYPE_CHECKING:
    from ..config import VideoConfig
    from ..media import VideoInfo, VideoSampling
    from ..tokens.media_info import AudioMedia, MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["GenericRules", "GenericFamily", "Expansion", "Unservable", "build_generic", "generic_family", "kwargs_json"]

# One text-only turn pair: the chat template renders the text the processor's call may add tokens around.
_PROBE_CHAT = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]


class Unservable(ValueError):
    """The generic path cannot count this folder; the message says why (one line, for ``vlmpack scan``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GenericRules:
    """What ``ModelRules`` carries for a folder on the generic path (picklable: workers rebuild the family)."""

    processor_kwargs: str  # model.processor_kwargs as sorted JSON: the family is built with them
    proof: str  # how the folder was proven, for vlmpack scan: "proved: 12 images, 8 videos"


@dataclass(frozen=True, slots=True, kw_only=True)
class Expansion:
    """One item's replacement as the processor writes it, and what it costs."""

    text: str  # the exact string the processor splices in for the item's placeholder
    tokens: int  # its tokens
    media_tokens: int  # those among the processor's image / video / audio token ids
    encoder_patches: int  # vision-encoder patches (generic_fields.py)
    encoder_attention: int  # sum over the vision encoder's attention blocks of (patches in the block)**2
    audio_frames: int = 0  # an audio item's or a video's track: the audio encoder's tokens (AudioEncoder.work)
    audio_attention: int = 0  # and its attention windows' tokens**2


def _drop_for(exc: Exception, what: str, *, part: str) -> DropError:
    """A size rule's refusal as a drop naming it (Qwen-style smart_resize: 'absolute aspect ratio ...')."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    reason = Reason.UNSUPPORTED_ASPECT if "aspect" in text.lower() else Reason.UNSUPPORTED_MEDIA
    return DropError(reason, f"{part}: {what} refuses it: {type(exc).__name__}: {text}")


class GenericFamily:
    """The Family interface (``base.py``) for one processor folder, backed by its own processor object."""

    model_types = frozenset()  # none by name: any model_type whose folder is proven (``rules.generic``)
    positions = "model"  # the loader takes them from the model's own rope-index function, else 1-D
    video_fields = frozenset()  # of video:, only the reader (rules.video_fields_read adds it)

    def __init__(self, processor, *, model_type: str, path: Path, kwargs: dict, stand_in: str = "",
                 audio_in_video: bool = False) -> None:  # fmt: skip
        from .processor_frames import processor_rule

        self.name = model_type
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.stand_in = stand_in  # the written-out video rule used, for messages ("" when none)
        adapter, why = adapter_for(processor)
        if adapter is None:
            raise Unservable(why)
        self.adapter = adapter
        merged = processor._merge_kwargs(tokenizer_init_kwargs=self.tokenizer.init_kwargs)  # as its __call__ merges
        merged["videos_kwargs"].pop("load_audio_from_video", None)  # the omni __call__ pops it before the video call
        self._merged = merged
        self.images_kwargs, self.videos_kwargs = merged["images_kwargs"], merged["videos_kwargs"]
        # replace_*_token get the modality's keywords (ProcessorMixin._process_images / _process_videos) or the
        # whole merged set (the omni mixin's _process_videos, tf/processing_utils.py): both, the modality's winning
        self._replace_images = {**merged, **self.images_kwargs}
        self._replace_videos = {k: v for k, v in {**merged, **self.videos_kwargs}.items() if k not in AUDIO_IN_VIDEO_KEYS}
        if "load_audio_from_video" in merged:  # a plain video (no track): the omni call's path for a silent one
            self._replace_videos["load_audio_from_video"] = False
        self.audio_in_video = audio_in_video  # each video's own audio track counted with it (audio_rules.py)
        self.takes_image = getattr(processor, "image_processor", None) is not None and bool(getattr(processor, "image_token", None))
        self.takes_video = getattr(processor, "video_processor", None) is not None and bool(getattr(processor, "video_token", None))
        self.no_video_reason = f"{type(processor).__name__} has no video processor or video token"
        self.frame_rule = processor_rule(processor, path=path, kwargs=kwargs) if self.takes_video else None
        # audio: replace_audio_token gets the merged audio keywords (ProcessorMixin._process_audio)
        self.audio_rule, self.no_audio_reason = audio_rule_for(processor, merged["audio_kwargs"])
        self.takes_audio = self.audio_rule is not None
        self._audio_call = functools.lru_cache(maxsize=16384)(self.audio_rule.call) if self.takes_audio else None
        self.path = path
        media = [*processor.image_token_ids, *(processor.video_token_ids if self.takes_video else []),
                 *(processor.audio_token_ids if self.takes_audio else [])]  # fmt: skip
        self.media_ids = frozenset(i for i in media if isinstance(i, int))
        self.text_prefix, self.text_suffix = _text_edges(processor)
        self._image = functools.lru_cache(maxsize=65536)(self._image_expansion)
        self._video = functools.lru_cache(maxsize=16384)(self._video_expansion)
        self._audio = functools.lru_cache(maxsize=16384)(self._audio_expansions)
        self._video_audio = functools.lru_cache(maxsize=16384)(self._video_audio_expansion)

    # -- what the processor writes ---------------------------------------------------------------------
    def _expansion(self, text: str, fields: ItemFields) -> Expansion:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Expansion(text=text, tokens=len(ids), media_tokens=sum(1 for i in ids if i in self.media_ids),
                         encoder_patches=fields.encoder_patches, encoder_attention=fields.encoder_attention)  # fmt: skip

    def _image_expansion(self, height: int, width: int) -> Expansion:
        fields = self.adapter.image(self.processor, height, width, self.images_kwargs)
        return self._expansion(self.processor.replace_image_token(fields.fields, 0, **self._replace_images), fields)

    def _video_expansion(self, frames: tuple[int, ...], fps: float, total: int, height: int, width: int) -> Expansion:
        from transformers.video_utils import VideoMetadata

        metadata = VideoMetadata(total_num_frames=total, fps=fps, duration=total / fps, width=width, height=height,
                                 frames_indices=list(frames))  # fmt: skip
        fields = self.adapter.video(self.processor, len(frames), height, width, metadata, self.videos_kwargs)
        text = self.processor.replace_video_token(copy.deepcopy(fields.fields), 0, **self._replace_videos)
        return self._expansion(text, fields)

    def _video_audio_expansion(self, frames: tuple[int, ...], fps: float, total: int, height: int, width: int,
                               lengths: tuple[int, ...], index: int) -> Expansion:  # fmt: skip
        """A video with its track, clip ``index`` of the call of clips ``lengths`` (at the FE's rate)."""
        from transformers.video_utils import VideoMetadata

        metadata = VideoMetadata(total_num_frames=total, fps=fps, duration=total / fps, width=width, height=height,
                                 frames_indices=list(frames))  # fmt: skip
        fields = self.adapter.video(self.processor, len(frames), height, width, metadata, self.videos_kwargs)
        call = self._audio_call(lengths)
        text = video_with_audio_text(self.processor, fields.fields, call, index, self._merged)
        frames_in, attention = self.audio_encoder.work(call.frames[index]) if self.audio_encoder is not None else (0, 0)
        return dataclasses.replace(self._expansion(text, fields), audio_frames=frames_in, audio_attention=attention)

    def _video_with_track(self, media: MediaInfo) -> Expansion:
        """The video's replacement with its audio track (``media.audio``) within its call (``in_call``)."""
        lengths, index = self._call_of(media.audio)
        s = media.sampling
        return self._video_audio(tuple(s.frame_indices), s.native_fps, s.total_frames, s.resized_height,
                                 s.resized_width, lengths, index)  # fmt: skip

    def _call_of(self, clip: AudioMedia) -> tuple[tuple[int, ...], int]:
        """The lengths of the clips of ``clip``'s processor call (``in_call``; alone when empty) at the feature
        extractor's rate, and ``clip``'s index among them."""
        from ..media.audio import resampled_length

        call = clip.in_call or ((clip.samples, clip.sample_rate),)
        if (clip.samples, clip.sample_rate) not in call:
            raise ValueError(f"an audio clip of {clip.samples} samples at {clip.sample_rate} Hz is not in its call {call}")
        lengths = tuple(resampled_length(n, rate, self.audio_rule.sampling_rate) for n, rate in call)
        return lengths, call.index((clip.samples, clip.sample_rate))

    @functools.cached_property
    def audio_encoder(self) -> AudioEncoder | None:
        """The model's audio encoder, for the items' encoder work (read on the first audio item)."""
        return audio_encoder_for(self.path)[0]

    def _audio_expansions(self, lengths: tuple[int, ...]) -> tuple[Expansion, ...]:
        """Every clip of one processor call (``lengths`` at the feature extractor's rate), in order."""
        call = self._audio_call(lengths)
        out = []
        for text, frames in zip(call.replacements, call.frames, strict=True):
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            patches, attention = self.audio_encoder.work(frames) if self.audio_encoder is not None else (0, 0)
            out.append(Expansion(text=text, tokens=len(ids), media_tokens=sum(1 for i in ids if i in self.media_ids),
                                 encoder_patches=0, encoder_attention=0, audio_frames=patches,
                                 audio_attention=attention))  # fmt: skip
        return tuple(out)

    def _audio_item(self, media: MediaInfo, *, part: str) -> Expansion:
        """The clip's expansion within its call (``media.in_call``; alone when empty): a clip the processor gives
        no audio token is refused (a zero-length or too short clip would train on nothing)."""
        lengths, index = self._call_of(media)
        expansion = self._audio(lengths)[index]
        if not expansion.media_tokens:
            raise DropError(Reason.UNSUPPORTED_MEDIA, (
                f"{part}: {type(self.processor).__name__} gives this clip no audio token ({media.samples} samples at "
                f"{media.sample_rate} Hz, {lengths[index]} at {self.audio_rule.sampling_rate} Hz): too short to "
                "train on"))  # fmt: skip
        return expansion

    def expansion(self, media: MediaInfo, *, part: str = "") -> Expansion:
        """The item's replacement (cached per size key); a size the processor's rule refuses is a ``DropError``."""
        try:
            if media.kind == "image":
                return self._image(media.height, media.width)
            if media.kind == "audio":
                return self._audio_item(media, part=part or "audio")
            if self.audio_in_video and media.audio is not None:
                return self._video_with_track(media)
            s = media.sampling
            return self._video(tuple(s.frame_indices), s.native_fps, s.total_frames, s.resized_height, s.resized_width)
        except DropError:
            raise
        except Exception as exc:  # the processor's own size rule refuses the item (aspect, minimum ...)
            raise _drop_for(exc, self._rule_name(media), part=part or media.kind) from None

    def _rule_name(self, media: MediaInfo) -> str:
        if media.kind == "audio":
            return f"{type(self.processor).__name__}'s audio rule ({self.audio_rule.feature_extractor})"
        if media.kind == "video" and self.audio_in_video and media.audio is not None:
            return (f"{type(self.processor).__name__}'s video-with-audio rule ({type(self.processor.video_processor).__name__}, "
                    f"{self.audio_rule.feature_extractor})")  # fmt: skip
        owner = self.processor.image_processor if media.kind == "image" else self.processor.video_processor
        return f"{type(owner).__name__}'s size rule"

    # -- the Family interface -----------------------------------------------------------------------------
    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        return {}  # the processor object holds them all

    def special_tokens(self, tokenizer) -> SpecialTokens:
        video = getattr(self.processor, "video_token", None) if self.takes_video else None
        default = SpecialTokens()  # a kind the processor has no token for keeps a pad that the text never holds
        return SpecialTokens(image_pad=getattr(self.processor, "image_token", None) or default.image_pad,
                             video_pad=video or default.video_pad,
                             audio_pad=getattr(self.processor, "audio_token", None) or default.audio_pad)

    def in_sample(self, rules: ModelRules, media: Sequence[MediaInfo]) -> Sequence[MediaInfo]:
        """The sample's items with each audio item's ``in_call`` set to every audio of the sample, and each video
        track's (``load_audio_from_video``) to the same call: the processor pads the audios and tracks of one call
        together, so a clip's count may depend on the longest (audio_rules.py); others unchanged."""
        call = tuple((c.samples, c.sample_rate) for c in map(self._clip_of, media) if c is not None)
        if not call:
            return media
        out = []
        for m in media:
            if m.kind == "audio":
                m = dataclasses.replace(m, in_call=call)
            elif self._clip_of(m) is not None:
                m = dataclasses.replace(m, audio=dataclasses.replace(m.audio, in_call=call))
            out.append(m)
        return out

    def _clip_of(self, media: MediaInfo):
        """The item's clip in its processor call: an audio item, a video's track where the setting reads it."""
        if media.kind == "audio":
            return media
        return media.audio if media.kind == "video" and self.audio_in_video and media.audio is not None else None

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return f"{self.text_prefix}{text}{self.text_suffix}"

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        """The item as the processor takes it ALONE: an audio clip its processor refuses, or gives no audio token,
        in a call of its own is refused, naming it, even where a longer clip in the same call would pad it into a
        frame or two (Qwen3-Omni: a clip under 201 samples); a call that refuses its clips together is refused
        when the sample is counted."""
        if media.kind == "image" and not self.takes_image:
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"{part}: {type(self.processor).__name__} takes no image")
        if media.kind == "audio" and not self.takes_audio:
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"{part}: {self.name}: {self.no_audio_reason}")
        if media.kind == "audio":
            media = dataclasses.replace(media, in_call=())
        elif self._clip_of(media) is not None:
            media = dataclasses.replace(media, audio=dataclasses.replace(media.audio, in_call=()))
        self.expansion(media, part=part)

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        return self.expansion(media).text

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        e = self.expansion(media)
        return Size(tokens=e.tokens, media_tokens=e.media_tokens, encoder_patches=e.encoder_patches,
                    encoder_attention=e.encoder_attention, audio_frames=e.audio_frames,
                    audio_attention=e.audio_attention)  # fmt: skip

    def sample_video(self, rules: ModelRules, info: VideoInfo, video: VideoConfig, *, part: str) -> VideoSampling:
        """The frames the processor's own rule picks, at the reader's size (the processor resizes them)."""
        return self.frame_rule.sampling(info, tile=None, part=part)

    def describe(self, rules: ModelRules) -> str:
        return rules.generic.proof if rules.generic is not None else "unproven"


def _text_edges(processor) -> tuple[str, str]:
    """The special tokens the processor's call puts around every text (Molmo2Processor prepends the BOS, or the
    EOS where there is none, to a prompt that does not start with it; a tokenizer that adds BOS / EOS itself),
    as text: measured on the chat template's rendering of one text-only turn pair, the call vs the tokenizer
    alone (``add_special_tokens=False``, as the counter tokenizes). ``Unservable`` when the call changes the
    text otherwise."""
    tokenizer = processor.tokenizer
    template = getattr(processor, "chat_template", None) or tokenizer.chat_template
    try:
        rendered = tokenizer.apply_chat_template(_PROBE_CHAT, chat_template=template, tokenize=False)
    except Exception:  # a template that needs list contents or other variables: a plain text shows the same edges
        rendered = "Hello"
    try:
        called = list(processor(text=[rendered])["input_ids"][0])
    except Exception as exc:
        raise Unservable(f"{type(processor).__name__} fails on a text-only prompt: {type(exc).__name__}: {exc}") from None
    plain = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    start = next((k for k in range(len(called) - len(plain) + 1) if called[k:k + len(plain)] == plain), None)
    if start is None:
        raise Unservable(f"{type(processor).__name__}'s call changes the text itself (its input_ids are not the "
                         "tokenizer's with tokens around them)")  # fmt: skip
    prefix = tokenizer.decode(called[:start])
    suffix = tokenizer.decode(called[start + len(plain):])
    if tokenizer(prefix + rendered + suffix, add_special_tokens=False)["input_ids"] != called:
        raise Unservable(f"{type(processor).__name__}'s call adds tokens {called[:start]} / {called[start + len(plain):]} "
                         "that do not read back as text")  # fmt: skip
    return prefix, suffix


def build_generic(path: str | Path, model_type: str, processor_kwargs: dict, *, trust_remote_code: bool = False) -> GenericFamily:
    """The generic family for a folder: its processor from its parts, a written-out rule standing in for a video
    processor whose module needs torchvision. ``Unservable`` (one line) where it cannot count the folder."""
    from ..tokens.processor_parts import build_processor, video_processor_name
    from .video_rules import stand_in_for

    path = Path(path)
    stand_in_class = stand_in_for(video_processor_name(path, model_type))
    try:
        parts = build_processor(path, model_type, processor_kwargs, trust_remote_code=trust_remote_code,
                                skip=frozenset({"video_processor"}) if stand_in_class else frozenset())  # fmt: skip
    except ConfigError as exc:
        raise Unservable(str(exc)) from None
    processor = parts.processor
    merged = processor._merge_kwargs(tokenizer_init_kwargs=processor.tokenizer.init_kwargs)
    audio_in_video = audio_in_video_setting(processor, merged, processor_kwargs, model_type=model_type)  # ConfigError
    if stand_in_class is not None:
        processor.video_processor = stand_in_class.from_folder(path, processor_kwargs)
    missing = {a: why for a, why in parts.missing.items() if not (a == "video_processor" and stand_in_class)}
    if "image_processor" in missing and getattr(processor, "image_token", None):
        raise Unservable(f"its image processor {parts.part('image_processor').class_name} cannot be built here "
                         f"({missing['image_processor']})")  # fmt: skip
    if "video_processor" in missing and getattr(processor, "video_token", None):
        raise Unservable(f"its video processor {parts.part('video_processor').class_name} cannot be built here "
                         f"({missing['video_processor']}) and vlmpack has no written-out rule for it "
                         "(families/video_rules.py)")  # fmt: skip
    try:
        family = GenericFamily(processor, model_type=model_type, path=path, kwargs=processor_kwargs,
                               stand_in=stand_in_class.__name__ if stand_in_class else "", audio_in_video=audio_in_video)  # fmt: skip
    except ConfigError as exc:  # the video rule refuses every video (processor_frames)
        raise Unservable(str(exc)) from None
    if audio_in_video and not (family.takes_audio and family.takes_video):
        raise ConfigError(f"model.processor_kwargs.load_audio_from_video: {model_type}'s video audio tracks cannot be "
                          f"counted here ({family.no_audio_reason if not family.takes_audio else family.no_video_reason}); "
                          "remove the setting")  # fmt: skip
    return family




@functools.lru_cache(maxsize=8)
def _cached(path: str, model_type: str, kwargs_json: str) -> GenericFamily:
    kwargs = json.loads(kwargs_json)
    return build_generic(path, model_type, kwargs, trust_remote_code=kwargs.get("trust_remote_code") is True)


def generic_family(rules: ModelRules) -> GenericFamily:
    """The generic family of a folder the proof accepted (``rules.generic``), built once per process."""
    if rules.generic is None:
        raise ValueError(f"{rules.processor_path} is not on the generic path")
    return _cached(rules.processor_path, rules.model_type, rules.generic.processor_kwargs)


def kwargs_json(processor_kwargs: dict[str, Any]) -> str:
    """``model.processor_kwargs`` as the key ``GenericRules.processor_kwargs`` holds."""
    return json.dumps(processor_kwargs, sort_keys=True, default=str)

