"""Where a folder says ``do_sample_frames: true``, InternVL and LLaVA-OneVision videos get the frames their own
video processor samples (``families/processor_frames.py``); elsewhere the shared sampler stays.

Oracles, not our code:

- hand-checked cases of the two rules (transformers 5.24 ``InternVLVideoProcessor.sample_frames``,
  ``BaseVideoProcessor.sample_frames``), worked out in the comments, in the core environment;
- ``.venv-ref`` (torchvision): the real ``InternVLVideoProcessor`` / ``LlavaOnevisionVideoProcessor``, as
  ``preprocess`` calls ``sample_frames`` on a ``VideoMetadata``, over a grid of frame counts, frame rates and
  settings, refusals included; and an end-to-end ``vlmpack scan`` of real generated videos, whose counts equal
  the real ``AutoProcessor`` run on every decoded frame with ``do_sample_frames`` on and the video's metadata
  (videos it refuses are drops naming the rule).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from _family_kit import samples_in, scan_config
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import load_config
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.families.processor_frames import FrameRule
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.media import sample_video
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, video_bytes, write_shard
from vlmpack_offline.tokens import load_model_rules, make_counter

FAMILIES = ("internvl", "llava_onevision")


def _internvl(**settings) -> FrameRule:
    return FrameRule(processor="InternVL", internvl=True, where="the folder", **settings)


def _llava(**settings) -> FrameRule:
    return FrameRule(processor="LLaVA-OneVision", internvl=False, where="the folder", **settings)


@pytest.fixture(scope="module")
def _built(tmp_path_factory):
    return tmp_path_factory, {}  # (family, layout) -> a built folder, copied by ``folder``


@pytest.fixture
def folder(tmp_path, _built):
    """``folder(family, layout="hub", **video)``: a ``family`` processor folder whose video processor settings
    also hold ``video`` (e.g. ``do_sample_frames=True, fps=2``), in the file ``layout`` keeps them in."""
    made = []

    def make(family: str, *, layout: str = "hub", **video) -> Path:
        factory, built = _built
        if (family, layout) not in built:
            built[family, layout] = build_processor_dir(factory.mktemp(f"{family}_{layout}"), family, layout=layout,
                                                        video=True)  # fmt: skip
        directory = tmp_path / f"{family}_{layout}_{len(made)}"
        shutil.copytree(built[family, layout], directory)
        made.append(directory)
        if layout == "hub":
            path = directory / "video_preprocessor_config.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), **video}))
        else:
            path = directory / "processor_config.json"
            saved = json.loads(path.read_text())
            saved["video_processor"].update(video)
            path.write_text(json.dumps(saved))
        return directory

    return make


def _config(make_config, directory: Path, video: dict | None = None, **processor_kwargs):
    config = make_config(wds_dir="unused", processor_dir=directory, video=video or {})
    if processor_kwargs:
        import dataclasses

        kwargs = {**config.model.processor_kwargs, **processor_kwargs}
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, processor_kwargs=kwargs))
    return config


# -- the rules, hand-checked (core environment) ---------------------------------------------------------------


def test_internvl_rule_hand_checked():
    # 10 frames at 5 fps, fps 2: k = int(10 / 5 * 2) = 4, step 10 / 4 = 2.5, shift 1.25: 1.25 3.75 6.25 8.75
    assert _internvl(num_frames=None, fps=2.0).frames(10, 5.0, part="v") == (1, 3, 6, 8)
    # initial_shift false: 0 2.5 5 7.5
    assert _internvl(num_frames=None, fps=2.0, initial_shift=False).frames(10, 5.0, part="v") == (0, 2, 5, 7)
    # num_frames 3 of 7 wins over fps: step 7 / 3, shift 7 / 6: 1.17 3.5 5.83
    assert _internvl(num_frames=3, fps=2.0).frames(7, 5.0, part="v") == (1, 3, 5)
    # 3 frames at 5 fps, fps 2: k = int(1.2) = 1, shift 1.5: frame 1 (the shared sampler would take 4)
    assert _internvl(num_frames=None, fps=2.0).frames(3, 5.0, part="v") == (1,)


def test_llava_onevision_rule_hand_checked():
    # BaseVideoProcessor: arange(k) * n // k; 10 frames at 5 fps, fps 2: k = 4: 0 10//4 20//4 30//4
    assert _llava(num_frames=None, fps=2.0).frames(10, 5.0, part="v") == (0, 2, 5, 7)
    # 2 frames at 5 fps, fps 2: int(0.8) = 0, floored to 1 frame
    assert _llava(num_frames=None, fps=2.0).frames(2, 5.0, part="v") == (0,)
    # num_frames 4 of 6: 0 6//4 12//4 18//4
    assert _llava(num_frames=4, fps=None).frames(6, 30.0, part="v") == (0, 1, 3, 4)
    # neither: every frame
    assert _llava(num_frames=None, fps=None).frames(3, 30.0, part="v") == (0, 1, 2)


@pytest.mark.parametrize(
    ("rule", "n_frames", "native_fps", "message"),
    [
        (_internvl(num_frames=8, fps=None), 5, 5.0,
         "v.mp4: the InternVL video processor samples num_frames 8 but the video has 5 frames "
         "(do_sample_frames: true in the folder)"),
        (_llava(num_frames=8, fps=None), 5, 5.0,
         "v.mp4: the LLaVA-OneVision video processor samples num_frames 8 but the video has 5 frames "
         "(do_sample_frames: true in the folder)"),
        # 2 frames at 5 fps: int(2 / 5 * 2) = 0 frames, which InternVL divides by
        (_internvl(num_frames=None, fps=2.0), 2, 5.0,
         "v.mp4: the InternVL video processor samples fps 2: int(2 / 5 * 2) = 0 frames of this 0.400 s video"),
        # fps above the video's own rate: int(4 / 2 * 3) = 6 frames of 4
        (_llava(num_frames=None, fps=3.0), 4, 2.0,
         "v.mp4: the LLaVA-OneVision video processor samples fps 3 (6 frames at 2 fps) but the video has 4 frames"),
    ],
)  # fmt: skip
def test_a_video_the_processor_refuses_is_a_drop_naming_the_rule(rule, n_frames, native_fps, message):
    with pytest.raises(DropError) as caught:
        rule.frames(n_frames, native_fps, part="v.mp4")
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA
    assert str(caught.value).startswith(message)


# -- reading the folder (core environment) ------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["hub", "transformers5"])
def test_folder_do_sample_frames_selects_the_processors_rule(folder, make_config, family, layout):
    directory = folder(family, layout=layout, do_sample_frames=True, fps=2)
    counter = make_counter(_config(make_config, directory))
    assert counter.rules.video.sampler == "hf_processor"
    sampling = counter.probe("video", video_bytes(3, 5, 64, 48), part="v.mp4").sampling
    # 3 frames at 5 fps, fps 2: one frame (InternVL: shift 1.5 -> 1; LLaVA-OneVision: 0)
    assert sampling.frame_indices == ((1,) if family == "internvl" else (0,))


@pytest.mark.parametrize("family", FAMILIES)
def test_processor_kwargs_win_over_the_folder_as_in_from_pretrained(folder, make_config, family):
    """``from_pretrained`` hands ``model.processor_kwargs`` to the video processor over its folder's settings."""
    directory = folder(family, do_sample_frames=True, fps=2)
    assert load_model_rules(_config(make_config, directory, fps=4).model).frame_rule.fps == 4.0
    off = load_model_rules(_config(make_config, directory, do_sample_frames=False).model)
    assert off.frame_rule is None and off.video.sampler != "hf_processor"
    plain = folder(family)  # do_sample_frames false, as published
    on = load_model_rules(_config(make_config, plain, do_sample_frames=True, num_frames=4).model)
    assert (on.frame_rule.num_frames, on.frame_rule.where, on.video.sampler) == (4, "model.processor_kwargs", "hf_processor")


