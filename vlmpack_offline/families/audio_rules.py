"""Audio items counted from their lengths alone: the feature extractor's frame mask, the processor's own token rule.

transformers 5.24 expands audio in ``_process_audio`` (tf/processing_utils.py ``ProcessorMixin._process_audio``;
tf/models/qwen3_omni_moe/processing_qwen3_omni_moe.py and tf/models/qwen2_5_omni/processing_qwen2_5_omni.py
override it): the feature extractor (FE) runs once on every audio of the call, then ``replace_audio_token(processed,
idx)`` writes each item's string. Of the FE's output that string reads one field, the per-frame mask, and the mask
depends on the waveforms only through their lengths (at the FE's ``sampling_rate``: the loader resamples every clip
to it, ``media/audio.py``). So ``AudioRule.call`` runs the processor's OWN ``_process_audio`` (its kwargs, the
padding it forces, Qwen3-Omni's ``n_window``, its ``_get_feat_extract_output_lengths``, its ``replace_audio_token``)
on stand-in clips that have a length and no samples, with a stand-in FE that returns the mask its class would::

    pad       SequenceFeatureExtractor.pad (tf/feature_extraction_sequence_utils.py): truncation cuts each clip to
              max_length (rounded up to pad_to_multiple_of); padding True / "longest" pads to the longest clip of
              the CALL, "max_length" to max_length, both rounded up to pad_to_multiple_of; padding_side puts the
              zeros right or left. The keywords are the call's, else the FE ``__call__``'s own defaults (read from
              its signature): Whisper padding "max_length", truncation True, max_length None -> ``n_samples``;
              Gemma4 padding "longest", max_length 480000, truncation True, pad_to_multiple_of 128.
    Whisper   WhisperFeatureExtractor.__call__ (tf/models/whisper/feature_extraction_whisper.py): the sample mask
              taken every hop_length samples, less its last column when the padded length P is no multiple of
              hop_length: P // hop columns; column k is 1 where sample k * hop is real audio. A call padded to
              P <= n_fft // 2 fails in its torch STFT (reflect padding): refused whatever the scan's environment,
              since the loader's has torch.
    Gemma4    Gemma4AudioFeatureExtractor._extract_spectrogram (tf/models/gemma4/feature_extraction_gemma4.py):
              frame_length // 2 zeros in front (semicausal), frames of frame_length + 1 samples every hop_length:
              (P + frame_length // 2 - frame_length - 1) // hop + 1 frames; a frame is 1 where the last sample
              of its window (k * hop + frame_length - frame_length // 2 in the clip) is real audio.

So with Qwen3-Omni (padding True, truncation False) an item's count depends on the longest clip padded with it: the
items of one processor call are counted together (``AudioMedia.in_call``). Qwen2.5-Omni forces padding
"max_length" (its ``_process_audio``), so a clip past the FE's ``n_samples`` is cut there; Gemma4's FE cuts at 30 s.
Any other FE class, or call settings that return no mask, are refused by name (``AudioUnsupported``): the generic
path then takes no audio for that folder.

**Encoder work** (``Size.encoder_*``, the plan's cost model) from the model's audio encoder config (the folder's
``config.json``, its class defaults where the file has none). ``frames`` = the item's mask sum (the mel frames the
encoder is fed); patches = the tokens its transformer layers run over (after the conv front end); attention = the
query-key pairs those layers score, summed over the blocks the encoder attends within::

    qwen3_omni_moe_audio_encoder  chunks of 2 * n_window frames, each to f(c) tokens by three stride-2 convs
                                  (f as _get_feat_extract_output_lengths); attention within windows of
                                  f(2 * n_window) * (n_window_infer // (2 * n_window)) tokens, the last one
                                  shorter (modeling_qwen3_omni_moe.py ``chunk_and_pad_features``,
                                  ``get_audio_cu_seqlens``): sum of window**2
    qwen2_5_omni_audio_encoder    chunks of 2 * n_window frames, each to (c - 1) // 2 + 1 tokens by conv2's
                                  stride, attention within each chunk (modeling_qwen2_5_omni.py
                                  ``get_audio_cu_seqlens``): sum of chunk**2
    gemma4_audio                  two stride-2 convs (ceil(f / 2) twice), then chunked local attention: blocks of
                                  attention_chunk_size queries, each against chunk + attention_context_left - 1
                                  + attention_context_right keys (modeling_gemma4.py ``Gemma4AudioAttention``):
                                  blocks * chunk * context

An encoder with no rule here adds no encoder work (as an item on the slow path).
"""

