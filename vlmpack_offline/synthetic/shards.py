"""Deterministic synthetic WebDataset shards for tests, the demo and benchmarks.

The same seed gives the same bytes (fixed tar mtime/owner/mode, seeded content),
so tests can compare hashes and golden outputs. One shard holds samples like::

    shard-000000.tar
      k000000.json                 text only, HF messages
      sub/dir/k000001.json         folder-prefixed key
      sub/dir/k000001.img0.jpg     multi-dot part name: key "sub/dir/k000001", part "img0.jpg"
      k000002.json                 ShareGPT: "<image>\\n..." + "images": ["img0.png"]
      k000002.img0.png
      ...

``generate_dataset(include_faults=True)`` adds one sample per drop reason; its key
says which (``fault-<reason>-NNN``, see ``expected_fault``), except the two
``bad_member_name`` members, whose keys are ``../evil`` and ``/abs/x``.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from ..output.tar_writer import reproducible_tarinfo

__all__ = [
    "generate_source",
    "SyntheticSample",
    "FAULT_REASONS",
    "BAD_MEMBER_NAMES",
    "write_shard",
    "image_bytes",
    "video_bytes",
    "generate_dataset",
    "expected_fault",
    "truncate",
]

# drop reasons generate_dataset(include_faults=True) produces, one sample each
# (corrupt_media: two, a bad .jpg and a bad .mp4)
FAULT_REASONS = (
    "bad_json",
    "unknown_format",
    "missing_media",
    "corrupt_media",
    "unsupported_aspect",
    "overlong",
    "bad_member_name",
)
BAD_MEMBER_NAMES = ("../evil.json", "/abs/x.json")

_WORDS = (
    "the a cat dog red blue small large image picture shows sits near under over table window tree river "
    "mountain city street car bird flower house person child woman man holding looking at bright dark old "
    "new quickly slowly because while describe what is in this scene there are two three several many "
    "colorful wooden metal glass sky cloud sun light shadow left right center background foreground green "
    "yellow happy calm busy quiet morning evening night winter summer road bridge boat water field grass"
).split()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticSample:
    key: str  # sample key, may hold folders: "sub/dir/k000001"
    json: dict | bytes | None  # sample JSON (dict -> UTF-8 JSON, bytes as is, None -> no .json member)
    media: dict[str, bytes] = field(default_factory=dict)  # part name -> bytes, written in this order



def write_shard(
    path: str | Path,
    samples: Iterable[SyntheticSample],
    *,
    extra_members: Sequence[tuple[str, bytes]] = (),
    pax: bool = False,
) -> Path:
    """Write samples (``<key>.json`` then ``<key>.<part>`` each) and extra members, byte-reproducibly.

    GNU format writes no PAX header (long names use GNU longname records); ``pax=True``
    writes a PAX header before every member, to test readers that must skip them.
    Names are written as given, so bad names (``../x.json``) can be produced on purpose.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    members: list[tuple[str, bytes]] = []
    for sample in samples:
        if sample.json is not None:
            raw = sample.json if isinstance(sample.json, bytes) else json.dumps(sample.json).encode()
            members.append((f"{sample.key}.json", raw))
        members.extend((f"{sample.key}.{part}", data) for part, data in sample.media.items())
    members.extend(extra_members)
    fmt = tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT
    with open(path, "wb") as handle, tarfile.open(fileobj=handle, mode="w", format=fmt) as tar:
        for name, data in members:
            info = reproducible_tarinfo(name, len(data))
            if pax:
                info.pax_headers = {"comment": "vlmpack synthetic"}
            tar.addfile(info, io.BytesIO(data))
    return path


def truncate(path: str | Path, at_byte: int) -> None:
    """Cut a file to its first ``at_byte`` bytes (a shard killed mid-copy)."""
    with open(path, "r+b") as handle:
        handle.truncate(at_byte)


