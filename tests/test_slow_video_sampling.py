"""The slow path samples each video as the family's own processor does (``families/processor_frames.processor_rule``).

Oracle, not our code: the real processor (``AutoProcessor`` of the folder, in ``.venv-ref``) called the way a
user's pipeline calls it on a whole video: every decoded frame (PyAV, in presentation order) with the video's
``VideoMetadata`` from its own stream header (frame count, ``average_rate``, ``frames_indices`` every frame, as
transformers' ``load_video`` records when it does not sample), and the processor's own settings: it samples
itself where they say ``do_sample_frames`` (``return_metadata=True`` hands back the frames it took). For every
slow-path video family with a processor folder, over clips of many lengths and frame rates
(``synthetic/videos.py``) and a setting of each rule, the slow path must give:

- the processor's own token count (``token_len``, media tokens) for the whole sample;
- its refusals (Gemma4's 32 frames of a shorter clip) as ``unsupported_media`` drops naming the rule and numbers;
- a sampling record (``VideoSampling``: what the loader decodes) of the frames the processor took, whose
  ``decode_frames`` pixels are those frames.

Folders: ``synthetic.processor_dir.build_processor_dir`` where a family's builder module exists
(``FOLDER_MODULES``), else the real processor classes' own ``save_pretrained`` (class defaults, the Qwen BPE with
the family's tokens, a template that renders the processor's placeholders), as the issue-39 survey built them.
In the core environment: ``video:`` fields the processor's rule never reads are refused before anything loads.
"""

from __future__ import annotations

import importlib
import io
import json
import shutil
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import load_config
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.media import decode_frames
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES, build_processor_dir, tokenizer_files_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard
from vlmpack_offline.synthetic.videos import VideoSpec, encode
from vlmpack_offline.tokens import load_model_rules
from vlmpack_offline.tokens.slow import SlowCounter, video_metadata

# counts do not depend on the loss; train_on all spares the templates' assistant-span search (not under test)
_ALL = {"train_on": "all"}

TYPES = ("gemma4", "glm5_next", "molmo2", "ernie4_5_vl_moe", "lfm3_vl", "qwen3_omni_moe")

# (frames per second, seconds): 6 .. 100 frames, 0.5 s .. 12 s at 1 .. 30 fps, below and above each rule's thresholds (Gemma4's
# 32 frames, Ernie's 16 .. 180, Molmo2's 2 fps cap, Qwen3-VL's 4-frame minimum, GLM's even count)
CLIPS = ((10, 1), (30, 1), (8, 2.5), (15, 2), (24, 1.5), (5, 7), (1, 12), (25, 4), (30, 3), (12, 0.5), (2, 9),
         (29.97, 2), (20, 3))

# one setting of each rule beside its defaults, as model.processor_kwargs (from_pretrained hands them to the
# video processor); qwen3_omni_moe's turns its sampling on (Qwen2VLVideoProcessor's default takes every frame)
SETTINGS = {
    "gemma4": {"num_frames": 8}, "glm5_next": {"fps": 1}, "molmo2": {"num_frames": 6},
    "ernie4_5_vl_moe": {"fps": 1}, "lfm3_vl": {"do_sample_frames": False},
    "qwen3_omni_moe": {"do_sample_frames": True, "fps": 1},
}  # fmt: skip


# -- folders -----------------------------------------------------------------------------------------------

