"""``PackEncoder``: one ``PackedSample`` + its media bytes -> ``PackBatch``.

Each sub-sample is built alone, exactly as if it were the only sample:

1. media facts from the shared code the scan used (``tokens.probe_media``: image
   header size; video metadata + ``media.sample_video``);
2. ``tokens.materialize`` renders the chat and expands image/video pads the way
   the real processor does -> ``input_ids`` + assistant mask;
3. its length is checked against the planned ``token_len`` (``LengthMismatchError``);
4. pixels: ``MediaProcessor`` for the Qwen-VL grids (PIL image processor; decord frames at
   the sampler's indices), ``ProcessorImages`` (the family's own processor) for the others
   (``media_processor.media_processor_for``); positions from the model's own
   ``get_rope_index`` (mRoPE), else 1-D; ``token_type_ids`` where the model takes them
   (Gemma3); labels with the first one set to -100 (see ``labels.py``).

Then segments are concatenated and ``cu_seqlens`` records where each starts.

A processor family (a model type without a hand-written module in ``families/``: Gemma 4, GLM-5-Next,
Qwen-Omni, ...) takes steps 2-4 from its own HF processor instead (``processor_pack.py``): the pack's
sub-samples, rendered and decoded as the scan saw them (images as opened; videos at the frames the
scan's own probe chose; audio decoded to mono at the feature extractor's rate, ``ProcessorPack.audio``: the
scan's own decode), go through one processor call as a batch (one per sub-sample where the pack holds audio:
``processor_pack.py`` says why); each row is length-checked and labelled, the model's own rope index gives its
positions, and every field the model's forward takes (``mm_token_type_ids``, ERNIE's ``moe_mm_token_type_ids``,
``video_second_per_grid``, ``input_features``, ``feature_attention_mask``, ...) rides in the vision container.

A media part that cannot be read or decoded (steps 1 and 4) raises ``MediaDecodeError`` naming the pack, the
sample, the packed shard and member and the fix, instead of the decoder's own error from a DataLoader worker.

``dummy_image_for_text_packs``: a pack with no image and no video gets one extra
trailing segment made of a single ``<|image_pad|>`` token for a
``factor x factor`` black image (``factor`` = patch*merge, so grid 1x2x2 -> one
token). It has its own ``cu_seqlens`` segment (nobody attends to it, it attends
to nobody else), positions restarting at 0 from the rope index of that segment
alone, label -100 and loss weight 0: it changes no logit and no loss of the real
sub-samples, but the vision tower runs on every rank, so sharded data-parallel
training does not hang waiting for a rank without images. It costs ONE token:
such a pack has ``S <= capacity + 1``; plan with ``sample.max_token_len`` one
below the model's limit if the trainer needs ``S <= limit`` strictly.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from PIL import Image

from ..config import Config
from ..conversation import MEDIA_KINDS, Conversation, MediaRef
from ..errors import ConfigError, LengthMismatchError, MediaDecodeError, VlmpackError
from ..families import family_for
from ..media import decode_frames, probe_video
from ..packed_format import PackedSample, PackedSubSample, pack_key
from ..packed_settings import check_against_packed_dir, config_from_packed_dir, may_hold
from ..remote_code import trusted
from ..tokens import ImageMedia, TokenCounter, VideoMedia, make_counter, probe_media
from ..tokens.media_info import sample_for
from ..tokens.rules import load_model_rules, resolve_video
from ..tokens.slow import video_metadata
from .batch import PackBatch
from .labels import IGNORE_INDEX, sub_sample_labels, sub_sample_loss_weights
from .media_processor import MediaProcessor, media_processor_for
from .processor_pack import ProcessorPack, SubSampleMedia
from .rope import RopeIndex
from .servable import processor_for_loader, runs_processor
from .vision_inputs import VisionInputs, concat_token_fields, concat_vision_inputs

__all__ = ["EncoderOptions", "PackEncoder"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EncoderOptions:
    check_lengths: bool = True  # raise LengthMismatchError when a sub-sample's length != its planned token_len
    loss_weights: bool = False  # also emit per-token 1/n_label_tokens weights (per-sample loss averaging)
    dummy_image_for_text_packs: bool = False  # add a 1-token dummy image segment to packs without media
    train_on: str | None = None  # "assistant" | "all"; None = the config's loss.train_on


@dataclass(frozen=True, slots=True, kw_only=True)
class _Segment:
    sample_id: str
    input_ids: torch.Tensor  # long [L]
    labels: torch.Tensor  # long [L]
    positions: torch.Tensor  # [3, 1, L] or [1, L]
    media: tuple[dict, ...]  # processor output per media item, in order
    n_images: int
    n_videos: int
    n_audios: int = 0
    token_type_ids: torch.Tensor | None = None  # long [L] for models that take it (Gemma3: 1 on image tokens)
    token_fields: Mapping[str, torch.Tensor] | None = None  # processor families: [1, L] per-token fields


@contextmanager
def _decoding(pack_id: int, sample_id: str, parts: list[str], shard: str) -> Iterator[None]:
    """Any failure reading or decoding ``parts`` of one sub-sample as one ``MediaDecodeError`` naming them (an
    expected error of ours, or a missing package, passes as it is)."""
    try:
        yield
    except (VlmpackError, ImportError):
        raise
    except Exception as exc:  # noqa: BLE001 - PIL, PyAV, decord and the processors raise their own types
        members = [f"{pack_key(pack_id)}.{part}" for part in parts]
        raise MediaDecodeError.naming(pack_id=pack_id, sample_id=sample_id, members=members, shard=shard,
                                      cause=exc) from exc  # fmt: skip


def _conversation(sub: PackedSubSample) -> Conversation:
    media = tuple(
        MediaRef(kind=item["type"], part=item[item["type"]])
        for message in sub.messages
        for item in message["content"]
        if isinstance(item, dict) and item.get("type") in MEDIA_KINDS
    )
    return Conversation(messages=tuple(sub.messages), media=media)


class PackEncoder:
    """Builds ``PackBatch`` es for one model family (read from ``config.model``)."""

    def __init__(self, config: Config, options: EncoderOptions | None = None) -> None:
        if config.data.packed_wds_dir:  # the dataset's recorded settings (.nv-meta/vlmpack.json) must agree
            check_against_packed_dir(config, config.data.packed_wds_dir, missing_ok=True)  # a path or a URL
        self.config = config
        self.options = options or EncoderOptions()
        # a packed set whose write recorded no video needs no video reader on the training machine
        packed = config.data.packed_wds_dir
        rules = load_model_rules(config.model, reads_video=not packed or may_hold(packed, "videos"))
        self.pack_processor: ProcessorPack | None = None
        processor_family = not rules.text_only and runs_processor(rules.model_type)
        # the scan's own counter: materialize() for a module family; for a processor family its probe picks the
        # frames the scan counted (the processor's own rule or the shared sampler)
        self.counter = make_counter(config, rules=rules) if processor_family else TokenCounter.from_config(config, rules)
        if self.options.train_on is not None:
            if self.options.train_on not in ("assistant", "all"):
                raise ValueError(f"EncoderOptions.train_on must be 'assistant' or 'all', got {self.options.train_on!r}")
            self.counter.train_on = self.options.train_on
        self.rules = rules
        path = Path(self.rules.processor_path)
        kwargs = {k: v for k, v in config.model.processor_kwargs.items() if k != "pretrained_model_name_or_path"}
        self.media = None  # text only: no image processor to load (a tokenizer folder such as Kimi-K2.5's has none)
        if self.rules.text_only:  # model.processor_loader: auto_tokenizer; the scan packed text samples only
            self.rope = RopeIndex(SimpleNamespace(model_type=self.rules.model_type))  # 1-D positions
        else:
            self.rope = RopeIndex.from_processor_dir(path, model_type=self.rules.model_type,
                                                     trust_remote_code=trusted(config.model.processor_kwargs))
        if processor_family:  # the family's own processor makes ids, fields and (with the rope) positions
            self.pack_processor = processor_for_loader(self.rules, config, self.counter, self.rope)
        elif not self.rules.text_only:
            self.media = media_processor_for(
                family_for(self.rules.model_type), path, image_pad=self.counter.expander.special.image_pad, **kwargs
            )
        self.image_pad_id = None if processor_family else self.counter.tokenizer.convert_tokens_to_ids(
            self.counter.expander.special.image_pad)  # fmt: skip
        # LLaVA-OneVision: a sub-sample's images go through one processor call (ProcessorImages.images)
        self.images_per_sample = bool(getattr(family_for(self.rules.model_type), "images_per_sample", False))
        if self.options.dummy_image_for_text_packs and not isinstance(self.media, MediaProcessor):
            raise ConfigError(  # here, not at the first text-only pack
                f"EncoderOptions.dummy_image_for_text_packs is built for Qwen-VL grids; {self.rules.model_type} has "
                "no such dummy: train with DDP's unused-parameter search instead (ddp_find_unused_parameters=True)"
            )

    @classmethod
    def from_packed_dir(
        cls,
        packed_wds_dir: str | Path,
        processor_path: str | Path | None = None,
        *,
        options: EncoderOptions | None = None,
        **overrides: dict,
    ) -> PackEncoder:
        """The encoder for the settings ``packed_wds_dir`` was planned with (``.nv-meta/vlmpack.json``).

        ``processor_path``: where the processor directory lives on this machine (its token files must
        hash as recorded). ``overrides``: config sections as mappings, e.g. ``video={"fps": 2.0}``;
        one that contradicts the recorded settings raises ``ConfigError`` naming the field and both
        values. ``PackEncoder.from_packed_dir("/data/packed", "/models/Qwen2.5-VL-7B")``.
        """
        config = config_from_packed_dir(packed_wds_dir, processor_path, check=False, **overrides)
        return cls(config, options)  # __init__ checks config against the directory's settings

    # -- one sub-sample -------------------------------------------------------------------------
    def _segment(self, pack_id: int, sub: PackedSubSample, media: Mapping[str, bytes], shard: str = "") -> _Segment:
        conversation = _conversation(sub)
        infos, tensors, seconds, together = [], [], [], []
        for ref in conversation.media:
            if ref.part not in media:
                raise KeyError(f"pack {pack_id}, sample {sub.id!r}: media part {ref.part!r} is missing from the pack")
            if ref.kind == "audio":  # the scan drops audio for a family module (unsupported_media)
                raise ValueError(f"pack {pack_id}, sample {sub.id!r}: audio part {ref.part!r} for {self.rules.model_type}, "
                                 "whose family module takes no audio: rerun scan/plan/write with this processor folder")  # fmt: skip
            data = media[ref.part]
            with _decoding(pack_id, sub.id, [ref.part], shard):
                if ref.kind == "image":
                    infos.append(probe_media("image", data, rules=self.rules, video=self.config.video, part=ref.part))
                    if self.images_per_sample:
                        together.append(data)
                    else:
                        tensors.append(self.media.image(data))
                else:  # probe + sample as probe_media does, keeping the container facts for sampled_fps
                    settings = resolve_video(self.config.video, self.rules.video, factor=self.rules.factor)
                    video = probe_video(data, reader=settings.reader, part=ref.part)
                    sampling = sample_for(self.rules, video, settings, part=ref.part)
                    infos.append(VideoMedia(sampling=sampling))
                    frames = decode_frames(data, sampling, resize=self.media.resized_frames)
            if ref.kind == "video":  # the video processor on decoded frames: its errors are its own
                tensors.append(self.media.frames(frames, sampling))
                sampled_fps = sampling.n_frames / video.n_frames * video.native_fps  # HF VideoMetadata.sampled_fps
                seconds.append(self.rules.temporal_patch_size / sampled_fps)
        if together:
            with _decoding(pack_id, sub.id, [r.part for r in conversation.media if r.kind == "image"], shard):
                tensors.insert(0, self.media.images(together))
        materialized = self.counter.materialize(conversation, infos)
        input_ids, assistant_mask = materialized.input_ids, materialized.assistant_mask
        if self.options.check_lengths and len(input_ids) != sub.token_len:
            raise LengthMismatchError(
                f"pack {pack_id}, sample {sub.id!r}: materialized {len(input_ids)} tokens but the plan says "
                f"{sub.token_len}; the processor settings or the video config differ from the scan's: "
                "rerun scan/plan/write with the loader's config"
            )
        ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
        mask = torch.as_tensor(np.asarray(assistant_mask), dtype=torch.bool)
        grids = concat_vision_inputs(tensors)
        positions = self.rope.positions(
            ids[None],
            image_grid_thw=grids.get("image_grid_thw"),
            video_grid_thw=grids.get("video_grid_thw"),
            second_per_grid_ts=torch.tensor(seconds) if seconds and self.rope.uses_seconds else None,
        )
        if seconds and self.rope.uses_seconds:
            for item, value in zip([t for t in tensors if "video_grid_thw" in t], seconds, strict=True):
                item["second_per_grid_ts"] = torch.tensor([value], dtype=torch.float32)
        return _Segment(
            sample_id=sub.id,
            input_ids=ids,
            labels=sub_sample_labels(ids, mask),
            positions=positions,
            media=tuple(tensors),
            n_images=sum(isinstance(i, ImageMedia) for i in infos),
            n_videos=sum(isinstance(i, VideoMedia) for i in infos),
            token_type_ids=self.media.token_type_ids(ids) if self.media is not None else None,
        )

    def _processor_segments(self, pack: PackedSample, media: Mapping[str, bytes], shard: str
                            ) -> tuple[list[_Segment], dict[str, torch.Tensor]]:  # fmt: skip
        """A processor family's segments and media fields: the pack through its processor (``processor_pack``)."""
        subs = []
        for sub in pack.samples:
            conversation = _conversation(sub)
            images, videos, metadata, audios, slots = [], [], [], [], []
            for ref in conversation.media:
                if ref.part not in media:
                    raise KeyError(f"pack {pack.pack_id}, sample {sub.id!r}: media part {ref.part!r} is missing from the pack")
                with _decoding(pack.pack_id, sub.id, [ref.part], shard):
                    if ref.kind == "image":  # as opened: no EXIF transpose, like the scan
                        image = Image.open(io.BytesIO(media[ref.part]))
                        image.load()
                        images.append(image)
                    elif ref.kind == "audio":  # mono at the feature extractor's rate, as the scan decoded it
                        audios.append(self.pack_processor.audio(media[ref.part], part=ref.part))
                        slots.append(None)
                    else:  # the scan's own probe: the frames it counted, at the size it passed them
                        info = self.counter.probe("video", media[ref.part], part=ref.part)
                        if getattr(info, "audio", None) is not None:  # its own track (load_audio_from_video)
                            audios.append(self.pack_processor.audio(media[ref.part], part=f"{ref.part} (its audio track)"))
                            slots.append(len(videos))
                        sampling = info.sampling if isinstance(info, VideoMedia) else info.video.sampling
                        videos.append(decode_frames(media[ref.part], sampling))
                        metadata.append(video_metadata(sampling))
            subs.append(SubSampleMedia(sample_id=sub.id, conversation=conversation, token_len=sub.token_len,
                                       images=tuple(images), videos=tuple(videos), video_metadata=tuple(metadata),
                                       audios=tuple(audios), audio_from_video_indices=tuple(slots)))  # fmt: skip
        rows, fields = self.pack_processor.rows(pack.pack_id, subs, check_lengths=self.options.check_lengths)
        segments = [
            _Segment(sample_id=sub.sample_id, input_ids=row.input_ids, labels=row.labels, positions=row.positions,
                     media=(), n_images=len(sub.images), n_videos=len(sub.videos), n_audios=len(sub.audios),
                     token_fields=row.token_fields)
            for sub, row in zip(subs, rows, strict=True)
        ]  # fmt: skip
        return segments, fields

    def _dummy_segment(self) -> _Segment:
        side = self.rules.factor
        buffer = io.BytesIO()
        Image.new("RGB", (side, side)).save(buffer, format="PNG")
        tensors = self.media.image(buffer.getvalue(), do_resize=False)  # below min_pixels on purpose: 1 token
        t, h, w = (int(x) for x in tensors["image_grid_thw"][0])
        n_tokens = t * h * w // self.rules.merge_size**2
        ids = torch.full((n_tokens,), self.image_pad_id, dtype=torch.long)
        positions = self.rope.positions(ids[None], image_grid_thw=tensors["image_grid_thw"])
        return _Segment(
            sample_id="",
            input_ids=ids,
            labels=torch.full_like(ids, IGNORE_INDEX),
            positions=positions,
            media=(tensors,),
            n_images=1,
            n_videos=0,
        )

    # -- one pack ---------------------------------------------------------------------------------
    def encode(self, pack: PackedSample, media: Mapping[str, bytes], *, shard: str = "") -> PackBatch:
        """Materialize every sub-sample of ``pack`` and concatenate them into one ``PackBatch``. ``shard``: the
        packed tar the pack was read from, named by a ``MediaDecodeError``."""
        fields: dict[str, torch.Tensor] = {}
        if self.pack_processor is not None:
            segments, fields = self._processor_segments(pack, media, shard)
        else:
            segments = [self._segment(pack.pack_id, sub, media, shard) for sub in pack.samples]
        n_dummy = 0
        if self.options.dummy_image_for_text_packs and not any(s.n_images or s.n_videos for s in segments):
            segments.append(self._dummy_segment())
            n_dummy = 1
        lengths = torch.tensor([len(s.input_ids) for s in segments], dtype=torch.int32)
        cu_seqlens = torch.zeros(len(segments) + 1, dtype=torch.int32)
        cu_seqlens[1:] = torch.cumsum(lengths, 0)
        labels = torch.cat([s.labels for s in segments])
        weights = None
        if self.options.loss_weights:
            weights = torch.cat([sub_sample_loss_weights(s.labels) for s in segments])[None]
        return PackBatch(
            pack_id=pack.pack_id,
            sample_ids=tuple(s.sample_id for s in segments),
            input_ids=torch.cat([s.input_ids for s in segments])[None],
            labels=labels[None],
            position_ids=torch.cat([s.positions for s in segments], dim=-1),
            cu_seqlens=cu_seqlens,
            max_seqlen=int(lengths.max()) if len(segments) else 0,
            vision=VisionInputs({**fields, **concat_token_fields([s.token_fields for s in segments if s.token_fields])})
            if self.pack_processor is not None else concat_vision_inputs([m for s in segments for m in s.media]),
            n_images_per_sample=torch.tensor([s.n_images for s in segments], dtype=torch.long),
            n_videos_per_sample=torch.tensor([s.n_videos for s in segments], dtype=torch.long),
            n_audios_per_sample=torch.tensor([s.n_audios for s in segments], dtype=torch.long),
            loss_weights=weights,
            n_dummy_segments=n_dummy,
            token_type_ids=(
                torch.cat([s.token_type_ids for s in segments])[None]
                if segments and all(s.token_type_ids is not None for s in segments) else None
            ),
            linear_attention=self.rope.has_linear_attention,
            sliding_window=self.rope.sliding_window,
            masks_from_positions=self.pack_processor is not None,
            rope_text_row=self.rope.takes_text_row,
        )

