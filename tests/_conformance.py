"""The conformance suite's records (not a test module): what a row of ``tests/_families_table.py`` is made of.

A ``Row`` names a model type, how its processor folder is built, its oracle (transformers' own processor class
loaded from that folder, never our code), the data its counts are checked on (``EdgeData`` / ``AnyresData``),
and what the checks in ``tests/test_conformance_*.py`` must see: refusals, the hard case (``Stress``),
``processor_kwargs`` variants, the loader check (``Loader``), the settings ``load_model_rules`` reads.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _family_kit import edge_dataset
from PIL import Image

from vlmpack_offline.media import decode_frames
from vlmpack_offline.synthetic.shards import (
    SyntheticSample,
    generate_dataset,
    image_bytes,
    video_bytes,
    write_shard,
)

__all__ = ["LAYOUTS", "AnyresData", "EdgeData", "Loader", "Refusal", "Row", "Stress", "Variant", "auto_processor", "every_frame"]

LAYOUTS = ("hub", "transformers5")


def auto_processor(folder: Path, **kwargs):
    """``AutoProcessor.from_pretrained``: the processor exactly as a user's code loads it."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(folder, **kwargs)


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeData:
    """The generated dataset (text, one image, multi-image, videos) plus one sample per edge size: that image,
    text with blank lines, a second image of ``second_image``, more text; its answer is ``Answer <index>.``."""

    seed: int
    samples_per_shard: int
    sizes: tuple[tuple[int, int], ...]  # (width, height) of each edge sample's first image
    second_image: tuple[int, int] = (640, 480)
    clips: tuple[tuple[int, int, int, int], ...] = ()  # (frames, fps, width, height): one video sample each (the
    #                                                    first with an image and a second clip in the same turn)

    def build(self, root: Path) -> Path:
        edge_dataset(root, seed=self.seed, samples_per_shard=self.samples_per_shard, sizes=list(self.sizes),
                     second_image=self.second_image)  # fmt: skip
        if self.clips:
            write_shard(root / "videos.tar", [_clip_sample(index, spec) for index, spec in enumerate(self.clips)])
        return root

    def answer(self, key: str) -> str | None:
        """The one assistant answer of an edge or clip sample (None for the generated ones: they may have several)."""
        if key.startswith("edge"):
            return f"Answer {int(key[4:])}."
        return f"Clip {int(key[3:])}." if key.startswith("vid") else None


def _clip_sample(index: int, spec: tuple[int, int, int, int]) -> SyntheticSample:
    media = {"v.mp4": video_bytes(*spec, seed=index)}
    user = [{"type": "video", "video": "v.mp4"}, {"type": "text", "text": f"What happens in clip {index}?"}]
    if index == 0:  # a second video and an image in the same turn
        media |= {"w.mp4": video_bytes(12, 6, 64, 64, seed=9), "i.png": image_bytes(300, 200, fmt="PNG")}
        user += [{"type": "image", "image": "i.png"}, {"type": "video", "video": "w.mp4"}]
    return _sample(f"vid{index:02d}", user, f"Clip {index}.", media)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnyresData:
    """The generated dataset plus, per size, that image alone (``one<index>``: the processor tiles a sample's
    only image) and with a second one (``two<index>``: one square each), and one sample of three images."""

    sizes: tuple[tuple[int, int], ...]

    def build(self, root: Path) -> Path:
        generate_dataset(root, seed=11, n_shards=2, samples_per_shard=10, include_faults=False)
        samples = []
        for index, (width, height) in enumerate(self.sizes):
            fmt = "PNG" if width * height < 1_000_000 else "JPEG"  # big PNGs cost seconds to write and decode
            name = f"a.{fmt.lower()}"
            alone = {name: image_bytes(width, height, fmt=fmt, seed=index)}
            user = [{"type": "image", "image": name}, {"type": "text", "text": f"What is in\n\nthis {index}?"}]
            samples.append(_sample(f"one{index:03d}", user, f"One {index}.", alone))
            pair = {**alone, "b.jpg": image_bytes(*self.sizes[-index - 1], seed=index)}
            user = [{"type": "image", "image": name}, {"type": "text", "text": "Left and"},
                    {"type": "image", "image": "b.jpg"}, {"type": "text", "text": " right?"}]  # fmt: skip
            samples.append(_sample(f"two{index:03d}", user, f"Two {index}.", pair))
        three = {f"m{i}.jpg": image_bytes(*size, seed=i) for i, size in enumerate([(640, 480), (2000, 10), (1, 1)])}
        user = [{"type": "image", "image": name} for name in three] + [{"type": "text", "text": "Three."}]
        samples.append(_sample("three", user, "Yes.", three))
        write_shard(root / "edges.tar", samples)
        return root

    def answer(self, key: str) -> str | None:
        if not key.startswith(("one", "two")):
            return None
        return f"{'One' if key.startswith('one') else 'Two'} {int(key[3:])}."


def _sample(key: str, user: list[dict], answer: str, media: dict[str, bytes]) -> SyntheticSample:
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return SyntheticSample(key=key, json={"messages": messages}, media=media)


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """Images the real processor refuses (it raises ``ValueError`` saying ``says``): the scan drops them."""

    reason: str  # the drop reason the scan records
    says: tuple[str, ...]  # words the processor's own error holds
    count: int  # how many samples of the row's data it refuses


