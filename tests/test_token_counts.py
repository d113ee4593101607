"""Token counts of the fast path equal what the real HF processor classes produce, sample by sample.

The reference is the real ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor`` (restricted to
image processor + tokenizer, because their video processor needs torchvision) with the
real ``Qwen2VLImageProcessorPil`` on the decoded image: its ``input_ids`` are compared
token by token with ``materialize`` and by length with ``count``. Videos use the real
processor's ``replace_video_token`` on the grid the image processor gives for the
sampled frames. Each family runs on both processor-folder layouts: the hub files and the
transformers-5 ``save_pretrained`` output (``processor_config.json``), which the real image
processor reads by itself.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transformers import Qwen2_5_VLProcessor, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.video_utils import VideoMetadata

from vlmpack_offline.config import VideoConfig
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.media import VideoInfo, decode_frames, sample_video
from vlmpack_offline.reasons import DropError
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, generate_dataset, image_bytes, write_shard
from vlmpack_offline.tario import iter_samples, read_range
from vlmpack_offline.tokens import (
    ImageMedia,
    TokenCounter,
    VideoMedia,
    load_model_rules,
    load_tokenizer,
    make_counter,
)

FAMILIES = {"qwen2_5_vl": Qwen2_5_VLProcessor, "qwen3_vl": Qwen3VLProcessor}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> list[tuple[str, object, dict[str, bytes]]]:
    """(key, Conversation, {part: bytes}) for every sample of a generated dataset."""
    paths = generate_dataset(tmp_path_factory.mktemp("wds"), seed=3, n_shards=2, samples_per_shard=14)
    samples = []
    for path in paths:
        with open(path, "rb") as handle:
            for raw in iter_samples(path):
                parts = {m.part: read_range(handle, m.offset, m.size) for m in raw.members}
                conversation = parse_conversation(parts.pop("json"), key=raw.key, parts=list(parts))
                samples.append((raw.key, conversation, parts))
    return samples


@pytest.fixture(scope="module")
def transformers5_dirs(tmp_path_factory) -> dict[str, Path]:
    """Folders as transformers 5 ``save_pretrained`` writes them: ``processor_config.json``, no preprocessor_config.

    Qwen2.5-VL's carries its video processor section (per-frame bounds, so the image-processor grid of a
    sampled frame is the video grid); Qwen3-VL's video section is checked in ``test_video_settings.py``.
    """
    return {
        name: build_processor_dir(
            tmp_path_factory.mktemp(f"t5_{name}"), name, layout="transformers5", video=name == "qwen2_5_vl"
        )
        for name in FAMILIES
    }


@pytest.fixture(
    params=[(name, layout) for name in sorted(FAMILIES) for layout in ("hub", "transformers5")],
    ids=lambda p: "-".join(p),
)
def family(request, qwen25_processor_dir, qwen3_processor_dir, transformers5_dirs, make_config):
    """(counter, real processor, image processor) for one model family and processor-folder layout."""
    name, layout = request.param
    hub = {"qwen2_5_vl": qwen25_processor_dir, "qwen3_vl": qwen3_processor_dir}
    directory = hub[name] if layout == "hub" else transformers5_dirs[name]
    if layout == "transformers5":
        assert not (directory / "preprocessor_config.json").exists()
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(directory)
    # image processor + tokenizer only: the class's video processor needs torchvision
    cls = type(
        "ImageOnly",
        (FAMILIES[name],),
        {"get_attributes": classmethod(lambda c: ["image_processor", "tokenizer"])},
    )
    processor = cls(
        image_processor=image_processor,
        tokenizer=counter.tokenizer,
        chat_template=counter.tokenizer.chat_template,
    )
    return counter, processor, image_processor


def _media(counter, conversation, parts):
    return [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]


def test_image_processor_reads_the_directory_settings(family):
    counter, _, image_processor = family
    assert image_processor.patch_size == counter.rules.patch_size
    assert image_processor.size["shortest_edge"] == counter.rules.min_pixels
    assert image_processor.size["longest_edge"] == counter.rules.max_pixels


def test_text_and_image_samples_match_the_real_processor(family, dataset):
    counter, processor, _ = family
    checked = mismatches = 0
    for key, conversation, parts in dataset:
        if conversation.media_type == "video":
            continue
        text = counter.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
        reference = processor(text=[text], images=images or None)["input_ids"][0]
        media = _media(counter, conversation, parts)
        count = counter.count(conversation, media)
        materialized = counter.materialize(conversation, media)
        checked += 1
        if count.token_len != len(reference) or materialized.input_ids != list(reference):
            mismatches += 1
            print(f"mismatch {key}: count {count.token_len}, processor {len(reference)}")
    assert checked >= 20 and mismatches == 0


def test_video_samples_match_processor_expansion_on_image_processor_grid(family, dataset):
    counter, processor, image_processor = family
    processor.video_processor = image_processor  # replace_video_token reads merge/temporal sizes from it
    videos = [(k, c, p) for k, c, p in dataset if c.media_type == "video"]
    assert len(videos) >= 2
    for _key, conversation, parts in videos:
        media = _media(counter, conversation, parts)
        text = counter.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
        image_repl = processor._process_images(images)[1] if images else []
        video_repl = []
        for item in media:
            if not isinstance(item, VideoMedia):
                continue
            frames = decode_frames(parts[conversation.media[media.index(item)].part], item.sampling)
            _, h, w = image_processor(images=[Image.fromarray(frames[0])])["image_grid_thw"][0]
            grid = np.array([[len(frames) // image_processor.temporal_patch_size, h, w]])
            metadata = VideoMetadata(
                total_num_frames=len(frames),
                fps=item.sampling.native_fps,
                frames_indices=list(item.sampling.frame_indices),
            )
            video_repl.append(
                processor.replace_video_token({"video_grid_thw": grid, "video_metadata": [metadata]}, 0)
            )
        (expanded,), _ = processor.get_text_with_replacements([text], image_repl, video_repl)
        reference = counter.tokenizer(expanded, add_special_tokens=False)["input_ids"]
        assert counter.count(conversation, media).token_len == len(reference)
        assert counter.materialize(conversation, media).input_ids == reference


def test_assistant_mask_covers_assistant_text_and_never_media(family, dataset):
    counter, _, _ = family
    tok = counter.tokenizer
    pads = {tok.convert_tokens_to_ids("<|image_pad|>"), tok.convert_tokens_to_ids("<|video_pad|>")}
    for _key, conversation, parts in dataset:
        media = _media(counter, conversation, parts)
        out = counter.materialize(conversation, media)
        assert len(out.assistant_mask) == len(out.input_ids) == counter.count(conversation, media).token_len
        assert not any(m for i, m in zip(out.input_ids, out.assistant_mask, strict=True) if i in pads)
        answer = "".join(
            "".join(item["text"] for item in message["content"]) + "<|im_end|>"
            for message in conversation.messages
            if message["role"] == "assistant"
        )
        assert tok.decode([i for i, m in zip(out.input_ids, out.assistant_mask, strict=True) if m]) == answer


def test_processor_kwargs_pixels_override_the_directory(make_config, qwen25_processor_dir):
    config = make_config(
        wds_dir="unused",
        model={
            "processor_kwargs": {
                "pretrained_model_name_or_path": str(qwen25_processor_dir),
                "max_pixels": 200_000,
                "min_pixels": 50_000,
            }
        },
    )
    counter = make_counter(config)
    reference = Qwen2VLImageProcessorPil.from_pretrained(
        qwen25_processor_dir, max_pixels=200_000, min_pixels=50_000
    )
    for width, height in ((1500, 1000), (40, 30), (333, 777)):
        media = counter.probe("image", image_bytes(width, height), part="img.jpg")
        t, h, w = reference(images=[Image.new("RGB", (width, height))])["image_grid_thw"][0]
        assert counter.expander.replacement_size(media).media_tokens == t * h * w // 4


def test_aspect_ratio_over_200_is_unsupported(family):
    counter, _, _ = family
    with pytest.raises(DropError) as info:
        counter.probe("image", image_bytes(4020, 20, fmt="PNG"), part="img0.png")
    assert info.value.reason == "unsupported_aspect"


def test_unreadable_image_is_corrupt_media(family):
    counter, _, _ = family
    with pytest.raises(DropError) as info:
        counter.probe("image", b"\xff\xd8 not really a jpeg", part="img0.jpg")
    assert info.value.reason == "corrupt_media"


def test_auto_tokenizer_counts_text_and_refuses_media(make_config, qwen25_processor_dir, dataset):
    config = make_config(wds_dir="unused", model={"processor_loader": "auto_tokenizer"})
    counter = make_counter(config)
    _key, text_sample, _ = next(d for d in dataset if d[1].media_type == "text")
    expected = counter.tokenizer.apply_chat_template(list(text_sample.messages), tokenize=True)["input_ids"]
    assert counter.count(text_sample, []).token_len == len(expected)
    with pytest.raises(DropError) as info:
        counter.probe("image", image_bytes(64, 64), part="img0.jpg")
    assert info.value.reason == "unsupported_media"
    assert "auto_processor" in str(info.value)


def test_video_sampling_follows_qwen_vl_utils():
    # 16 frames at 8 fps = 2 s; at video.fps 2 -> 4 frames, evenly spread: round(linspace(0, 15, 4))
    info = VideoInfo(n_frames=16, native_fps=8.0, height=48, width=64, backend="decord")
    sampling = sample_video(info, VideoConfig(fps=2.0, min_frames=4), factor=28)
    assert sampling.frame_indices == (0, 5, 10, 15)
    # 64x48 is below min_pixels 128*28*28: scaled by sqrt(100352 / 3072) = 5.72 and rounded up to
    # multiples of 28: ceil(274.3 / 28) * 28 = 280, ceil(365.8 / 28) * 28 = 392
    assert (sampling.resized_height, sampling.resized_width) == (280, 392)
    # an odd frame budget is rounded down to the temporal factor; short videos keep >= 2 frames
    assert sample_video(dataclasses.replace(info, n_frames=3), VideoConfig(), factor=28).frame_indices == (
        0,
        2,
    )
    assert (
        len(sample_video(dataclasses.replace(info, n_frames=1000), VideoConfig(), factor=28).frame_indices)
        == 250
    )


def test_video_total_pixels_budget_shrinks_frames():
    info = VideoInfo(n_frames=2000, native_fps=25.0, height=1080, width=1920, backend="decord")
    roomy = sample_video(info, VideoConfig(), factor=28)
    tight = sample_video(info, VideoConfig(total_pixels=160 * 28 * 28 * 10), factor=28)
    assert roomy.n_frames == tight.n_frames == 160
    assert tight.resized_height * tight.resized_width <= max(
        160 * 28 * 28 * 10 / 160 * 2, 128 * 28 * 28 * 1.05
    )
    assert tight.resized_height * tight.resized_width < roomy.resized_height * roomy.resized_width


def test_text_with_literal_pad_token_is_refused(family, tmp_path):
    counter, _, _ = family
    path = write_shard(
        tmp_path / "s.tar",
        [
            SyntheticSample(
                key="k",
                json={
                    "messages": [
                        {"role": "user", "content": "look <|image_pad|>"},
                        {"role": "assistant", "content": "ok"},
                    ]
                },
            )
        ],
    )
    conversation = parse_conversation(
        read_range(open(path, "rb"), *next((m.offset, m.size) for m in next(iter_samples(path)).members)),
        key="k",
        parts=["json"],
    )
    with pytest.raises(DropError) as info:
        counter.count(conversation, [])
    assert info.value.reason == "unknown_format"


def test_rules_read_qwen3_size_edges(make_config, qwen3_processor_dir):
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=qwen3_processor_dir).model)
    assert (rules.model_type, rules.patch_size, rules.factor) == ("qwen3_vl", 16, 32)
    assert (rules.min_pixels, rules.max_pixels) == (65536, 16777216)
    assert isinstance(
        make_counter(make_config(wds_dir="unused", processor_dir=qwen3_processor_dir)), TokenCounter
    )
    assert isinstance(ImageMedia(width=1, height=1), ImageMedia) and Path(rules.processor_path).is_dir()


def test_batched_counts_equal_one_by_one(family, dataset):
    counter, _, _ = family
    samples = [(c, _media(counter, c, p)) for _k, c, p in dataset]
    assert counter.count_many(samples) == [counter.count(c, m) for c, m in samples]


def _llava_dir(target: Path, qwen_dir: Path) -> Path:
    """A LLaVA-style processor dir (CLIP PIL image processor + the Qwen tokenizer): a non-Qwen-VL family."""
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = load_tokenizer(str(qwen_dir))
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        image_token="<|image_pad|>",
        vision_feature_select_strategy="default",
        chat_template=tokenizer.chat_template,
    )
    processor.save_pretrained(target)
    (target / "config.json").write_text('{"model_type": "llava"}')
    return target


def test_other_families_run_their_processor_on_the_slow_path(
    tmp_path, make_config, qwen25_processor_dir, dataset, caplog
):
    from transformers import AutoProcessor

    directory = _llava_dir(tmp_path / "llava", qwen25_processor_dir)
    with caplog.at_level("WARNING"):
        counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    assert "slow path" in caplog.text
    reference = AutoProcessor.from_pretrained(directory)
    checked = 0
    for _key, conversation, parts in dataset:
        if conversation.media_type != "image" or len(conversation.media) != 1:
            continue
        text = counter.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        image = Image.open(io.BytesIO(parts[conversation.media[0].part]))
        expected = len(reference(text=[text], images=[image])["input_ids"][0])
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        assert counter.count(conversation, media).token_len == expected
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_exif_rotated_jpeg_counts_its_stored_size_like_the_processor(family):
    # the loader hands PIL's image as opened to the processor, which does not apply EXIF orientation
    counter, processor, _ = family
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display": displayed 300x900, stored 900x300
    buffer = io.BytesIO()
    Image.new("RGB", (900, 300), (120, 30, 200)).save(buffer, format="JPEG", exif=exif)
    media = counter.probe("image", buffer.getvalue(), part="img0.jpg")
    assert (media.width, media.height) == (900, 300)
    grid = processor.image_processor(images=[Image.open(io.BytesIO(buffer.getvalue()))])["image_grid_thw"][0]
    assert counter.expander.replacement_size(media).media_tokens == int(np.prod(grid)) // 4
