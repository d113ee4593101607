"""LLaVA-OneVision on the fast path: counts equal the real ``LlavaOnevisionProcessor``, sample by sample.

The reference is transformers' own ``LlavaOnevisionProcessor`` loaded by its own ``from_pretrained``
from the folder: in ``.venv`` (no torchvision) the real class restricted to its image processor
(``LlavaOnevisionImageProcessorPil``) and tokenizer, since its video processor needs torchvision; in
``.venv-ref`` (tests marked ``torchvision``) ``AutoProcessor`` itself, videos included. Each sample's
images go in as one list per sample (``images=[images]``), which is what ``apply_chat_template`` does
(checked below): the processor then tiles a sample's only image (anyres) and gives each image of a
multi-image sample one square (``batch_num_images``).

Its ``input_ids`` are compared by length with the scan's ``token_len`` (the whole ``vlmpack scan``
stage), token by token with ``materialize``, and its ``<image>`` / ``<video>`` ids with ``media_tokens``,
for text, one-image (many sizes and aspect ratios, 1x1 to 5000:1) and multi-image samples, in both folder
layouts, and for videos (the frames the shared sampler picks, decoded at their own size) where
torchvision is installed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from _family_kit import images_only, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image
from transformers import LlavaOnevisionProcessor

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.media import decode_frames
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, generate_dataset, image_bytes, write_shard
from vlmpack_offline.tokens import load_model_rules, make_counter

LAYOUTS = ("hub", "transformers5")

# (width, height): tile-sized, under and over a tile, every grid shape's edge, ties between grids, wide and
# tall up to 5000:1 (the anyres_max_9 shrink and the unpadding round there), 1x1.
SIZES = [
    (1, 1), (100, 100), (384, 384), (385, 383), (768, 384), (384, 768), (1000, 300), (300, 1000),
    (2304, 2304), (4000, 3000), (1920, 1080), (777, 333), (2000, 10), (10, 2000), (5000, 1), (1, 5000),
]  # fmt: skip

_ImagesOnly = images_only(LlavaOnevisionProcessor)


def _messages(user: list[dict], answer: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def _dataset(root: Path) -> Path:
    """The generated dataset (text, one image, multi-image, videos) plus, per size of ``SIZES``, that image
    alone and that image with a second one, and one sample of three images."""
    generate_dataset(root, seed=11, n_shards=2, samples_per_shard=10, include_faults=False)
    samples = []
    for index, (width, height) in enumerate(SIZES):
        fmt = "PNG" if width * height < 1_000_000 else "JPEG"  # big PNGs cost seconds to write and decode
        name = f"a.{fmt.lower()}"
        alone = {name: image_bytes(width, height, fmt=fmt, seed=index)}
        user = [{"type": "image", "image": name}, {"type": "text", "text": f"What is in\n\nthis {index}?"}]
        samples.append(SyntheticSample(key=f"one{index:03d}", json={"messages": _messages(user, f"One {index}.")}, media=alone))
        pair = {**alone, "b.jpg": image_bytes(*SIZES[-index - 1], seed=index)}
        user = [{"type": "image", "image": name}, {"type": "text", "text": "Left and"},
                {"type": "image", "image": "b.jpg"}, {"type": "text", "text": " right?"}]  # fmt: skip
        samples.append(SyntheticSample(key=f"two{index:03d}", json={"messages": _messages(user, f"Two {index}.")}, media=pair))
    three = {f"m{i}.jpg": image_bytes(*size, seed=i) for i, size in enumerate([(640, 480), (2000, 10), (1, 1)])}
    user = [{"type": "image", "image": name} for name in three] + [{"type": "text", "text": "Three."}]
    samples.append(SyntheticSample(key="three", json={"messages": _messages(user, "Yes.")}, media=three))
    write_shard(root / "edges.tar", samples)
    return root


@pytest.fixture(scope="module")
def ov_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"ov_{layout}"), "llava_onevision", layout=layout)
            for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    return _dataset(tmp_path_factory.mktemp("ov_wds"))



def _reference(processor, conversation, parts, counter=None) -> list[int]:
    """The processor's input_ids for one sample: its images as one list (as apply_chat_template passes them),
    its videos as the frames the shared sampler picks (needs ``counter`` and the video processor)."""
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
    videos = []
    for m in conversation.media:
        if m.kind == "video":
            sampling = counter.probe("video", parts[m.part], part=m.part).sampling
            videos.append(decode_frames(parts[m.part], sampling, resize=False))
    out = processor(text=[text], images=[images] if images else None, videos=videos or None)
    return list(out["input_ids"][0])


def _scan_matches_reference(tmp_path, wds, directory, processor, path_line, *, videos: bool, **kwargs) -> dict:
    """Run ``vlmpack scan`` (it prints ``path_line``); every row's counts equal the reference's; the kinds seen."""
    video = kwargs.pop("video", None) or {"max_frames": 12}
    config = scan_config(tmp_path, wds, directory, max_token_len=1_000_000, sections={"video": video}, **kwargs)
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path_line in result.output
    counter = make_counter(_load(config))
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    media_ids = (processor.image_token_id, processor.video_token_id)
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0}
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        assert row.status == "ok", (row.key, row.status, row.error)
        if "video" in kinds and not videos:
            continue
        ids = _reference(processor, conversation, parts, counter)
        assert (row.token_len, row.media_tokens) == (len(ids), sum(ids.count(i) for i in media_ids)), row.key
        kind = "video" if "video" in kinds else "text" if not kinds else "image" if len(kinds) == 1 else "multi"
        seen[kind] += 1
    return seen


def _load(config_path: Path):
    from vlmpack_offline.config import load_config

    return load_config(config_path)


PATH_LINE = "llava_onevision: fast path (729 tokens per 384x384 tile, anyres_max_9 over 36 grids"


@pytest.mark.slow  # the whole scan stage
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_the_real_processor(tmp_path, layout, ov_dirs, wds):
    directory = ov_dirs[layout]
    assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
    processor = _ImagesOnly.from_pretrained(directory)
    assert type(processor.image_processor).__name__ == "LlavaOnevisionImageProcessorPil"
    assert (processor.num_image_tokens, processor.vision_aspect_ratio) == (729, "anyres_max_9")
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, PATH_LINE, videos=False)
    assert seen["text"] >= 2 and seen["image"] >= len(SIZES) and seen["multi"] >= len(SIZES) + 1, seen


def test_the_reference_call_is_apply_chat_templates(ov_dirs, wds):
    """``images=[images]`` (one list per sample) is what ``apply_chat_template`` hands the processor;
    a flat list would tile every image of a multi-image sample (and give another count)."""
    processor = _ImagesOnly.from_pretrained(ov_dirs["hub"])
    conversation, parts = samples_in(wds)["two006"]
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
    loaded = iter(images)
    messages = [{**m, "content": [{**item, "image": next(loaded)} if item.get("type") == "image" else item
                                  for item in m["content"]]} for m in conversation.messages]  # fmt: skip
    applied = processor.apply_chat_template(messages, tokenize=True, return_dict=True)
    assert list(applied["input_ids"][0]) == _reference(processor, conversation, parts)
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    assert len(processor(text=[text], images=images)["input_ids"][0]) > len(applied["input_ids"][0])


def test_materialize_gives_the_processor_input_ids(ov_dirs, wds, make_config):
    directory = ov_dirs["transformers5"]
    processor = _ImagesOnly.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        if any(m.kind == "video" for m in conversation.media):
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        ids = _reference(processor, conversation, parts)
        assert materialized.input_ids == ids, key
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert processor.image_token_id not in learned
        if key.startswith(("one", "two")):  # one assistant turn: its text and <|im_end|> (the markers hold the text)
            answer = f"{'One' if key.startswith('one') else 'Two'} {int(key[3:])}."
            assert processor.tokenizer.decode(learned) == answer + "<|im_end|>"
        checked += 1
    assert checked >= 2 * len(SIZES) + 5


@pytest.mark.parametrize("kwargs", [
    {"vision_feature_select_strategy": "default", "vision_aspect_ratio": "anyres_max_4"},
    {"image_grid_pinpoints": [[384, 768], [768, 384], [768, 768], [1152, 384], [384, 1152]], "num_image_tokens": 576,
     "size": {"height": 336, "width": 336}},
], ids=["strategy-aspect", "pinpoints-size-tokens"])  # fmt: skip
def test_processor_kwargs_change_the_count_as_in_the_processor(ov_dirs, wds, make_config, kwargs):
    """Settings from model.processor_kwargs, as ``from_pretrained`` hands them to the processor and its
    image processor; counted with ``count`` (the scan's own entry) on every other edge size, alone and paired."""
    directory = ov_dirs["hub"]
    processor = _ImagesOnly.from_pretrained(directory, **kwargs)
    config = make_config(wds_dir="unused", processor_dir=directory,
                         model={"processor_kwargs": {"pretrained_model_name_or_path": str(directory), **kwargs}})  # fmt: skip
    counter = make_counter(config)
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        if not key.startswith(("one", "two")) or int(key[3:]) % 2:  # every other size, alone and with a second one
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        count = counter.count(conversation, media)
        ids = _reference(processor, conversation, parts)
        assert (count.token_len, count.media_tokens) == (len(ids), ids.count(processor.image_token_id)), key
        checked += 1
    assert checked == len(SIZES)


def test_settings_are_read_from_both_layouts(tmp_path, ov_dirs, make_config):
    for directory in ov_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        assert (rules.model_type, rules.fast, rules.tokens_per_image) == ("llava_onevision", True, 729)
        assert (rules.tile_size, rules.vision_aspect_ratio, rules.feature_select_strategy) == ((384, 384), "anyres_max_9", "full")
        assert len(rules.grid_pinpoints) == 36 and rules.temporal_patch_size == 1
    custom = build_processor_dir(tmp_path / "custom", "llava_onevision")
    settings = json.loads((custom / "processor_config.json").read_text())
    (custom / "processor_config.json").write_text(json.dumps({**settings, "num_image_tokens": None}))
    with pytest.raises(ConfigError, match="no num_image_tokens"):
        load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)


