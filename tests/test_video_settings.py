"""Video settings per family and from the processor folder, checked against the recipes they copy.

Two oracles that are not our code:

- Qwen's qwen-vl-utils recipe (``fetch_video`` + ``smart_nframes``, version 0.0.14). The PyPI
  package imports torchvision at module level, so it cannot be imported here; its documented
  constants and formulas are written out below (``_qwen_vl_utils_recipe``), with transformers'
  ``smart_resize`` (the same function qwen-vl-utils ships) for the resize. Hand-checked
  golden numbers pin the constants. In ``.venv-ref`` (torchvision) the real package runs: its
  ``smart_nframes`` on the metadata cases, and its ``fetch_video`` (decord) on real clips, whose frames and
  size, fed to the real ``AutoProcessor`` (Qwen3-VL, Qwen3.5) as Qwen's model cards do, give the count.
- transformers' own ``Qwen3VLVideoProcessor`` loaded from the folder (hub
  ``video_preprocessor_config.json`` and transformers-5 ``processor_config.json``): its real
  ``sample_frames`` gives the frame indices; its ``resize`` needs torchvision, so the size comes
  from transformers' Qwen3-VL video ``smart_resize`` called with the loaded processor's values, and the
  prompt from the real ``Qwen3VLProcessor.replace_video_token``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from transformers import Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as video_smart_resize
from transformers.video_utils import VideoMetadata

from vlmpack_offline.media import VideoInfo, sample_video
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import video_bytes
from vlmpack_offline.tokens import VideoMedia, load_model_rules, make_counter

# qwen-vl-utils 0.0.14 vision_process.py module constants
VIDEO_MIN_TOKEN_NUM, VIDEO_MAX_TOKEN_NUM, MODEL_SEQ_LEN = 128, 768, 128000
FPS, FRAME_FACTOR, FPS_MIN_FRAMES, FPS_MAX_FRAMES = 2.0, 2, 4, 768

# (n_frames, native fps, height, width): short, long, portrait, tiny, 4K, odd fps, an odd HF frame count (7)
VIDEOS = [(48, 24.0, 480, 640), (9000, 30.0, 1080, 1920), (300, 29.97, 1280, 720), (20, 10.0, 36, 48),
          (1200, 60.0, 2160, 3840), (77, 12.5, 360, 202), (35, 10.0, 240, 320)]  # fmt: skip


def _qwen_vl_utils_recipe(n_frames: int, fps: float, height: int, width: int, patch: int) -> tuple[int, int, int]:
    """(nframes, resized_height, resized_width) as ``fetch_video(ele={"video": ...}, image_patch_size=patch)``."""
    factor = patch * 2  # image_factor = image_patch_size * SPATIAL_MERGE_SIZE
    min_frames = math.ceil(FPS_MIN_FRAMES / FRAME_FACTOR) * FRAME_FACTOR
    max_frames = math.floor(min(FPS_MAX_FRAMES, n_frames) / FRAME_FACTOR) * FRAME_FACTOR
    nframes = min(min(max(n_frames / fps * FPS, min_frames), max_frames), n_frames)
    nframes = math.floor(nframes / FRAME_FACTOR) * FRAME_FACTOR
    min_pixels = VIDEO_MIN_TOKEN_NUM * factor * factor
    total_pixels = MODEL_SEQ_LEN * factor * factor * 0.9
    max_pixels = max(min(VIDEO_MAX_TOKEN_NUM * factor * factor, total_pixels / nframes * FRAME_FACTOR),
                     int(min_pixels * 1.05))  # fmt: skip
    h, w = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    return nframes, h, w


def _config(make_config, directory, **video):
    return make_config(wds_dir="unused", processor_dir=directory, video=video)


@pytest.mark.parametrize(
    ("family", "expected"),
    [("qwen2_5_vl", (100352, 602112, 90316800)), ("qwen3_vl", (131072, 786432, 117964800))],
)
def test_family_defaults_are_the_qwen_vl_utils_ones_for_its_patch(tmp_path, make_config, family, expected):
    # 128 / 768 tokens of (patch*2)**2 pixels per frame, 128000 * (patch*2)**2 * 0.9 in all: patch 14 vs 16
    rules = load_model_rules(_config(make_config, build_processor_dir(tmp_path, family)).model)
    video = rules.video
    assert (video.min_pixels, video.max_pixels, video.total_pixels) == expected
    assert (video.fps, video.min_frames, video.max_frames, video.sampler) == (2.0, 4, 768, "qwen_vl_utils")


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_sampler_with_family_defaults_equals_the_qwen_vl_utils_recipe(tmp_path, make_config, family):
    rules = load_model_rules(_config(make_config, build_processor_dir(tmp_path, family)).model)
    for n_frames, fps, height, width in VIDEOS:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        got = sample_video(info, rules.video, factor=rules.factor, temporal_factor=rules.temporal_patch_size)
        nframes, h, w = _qwen_vl_utils_recipe(n_frames, fps, height, width, rules.patch_size)
        assert (got.n_frames, got.resized_height, got.resized_width) == (nframes, h, w), (n_frames, fps, height, width)
        assert got.frame_indices == tuple(int(i) for i in np.linspace(0, n_frames - 1, nframes).round())


def test_qwen3_golden_case_hand_checked(tmp_path, make_config):
    # 10 s of 1080p at 30 fps -> 2 fps = 20 frames; per-frame cap min(768*32*32, 117964800/20*2) = 786432;
    # 1080x1920 -> beta = sqrt(1080*1920/786432) = 1.6238 -> floor(665.1/32)*32 = 640, floor(1182.4/32)*32 = 1152
    rules = load_model_rules(_config(make_config, build_processor_dir(tmp_path, "qwen3_vl")).model)
    info = VideoInfo(n_frames=300, native_fps=30.0, height=1080, width=1920, backend="decord")
    got = sample_video(info, rules.video, factor=rules.factor)
    assert (got.n_frames, got.resized_height, got.resized_width) == (20, 640, 1152)


@pytest.fixture(params=["hub", "transformers5"])
def qwen3_video_dir(request, tmp_path):
    """A Qwen3-VL folder with the video processor settings, in either layout."""
    return build_processor_dir(tmp_path / request.param, "qwen3_vl", layout=request.param, video=True)


def test_qwen3_folder_video_settings_give_the_hf_video_processor_frames_and_tokens(qwen3_video_dir, make_config):
    counter = make_counter(_config(make_config, qwen3_video_dir))
    video_processor = Qwen3VLVideoProcessor.from_pretrained(qwen3_video_dir)  # reads either layout itself
    assert counter.rules.video.sampler == "hf_processor"
    assert (counter.rules.video.min_pixels, counter.rules.video.max_pixels) == (
        video_processor.size.shortest_edge,
        video_processor.size.longest_edge,
    )
    image_only = type("P", (Qwen3VLProcessor,), {"get_attributes": classmethod(lambda c: ["image_processor", "tokenizer"])})
    processor = image_only(
        image_processor=Qwen2VLImageProcessorPil.from_pretrained(qwen3_video_dir),
        tokenizer=counter.tokenizer,
        chat_template=counter.tokenizer.chat_template,
    )
    processor.video_processor = video_processor  # replace_video_token reads merge/temporal sizes from it
    for n_frames, fps, height, width in VIDEOS:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        got = sample_video(info, counter.rules.video, factor=counter.rules.factor)
        metadata = VideoMetadata(total_num_frames=n_frames, fps=fps)
        indices = [int(i) for i in video_processor.sample_frames(metadata)]
        h, w = video_smart_resize(
            num_frames=len(indices), height=height, width=width,
            temporal_factor=video_processor.temporal_patch_size,
            factor=video_processor.patch_size * video_processor.merge_size,
            min_pixels=video_processor.size.shortest_edge, max_pixels=video_processor.size.longest_edge,
        )  # fmt: skip
        padded = indices + [indices[-1]] * (len(indices) % 2)  # patchify repeats the last frame
        assert got.frame_indices == tuple(padded) and (got.resized_height, got.resized_width) == (h, w)
        grid = np.array([[math.ceil(len(indices) / 2), h // 16, w // 16]])
        metadata.frames_indices = indices
        text = processor.replace_video_token({"video_grid_thw": grid, "video_metadata": [metadata]}, 0)
        expected = counter.tokenizer(text, add_special_tokens=False)["input_ids"]
        size = counter.expander.replacement_size(VideoMedia(sampling=got))
        assert size.tokens == len(expected)
        assert counter.tokenizer(counter.expander.replacement_text(VideoMedia(sampling=got)),
                                 add_special_tokens=False)["input_ids"] == expected  # fmt: skip


def test_config_video_values_win_over_the_folder(qwen3_video_dir, make_config):
    data = video_bytes(24, 12, 96, 64)
    folder = make_counter(_config(make_config, qwen3_video_dir)).probe("video", data, part="v.mp4")
    fewer = make_counter(_config(make_config, qwen3_video_dir, max_frames=4)).probe("video", data, part="v.mp4")
    assert folder.sampling.n_frames == 4 and fewer.sampling.n_frames == 4  # 2 s at 2 fps, either way
    slower = make_counter(_config(make_config, qwen3_video_dir, fps=1.0, min_frames=2)).probe("video", data)
    assert slower.sampling.n_frames == 2
    # the recipe instead of the folder: per-frame bounds 131072..786432, frames rounded to pairs
    recipe = make_counter(_config(make_config, qwen3_video_dir, sampler="qwen_vl_utils")).probe("video", data)
    nframes, h, w = _qwen_vl_utils_recipe(24, 12.0, 64, 96, 16)
    assert (recipe.sampling.n_frames, recipe.sampling.resized_height, recipe.sampling.resized_width) == (nframes, h, w)
    tighter = make_counter(
        _config(make_config, qwen3_video_dir, sampler="qwen_vl_utils", min_pixels=32 * 32 * 4, max_pixels=32 * 32 * 8)
    ).probe("video", data)
    assert tighter.sampling.resized_height * tighter.sampling.resized_width <= 32 * 32 * 8


def test_transformers5_folder_without_preprocessor_config_counts_on_the_fast_path(tmp_path, make_config):
    directory = build_processor_dir(tmp_path, "qwen2_5_vl", layout="transformers5", video=True)
    assert not (directory / "preprocessor_config.json").exists()
    rules = load_model_rules(_config(make_config, directory).model)
    assert rules.fast and (rules.patch_size, rules.min_pixels, rules.max_pixels) == (14, 3136, 12845056)
    assert (rules.video.min_pixels, rules.video.max_pixels, rules.video.sampler) == (100352, 602112, "qwen_vl_utils")


# -- the real qwen-vl-utils (PyPI, imports torchvision): .venv-ref only -----------------------------------------
# (n_frames, fps, width, height) of real clips for fetch_video: short, odd count, 25 fps, 4:3, 16:9
CLIPS = [(30, 10, 96, 64), (7, 5, 64, 48), (100, 25, 160, 90), (9, 3, 320, 240), (61, 30, 128, 72)]


@pytest.mark.torchvision
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_sampler_frame_counts_equal_the_real_smart_nframes(tmp_path, make_config, family):
    from qwen_vl_utils.vision_process import smart_nframes

    rules = load_model_rules(_config(make_config, build_processor_dir(tmp_path, family)).model)
    for n_frames, fps, height, width in VIDEOS:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        got = sample_video(info, rules.video, factor=rules.factor, temporal_factor=rules.temporal_patch_size)
        assert got.n_frames == smart_nframes({}, total_frames=n_frames, video_fps=fps), (n_frames, fps)
        assert got.n_frames == _qwen_vl_utils_recipe(n_frames, fps, height, width, rules.patch_size)[0]


@pytest.fixture(scope="module")
def qwen3_5_video_dir(tmp_path_factory):
    from vlmpack_offline.synthetic import folder_qwen3_5

    return folder_qwen3_5.build(tmp_path_factory.mktemp("qwen3_5_video"), video=True)


@pytest.mark.torchvision
@pytest.mark.parametrize("family", ["qwen3_vl", "qwen3_5"])
def test_qwen_vl_utils_recipe_counts_equal_fetch_video_and_the_processor(tmp_path, make_config, family, qwen3_5_video_dir):
    """``video.sampler: qwen_vl_utils`` = Qwen's own recipe: the frames and size of the real ``fetch_video``
    (decord reader, its defaults for patch 16), and the count of the real ``AutoProcessor`` run the way
    Qwen's model cards run it on fetch_video's output (``do_resize=False``, ``do_sample_frames=False``)."""
    from qwen_vl_utils.vision_process import fetch_video
    from transformers import AutoProcessor

    from vlmpack_offline.conversation import parse_conversation

    directory = qwen3_5_video_dir if family == "qwen3_5" else build_processor_dir(tmp_path / "p", family, video=True)
    counter = make_counter(_config(make_config, directory, sampler="qwen_vl_utils"))
    processor = AutoProcessor.from_pretrained(directory)
    pads = {processor.tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>")}
    for index, clip in enumerate(CLIPS):
        data = video_bytes(*clip, seed=index)
        path = tmp_path / f"clip{index}.mp4"
        path.write_bytes(data)
        video, metadata = fetch_video({"video": str(path)}, image_patch_size=16, return_video_metadata=True)
        item = counter.probe("video", data, part="v.mp4")
        assert item.sampling.frame_indices == tuple(metadata["frames_indices"]), clip
        assert (item.sampling.resized_height, item.sampling.resized_width) == tuple(video.shape[-2:]), clip
        messages = [{"role": "user", "content": [{"type": "video", "video": "v.mp4"}, {"type": "text", "text": "Go."}]},
                    {"role": "assistant", "content": "Done."}]  # fmt: skip
        conversation = parse_conversation(json.dumps({"messages": messages}).encode(), key="k", parts=["v.mp4"])
        text = processor.tokenizer.apply_chat_template(messages, tokenize=False)
        ids = processor(text=[text], videos=[video], video_metadata=[VideoMetadata(**metadata)], do_resize=False,
                        do_sample_frames=False)["input_ids"][0]  # fmt: skip
        count = counter.count(conversation, [item])
        assert (count.token_len, count.media_tokens) == (len(ids), sum(i in pads for i in ids)), clip


@pytest.mark.parametrize(
    ("family", "video", "refused"),
    [
        ("kimi_k25", {"max_frames": 4, "max_pixels": 10000}, "video.max_frames, video.max_pixels"),
        ("glm46v", {"fps": 1.0}, "video.fps"),
        ("internvl", {"max_frames": 8, "total_pixels": 1000, "min_pixels": 100000}, "video.min_pixels, video.total_pixels"),
        ("llava_onevision", {"max_pixels": 1000}, "video.max_pixels"),
        ("gemma3", {"fps": 1.0}, "video.fps"),
        ("mistral3", {"max_frames": 8}, "video.max_frames"),
        ("kimi_k25", {"fps": 1.0}, None),
        ("glm4v", {"fps": 1.0, "max_pixels": 2 * 28 * 28 * 300}, None),
        ("internvl", {"fps": 1.0, "min_frames": 2, "max_frames": 8}, None),
        ("llava_onevision", {"max_frames": 8, "min_frames": 8}, None),
        ("qwen3_vl", {"total_pixels": 10**8}, "video.total_pixels"),  # the folder's hf_processor sampling
        ("qwen3_vl", {"total_pixels": 10**8, "sampler": "qwen_vl_utils"}, None),
        ("qwen2_5_vl", {"total_pixels": 10**8}, None),
    ],
)
def test_video_fields_a_family_never_reads_are_refused(tmp_path, make_config, family, video, refused):
    """Kimi-K2.5 samples by fps alone, GLM-4.6V picks its rate from the duration, InternVL and LLaVA-OneVision
    resize every frame to their tile (their frame choice is ours, their pixel bounds are not), Gemma3 and Mistral3
    take no video, Qwen3-VL's own video processor sampling has no total pixel budget: a ``video:`` value the family
    would ignore is a config error naming it (it would silently not apply), the ones it reads are taken."""
    from vlmpack_offline.errors import ConfigError

    takes_video = family not in ("gemma3", "mistral3")
    config = make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path, family, video=takes_video),
                         video=video)  # fmt: skip
    if refused is None:
        rules = load_model_rules(config.model, config.video)
        assert all(getattr(rules.video, name) == value for name, value in video.items())
        return
    reason = "never reads" if takes_video else "takes no video"
    name = "qwen-vl" if family.startswith("qwen") else family
    with pytest.raises(ConfigError, match=f"^{refused}: {name} {reason}"):
        load_model_rules(config.model, config.video)


@pytest.mark.parametrize(
    ("family", "video", "line"),
    [
        ("internvl", {"max_frames": 8}, "videos (video:, else the folder's settings, else the family's recipe): "
                                        "fps 2, min_frames 4, max_frames 8, sampler qwen_vl_utils, "
                                        "reader torchcodec"),
        ("gemma3", {}, "videos: dropped as unsupported_media (gemma3 takes no video)"),
    ],
)
def test_scan_says_the_video_settings_it_counts_with(tmp_path, make_config, family, video, line):
    """The summary's second line: the settings the count uses after video: / folder / recipe, under their names
    (InternVL's processor samples nothing itself, so its frames are this recipe's, not its own defaults)."""
    from vlmpack_offline.stages import scan
    from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    write_shard(tmp_path / "wds" / "shard-000000.tar", [SyntheticSample(key="k", json=chat)])
    processor_dir = build_processor_dir(tmp_path / "proc", family, video=family != "gemma3")
    result = scan.run(make_config(wds_dir=tmp_path / "wds", processor_dir=processor_dir, video=video))
    assert result.summary[0].startswith(f"{family}: fast path (") and result.summary[1] == line


# settings handed to fetch_video as the item's own keys (and to vlmpack as video:): above its per-frame limit,
# min = max, a small total, min close to max, few frames, a low cap
SETTINGS = [{}, {"max_pixels": 1003520}, {"min_pixels": 200704, "max_pixels": 200704}, {"total_pixels": 2_000_000},
            {"min_pixels": 150000, "max_pixels": 160000}, {"fps": 1.0, "min_frames": 2, "max_frames": 8},
            {"min_pixels": 20000, "max_pixels": 50000}]  # fmt: skip
LARGE_CLIPS = [(8, 4, 1280, 720), (12, 6, 720, 960), (30, 10, 96, 64)]  # (n_frames, fps, width, height)


@pytest.mark.torchvision
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_every_setting_samples_the_frames_and_size_fetch_video_does(tmp_path, make_config, family, monkeypatch):
    """The real ``fetch_video`` (decord reader) with each setting as the item's keys vs ``vlmpack``'s sampler."""
    from qwen_vl_utils.vision_process import fetch_video

    from vlmpack_offline.media import probe_video

    monkeypatch.setenv("FORCE_QWENVL_VIDEO_READER", "decord")
    directory = build_processor_dir(tmp_path / "p", family, video=True)
    clips = []
    for index, clip in enumerate(LARGE_CLIPS):
        data = video_bytes(*clip, seed=index)
        (tmp_path / f"clip{index}.mp4").write_bytes(data)
        clips.append((tmp_path / f"clip{index}.mp4", data))
    for settings in SETTINGS:
        config = _config(make_config, directory, sampler="qwen_vl_utils", **settings)
        rules = load_model_rules(config.model, config.video)
        for path, data in clips:
            video, metadata = fetch_video({"video": str(path), **settings}, image_patch_size=rules.patch_size,
                                          return_video_metadata=True)  # fmt: skip
            got = sample_video(probe_video(data), rules.video, factor=rules.factor,
                               temporal_factor=rules.temporal_patch_size)  # fmt: skip
            assert got.frame_indices == tuple(metadata["frames_indices"]), (settings, path.name)
            assert (got.resized_height, got.resized_width) == tuple(video.shape[-2:]), (settings, path.name)


def test_a_max_pixels_above_qwen_vl_utils_limit_is_said_in_the_scan_line(tmp_path, make_config):
    from vlmpack_offline.tokens.factory import video_sampling

    directory = build_processor_dir(tmp_path, "qwen2_5_vl")
    config = _config(make_config, directory, max_pixels=1003520)
    rules = load_model_rules(config.model, config.video)
    line = video_sampling(rules)
    assert line.endswith("max_pixels 1003520 is above qwen-vl-utils' per-frame limit 602112 (768 tokens): frames "
                         "are capped there, as fetch_video does")
    info = VideoInfo(n_frames=16, native_fps=8.0, height=1288, width=728, backend="decord")
    sampled = sample_video(info, rules.video, factor=rules.factor, temporal_factor=rules.temporal_patch_size)
    assert sampled.resized_height * sampled.resized_width <= 602112  # fetch_video's frame: 1008x560, not 1288x728
    assert (sampled.resized_height, sampled.resized_width) == smart_resize(1288, 728, factor=28, min_pixels=100352,
                                                                          max_pixels=602112)  # fmt: skip


def test_min_pixels_above_max_pixels_is_a_config_error(tmp_path, make_config):
    from vlmpack_offline.errors import ConfigError

    with pytest.raises(ConfigError, match=r"need 1 <= video.min_pixels <= video.max_pixels, got video.min_pixels 300000 and video.max_pixels 200000"):
        _config(make_config, build_processor_dir(tmp_path, "qwen2_5_vl"), min_pixels=300000, max_pixels=200000)


@pytest.mark.parametrize("cap", [True, False])
def test_qwen3_folder_frame_cap_gives_the_hf_video_processors_own_patch_count(tmp_path, make_config, cap):
    """``cap_pixels_per_frame`` in a Qwen3-VL folder: the real processor's ``sample_frames`` and its own
    ``get_num_of_video_patches`` (kept in step with its ``resize``) give vlmpack's frames and patches."""
    directory = build_processor_dir(tmp_path, "qwen3_vl", video=True)
    settings = directory / "video_preprocessor_config.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "cap_pixels_per_frame": cap}))
    counter = make_counter(_config(make_config, directory))
    video_processor = Qwen3VLVideoProcessor.from_pretrained(directory)
    assert counter.rules.video.cap_pixels_per_frame is cap and video_processor.cap_pixels_per_frame is cap
    capped = 0
    for n_frames, fps, height, width in VIDEOS:
        info = VideoInfo(n_frames=n_frames, native_fps=fps, height=height, width=width, backend="decord")
        got = sample_video(info, counter.rules.video, factor=counter.rules.factor)
        sampled = len(video_processor.sample_frames(VideoMetadata(total_num_frames=n_frames, fps=fps)))
        patches = got.n_frames // 2 * (got.resized_height // 16) * (got.resized_width // 16)
        assert patches == video_processor.get_num_of_video_patches(sampled, height, width), (n_frames, height, width)
        uncapped = video_smart_resize(num_frames=sampled, height=height, width=width, temporal_factor=2, factor=32,
                                      min_pixels=video_processor.size.shortest_edge,
                                      max_pixels=video_processor.size.longest_edge)  # fmt: skip
        capped += (got.resized_height, got.resized_width) != uncapped
    assert (capped > 0) is cap  # the cap changes some of these videos' sizes, and only with it


def test_the_frame_cap_is_refused_where_the_recipe_sampler_would_ignore_it(tmp_path, make_config):
    from vlmpack_offline.errors import ConfigError

    directory = build_processor_dir(tmp_path, "qwen2_5_vl")
    with pytest.raises(ConfigError, match=r"video.cap_pixels_per_frame: qwen-vl never reads it \(sampler qwen_vl_utils\)"):
        load_model_rules(*(lambda c: (c.model, c.video))(_config(make_config, directory, cap_pixels_per_frame=True)))
