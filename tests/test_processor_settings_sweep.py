"""Every processor setting a fast-path family meets is followed or refused (``families/settings_sweep.py``).

(a) every processor folder the repository builds (each family, both layouts, with and without video settings)
    loads: the sweep does not refuse what real folders carry;
(b) a key in none of the lists, in each place (image settings, video settings, ``processor_config.json``,
    ``model.processor_kwargs``), is a ``ConfigError`` naming the key, the place and the family; a pinned key at
    another value is one too, and a null value is the processor's default;
(c) the oracle (reference environment): each key of the shared "unchanged" list that the family's real processor
    accepts, set to another value, leaves the processor's ``input_ids`` length and its grids / pixel rows as
    they were, for two images (and a video for the families with video).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _families_table import ROWS
from PIL import Image

from vlmpack_offline.config import ModelConfig
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.families import FAST_FAMILIES
from vlmpack_offline.families.settings_sweep import FAMILY_KEYS, UNCHANGED
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens.rules import load_model_rules

# the folder builder's name for each family (qwen3_5 builds the Qwen3.5 folder)
BUILT = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm4v", "glm4v_moe", "glm46v", "internvl",
         "llava_onevision", "gemma3", "mistral3", "kimi_k25"]  # fmt: skip
NO_VIDEO = {r.model_type for r in ROWS if r.no_video}  # the conformance table's model types without video
_FOLDERS: dict[tuple[str, str, bool], Path] = {}


def folder(tmp_path_factory, family: str, layout: str = "hub", video: bool = False) -> Path:
    """One built folder per (family, layout, video) for the whole session."""
    key = (family, layout, video)
    if key not in _FOLDERS:
        _FOLDERS[key] = build_processor_dir(tmp_path_factory.mktemp(f"{family}-{layout}"), family, layout=layout,
                                            video=video)  # fmt: skip
    return _FOLDERS[key]


def copy_of(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def rules_of(path: Path, **kwargs):
    return load_model_rules(ModelConfig(processor_kwargs={"pretrained_model_name_or_path": str(path), **kwargs}))


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_every_fast_family_has_lists():
    assert set(FAMILY_KEYS) == set(FAST_FAMILIES)


@pytest.mark.parametrize("video", [False, True], ids=["images", "video"])
@pytest.mark.parametrize("layout", ["hub", "transformers5"])
@pytest.mark.parametrize("family", BUILT)
def test_built_folders_load(tmp_path_factory, family, layout, video):
    if video and family in NO_VIDEO:
        pytest.skip(f"{family} has no video processor")
    rules = rules_of(folder(tmp_path_factory, family, layout, video))
    assert rules.fast


# (b) one unknown key in each place: the error names the key, the place and the family
def test_unknown_key_in_the_image_settings_is_refused(tmp_path_factory, tmp_path):
    path = copy_of(folder(tmp_path_factory, "qwen2_5_vl"), tmp_path / "p")
    edit_json(path / "preprocessor_config.json", lambda d: d.update(do_pad=True))
    with pytest.raises(ConfigError, match=r"preprocessor_config.json: do_pad: qwen2_5_vl counts do not follow it"):
        rules_of(path)


def test_unknown_key_in_the_video_settings_is_refused(tmp_path_factory, tmp_path):
    path = copy_of(folder(tmp_path_factory, "qwen3_vl", video=True), tmp_path / "p")
    edit_json(path / "video_preprocessor_config.json", lambda d: d.update(num_frames=8))
    with pytest.raises(ConfigError, match=r"video_preprocessor_config.json: num_frames: qwen3_vl counts do not follow"):
        rules_of(path)


def test_unknown_key_in_a_processor_config_section_is_refused(tmp_path_factory, tmp_path):
    path = copy_of(folder(tmp_path_factory, "internvl", "transformers5", video=True), tmp_path / "p")
    edit_json(path / "processor_config.json", lambda d: d["video_processor"].update(max_frames=4))
    with pytest.raises(ConfigError, match=r"processor_config.json: video_processor.max_frames: internvl counts do not"):
        rules_of(path)
    path = copy_of(folder(tmp_path_factory, "gemma3", "transformers5"), tmp_path / "g")
    edit_json(path / "processor_config.json", lambda d: d["image_processor"].update(crop_size={"height": 8, "width": 8}))
    with pytest.raises(ConfigError, match=r"processor_config.json: image_processor.crop_size: gemma3 counts do not"):
        rules_of(path)


def test_unknown_key_at_the_processor_config_top_level_is_refused(tmp_path_factory, tmp_path):
    path = copy_of(folder(tmp_path_factory, "llava_onevision"), tmp_path / "p")
    edit_json(path / "processor_config.json", lambda d: d.update(num_additional_image_tokens=1))
    with pytest.raises(ConfigError, match=r"processor_config.json: num_additional_image_tokens: llava_onevision counts"):
        rules_of(path)


def test_unknown_processor_kwarg_is_refused(tmp_path_factory):
    path = folder(tmp_path_factory, "qwen2_5_vl")
    with pytest.raises(ConfigError, match=r"model.processor_kwargs.do_pad: qwen2_5_vl counts do not follow it \(it may "
                                          r"change the processor's output\); remove it, or report it"):  # fmt: skip
        rules_of(path, do_pad=True)
    with pytest.raises(ConfigError, match=r"model.processor_kwargs.fps: qwen2_5_vl counts do not follow it"):
        rules_of(path, fps=1)  # read by the video processor, not by the Qwen2.5-VL count
    with pytest.raises(ConfigError, match=r"model.processor_kwargs.max_num_crops: gemma3 counts do not follow it"):
        rules_of(folder(tmp_path_factory, "gemma3"), max_num_crops=4)


def test_pinned_key_at_another_value_is_refused(tmp_path_factory, tmp_path):
    path = copy_of(folder(tmp_path_factory, "qwen3_vl", "transformers5"), tmp_path / "p")
    edit_json(path / "processor_config.json", lambda d: d["image_processor"].update(do_resize=False))
    with pytest.raises(ConfigError, match=r"image_processor.do_resize is False: qwen3_vl counts assume do_resize: true"):
        rules_of(path)
    with pytest.raises(ConfigError, match=r"model.processor_kwargs.do_sample_frames is False: glm4v counts assume "
                                          r"do_sample_frames: true"):  # fmt: skip
        rules_of(folder(tmp_path_factory, "glm4v", video=True), do_sample_frames=False)


def test_unchanged_followed_and_null_keys_pass(tmp_path_factory, tmp_path):
    path = folder(tmp_path_factory, "qwen2_5_vl")
    assert rules_of(path, image_mean=[0, 0, 0], do_normalize=False, resample=0, trust_remote_code=False,
                    min_pixels=1024, do_pad=None).min_pixels == 1024  # fmt: skip
    glm = folder(tmp_path_factory, "glm4v", video=True)
    rules_of(glm, num_frames=8)  # GLM's video processor samples by fps alone: num_frames is never read


def test_slow_path_and_tokenizer_only_are_not_swept(tmp_path_factory):
    path = folder(tmp_path_factory, "qwen2_5_vl")
    model = ModelConfig(processor_loader="auto_tokenizer",
                        processor_kwargs={"pretrained_model_name_or_path": str(path), "do_pad": True})  # fmt: skip
    assert load_model_rules(model).text_only


# (c) the oracle: every shared "unchanged" key the real processor accepts leaves its output lengths alone
# another value for each key (the folders hold the processor's defaults, or nothing)
_OTHER = {
    "do_normalize": False, "image_mean": [0.1, 0.2, 0.3], "image_std": [0.9, 0.8, 0.7], "do_rescale": False,
    "rescale_factor": 1 / 127, "do_convert_rgb": False, "resample": 0, "data_format": "channels_first",
    "input_data_format": "channels_last", "device": "cpu", "disable_grouping": True, "return_metadata": True,
}  # fmt: skip
_LENGTHS = ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "image_sizes", "num_crops",
            "image_num_patches", "batch_num_images")  # fmt: skip
# the folder each family's oracle loads (hub files; the processor class is the family's)
_ORACLE = {"qwen2_5_vl": True, "qwen3_vl": True, "glm4v": True, "glm46v": True, "internvl": True,
           "llava_onevision": True, "gemma3": False, "mistral3": False, "kimi_k25": True}  # fmt: skip


def _shape(value):
    if hasattr(value, "shape"):
        return tuple(value.shape[:1]) if value.ndim > 2 else tuple(value.shape)  # rows; grids / sizes whole
    return len(value) if isinstance(value, (list, tuple)) else value


def _lengths(processor, images, video, **kwargs) -> dict:
    """len(input_ids) and the row counts of the vision fields for one sample of the processor's own template."""
    content = [{"type": "image"} for _ in images] + ([{"type": "video"}] if video is not None else [])
    text = processor.apply_chat_template([{"role": "user", "content": [*content, {"type": "text", "text": "Hi"}]}],
                                         tokenize=False)  # fmt: skip
    call = {"text": [text], "images": images, "return_tensors": "pt", **kwargs}
    if video is not None:
        from transformers.video_utils import VideoMetadata

        frames, fps = video
        call |= {"videos": [frames], "do_sample_frames": False,
                 "video_metadata": [VideoMetadata(total_num_frames=len(frames), fps=fps, duration=len(frames) / fps,
                                                  frames_indices=list(range(len(frames))))]}  # fmt: skip
    out = processor(**call)
    lengths = {"input_ids": out["input_ids"].shape[-1]}
    lengths |= {name: _shape(out[name]) for name in _LENGTHS if name in out}
    for name in ("image_grid_thw", "video_grid_thw", "image_sizes"):
        if name in out:
            lengths[name] = [list(map(int, row)) for row in out[name].reshape(-1, out[name].shape[-1])]
    return lengths