from __future__ import annotations

import copy
import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["AUDIO_IN_VIDEO_KEYS", "AudioCall", "AudioEncoder", "AudioRule", "AudioUnsupported", "audio_encoder_for",
           "audio_in_video_setting", "audio_rule_for", "video_with_audio_text"]

_WHISPER = "transformers.models.whisper.feature_extraction_whisper.WhisperFeatureExtractor"
_GEMMA4 = "transformers.models.gemma4.feature_extraction_gemma4.Gemma4AudioFeatureExtractor"


class AudioUnsupported(ValueError):
    """The processor's audio cannot be counted from lengths here; the message says why (one line)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioCall:
    """What the processor's ``_process_audio`` gives for the clips of one call, in order."""

    replacements: tuple[str, ...]  # the string each clip's placeholder becomes
    frames: tuple[int, ...]  # each clip's mel frames that hold audio (its mask's sum): what the encoder is fed
    fields: Any = None  # what ``_process_audio`` returned (its num_audio_tokens ...): a video's track reads it


class _Clip:
    """A clip with a length and no samples: all the stand-in FE reads of it."""

    __slots__ = ("samples",)

    def __init__(self, samples: int) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return self.samples


@functools.cache
def _call_defaults(fe_class: type) -> dict[str, Any]:
    params = inspect.signature(fe_class.__call__).parameters
    return {name: p.default for name, p in params.items()
            if p.kind is p.POSITIONAL_OR_KEYWORD and name not in ("self", "raw_speech")}  # fmt: skip


def _call_settings(fe, kwargs: dict) -> dict[str, Any]:
    """The FE ``__call__``'s keywords as it sees them: the call's, else its own signature's defaults."""
    return {name: kwargs.get(name, default) for name, default in _call_defaults(type(fe)).items()}