_TEMPLATE = (  # the processor's own placeholders, so its call finds one per media item
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'video' %}VIDEO{% elif c['type'] == 'image' %}IMAGE"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
)
# tokenizer attribute -> token, as the survey's folders name them; video / image placeholder per type
_NAMES = {
    "gemma4": {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
               "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"},
    "glm5_next": {},
    "molmo2": {"image_token": "<|image|>", "video_token": "<|video|>"},
    "ernie4_5_vl_moe": {"image_token": "<|IMAGE_PLACEHOLDER|>", "image_start_token": "<|IMAGE_START|>",
                        "image_end_token": "<|IMAGE_END|>", "video_token": "<|VIDEO_PLACEHOLDER|>",
                        "video_start_token": "<|VIDEO_START|>", "video_end_token": "<|VIDEO_END|>"},
    "lfm3_vl": {},
    "qwen3_omni_moe": {"image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>", "audio_token": "<|AUDIO|>",
                       "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
                       "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"},
}  # fmt: skip
_EXTRA = {
    "gemma4": ["<|video|>"],
    "glm5_next": ["<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
                  "<|end_of_video|>"],
    "molmo2": ["<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>", "<frame_start>", "<im_end>",
               "<frame_end>", "<im_low>"],
    "lfm3_vl": ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"],
}  # fmt: skip
_PLACEHOLDER = {"gemma4": "<|video|>", "glm5_next": "<|begin_of_video|><|video|><|end_of_video|>",
                "molmo2": "<|video|>", "ernie4_5_vl_moe": "<|VIDEO_START|><|VIDEO_PLACEHOLDER|><|VIDEO_END|>",
                "lfm3_vl": "<|video_pad|>", "qwen3_omni_moe": "<|vision_bos|><|VIDEO|><|vision_eos|>"}  # fmt: skip


def _parts(model_type: str, tokenizer):
    """The real classes of each part, class defaults (Ernie's drawn timestamps off: they need a font file)."""
    import transformers

    def cls(module: str, name: str):
        return getattr(importlib.import_module(f"transformers.models.{module}"), name)

    qwen_image = cls("qwen2_vl.image_processing_pil_qwen2_vl", "Qwen2VLImageProcessorPil")
    return {
        "gemma4": lambda: transformers.Gemma4Processor(
            feature_extractor=cls("gemma4.feature_extraction_gemma4", "Gemma4AudioFeatureExtractor")(),
            image_processor=cls("gemma4.image_processing_pil_gemma4", "Gemma4ImageProcessorPil")(),
            video_processor=cls("gemma4.video_processing_gemma4", "Gemma4VideoProcessor")(), tokenizer=tokenizer),
        "glm5_next": lambda: transformers.Glm5NextProcessor(
            image_processor=cls("glm5_next.image_processing_pil_glm5_next", "Glm5NextImageProcessorPil")(),
            video_processor=cls("glm5_next.video_processing_glm5_next", "Glm5NextVideoProcessor")(), tokenizer=tokenizer),
        "molmo2": lambda: transformers.Molmo2Processor(
            image_processor=cls("molmo2.image_processing_molmo2", "Molmo2ImageProcessor")(),
            video_processor=cls("molmo2.video_processing_molmo2", "Molmo2VideoProcessor")(), tokenizer=tokenizer),
        "ernie4_5_vl_moe": lambda: transformers.Ernie4_5_VLMoeProcessor(
            image_processor=cls("ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe",
                                "Ernie4_5_VLMoeImageProcessorPil")(),
            video_processor=cls("ernie4_5_vl_moe.video_processing_ernie4_5_vl_moe",
                                "Ernie4_5_VLMoeVideoProcessor")(draw_on_frames=False), tokenizer=tokenizer),
        "lfm3_vl": lambda: transformers.Lfm3VlProcessor(
            image_processor=qwen_image(),
            video_processor=cls("qwen3_vl.video_processing_qwen3_vl", "Qwen3VLVideoProcessor")(), tokenizer=tokenizer),
        "qwen3_omni_moe": lambda: transformers.Qwen3OmniMoeProcessor(
            image_processor=qwen_image(),
            video_processor=cls("qwen2_vl.video_processing_qwen2_vl", "Qwen2VLVideoProcessor")(),
            feature_extractor=transformers.WhisperFeatureExtractor(), tokenizer=tokenizer),
    }[model_type]()  # fmt: skip