def image_bytes(width: int, height: int, *, mode: str = "RGB", fmt: str = "JPEG", seed: int = 0) -> bytes:
    """A smooth seeded image (low-res noise upscaled): cheap to encode, small on disk.

    Images over 2 megapixels are a solid colour, so a 4000 px image stays cheap.
    """
    rng = np.random.default_rng(seed)
    if width * height > 2_000_000:
        color = tuple(int(c) for c in rng.integers(0, 256, 4))
        image = Image.new("RGBA", (width, height), color)
    else:
        coarse = rng.integers(0, 256, (4, 4, 4), dtype=np.uint8)
        image = Image.fromarray(coarse, "RGBA").resize((width, height), Image.Resampling.BILINEAR)
    if mode == "P":
        image = image.convert("RGB").quantize(colors=16)
    else:
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def video_bytes(n_frames: int, fps: int, width: int, height: int, *, seed: int = 0) -> bytes:
    """A seeded moving-gradient MP4 (H.264 when the build has it, else MPEG-4 part 2)."""
    import av

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, 3)
    ys, xs = np.mgrid[0:height, 0:width]
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4", options={"fflags": "+bitexact"}) as container:
        if "libx264" in av.codecs_available:  # x264's default lookahead/mbtree is not reproducible; ultrafast is
            stream = container.add_stream("libx264", rate=fps, options={"threads": "1", "preset": "ultrafast"})
        else:
            stream = container.add_stream("mpeg4", rate=fps, options={"threads": "1"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.flags |= av.codec.context.Flags.bitexact
        for index in range(n_frames):
            shift = index * 4
            planes = [(xs + shift + base[0]) % 256, (ys + shift + base[1]) % 256, (xs + ys + base[2]) % 256]
            pixels = np.stack(planes, -1).astype(np.uint8)  # kept alive: the frame may borrow this buffer
            video_frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            for packet in stream.encode(video_frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue()


def _sentence(rng: random.Random, lo: int = 4, hi: int = 30) -> str:
    words = rng.choices(_WORDS, k=rng.randint(lo, hi))
    return " ".join(words).capitalize() + rng.choice((".", "?", "!", "."))


def _text(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))


def _normal_size(rng: random.Random) -> tuple[int, int]:
    side = rng.randint(200, 700)
    ratio = rng.choice((1.0, 4 / 3, 3 / 4, 16 / 9, 9 / 16, 2.5, 0.4))
    return side, max(30, int(side / ratio))


def _hf(user: list, rng: random.Random, *, system: bool = False) -> dict:
    messages = [{"role": "system", "content": _sentence(rng)}] if system else []
    messages += [{"role": "user", "content": user}, {"role": "assistant", "content": _text(rng)}]
    if rng.random() < 0.3:  # a second turn
        messages += [{"role": "user", "content": _text(rng)}, {"role": "assistant", "content": _text(rng)}]
    return {"messages": messages}


def _sharegpt(first_user: str, rng: random.Random, **media_lists: list[str]) -> dict:
    turns = [{"from": "human", "value": first_user}, {"from": "gpt", "value": _text(rng)}]
    if rng.random() < 0.3:
        turns += [{"from": "human", "value": _text(rng)}, {"from": "gpt", "value": _text(rng)}]
    return {"conversations": turns, **{k: v for k, v in media_lists.items() if v}}


# Recipes: (rng, seed) -> (json, media). Cycled in order so every layout appears early.
def _text_only(rng: random.Random, seed: int) -> tuple[dict, dict]:
    return _hf(_text(rng), rng, system=rng.random() < 0.5), {}


def _hf_rgb_jpeg(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {"img0.jpg": image_bytes(*_normal_size(rng), seed=seed)}
    user = [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": _text(rng)}]
    return _hf(user, rng), media


def _sharegpt_rgba_png(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {"img0.png": image_bytes(*_normal_size(rng), mode="RGBA", fmt="PNG", seed=seed)}
    return _sharegpt("<image>\n" + _text(rng), rng, images=["img0.png"]), media


def _hf_multi_image(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {
        "img0.png": image_bytes(*_normal_size(rng), mode="P", fmt="PNG", seed=seed),
        "img1.jpg": image_bytes(*_normal_size(rng), mode="L", seed=seed + 1),
    }
    user = [
        {"type": "text", "text": "Compare these. "},
        {"type": "image", "image": "img0.png"},
        {"type": "image", "image": "img1.jpg"},
        {"type": "text", "text": _text(rng)},
    ]
    return _hf(user, rng), media


def _sharegpt_unnamed(rng: random.Random, seed: int) -> tuple[dict, dict]:
    """No `images` list: media taken by extension in member order (b.jpg before a.png)."""
    media = {"b.jpg": image_bytes(*_normal_size(rng), seed=seed), "a.png": image_bytes(30, 30, fmt="PNG", seed=seed)}
    return _sharegpt(f"First <image> then <image>\n{_text(rng)}", rng), media


def _hf_unnamed_tiny(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {"jpg": image_bytes(30, rng.randint(30, 60), seed=seed)}  # part is just the extension
    user = [{"type": "image"}, {"type": "text", "text": _text(rng)}]
    return _hf(user, rng), media


def _hf_video(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {"clip.mp4": video_bytes(rng.randint(8, 16), rng.choice((4, 8)), 64, 48, seed=seed)}
    user = [{"type": "video", "video": "clip.mp4"}, {"type": "text", "text": _text(rng)}]
    return _hf(user, rng), media


def _sharegpt_video_and_image(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {
        "vid0.mp4": video_bytes(rng.randint(8, 16), 8, 64, 48, seed=seed),
        "img0.jpg": image_bytes(*_normal_size(rng), seed=seed),
    }
    return _sharegpt(f"<video>\n<image>\n{_text(rng)}", rng, images=["img0.jpg"], videos=["vid0.mp4"]), media


def _huge_image(rng: random.Random, seed: int) -> tuple[dict, dict]:
    media = {"img0.jpg": image_bytes(4000, 3000, seed=seed)}
    return _sharegpt("<image>\n" + _text(rng), rng, images=["img0.jpg"]), media


_Recipe = Callable[[random.Random, int], tuple[dict, dict]]
_RECIPES: tuple[_Recipe, ...] = (
    _text_only,
    _hf_rgb_jpeg,
    _sharegpt_rgba_png,
    _hf_multi_image,
    _sharegpt_unnamed,
    _hf_unnamed_tiny,
    _hf_video,
    _sharegpt_video_and_image,
)
_VIDEO_RECIPES = (_hf_video, _sharegpt_video_and_image)
_HUGE_AT = 5  # global sample index that becomes the (single) 4000 px image


def _faults(rng: random.Random, seed: int) -> list[tuple[str, SyntheticSample]]:
    """(reason, sample) pairs, one per reason (two for corrupt_media); bad_member_name is extra members."""

    def key(reason: str, n: int = 0) -> str:
        return f"fault-{reason}-{n:03d}"

    good_jpeg = image_bytes(64, 64, seed=seed)
    corrupt = bytes(rng.getrandbits(8) for _ in range(512))
    overlong = " ".join(rng.choices(_WORDS, k=20_000))
    image_turn = [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": "What is it?"}]
    return [
        ("bad_json", SyntheticSample(key=key("bad_json"), json=b'{"messages": [{"role": "user", "content": ')),
        ("unknown_format", SyntheticSample(key=key("unknown_format"), json={"caption": _text(rng)})),
        (
            "missing_media",
            SyntheticSample(
                key=key("missing_media"),
                json=_hf([*image_turn, {"type": "image", "image": "img1.jpg"}], rng),
                media={"img0.jpg": good_jpeg},
            ),
        ),
        (
            "corrupt_media",
            SyntheticSample(key=key("corrupt_media"), json=_hf(image_turn, rng), media={"img0.jpg": corrupt}),
        ),
        (
            "corrupt_media",
            SyntheticSample(
                key=key("corrupt_media", 1),
                json=_hf([{"type": "video", "video": "clip.mp4"}, {"type": "text", "text": "Describe."}], rng),
                media={"clip.mp4": b"\x00\x00\x00\x18ftypmp42" + corrupt},
            ),
        ),
        (
            "unsupported_aspect",
            SyntheticSample(
                key=key("unsupported_aspect"),
                json=_sharegpt("<image>\n" + _text(rng), rng, images=["img0.png"]),
                media={"img0.png": image_bytes(4000, 10, fmt="PNG", seed=seed)},
            ),
        ),
        ("overlong", SyntheticSample(key=key("overlong"), json=_hf(overlong, rng))),
    ]


def expected_fault(key: str) -> str | None:
    """The drop reason generate_dataset meant for a sample key, or None for a good sample."""
    if f"{key}.json" in BAD_MEMBER_NAMES:
        return "bad_member_name"
    if key.startswith("fault-"):
        return key.split("-")[1]
    return None


def generate_dataset(
    out_dir: str | Path,
    *,
    seed: int = 0,
    n_shards: int = 2,
    samples_per_shard: int = 16,
    include_faults: bool = False,
    video: bool = True,
) -> list[Path]:
    """Write ``n_shards`` shards mixing every layout and edge case; returns their paths.

    Shards are ``out_dir/shard-%06d.tar``, the last one (of two or more) in
    ``out_dir/sub/`` so recursive discovery is exercised. Every third key has a
    folder prefix (``sub/dir/k000001``). Faults are spread over the shards after
    the good samples; the bad member names go to the last shard.
    """
    out_dir = Path(out_dir)
    rng = random.Random(seed)
    recipes = _RECIPES if video else tuple(r for r in _RECIPES if r not in _VIDEO_RECIPES)
    shards: list[list[SyntheticSample]] = [[] for _ in range(n_shards)]
    for index in range(n_shards * samples_per_shard):
        recipe = _huge_image if index == _HUGE_AT else recipes[index % len(recipes)]
        raw_json, media = recipe(rng, seed * 1_000_003 + index)
        key = f"sub/dir/k{index:06d}" if index % 3 == 1 else f"k{index:06d}"
        shards[index // samples_per_shard].append(SyntheticSample(key=key, json=raw_json, media=media))
    if include_faults:
        for n, (_, sample) in enumerate(_faults(rng, seed)):
            shards[n % n_shards].append(sample)
    paths = []
    for number, samples in enumerate(shards):
        folder = out_dir / "sub" if n_shards > 1 and number == n_shards - 1 else out_dir
        extra = [(name, b'{"messages": []}') for name in BAD_MEMBER_NAMES] if include_faults and number == n_shards - 1 else []
        paths.append(write_shard(folder / f"shard-{number:06d}.tar", samples, extra_members=extra))
    return paths


_KIND_RECIPES: dict[str, tuple[_Recipe, ...]] = {
    "text": (_text_only,),
    "image": (_hf_rgb_jpeg, _sharegpt_rgba_png, _hf_multi_image),
    "video": (_hf_video,),
}


def generate_source(out_dir: str | Path, kind: str, *, n_samples: int, seed: int = 0,
                    samples_per_shard: int = 64) -> list[Path]:
    """One source of a mixture: ``n_samples`` good samples of one kind (text, image or video) in
    ``out_dir/shard-%06d.tar``; returns the shard paths."""
    rng = random.Random(seed)
    recipes = _KIND_RECIPES[kind]
    samples = []
    for index in range(n_samples):
        raw_json, media = recipes[index % len(recipes)](rng, seed * 1_000_003 + index)
        samples.append(SyntheticSample(key=f"{kind}{index:06d}", json=raw_json, media=media))
    return [write_shard(Path(out_dir) / f"shard-{n // samples_per_shard:06d}.tar",
                        samples[n : n + samples_per_shard])
            for n in range(0, n_samples, samples_per_shard)]