@dataclass(frozen=True, slots=True, kw_only=True)
class Stress:
    """The model type's hard case, counted over the checked samples: ``hit(processor, image sizes, media
    tokens)`` says whether a sample reaches it (a tile grid, a pixel budget, a resize)."""

    name: str
    hit: Callable[[object, list[tuple[int, int]], int], bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """``model.processor_kwargs`` that change the counts: the scan with them equals the real processor
    loaded with the same keywords (``from_pretrained(folder, **kwargs)``)."""

    id: str
    kwargs: dict
    layout: str
    path_line: str
    facts: dict = field(default_factory=dict)
    at_least: dict = field(default_factory=dict)
    exactly: dict = field(default_factory=dict)


def every_frame(data: bytes):
    """(every frame as uint8 [T, H, W, 3], the container's VideoMetadata), read by PyAV alone."""
    import av
    import numpy as np
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        fps = float(container.streams.video[0].average_rate)
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    return frames, VideoMetadata(total_num_frames=len(frames), fps=fps, duration=len(frames) / fps)


@dataclass(frozen=True, slots=True, kw_only=True)
class Loader:
    """What the loader check packs and compares: the real stages (scan -> bucket -> plan -> write) on a generated
    dataset, then every pack through ``PackEncoder`` against the row's oracle on each sub-sample alone."""

    layouts: tuple[str, ...]
    seed: int
    max_token_len: int
    videos: bool = True  # the generated dataset holds videos
    fields: tuple[str, ...] = ("pixel_values",)  # vision inputs: the pack's = the sub-samples' concatenated
    token_type_ids: bool = False  # the model takes token_type_ids (equal per segment), else the batch has none
    turns_joined_by: str = ""  # what a sub-sample's labelled turns are joined by (GLM: the next <|user|>)
    rope: Callable[[Path], Callable[[dict], object]] | None = None  # folder -> (oracle output -> positions);
    #                                                                  None: 1-D positions restarting per segment
    count: Callable[[list, dict, object], dict[str, int]] | None = None  # (images, oracle output, positions) -> hits
    at_least: dict = field(default_factory=dict)  # images / packs_with_images / the count's names -> fewest


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One model type (one oracle) of the conformance suite."""

    id: str  # the test id (a model type, or a model type and what its folder adds)
    model_type: str  # the folder's config.json model_type and the scan line's prefix
    oracle: Callable[..., object]  # folder, **kwargs -> the real processor
    facts: dict  # dotted attribute of the oracle -> value: the folder holds the published settings
    path_line: str  # what ``vlmpack scan`` prints for the folder
    media_ids: Callable[[object], set[int]]  # the oracle's ids that ``media_tokens`` counts
    data: EdgeData
    videos: str  # "dropped" (unsupported_media), "elsewhere" (ok; counted by a video check), "every_frame"
    #              (every decoded frame + its VideoMetadata: the processor samples), "sampled" (our sampler's frames)
    answer_end: str = "{answer}"  # the decoded labelled tokens of a one-turn sample
    layouts: tuple[str, ...] = LAYOUTS
    folder_video: bool = False  # build the folder with its video processor settings
    torchvision: bool = False  # the oracle needs torchvision (runs in .venv-ref)
    slow: bool = False  # the whole scan is a slow test
    nested_images: bool = False  # one image list per sample (what apply_chat_template hands the processor)
    scan_sections: dict = field(default_factory=dict)  # config sections besides model / data
    max_token_len: int = 65536
    refusal: Refusal | None = None
    stress: Stress | None = None
    per_image: int | None = None  # a fixed number of media tokens per image
    at_least: dict = field(default_factory=dict)  # kind -> fewest samples of that kind the scan check sees
    exactly: dict = field(default_factory=dict)
    rules: dict = field(default_factory=dict)  # what ``load_model_rules`` reads from the folder, both layouts
    no_video: str | None = None  # the drop message of a video item (a model type without video)
    variants: tuple[Variant, ...] = ()
    loader: Loader | None = None  # the loader check (packs vs the oracle per sub-sample)
    build: Callable[[Path, str, bool], Path] | None = None  # (target, layout, video) -> folder, where
    #                                                           ``build_processor_dir`` has no name for the type

    def folder(self, target: Path, layout: str) -> Path:
        """The row's processor folder in ``layout``, written into ``target``."""
        from vlmpack_offline.synthetic.processor_dir import build_processor_dir

        if self.build is not None:
            return self.build(target, layout, self.folder_video)
        return build_processor_dir(target, self.model_type, layout=layout, video=self.folder_video)

    def folders(self, root: Path) -> dict[str, Path]:
        """The row's folder in each layout, under ``root``."""
        return {layout: self.folder(root / layout, layout) for layout in LAYOUTS}

    def reference_ids(self, processor, conversation, parts, counter) -> list[int]:
        """The real processor's ``input_ids`` for one sample alone (``ValueError`` where it refuses an image):
        its own chat template's text, the decoded images, and the row's video input."""
        text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
        call = {"images": ([images] if self.nested_images else images) if images else None}
        videos = [parts[m.part] for m in conversation.media if m.kind == "video"]
        if videos and self.videos == "every_frame":  # the processor samples its own frames
            decoded = [every_frame(data) for data in videos]
            call |= {"videos": [f for f, _ in decoded], "video_metadata": [m for _, m in decoded]}
        elif videos and self.videos == "sampled":  # the frames vlmpack's sampler picks, at their own size
            sampled = [counter.probe("video", data, part="v.mp4").sampling for data in videos]
            call |= {"videos": [decode_frames(d, s, resize=False) for d, s in zip(videos, sampled, strict=True)]}
        return [int(i) for i in processor(text=[text], **call)["input_ids"][0]]