def _saved_folder(target: Path, model_type: str, layout: str) -> Path:
    """The real classes' ``save_pretrained`` (transformers5 layout: one processor_config.json), or the hub
    layout's split files made from it."""
    from transformers import AutoTokenizer

    target.mkdir(parents=True)
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_files_dir() / name, target / name)
    tokenizer = AutoTokenizer.from_pretrained(target, model_max_length=1_000_000)
    names = _NAMES[model_type]
    tokenizer.add_special_tokens({"additional_special_tokens": [*names.values(), *_EXTRA.get(model_type, [])]})
    tokenizer.save_pretrained(target)
    config = json.loads((target / "tokenizer_config.json").read_text())
    extra = config.get("extra_special_tokens")
    config["extra_special_tokens"] = {**(extra if isinstance(extra, dict) else {}), **names}  # a list names none
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    processor = _parts(model_type, AutoTokenizer.from_pretrained(target))
    processor.chat_template = _TEMPLATE.replace("VIDEO", _PLACEHOLDER[model_type])
    processor.save_pretrained(target)
    if layout == "hub":  # video settings in their own file, as hub folders keep them
        nested = json.loads((target / "processor_config.json").read_text())
        video = nested.pop("video_processor")
        (target / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
        (target / "processor_config.json").write_text(json.dumps(nested, indent=2))
    (target / "config.json").write_text(json.dumps({"model_type": model_type}))
    return target


def _folder(target: Path, model_type: str, layout: str) -> Path:
    if model_type in FOLDER_MODULES:
        return build_processor_dir(target, model_type, layout=layout, video=True)
    return _saved_folder(target, model_type, layout)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made: dict = {}

    def get(model_type: str, layout: str = "transformers5") -> Path:
        if (model_type, layout) not in made:
            made[model_type, layout] = _folder(tmp_path_factory.mktemp(model_type) / layout, model_type, layout)
        return made[model_type, layout]

    return get


# -- the oracle: the processor's own call on the whole video ------------------------------------------------


def _whole_video(data: bytes):
    """Every frame PyAV decodes (a tensor: a numpy video indexed by one torch index loses its frame axis) and
    the ``VideoMetadata`` of the stream header, with every frame's index (transformers' ``load_video`` records
    so when it takes every frame; a processor that samples replaces them)."""
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        rate = float(container.streams.video[0].average_rate)
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    n = len(frames)
    height, width = frames.shape[1:3]
    metadata = VideoMetadata(total_num_frames=n, fps=rate, duration=n / rate, width=width, height=height,
                             frames_indices=list(range(n)))  # fmt: skip
    return torch.from_numpy(frames), metadata


def _media_ids(processor) -> set[int]:
    ids = set()
    for kind in ("image", "video"):
        listed = getattr(processor, f"{kind}_token_ids", None)
        ids.update(listed if isinstance(listed, list | tuple) else [getattr(processor, f"{kind}_token_id", None)])
    return {i for i in ids if isinstance(i, int)}


def _call(processor, text: str, frames, metadata, **kwargs) -> dict:
    """The processor's output for one sample with one video: ``input_ids`` and every tensor the model takes."""
    out = processor(text=[text], videos=[frames], video_metadata=[metadata], return_tensors="pt", **kwargs)
    return dict(out)


def _oracle(processor, text: str, data: bytes):
    """``_call`` of the processor sampling the whole video itself (its own settings), or the exception it raised."""
    frames, metadata = _whole_video(data)
    try:
        return _call(processor, text, frames, metadata)
    except (ValueError, ZeroDivisionError) as exc:
        return exc


def _sample(index: int, data: bytes):
    messages = [{"role": "user", "content": [{"type": "text", "text": "Look."}, {"type": "video", "video": "v.mp4"},
                                             {"type": "text", "text": "What moves?"}]},
                {"role": "assistant", "content": f"Clip {index}."}]  # fmt: skip
    return messages, parse_conversation(json.dumps({"messages": messages}).encode(), key=f"k{index}", parts=["v.mp4"])


def _clips():
    return [encode(VideoSpec(fps=fps, seconds=seconds, width=64, height=48), seed=i) for i, (fps, seconds) in
            enumerate(CLIPS)]  # fmt: skip


@pytest.fixture(scope="module")
def clips():
    return _clips()


# -- counts, refusals and the loader's frames vs the processor sampling itself ------------------------------


def _slow(config) -> SlowCounter:
    """The slow path, also where the generic fast path would take the folder (``make_counter``'s choice)."""
    return SlowCounter(load_model_rules(config.model, config.video), config)


@pytest.mark.torchvision
@pytest.mark.parametrize("settings", ["defaults", "set"])
@pytest.mark.parametrize("model_type", TYPES)
def test_counts_refusals_and_frames_equal_the_processor_sampling_itself(folders, clips, make_config, model_type,
                                                                       settings):  # fmt: skip
    from transformers import AutoProcessor

    kwargs = SETTINGS[model_type] if settings == "set" else {}
    directory = folders(model_type)
    processor = AutoProcessor.from_pretrained(directory, **kwargs)
    config = make_config(wds_dir="unused", processor_dir=directory, loss=_ALL,
                         model={"processor_kwargs": {"pretrained_model_name_or_path": str(directory), **kwargs}})
    counter = _slow(config)
    media_ids = _media_ids(processor)
    kept = refused = 0
    for index, data in enumerate(clips):
        messages, conversation = _sample(index, data)
        text = processor.apply_chat_template(messages, tokenize=False)
        expected = _oracle(processor, text, data)
        try:
            media = [counter.probe("video", data, part="v.mp4")]
        except DropError as exc:
            assert isinstance(expected, Exception), (index, str(exc))
            assert exc.reason == Reason.UNSUPPORTED_MEDIA and "v.mp4" in str(exc)
            frames_said = f"{expected_frames(data)} frames"
            assert counter.frame_rule.processor in str(exc) and frames_said in str(exc), str(exc)
            refused += 1
            continue
        assert not isinstance(expected, Exception), (index, repr(expected))
        ids = expected["input_ids"][0].tolist()
        count = counter.count(conversation, media)
        assert (count.token_len, count.media_tokens) == (len(ids), sum(i in media_ids for i in ids)), index
        # the hand-off to the loader: the frames it decodes (those the processor took), given to the processor
        # as already sampled, make the same model inputs as the processor sampling the whole video itself
        sampling = media[0].video.sampling
        frames = decode_frames(data, sampling)
        assert np.array_equal(frames, _whole_video(data)[0].numpy()[list(sampling.frame_indices)]), index
        handed = _call(processor, text, frames, video_metadata(sampling), do_sample_frames=False)
        assert handed.keys() == expected.keys(), index
        for name, value in expected.items():
            assert torch.equal(handed[name], value), (index, name)
        kept += 1
    assert kept >= 5, (kept, refused)
    if model_type == "gemma4":  # its fixed frame count (32, or 8 set) refuses the shorter clips
        assert refused > 0


def expected_frames(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as container:
        return sum(1 for _ in container.decode(video=0))


@pytest.mark.torchvision
@pytest.mark.parametrize("model_type", ["gemma4", "qwen3_omni_moe"])
def test_hub_layout_samples_as_the_transformers5_layout(folders, clips, make_config, model_type):
    """The rule comes from the loaded processor, so both folder layouts give the same frames."""
    frames = {}
    for layout in ("hub", "transformers5"):
        directory = folders(model_type, layout)
        counter = _slow(make_config(wds_dir="unused", processor_dir=directory, loss=_ALL))
        frames[layout] = []
        for data in clips:
            try:
                frames[layout].append(counter.probe("video", data, part="v").video.sampling.frame_indices)
            except DropError as exc:
                frames[layout].append(exc.reason)
    assert frames["hub"] == frames["transformers5"]


@pytest.mark.torchvision
def test_qwen3_omni_takes_its_class_video_size_over_the_folder(folders, make_config):
    """``Qwen3OmniMoeProcessor.videos_kwargs`` (size 128*32*32 .. 768*32*32) wins over the video processor's saved
    size, as the processor's own call merges them: a folder with another size counts the same tokens."""
    from transformers import AutoProcessor

    base = folders("qwen3_omni_moe")
    other = base.parent / "other-size"
    shutil.copytree(base, other)
    settings = json.loads((other / "processor_config.json").read_text())
    settings["video_processor"]["size"] = {"shortest_edge": 3136, "longest_edge": 50176}
    (other / "processor_config.json").write_text(json.dumps(settings, indent=2))
    data = encode(VideoSpec(fps=4, seconds=2, width=320, height=240))
    counts = []
    for directory in (base, other):
        processor = AutoProcessor.from_pretrained(directory)
        counter = _slow(make_config(wds_dir="unused", processor_dir=directory, loss=_ALL))
        messages, conversation = _sample(0, data)
        count = counter.count(conversation, [counter.probe("video", data, part="v.mp4")])
        expected = _oracle(processor, processor.apply_chat_template(messages, tokenize=False), data)
        assert count.token_len == expected["input_ids"].shape[1]
        counts.append(count.token_len)
    assert counts[0] == counts[1]


# -- end to end: refusals are recorded drops ----------------------------------------------------------------


@pytest.mark.torchvision
def test_scan_records_gemma4_short_clips_as_drops_naming_the_rule(folders, tmp_path):
    from _family_kit import scan_config

    directory = folders("gemma4")
    samples = []
    for index, (fps, seconds) in enumerate(((10, 2), (10, 4), (24, 1))):  # 20, 40 and 24 frames
        messages, _ = _sample(index, b"")
        data = encode(VideoSpec(fps=fps, seconds=seconds, width=64, height=48), seed=index)
        samples.append(SyntheticSample(key=f"clip{index}", json={"messages": messages}, media={"v.mp4": data}))
    write_shard(tmp_path / "wds" / "clips.tar", samples)
    config = scan_config(tmp_path, tmp_path / "wds", directory, sections={"loss": _ALL})
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    with Manifest(manifest_path(load_config(config).data.work_dir)) as manifest:
        rows = {row.key: row for row in manifest.iter_samples()}
    assert rows["clip1"].status == "ok"
    for key, frames in (("clip0", 20), ("clip2", 24)):
        assert rows[key].status == "unsupported_media", (key, rows[key].status, rows[key].error)
        error = rows[key].error
        assert "Gemma4VideoProcessor.sample_frames" in error and "num_frames 32" in error, error
        assert f"{frames} frames" in error and "do_sample_frames: true in the folder" in error, error
        assert "exceeds" in error, error  # the processor's own words


# -- config time --------------------------------------------------------------------------------------------


def test_video_fields_of_a_processor_family_are_refused_before_loading(tmp_path, make_config):
    """gemma4 has no module: its videos are sampled by its processor's own rule (on the generic path or the slow
    one), which reads no ``video:`` field but the reader: one set would silently not apply."""
    directory = build_processor_dir(tmp_path / "gemma4", "gemma4", layout="transformers5", video=True)
    for video in ({"fps": 1.0}, {"max_frames": 8, "reader": "pyav"}, {"min_pixels": 3136}):
        config = make_config(wds_dir="unused", processor_dir=directory, video=video)
        with pytest.raises(ConfigError) as caught:
            load_model_rules(config.model, config.video)
        said = str(caught.value)
        assert all(f"video.{name}" in said for name in video if name != "reader"), said
        # the generic path's rule is the processor's own: the message names it, not a sampler it does not use
        assert "Gemma4VideoProcessor.sample_frames" in said and "qwen_vl_utils" not in said, said
    config = make_config(wds_dir="unused", processor_dir=directory, video={"reader": "decord"})
    assert load_model_rules(config.model, config.video).video.reader == "decord"


@pytest.mark.torchvision
def test_the_slow_path_refuses_video_fields_naming_its_processors_rule(folders, make_config):
    directory = folders("gemma4")
    for video in ({"fps": 1.0}, {"max_frames": 8, "sampler": "hf_processor"}, {"sampler": "qwen_vl_utils"}):
        config = make_config(wds_dir="unused", processor_dir=directory, video=video)
        with pytest.raises(ConfigError) as caught:
            SlowCounter(load_model_rules(config.model), config)  # the rules without video: its own check
        said = str(caught.value)
        assert "Gemma4VideoProcessor.sample_frames" in said and "num_frames 32" in said, said
        assert all(f"video.{name}" in said for name in video if video[name] != "hf_processor"), said
    config = make_config(wds_dir="unused", processor_dir=directory, loss=_ALL, video={"reader": "pyav"})
    assert _slow(config).reader == "pyav"