@pytest.mark.parametrize("family", FAMILIES)
def test_without_do_sample_frames_the_shared_sampler_stays(folder, make_config, family):
    from vlmpack_offline.media import probe_video

    directory = folder(family)  # do_sample_frames false
    counter = make_counter(_config(make_config, directory))
    assert counter.rules.frame_rule is None
    data = video_bytes(3, 5, 384, 384)
    got = counter.probe("video", data, part="v.mp4").sampling
    if family == "internvl":  # the recipe's minimum of 4 frames, clamped to the video's 3 (the processor: 1)
        expected = sample_video(probe_video(data), counter.rules.video, factor=counter.rules.factor, temporal_factor=1)
        assert got.frame_indices == expected.frame_indices == (0, 1, 2)
    else:  # LLaVA-OneVision's 32-frame recipe, frames repeated (the processor: 1)
        assert got.n_frames == 32


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("video", [{"fps": 1.0}, {"min_frames": 2, "max_frames": 8}, {"max_pixels": 10**6}])
def test_video_fields_the_processors_sampling_never_reads_are_refused(folder, make_config, family, video):
    directory = folder(family, do_sample_frames=True, num_frames=4)
    config = _config(make_config, directory, video)
    with pytest.raises(ConfigError, match=rf"^video\.{next(iter(video))}.*: {family} videos are sampled by its "
                                          r"video processor itself, .*num_frames 4"):  # fmt: skip
        load_model_rules(config.model, config.video)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampler_qwen_vl_utils_keeps_the_shared_sampler(folder, make_config, family):
    directory = folder(family, do_sample_frames=True, fps=2)
    config = _config(make_config, directory, {"sampler": "qwen_vl_utils", "min_frames": 4, "max_frames": 4})
    rules = load_model_rules(config.model, config.video)
    assert rules.video.sampler == "qwen_vl_utils"
    counter = make_counter(config)
    assert counter.probe("video", video_bytes(9, 5, 64, 48), part="v.mp4").sampling.n_frames == 4