def _round_up(length: int, multiple: int | None) -> int:
    return length if not multiple or length % multiple == 0 else (length // multiple + 1) * multiple


def _sample_ranges(fe, lengths: list[int], *, padding, max_length, truncation, pad_to_multiple_of) -> list[tuple[int, int, int]]:
    """Each clip's (first, end, padded length) in samples after ``SequenceFeatureExtractor.pad`` (module doc)."""
    from transformers.utils import PaddingStrategy

    strategy = fe._get_padding_strategies(padding=padding, max_length=max_length)  # the FE's own (and its errors)
    if truncation:
        if max_length is None:
            raise ValueError("When setting ``truncation=True``, make sure that ``max_length`` is defined.")
        cut = _round_up(max_length, pad_to_multiple_of)
        lengths = [min(n, cut) for n in lengths]
    if strategy == PaddingStrategy.LONGEST:
        max_length, strategy = max(lengths), PaddingStrategy.MAX_LENGTH
    out = []
    for n in lengths:
        target = _round_up(max_length, pad_to_multiple_of) if max_length is not None else n
        pad = target - n if strategy != PaddingStrategy.DO_NOT_PAD and n < target else 0
        out.append((0, n, n + pad) if fe.padding_side == "right" else (pad, n + pad, n + pad))
    return out


def _in_range(positions: np.ndarray, first: int, end: int) -> np.ndarray:
    return (positions >= first) & (positions < end)


class _WhisperMask:
    """WhisperFeatureExtractor's ``attention_mask`` (module doc), as ``return_attention_mask=True`` returns it."""

    def output(self, fe, lengths: list[int], kwargs: dict) -> tuple[dict, tuple[int, ...]]:
        s = _call_settings(fe, kwargs)
        if s["sampling_rate"] is not None and s["sampling_rate"] != fe.sampling_rate:
            raise ValueError(f"{type(fe).__name__} takes {fe.sampling_rate} Hz audio, the call says {s['sampling_rate']}")
        if not s["return_attention_mask"]:
            raise AudioUnsupported(f"{type(fe).__name__} is called without return_attention_mask, so it returns no "
                                   "frame mask that vlmpack can build from lengths")  # fmt: skip
        ranges = _sample_ranges(fe, lengths, padding=s["padding"], max_length=s["max_length"] or fe.n_samples,
                                truncation=s["truncation"], pad_to_multiple_of=s["pad_to_multiple_of"])  # fmt: skip
        if len({padded for _, _, padded in ranges}) > 1:  # its batch transpose fails on clips left unpadded
            raise ValueError(f"{type(fe).__name__} cannot batch clips of different lengths without padding")
        if ranges[0][2] <= fe.n_fft // 2:  # torch.stft's reflect padding of n_fft // 2 needs a longer input
            raise ValueError(f"{type(fe).__name__}'s STFT (torch) cannot pad a call of {ranges[0][2]} samples by "
                             f"n_fft // 2 = {fe.n_fft // 2}")  # fmt: skip
        starts = np.arange(ranges[0][2] // fe.hop_length) * fe.hop_length
        mask = np.array([_in_range(starts, first, end) for first, end, _ in ranges], dtype=np.int32).reshape(len(ranges), -1)
        return {"attention_mask": mask}, tuple(int(m) for m in mask.sum(-1))


class _Gemma4Mask:
    """Gemma4AudioFeatureExtractor's ``input_features_mask`` (module doc), one array per clip."""

    def output(self, fe, lengths: list[int], kwargs: dict) -> tuple[dict, tuple[int, ...]]:
        s = _call_settings(fe, kwargs)
        if not s["return_attention_mask"]:
            raise AudioUnsupported(f"{type(fe).__name__} is called without return_attention_mask, so it returns no "
                                   "frame mask that vlmpack can build from lengths")  # fmt: skip
        ranges = _sample_ranges(fe, lengths, padding=s["padding"], max_length=s["max_length"],
                                truncation=s["truncation"], pad_to_multiple_of=s["pad_to_multiple_of"])  # fmt: skip
        half = fe.frame_length // 2
        masks = []
        for first, end, padded in ranges:
            frames = max((padded + half - fe.frame_length - 1) // fe.hop_length + 1, 0)
            window_ends = np.arange(frames) * fe.hop_length + fe.frame_length - half
            masks.append(_in_range(window_ends, first, end))
        return {"input_features_mask": masks}, tuple(int(m.sum()) for m in masks)


_MASKS = {_WHISPER: _WhisperMask(), _GEMMA4: _Gemma4Mask()}


class _LengthsOnlyFE:
    """Stands in for the processor's FE inside its own ``_process_audio``: the real FE's attributes, and a call
    that returns the frame mask its class would, from the clips' lengths; ``frames`` holds the last call's."""

    def __init__(self, fe, mask) -> None:
        self._fe, self._mask = fe, mask
        self.frames: tuple[int, ...] = ()

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_fe", "_mask"):  # copy / pickle probing a half-built instance
            raise AttributeError(name)
        return getattr(self._fe, name)

    def __call__(self, raw_speech, **kwargs):
        from transformers.feature_extraction_utils import BatchFeature

        fields, self.frames = self._mask.output(self._fe, [len(clip) for clip in raw_speech], kwargs)
        return BatchFeature(fields)


class AudioRule:
    """One processor's audio expansion from clip lengths (module doc); built by ``audio_rule_for``."""

    def __init__(self, processor, audio_kwargs: dict) -> None:
        attribute = "audio_processor" if getattr(processor, "audio_processor", None) is not None else "feature_extractor"
        fe = getattr(processor, attribute)
        mask = _MASKS.get(f"{type(fe).__module__}.{type(fe).__qualname__}")
        if mask is None:
            raise AudioUnsupported(f"vlmpack has no frame-mask rule for its feature extractor {type(fe).__name__} "
                                   f"(it has one for {', '.join(sorted(n.rsplit('.', 1)[1] for n in _MASKS))})")  # fmt: skip
        self.sampling_rate = int(fe.sampling_rate)  # the rate the loader resamples every clip to
        self.feature_extractor = type(fe).__name__
        self._audio_kwargs = audio_kwargs
        self._fe = _LengthsOnlyFE(fe, mask)
        self._processor = copy.copy(processor)  # the same parts, with the stand-in FE
        setattr(self._processor, attribute, self._fe)

    def call(self, lengths: tuple[int, ...]) -> AudioCall:
        """The replacement and frames of each clip of one processor call (``lengths`` at the FE's rate)."""
        fields, replacements = self._processor._process_audio([_Clip(n) for n in lengths], **copy.deepcopy(self._audio_kwargs))
        return AudioCall(replacements=tuple(str(r) for r in replacements), frames=self._fe.frames, fields=fields)


def audio_rule_for(processor, audio_kwargs: dict) -> tuple[AudioRule | None, str]:
    """The processor's audio rule, or None and why it takes no audio here. ``audio_kwargs``: its merged
    ``audio_kwargs`` (``processor._merge_kwargs``, as its ``__call__`` merges them). A one-second clip is counted
    once, so call settings the rule cannot follow are found here, not at the first sample."""
    name = type(processor).__name__
    from ..tokens.processor_parts import audio_extractor

    if audio_extractor(processor) is None:
        return None, f"{name} has no audio feature extractor or audio token"
    try:
        rule = AudioRule(processor, audio_kwargs)
        rule.call((rule.sampling_rate,))
    except Exception as exc:  # noqa: BLE001 - any refusal of a plain clip: this folder's audio is not countable here
        return None, f"{name}'s audio cannot be counted from lengths here: {type(exc).__name__}: {exc}"
    return rule, ""


# -- audio inside video (Qwen-Omni's load_audio_from_video) --------------------------------------------------
AUDIO_IN_VIDEO_KEYS = ("load_audio_from_video", "use_audio_in_video")  # transformers 5.24's name, its deprecated alias


def audio_in_video_setting(processor, merged: dict, processor_kwargs: dict, *, model_type: str) -> bool:
    """Whether each video's own audio track is read and interleaved with its frames.

    Set by ``model.processor_kwargs`` ``load_audio_from_video: true`` (transformers 5.24's name) or
    ``use_audio_in_video: true`` (its deprecated alias, as qwen-omni-utils users pass it): vlmpack's loader then
    calls the processor with ``load_audio_from_video=True``. Unset there, the folder's own default as the
    processor's merged keywords hold it (``OmniModalProcessorMixin.__call__``, tf/processing_utils.py). A value
    that is not a boolean, the two spellings disagreeing, or a processor without the path
    (``replace_video_with_audio_token``: not an omni processor) is a ``ConfigError`` naming the key: never a
    setting taken and not applied."""
    from transformers.processing_utils import OmniModalProcessorMixin

    from ..errors import ConfigError

    given = {key: processor_kwargs[key] for key in AUDIO_IN_VIDEO_KEYS if key in processor_kwargs}
    for key, value in given.items():
        if not isinstance(value, bool):
            raise ConfigError(f"model.processor_kwargs.{key} = {value!r}: give true or false")
    if len(set(given.values())) > 1:
        raise ConfigError(f"model.processor_kwargs: {' and '.join(f'{k} = {v}' for k, v in given.items())} disagree; "
                          "keep one (load_audio_from_video is transformers' name)")  # fmt: skip
    videos = merged.get("videos_kwargs", {})
    folder = videos.get("load_audio_from_video", merged.get("load_audio_from_video", False))
    on = next(iter(given.values())) if given else bool(folder)
    if not on:
        return False
    key = next(iter(given), "load_audio_from_video")
    interleaves = isinstance(processor, OmniModalProcessorMixin) and (
        type(processor).replace_video_with_audio_token is not OmniModalProcessorMixin.replace_video_with_audio_token)
    if not interleaves:
        raise ConfigError(f"model.processor_kwargs.{key}: {type(processor).__name__} ({model_type}) reads no audio "
                          "track from a video (it has no replace_video_with_audio_token; Qwen3-Omni and Qwen2.5-Omni "
                          f"do); remove {key}")  # fmt: skip
    return True


class _OneVideoFields:
    """Stands in for the video processor inside the processor's own ``_process_videos``: the real one's
    attributes (temporal_patch_size ...), and a call that returns one video's fields, already computed."""

    def __init__(self, video_processor, fields: dict) -> None:
        self._real, self._fields = video_processor, fields

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_real", "_fields"):
            raise AttributeError(name)
        return getattr(self._real, name)

    def __call__(self, videos, **kwargs):
        from transformers.feature_extraction_utils import BatchFeature

        return BatchFeature(copy.deepcopy(self._fields))


def video_with_audio_text(processor, video_fields: dict, audio: AudioCall, index: int, merged: dict) -> str:
    """A video's replacement with its track, clip ``index`` of the processor call ``audio``, as its call writes
    it: the processor's own ``_process_videos`` (its seconds per grid from videos_kwargs' fps) and
    ``replace_video_token`` -> ``replace_video_with_audio_token`` (frames and audio tokens interleaved by
    position_id_per_seconds), with the keywords ``OmniModalProcessorMixin.__call__`` hands it."""
    import numpy as np

    # generic_fields' grid is (t, 1, h * w): its product is all replace_video_token reads. The interleave reads
    # the tokens of one temporal patch as (h // merge) * (w // merge): the same from (t, merge, h * w / merge)
    merge = int(processor.video_processor.merge_size)
    t, h, w = (int(g) for g in video_fields["video_grid_thw"][0])
    if (h * w) % (merge * merge):
        raise ValueError(f"a video grid of {h * w} patches per frame is no multiple of merge_size**2 = {merge * merge}")
    video_fields = {**video_fields, "video_grid_thw": [np.array([t, merge, h * w // merge])]}
    kwargs = copy.deepcopy(merged)
    for key in AUDIO_IN_VIDEO_KEYS:
        kwargs["videos_kwargs"].pop(key, None)
    kwargs["load_audio_from_video"] = True
    own = copy.copy(processor)
    own.video_processor = _OneVideoFields(processor.video_processor, video_fields)
    _, replacements = own._process_videos([None], audio=None, processed_audio=audio.fields,
                                          video_to_audio_indices=[index], **kwargs)  # fmt: skip
    return str(replacements[0])


# -- the audio encoder's work ------------------------------------------------------------------------------
def _strided(frames: int, convs: int) -> int:
    """``frames`` after ``convs`` stride-2 convs of kernel 3, padding 1: (t + 2 - 3) // 2 + 1 each (0 stays 0)."""
    for _ in range(convs):
        frames = (frames - 1) // 2 + 1
    return frames


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioEncoder:
    """The audio encoder's shape as its config gives it (module doc): ``work(frames)`` -> (patches, attention)."""

    kind: str  # the audio config's model_type
    n_window: int = 0  # Qwen-Omni: half a conv chunk, in mel frames
    n_window_infer: int = 0  # Qwen3-Omni: an attention window, in mel frames
    chunk: int = 0  # Gemma4: queries per attention block
    context: int = 0  # Gemma4: keys per attention block

    def work(self, frames: int) -> tuple[int, int]:
        if self.kind == "qwen3_omni_moe_audio_encoder":
            size = 2 * self.n_window
            tokens = (frames // size) * _strided(size, 3) + _strided(frames % size, 3)
            window = _strided(size, 3) * (self.n_window_infer // size)
            return tokens, (tokens // window) * window**2 + (tokens % window) ** 2
        if self.kind == "qwen2_5_omni_audio_encoder":
            size = 2 * self.n_window
            full, tail = divmod(frames, size)
            chunks = [_strided(size, 1)] * full + ([_strided(tail, 1)] if tail else [])
            return sum(chunks), sum(c * c for c in chunks)
        tokens = _strided(frames, 2)  # gemma4_audio
        blocks = -(-tokens // self.chunk)
        return tokens, blocks * self.chunk * self.context


def audio_encoder_for(path: str | Path) -> tuple[AudioEncoder | None, str]:
    """The folder's audio encoder (its ``config.json``'s audio config, else that config class's defaults), or None
    and why: no config, or an encoder without a rule here."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError, KeyError) as exc:  # no config.json, or one transformers cannot read
        return None, f"no model config to read the audio encoder from ({type(exc).__name__})"
    for owner in (config, getattr(config, "thinker_config", None)):
        if owner is None or "audio_config" not in getattr(owner, "sub_configs", {}):
            continue
        audio = getattr(owner, "audio_config", None) or owner.sub_configs["audio_config"]()
        kind = getattr(audio, "model_type", "")
        if kind in ("qwen3_omni_moe_audio_encoder", "qwen2_5_omni_audio_encoder"):
            return AudioEncoder(kind=kind, n_window=audio.n_window, n_window_infer=getattr(audio, "n_window_infer", 0)), ""
        if kind == "gemma4_audio":
            context = audio.attention_chunk_size + audio.attention_context_left - 1 + audio.attention_context_right
            return AudioEncoder(kind=kind, chunk=audio.attention_chunk_size, context=context), ""
        return None, f"no encoder rule for audio config {kind!r}"
    return None, f"{type(config).__name__} names no audio encoder"