# -- with torchvision: AutoProcessor, videos included ---------------------------------------------------------


@pytest.fixture(scope="module")
def ov_video_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"ov_video_{layout}"), "llava_onevision",
                                        layout=layout, video=True) for layout in LAYOUTS}  # fmt: skip


@pytest.mark.slow  # the whole scan stage
@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_autoprocessor_with_videos(tmp_path, layout, ov_video_dirs, wds):
    from transformers import AutoProcessor

    directory = ov_video_dirs[layout]
    processor = AutoProcessor.from_pretrained(directory)
    assert type(processor.video_processor).__name__ == "LlavaOnevisionVideoProcessor"
    assert processor.video_processor.do_sample_frames is False  # it takes every frame it is given
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, PATH_LINE, videos=True)
    assert seen["video"] >= 2 and seen["image"] >= len(SIZES) and seen["multi"] >= len(SIZES), seen


@pytest.mark.torchvision
def test_frame_counts_follow_the_video_config(tmp_path, ov_video_dirs, wds, make_config):
    """Another ``video:`` section picks other frames; the count follows the processor on those frames."""
    from transformers import AutoProcessor

    directory = ov_video_dirs["hub"]
    processor = AutoProcessor.from_pretrained(directory)
    counts = set()
    for video in ({"fps": 1.0, "max_frames": 5}, {"fps": 4.0, "min_frames": 3, "max_frames": 9}):
        counter = make_counter(make_config(wds_dir="unused", processor_dir=directory, video=video))
        for key, (conversation, parts) in samples_in(wds).items():
            if not any(m.kind == "video" for m in conversation.media):
                continue
            media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
            count = counter.count(conversation, media)
            ids = _reference(processor, conversation, parts, counter)
            assert (count.token_len, count.media_tokens) == (
                len(ids), ids.count(processor.image_token_id) + ids.count(processor.video_token_id)), key  # fmt: skip
            counts.add(count.token_len)
    assert len(counts) >= 2
    assert np.all(np.asarray(sorted(counts)) > 0)