@pytest.mark.parametrize(
    ("family", "video", "kwargs", "error"),
    [
        ("internvl", {}, {"do_sample_frames": True},  # neither fps nor num_frames: InternVL fails on every video
         "but has neither num_frames nor fps"),
        ("llava_onevision", {}, {"do_sample_frames": True, "fps": 2, "num_frames": 4},  # exclusive in the base class
         "has both num_frames 4 and fps 2"),
        ("internvl", {}, {"do_sample_frames": True, "num_frames": 0}, "num_frames is 0"),
        ("internvl", {"sampler": "hf_processor"}, {}, "video.sampler = 'hf_processor': the internvl video processor"),
    ],
)  # fmt: skip
def test_a_rule_that_cannot_sample_is_a_config_error(folder, make_config, family, video, kwargs, error):
    directory = folder(family, **kwargs)
    config = _config(make_config, directory, video)
    with pytest.raises(ConfigError, match=error):
        load_model_rules(config.model, config.video)


def test_scan_summary_names_the_rule(folder, tmp_path, make_config):
    from vlmpack_offline.stages import scan

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    write_shard(tmp_path / "wds" / "shard-000000.tar", [SyntheticSample(key="k", json=chat)])
    directory = folder("internvl", do_sample_frames=True, fps=2)
    result = scan.run(make_config(wds_dir=tmp_path / "wds", processor_dir=directory))
    assert result.summary[1] == ("videos: frames as the InternVL video processor samples them "
                                 "(fps 2; do_sample_frames: true in the folder), reader torchcodec")  # fmt: skip


# -- against the real video processors (reference environment) ----------------------------------------------

NATIVE_FPS = (29.97, 15.1, 24.0, 25.0, 30.0, 5.0, 2.5, 1.0)
SETTINGS = ({"fps": 1}, {"fps": 2}, {"fps": 0.5}, {"num_frames": 4}, {"num_frames": 8}, {"num_frames": 16})


def _video_processor(family: str, **settings):
    if family == "internvl":
        from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor as cls
    else:
        from transformers.models.llava_onevision.video_processing_llava_onevision import (
            LlavaOnevisionVideoProcessor as cls,
        )
    return cls(do_sample_frames=True, **settings)


def _real_indices(processor, n_frames: int, native_fps: float):
    """The processor's frames as ``preprocess`` samples them: ``sample_frames`` with every setting the processor
    holds as keyword (``partial(self.sample_frames, **kwargs)``); None where it raises."""
    from transformers.video_utils import VideoMetadata

    metadata = VideoMetadata(total_num_frames=n_frames, fps=native_fps, duration=n_frames / native_fps)
    kwargs = {name: getattr(processor, name, None) for name in processor.valid_kwargs.__annotations__}
    kwargs = {k: v for k, v in kwargs.items() if k not in ("do_sample_frames", "video_metadata")}
    try:
        return tuple(int(i) for i in processor.sample_frames(metadata, **kwargs))
    except (ValueError, ZeroDivisionError):
        return None


@pytest.mark.torchvision
@pytest.mark.parametrize("family", FAMILIES)
def test_real_preprocess_samples_the_frames_of_the_oracle_call(family):
    """``_real_indices`` is what a full ``preprocess`` call picks (its returned metadata), refusals included."""
    from transformers.video_utils import VideoMetadata

    for settings in ({"fps": 2}, {"num_frames": 4}):
        processor = _video_processor(family, **settings)
        for n_frames, native_fps in ((3, 5.0), (2, 5.0), (10, 29.97), (41, 15.1)):
            metadata = VideoMetadata(total_num_frames=n_frames, fps=native_fps, duration=n_frames / native_fps)
            video = torch.zeros((n_frames, 8, 8, 3), dtype=torch.uint8)  # a tensor: see _every_frame
            try:
                out = processor(videos=[video], video_metadata=[metadata], return_metadata=True)
                got = tuple(int(i) for i in out["video_metadata"][0].frames_indices)
            except (ValueError, ZeroDivisionError):
                got = None
            assert got == _real_indices(processor, n_frames, native_fps), (settings, n_frames, native_fps)


