"""What the token count needs to know about one media item.

``probe_media`` reads bytes into a small record (header size for an image,
container metadata + the shared frame sampling for a video, the stream's decoded length
and rate for an audio) and lets the model's family refuse what its processor cannot take
(``families/``: a video for a family without video, an audio for one that does not hear,
a Qwen-VL aspect ratio past 200:1). ``grid_thw`` / ``media_token_count``
are the Qwen-VL patch grid (``families/qwen.py``), kept here for their callers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..config import VideoConfig
from ..families import family_of
from ..families.qwen import grid_thw, media_token_count
from ..media import PacketSpan, VideoInfo, VideoSampling, image_size, probe_video, sample_video
from ..reasons import DropError, Reason
from .rules import ModelRules, resolve_video

__all__ = ["ImageMedia", "VideoMedia", "AudioMedia", "MediaInfo", "probe_media", "sample_for", "grid_thw", "media_token_count"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageMedia:
    kind: ClassVar[str] = "image"
    width: int  # header width in pixels (no EXIF transpose)
    height: int  # header height in pixels


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoMedia:
    kind: ClassVar[str] = "video"
    sampling: VideoSampling  # the frames the loader will decode, and their size
    span: PacketSpan | None = None  # where the probe's packets end against the header (the scan's integrity check)
    # its own audio track where the family reads it (Qwen-Omni's load_audio_from_video, families/audio_rules.py):
    # None when the setting is off or the file has no audio stream (the processor then counts a plain video)
    audio: AudioMedia | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioMedia:
    kind: ClassVar[str] = "audio"
    samples: int  # decoded samples per channel at sample_rate, as the loader's decoder hands them (media/audio.py)
    sample_rate: int  # the stream's own rate in Hz (the loader resamples to the feature extractor's)
    channels: int  # the stream's channels (the loader mixes them to mono)
    # (samples, sample_rate) of every audio item the processor's call pads together with this one, this one
    # included, in order; () for an item counted alone. Set by ``Family.in_sample`` where the feature extractor
    # pads a sample's audios to a common length and an item's count depends on the others (Whisper's).
    in_call: tuple[tuple[int, int], ...] = ()


MediaInfo = ImageMedia | VideoMedia | AudioMedia


def sample_for(rules: ModelRules, info: VideoInfo, settings: VideoConfig, *, part: str = "video") -> VideoSampling:
    """The frames and size for ``info``: the video processor's own rule where the folder asks for it
    (``rules.frame_rule``: InternVL, LLaVA-OneVision with ``do_sample_frames: true``), the family's own sampling
    where its video processor samples frames itself (``Family.sample_video``, GLM-4V), else the shared sampler
    (``media.sample_video``). Scan and loader both call this, so they pick the same frames."""
    family = family_of(rules)
    if rules.frame_rule is not None and settings.sampler == "hf_processor":  # the video processor's own frames
        sampling = rules.frame_rule.sampling(info, tile=rules.tile_size, part=part)  # (InternVL, LLaVA-OneVision)
    elif family is not None and hasattr(family, "sample_video"):
        sampling = family.sample_video(rules, info, settings, part=part)
    else:
        sampling = sample_video(info, settings, factor=rules.factor, temporal_factor=rules.temporal_patch_size, part=part)
    if settings.reader == "pyav":
        _check_pyav_hands_every_frame(sampling, rules, part=part)
    if info.rotation:  # decode_frames turns the frames as the reader does
        sampling = dataclasses.replace(sampling, rotation=info.rotation, upright=info.upright)
    return sampling


def _check_pyav_hands_every_frame(sampling: VideoSampling, rules: ModelRules, *, part: str) -> None:
    """transformers' ``read_video_pyav`` keeps a frame once however often the sampling names it (``if i in
    indices``), where torchcodec and decord return it each time. Padding the last frame up to the temporal patch
    is the processor's own (Qwen-VL, GLM-4V pad so): anything else the processor would get fewer frames for
    (LLaVA-OneVision's fixed count on a short video), or fewer than a temporal patch (GLM-4V on a 0.2 s clip)."""
    temporal = max(rules.temporal_patch_size, 1)
    distinct = list(dict.fromkeys(sampling.frame_indices))
    padded = distinct + [distinct[-1]] * (-len(distinct) % temporal)
    if len(distinct) < temporal or padded != list(sampling.frame_indices):
        raise DropError(
            Reason.UNSUPPORTED_MEDIA,
            f"{part}: the sampling takes {sampling.n_frames} frames, {len(distinct)} of them distinct, and transformers' "
            f"pyav reader hands each frame once, so the processor would get {len(distinct)}"
            + (f" (fewer than its temporal patch of {temporal})" if len(distinct) < temporal else "")
            + "; video.reader torchcodec or decord return every frame asked for",
        )


def probe_media(
    kind: str, data: bytes, *, rules: ModelRules, video: VideoConfig | None, part: str = "", check_grid: bool = True
) -> MediaInfo:
    """Read one media part's facts (no pixel decode for images); raises ``DropError`` with a drop reason.

    ``video`` is the config's ``video:`` section: its set fields win over ``rules.video`` (the
    processor folder's settings over the family recipe).
    ``check_grid=False`` skips the family's checks (the Qwen-VL 200:1 aspect limit, a video for a
    family without video): the slow path leaves them to the family's own processor.
    """
    part = part or kind
    family = family_of(rules)
    if check_grid and kind == "audio" and family is not None and not getattr(family, "takes_audio", False):
        raise DropError(
            Reason.UNSUPPORTED_MEDIA,
            f"{part}: {rules.model_type} takes no audio ({family.name}: its processor has no feature extractor and "
            "audio token); drop the audio from the sample or train a family that hears (qwen3_omni_moe, gemma4, ...)",
        )
    if check_grid and kind == "video" and family is not None and not family.takes_video:
        why = getattr(family, "no_video_reason", "its processor has no video input")  # a family may say why
        raise DropError(
            Reason.UNSUPPORTED_MEDIA,
            f"{part}: {rules.model_type} takes no video ({why}); "
            "drop the video from the sample or train a family that takes video",
        )
    if kind == "image":
        size = image_size(data, part=part)
        media: MediaInfo = ImageMedia(width=size.width, height=size.height)
    elif kind == "video":
        settings = resolve_video(video, rules.video, factor=rules.factor)  # config > folder > recipe
        info = probe_video(data, reader=settings.reader, part=part)
        track = _audio_track(data, part=part) if check_grid and getattr(family, "audio_in_video", False) else None
        media = VideoMedia(sampling=sample_for(rules, info, settings, part=part), span=info.span, audio=track)
    elif kind == "audio":
        from ..media.audio import probe_audio  # PyAV: paid by a scan that meets audio only

        audio = probe_audio(data, part=part)
        media = AudioMedia(samples=audio.samples, sample_rate=audio.sample_rate, channels=audio.channels)
    else:
        raise ValueError(f"unknown media kind {kind!r}")
    if check_grid and family is not None:  # e.g. Qwen-VL's aspect limit, so the drop is recorded at probe time
        family.check(rules, media, part=part)
    return media


def _audio_track(data: bytes, *, part: str) -> AudioMedia | None:
    """A video's first audio stream as the loader decodes it (``media.audio``), or None where the file has none:
    the processor then gives the video no audio (``_resolve_audio_from_video`` skips a silent video). A track
    that is there but cut or unreadable is the video's drop, named as its audio track."""
    import io

    import av

    from ..media.audio import probe_audio

    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.audio:
                return None
    except Exception as exc:  # noqa: BLE001 - probe_video read it: a container PyAV cannot reopen is corrupt
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: its audio track cannot be read (PyAV: {exc})") from None
    audio = probe_audio(data, part=f"{part} (its audio track)")
    return AudioMedia(samples=audio.samples, sample_rate=audio.sample_rate, channels=audio.channels)
