"""GLM-4.1V / 4.5V / 4.6V videos on the fast path: frames, grid, prompt and count equal the real processors'.

Oracles (transformers' own code, never ours):

- with torchvision (``.venv-ref``): ``AutoProcessor`` of the folder (``Glm4vProcessor`` +
  ``Glm4vVideoProcessor``, ``Glm46VProcessor`` + ``Glm46VVideoProcessor``) given EVERY decoded frame of the
  video and its ``VideoMetadata`` (frame count and rate, duration = frames / fps, as transformers' video
  loaders fill it): it samples, resizes and expands itself. Its ``input_ids`` must equal ``materialize``'s
  and its length the scan's count, for several videos (odd frame counts, below the patch factor, wide), a
  sample mixing an image and a video, in both folder layouts. Its ``sample_frames`` and its module's
  ``smart_resize`` must give our frames and size for long videos (past GLM-4.1V's 300 s and GLM-4.6V's
  30 s / 300 s / 2400 s steps) from metadata alone.
- without torchvision (``.venv``): the real ``Glm4vProcessor`` / ``Glm46VProcessor`` class (images only)
  with its ``replace_video_token`` on our grid and ``VideoMetadata``: the prompt text and its token count.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _family_kit import images_only
from PIL import Image
from transformers import Glm4vProcessor, Glm46VProcessor
from transformers.video_utils import VideoMetadata

from vlmpack_offline.conversation import Conversation, MediaRef
from vlmpack_offline.media import VideoInfo, decode_frames
from vlmpack_offline.media.video import VideoSampling
from vlmpack_offline.reasons import DropError
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.tokens import VideoMedia, make_counter
from vlmpack_offline.tokens.media_info import sample_for
from vlmpack_offline.tokens.rules import resolve_video

FAMILIES = ("glm4v", "glm4v_moe", "glm46v")
# (frames, fps, width, height): 5 s, an odd count at 12 fps, below the 28-pixel factor, wide, 1 s at 7 fps
VIDEOS = [(50, 10, 96, 64), (37, 12, 64, 48), (24, 8, 20, 14), (45, 15, 300, 40), (7, 7, 64, 64)]
# (frames, fps, width, height) from metadata only: around 30 s, 300 s and 2400 s, odd rates
METADATA = [(300, 30.0, 1920, 1080), (899, 29.97, 640, 360), (931, 30.0, 1280, 720), (8990, 29.97, 720, 1280),
            (9031, 30.0, 3840, 2160), (75000, 25.0, 640, 480), (30, 1.0, 100, 100), (3, 24.0, 500, 20)]  # fmt: skip


def _messages(parts: list[tuple[str, str]]) -> tuple[dict, ...]:
    content = [{"type": kind, kind: part} for kind, part in parts] + [{"type": "text", "text": "What happens?"}]
    return ({"role": "user", "content": content}, {"role": "assistant", "content": "Something moves."})


def _counter(make_config, folder: Path):
    return make_counter(make_config(wds_dir="unused", processor_dir=folder))


def _all_frames(data: bytes, info: VideoSampling) -> np.ndarray:
    every = VideoSampling(frame_indices=tuple(range(info.total_frames)), resized_height=0, resized_width=0,
                          native_fps=info.native_fps, total_frames=info.total_frames)  # fmt: skip
    return decode_frames(data, every, resize=False)


@pytest.mark.torchvision
@pytest.mark.parametrize(("family", "layout"), [("glm4v", "hub"), ("glm4v", "transformers5"), ("glm4v_moe", "hub"),
                                                ("glm46v", "hub"), ("glm46v", "transformers5")])  # fmt: skip
def test_counts_equal_the_real_processor_sampling_the_whole_video(tmp_path, make_config, family, layout):
    from transformers import AutoProcessor

    folder = build_processor_dir(tmp_path, family, layout=layout, video=True)
    processor = AutoProcessor.from_pretrained(folder)
    assert type(processor.video_processor).__name__ == ("Glm46VVideoProcessor" if family == "glm46v" else "Glm4vVideoProcessor")
    counter = _counter(make_config, folder)
    assert counter.rules.video.sampler == "hf_processor"
    image = image_bytes(120, 90, seed=3)
    cases = [[("video", f"v{i}.mp4")] for i in range(len(VIDEOS))] + [[("image", "a.jpg"), ("video", "v0.mp4")]]
    media = {f"v{i}.mp4": video_bytes(*spec, seed=i) for i, spec in enumerate(VIDEOS)} | {"a.jpg": image}
    for parts in cases:
        messages = _messages(parts)
        conversation = Conversation(messages=messages, media=tuple(MediaRef(kind=k, part=p) for k, p in parts))
        infos = [counter.probe(k, media[p], part=p) for k, p in parts]
        videos = [(_all_frames(media[p], i.sampling), i.sampling) for (k, p), i in zip(parts, infos, strict=True) if k == "video"]
        text = processor.apply_chat_template(list(messages), tokenize=False)
        out = processor(
            text=[text], images=[Image.open(io.BytesIO(image))] if ("image", "a.jpg") in parts else None,
            videos=[frames for frames, _ in videos],
            video_metadata=[VideoMetadata(total_num_frames=s.total_frames, fps=s.native_fps,
                                          duration=s.total_frames / s.native_fps) for _, s in videos],
        )  # fmt: skip
        expected = list(out["input_ids"][0])
        (_, sampling), grid = videos[0], out["video_grid_thw"][0].tolist()
        assert grid == [sampling.n_frames // 2, sampling.resized_height // 14, sampling.resized_width // 14], parts
        assert counter.materialize(conversation, infos).input_ids == expected, parts
        count = counter.count(conversation, infos)
        assert count.token_len == len(expected)
        assert count.media_tokens == expected.count(processor.image_token_id)


@pytest.mark.torchvision
@pytest.mark.parametrize("family", FAMILIES)
def test_frames_and_size_equal_the_real_video_processor_from_metadata(tmp_path, make_config, family):
    import importlib

    from transformers import AutoProcessor

    folder = build_processor_dir(tmp_path, family, layout="hub", video=True)
    video_processor = AutoProcessor.from_pretrained(folder).video_processor
    module = "glm46v" if family == "glm46v" else "glm4v"
    real_resize = importlib.import_module(f"transformers.models.{module}.video_processing_{module}").smart_resize
    rules = _counter(make_config, folder).rules
    for n_frames, fps, width, height in METADATA:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        metadata = VideoMetadata(total_num_frames=n_frames, fps=fps, duration=n_frames / fps)
        indices = [int(i) for i in video_processor.sample_frames(metadata)]
        if not indices:  # GLM-4.6V samples nothing from 3 frames at 24 fps: its processor then fails
            with pytest.raises(DropError, match="samples no frame"):
                sample_for(rules, info, rules.video, part="v.mp4")
            continue
        ours = sample_for(rules, info, rules.video, part="v.mp4")
        size = real_resize(num_frames=len(indices), height=height, width=width, temporal_factor=2, factor=28,
                           min_pixels=video_processor.size.shortest_edge, max_pixels=video_processor.size.longest_edge)  # fmt: skip
        assert ours.frame_indices == tuple(indices), (n_frames, fps)
        assert (ours.resized_height, ours.resized_width) == size, (n_frames, fps, width, height)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_prompt_equals_replace_video_token_without_torchvision(tmp_path, make_config, family):
    """The real processor class's own ``replace_video_token`` on our grid and metadata (no torchvision needed)."""
    folder = build_processor_dir(tmp_path, family, layout="hub", video=True)
    processor = images_only(Glm46VProcessor if family == "glm46v" else Glm4vProcessor).from_pretrained(folder)
    processor.video_processor = SimpleNamespace(merge_size=2)  # replace_video_token reads only this
    counter = _counter(make_config, folder)
    for n_frames, fps, width, height in METADATA:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        try:
            media = VideoMedia(sampling=sample_for(counter.rules, info, counter.rules.video, part="v.mp4"))
        except DropError:  # GLM-4.6V: too short to sample a frame (checked against it in the test above)
            assert family == "glm46v" and n_frames / fps < 1 / 6
            continue
        s = media.sampling
        grid = torch.tensor([[math.ceil(s.n_frames / 2), s.resized_height // 14, s.resized_width // 14]])
        metadata = VideoMetadata(total_num_frames=n_frames, fps=fps, frames_indices=list(s.frame_indices))
        text = processor.replace_video_token({"video_grid_thw": grid, "video_metadata": [metadata]}, 0)
        assert counter.expander.replacement_text(media) == text
        ids = counter.tokenizer(text, add_special_tokens=False)["input_ids"]
        size = counter.expander.replacement_size(media)
        assert (size.tokens, size.media_tokens) == (len(ids), ids.count(processor.image_token_id))


def test_config_video_fps_changes_glm41v_sampling_as_in_the_processor(tmp_path, make_config):
    folder = build_processor_dir(tmp_path, "glm4v", layout="transformers5", video=True)
    config = make_config(wds_dir="unused", processor_dir=folder, video={"fps": 1.0})
    rules = make_counter(config).rules
    settings = resolve_video(config.video, rules.video, factor=rules.factor)  # as probe_media resolves
    assert (rules.video.fps, settings.fps, rules.max_duration) == (2.0, 1.0, 300)
    info = VideoInfo(n_frames=100, native_fps=10.0, height=64, width=64, backend="decord")
    assert sample_for(rules, info, settings).frame_indices == tuple(range(0, 100, 10))  # 10 s at 1 fps
    assert len(sample_for(rules, info, rules.video).frame_indices) == 20  # the folder's 2 fps


def test_another_video_sampler_is_refused_before_any_sample_is_read(tmp_path, small_dataset):
    """GLM samples as its own video processor does: ``video.sampler: qwen_vl_utils`` is a config error of the
    scan (one line, exit 2), not a drop of every video sample."""
    import yaml
    from click.testing import CliRunner

    from vlmpack_offline.cli import cli
    from vlmpack_offline.errors import ConfigError

    folder = build_processor_dir(tmp_path / "proc", "glm4v", video=True)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "data": {"wds_dir": [str(p) for p in small_dataset], "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
        "video": {"sampler": "qwen_vl_utils"},
    }))  # fmt: skip
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert isinstance(result.exception, ConfigError), result.output
    assert "video.sampler = 'qwen_vl_utils'" in str(result.exception) and "remove video.sampler" in str(result.exception)
    assert not (tmp_path / "work" / "manifest.sqlite").exists()


@pytest.mark.torchvision
def test_processor_kwargs_size_and_fps_reach_the_video_sampling_as_in_from_pretrained(tmp_path, make_config):
    """``AutoProcessor.from_pretrained(folder, size=..., fps=...)`` hands them to the video processor as well."""
    from transformers import AutoProcessor

    folder = build_processor_dir(tmp_path, "glm4v", layout="hub", video=True)
    kwargs = {"size": {"shortest_edge": 3136, "longest_edge": 2 * 28 * 28 * 300}, "fps": 1}
    video_processor = AutoProcessor.from_pretrained(folder, **kwargs).video_processor
    assert (video_processor.fps, video_processor.size.longest_edge) == (1, 2 * 28 * 28 * 300)
    config = make_config(wds_dir="unused", processor_dir=folder, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(folder), **kwargs}})  # fmt: skip
    rules = make_counter(config).rules
    from transformers.models.glm4v.video_processing_glm4v import smart_resize

    for n_frames, fps, width, height in METADATA:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        indices = [int(i) for i in video_processor.sample_frames(VideoMetadata(
            total_num_frames=n_frames, fps=fps, duration=n_frames / fps))]  # fmt: skip
        ours = sample_for(rules, info, rules.video)
        size = smart_resize(num_frames=len(indices), height=height, width=width, temporal_factor=2, factor=28,
                            min_pixels=3136, max_pixels=2 * 28 * 28 * 300)  # fmt: skip
        assert ours.frame_indices == tuple(indices) and (ours.resized_height, ours.resized_width) == size