@pytest.mark.torchvision
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("settings", SETTINGS + ({"fps": 2, "initial_shift": False}, {"num_frames": 8, "initial_shift": 0.5}),
                         ids=str)  # fmt: skip
def test_frames_equal_the_real_video_processor_over_a_grid(family, settings):
    if family != "internvl" and "initial_shift" in settings:
        pytest.skip("initial_shift is InternVL's")
    processor = _video_processor(family, **settings)
    rule = (_internvl if family == "internvl" else _llava)(
        num_frames=settings.get("num_frames"), fps=float(settings["fps"]) if "fps" in settings else None,
        **({"initial_shift": settings["initial_shift"]} if "initial_shift" in settings else {}),
    )  # fmt: skip
    kept = refused = 0
    for native_fps in NATIVE_FPS:
        for n_frames in range(1, 401):
            expected = _real_indices(processor, n_frames, native_fps)
            try:
                got = rule.frames(n_frames, native_fps, part="v")
            except DropError as exc:
                assert expected is None, (n_frames, native_fps, str(exc))
                refused += 1
                continue
            assert got == expected, (n_frames, native_fps)
            kept += 1
    # refused: short videos under InternVL's fps rule (0 frames) and num_frames; LLaVA-OneVision's fps rule
    # (at least 1 frame) only where fps is above the video's own rate (1 fps)
    assert kept > 0 and (refused > 0) == (family == "internvl" or "num_frames" in settings or settings["fps"] > 1)


# -- end to end: vlmpack scan vs the real processor on real videos ------------------------------------------

# (frames, fps): 0.4 s to 4.2 s at 5 fps (the short ones: the shared sampler's 4-frame minimum would differ),
# and 4 s at 1 fps (fps 2 asks for more frames than it has)
CLIPS = ((2, 5), (3, 5), (4, 5), (5, 5), (7, 5), (9, 5), (13, 5), (21, 5), (4, 1))


def _clips_dataset(root: Path) -> Path:
    samples = []
    for index, (n_frames, fps) in enumerate(CLIPS):
        user = [{"type": "text", "text": "Look at this"}, {"type": "video", "video": "v.mp4"},
                {"type": "text", "text": "What moves?"}]  # fmt: skip
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": f"Clip {index}."}]
        samples.append(SyntheticSample(key=f"clip{index:02d}", json={"messages": messages},
                                       media={"v.mp4": video_bytes(n_frames, fps, 64, 48, seed=index)}))  # fmt: skip
    write_shard(root / "clips.tar", samples)
    return root


def _every_frame(data: bytes):
    """Every decoded frame (PyAV) as a tensor, and the video's ``VideoMetadata`` from its own stream. A tensor,
    not a numpy array: ``InternVLVideoProcessor`` indexes the video with its torch indices, and a numpy video
    indexed by one index loses its frame axis (the processor then fails on a one-frame sample)."""
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        rate = float(container.streams.video[0].average_rate)
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    return torch.from_numpy(frames), VideoMetadata(total_num_frames=len(frames), fps=rate, duration=len(frames) / rate)


@pytest.mark.torchvision
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("settings", [{"fps": 2}, {"num_frames": 4}], ids=str)
def test_scan_counts_equal_the_real_processor_sampling_itself(folder, tmp_path, family, settings):
    from transformers import AutoProcessor

    directory = folder(family, layout="transformers5", do_sample_frames=True, **settings)
    processor = AutoProcessor.from_pretrained(directory)
    assert processor.video_processor.do_sample_frames is True
    wds = _clips_dataset(tmp_path / "wds")
    config = scan_config(tmp_path, wds, directory)
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    samples = samples_in(wds)
    with Manifest(manifest_path(load_config(config).data.work_dir)) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    media_ids = {processor.image_token_id, getattr(processor, "video_token_id", None)} - {None}
    kept = dropped = 0
    for row in rows:
        conversation, parts = samples[row.key]
        text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        frames, metadata = _every_frame(parts["v.mp4"])
        try:  # the processor samples itself: do_sample_frames from its folder, the metadata of the video
            ids = processor(text=[text], videos=[frames], video_metadata=[metadata])["input_ids"][0]
        except (ValueError, ZeroDivisionError):
            assert row.status == "unsupported_media", (row.key, row.status)
            assert "do_sample_frames: true in the folder" in row.error and next(iter(settings)) in row.error
            dropped += 1
            continue
        ids = list(ids)
        assert row.status == "ok", (row.key, row.status, row.error)
        assert (row.token_len, row.media_tokens) == (len(ids), sum(ids.count(i) for i in media_ids)), row.key
        kept += 1
    assert kept >= 5 and dropped >= 1, (kept, dropped)