def test_hand_checked_counts():
    """The module doc's examples, worked by hand from the processor's arithmetic (27 x 27 features per tile)."""
    from vlmpack_offline.families.llava_onevision import image_tokens, video_tokens
    from vlmpack_offline.synthetic.folder_llava_onevision import PINPOINTS

    settings = {"tile": (384, 384), "pinpoints": tuple(map(tuple, PINPOINTS)), "base": 729, "aspect": "anyres_max_9",
                "default_strategy": False}  # fmt: skip
    assert image_tokens(384, 384, alone=True, **settings) == 729 + 27 * 27 + 27
    assert image_tokens(300, 1000, alone=True, **settings) == 729 + 25 * 81 + 25  # 1 x 3 grid, 2 rows unpadded
    assert image_tokens(2000, 3000, alone=True, **settings) == 729 + 66 * 99 + 66  # 4 x 6 grid shrunk by 1.63
    assert image_tokens(2000, 3000, alone=False, **settings) == 730  # one square + newline in a multi-image sample
    assert image_tokens(2000, 3000, alone=False, **{**settings, "default_strategy": True}) == 729
    assert video_tokens(8, base=729) == 8 * 14 * 14 + 1


@pytest.mark.torchvision
def test_a_video_past_200_to_1_is_counted_as_the_processor_takes_it(ov_video_dirs, make_config):
    """LLaVA-OneVision resizes every frame to its tile: a 1000 x 4 video is no resize problem (the Qwen sampler's
    200:1 limit does not apply), and its count equals the processor's on the sampled frames."""
    from transformers import AutoProcessor

    from vlmpack_offline.conversation import Conversation, MediaRef
    from vlmpack_offline.synthetic.shards import video_bytes

    directory = ov_video_dirs["transformers5"]
    processor = AutoProcessor.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    parts = {"v.mp4": video_bytes(20, 10, 1000, 4, seed=1)}
    user = [{"type": "video", "video": "v.mp4"}, {"type": "text", "text": "A thin strip?"}]
    messages = ({"role": "user", "content": user}, {"role": "assistant", "content": [{"type": "text", "text": "Yes."}]})
    conversation = Conversation(messages=messages, media=(MediaRef(kind="video", part="v.mp4"),))
    media = [counter.probe("video", parts["v.mp4"], part="v.mp4")]
    count = counter.count(conversation, media)
    ids = _reference(processor, conversation, parts, counter)
    assert media[0].sampling.n_frames >= 2
    assert (count.token_len, count.media_tokens) == (len(ids), ids.count(processor.video_token_id))