def _accepted(part) -> set[str]:
    return set(getattr(part, "valid_kwargs", dict).__annotations__) | {"return_tensors"} if part is not None else set()


@pytest.mark.torchvision
@pytest.mark.parametrize("family", sorted(_ORACLE))
def test_unchanged_keys_leave_the_real_processor_lengths(tmp_path_factory, family):
    from transformers import AutoProcessor

    path = folder(tmp_path_factory, family, video=_ORACLE[family])
    processor = AutoProcessor.from_pretrained(path)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in ((60, 90), (33, 47))]
    video = (rng.integers(0, 255, (4, 56, 84, 3), dtype=np.uint8), 2.0) if _ORACLE[family] else None
    before = _lengths(processor, images, video)
    accepted = _accepted(processor.image_processor) | _accepted(getattr(processor, "video_processor", None))
    keys = sorted(UNCHANGED & accepted & set(_OTHER))
    assert {"image_mean", "do_normalize", "resample", "do_convert_rgb"} <= set(keys), keys
    for key in keys:
        changed = AutoProcessor.from_pretrained(path, **{key: _OTHER[key]})
        assert _lengths(changed, images, video) == before, f"{family}: {key}={_OTHER[key]!r} changed the output"


@pytest.mark.torchvision
def test_the_oracle_sees_a_key_that_changes_the_lengths(tmp_path_factory):
    """The comparison above can fail: a followed size key (max_pixels) changes what it compares."""
    from transformers import AutoProcessor

    path = folder(tmp_path_factory, "qwen2_5_vl", video=True)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (280, 420, 3), dtype=np.uint8))]
    video = (rng.integers(0, 255, (4, 280, 420, 3), dtype=np.uint8), 2.0)
    before = _lengths(AutoProcessor.from_pretrained(path), images, video)
    smaller = AutoProcessor.from_pretrained(path, max_pixels=28 * 28 * 16, min_pixels=28 * 28 * 4)
    assert _lengths(smaller, images, video) != before


@pytest.mark.torchvision
@pytest.mark.parametrize(
    ("family", "part"),
    [("qwen2_5_vl", "Qwen2VLImageProcessor"), ("qwen2_5_vl", "Qwen2VLVideoProcessor"), ("qwen3_vl", "Qwen3VLVideoProcessor"),
     ("glm4v", "Glm4vImageProcessor"), ("glm4v", "Glm4vVideoProcessor"), ("internvl", "GotOcr2ImageProcessor"),
     ("internvl", "InternVLVideoProcessor"), ("llava_onevision", "LlavaOnevisionImageProcessor"),
     ("llava_onevision", "LlavaOnevisionVideoProcessor"), ("gemma3", "Gemma3ImageProcessor"),
     ("mistral3", "PixtralImageProcessor")],
)  # fmt: skip
def test_what_transformers_itself_saves_passes(tmp_path, family, part):
    """A folder written by the real class's save_pretrained (every attribute it keeps) is not refused."""
    import transformers

    from vlmpack_offline.families.settings_sweep import check_settings
    from vlmpack_offline.model_type import read_json

    getattr(transformers, part)().save_pretrained(tmp_path)
    check_settings(family, tmp_path, {}, read_json)
