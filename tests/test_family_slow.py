"""The slow path (families without a module): media tokens as expanded, unsupported media dropped.

Run offline on real processors that need no torchvision: LLaVA-1.5 (``LlavaProcessor``, CLIP
336 px, patch 14; its folder is the Qwen BPE plus ``<image>``, the public settings and a small
template), and Gemma3's real ``Gemma3Processor`` run as the slow path, whose counts must equal
the fast path's (checked against the same processor by the ``gemma3`` row of ``_families_table.py``). Expected
media tokens are worked out by hand from the public settings:

    LLaVA-1.5   (336 / 14)**2 = 576 <image> per image (CLS +1, removed by "default" select: -1)
    Gemma3      256 <image_soft_token> per image (image_seq_length), not 1 per <start_of_image>

Neither processor has a video processor, so a video item drops as ``unsupported_media``.
(``PixtralProcessor``, for Mistral3 / Pixtral, requires torchvision and is not run here.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir, tokenizer_files_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.tokens import load_model_rules, make_counter
from vlmpack_offline.tokens.factory import counting_path
from vlmpack_offline.tokens.slow import SlowCounter, video_metadata

_CLIP = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
_TEMPLATE = (  # the pad is a template variable so one template serves both folders
    "{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}{{ pad }}\n{% elif c['type'] == 'text' %}"
    "{{ c['text'] }}{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
)

FOLDERS = {
    "llava": {
        "tokens": ["<image>"], "pad": "<image>",
        "preprocessor": {"crop_size": {"height": 336, "width": 336}, "do_center_crop": True, "do_convert_rgb": True,
                         "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 3,
                         "rescale_factor": 1 / 255, "size": {"shortest_edge": 336},
                         "image_processor_type": "CLIPImageProcessor", "processor_class": "LlavaProcessor", **_CLIP},
        "processor": {"patch_size": 14, "vision_feature_select_strategy": "default", "num_additional_image_tokens": 1,
                      "processor_class": "LlavaProcessor"},
    },
}  # fmt: skip


def _folder(target: Path, model_type: str) -> Path:
    spec = FOLDERS[model_type]
    target.mkdir(parents=True)
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_files_dir() / name, target / name)
    tokenizer = AutoTokenizer.from_pretrained(target, chat_template=_TEMPLATE.replace("{{ pad }}", spec["pad"]))
    tokenizer.add_special_tokens({"additional_special_tokens": spec["tokens"]})
    tokenizer.save_pretrained(target)
    (target / "preprocessor_config.json").write_text(json.dumps(spec["preprocessor"]))
    (target / "processor_config.json").write_text(json.dumps(spec["processor"]))
    (target / "config.json").write_text(json.dumps({"model_type": model_type}))
    return target


@pytest.fixture(scope="module", params=["llava", "gemma3"])
def slow_dir(request, tmp_path_factory) -> tuple[str, Path]:
    target = tmp_path_factory.mktemp("slow") / request.param
    if request.param == "gemma3":
        return "gemma3", build_processor_dir(target, "gemma3")
    return request.param, _folder(target, request.param)


def _slow_counter(model_type: str, directory: Path, make_config):
    config = make_config(wds_dir="unused", processor_dir=directory)
    if model_type == "gemma3":  # has a family module: build its slow path by hand
        return SlowCounter(load_model_rules(config.model), config)
    return make_counter(config)


def _sample(sizes: list[tuple[int, int]], video: bool = False):
    user = [{"type": "image", "image": f"img{i}.png"} for i in range(len(sizes))]
    user += [{"type": "video", "video": "clip.mp4"}] if video else []
    messages = [{"role": "user", "content": [*user, {"type": "text", "text": "What is shown?"}]},
                {"role": "assistant", "content": "Shapes."}]  # fmt: skip
    parts = {f"img{i}.png": image_bytes(w, h, fmt="PNG", seed=i) for i, (w, h) in enumerate(sizes)}
    if video:
        parts["clip.mp4"] = video_bytes(8, 4, 64, 48)
    conversation = parse_conversation(json.dumps({"messages": messages}).encode(), key="k", parts=list(parts))
    return conversation, parts


def _expected_media_tokens(model_type: str, width: int, height: int) -> int:
    return {"llava": 576, "gemma3": 256}[model_type]  # fixed: every image is resized to one square


def test_media_tokens_are_the_expanded_media_tokens(slow_dir, make_config):
    model_type, directory = slow_dir
    counter = _slow_counter(model_type, directory, make_config)
    assert isinstance(counter, SlowCounter)
    if model_type == "llava":
        assert counting_path(counter.rules) == (  # the generic path has no rule for its output: one line says so
            "llava: slow path (HF processor; no generic rule: CLIPImageProcessorPil returns ['pixel_values'], none "
            "of the fields the generic path builds from sizes (image_grid_thw, num_soft_tokens_per_image, image_grids))")
    fast = make_counter(make_config(wds_dir="unused", processor_dir=directory)) if model_type == "gemma3" else None
    for sizes in ([(56, 28)], [(280, 84), (28, 28)], [(300, 200), (50, 120), (84, 84)]):
        conversation, parts = _sample(sizes)
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        count = counter.count(conversation, media)
        assert count.media_tokens == sum(_expected_media_tokens(model_type, w, h) for w, h in sizes), sizes
        text_only = counter.count(*_sample([]))
        assert text_only.media_tokens == 0 and count.token_len > text_only.token_len + count.media_tokens - 1
        if fast is not None:
            fast_media = [fast.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
            fast_count = fast.count(conversation, fast_media)  # the slow path leaves the encoder figures at 0
            assert (fast_count.token_len, fast_count.media_tokens) == (count.token_len, count.media_tokens)


def test_a_video_for_a_processor_without_video_is_dropped(slow_dir, make_config):
    model_type, directory = slow_dir
    counter = _slow_counter(model_type, directory, make_config)
    conversation, parts = _sample([(56, 56)], video=True)
    with pytest.raises(DropError) as caught:
        for m in conversation.media:
            counter.probe(m.kind, parts[m.part], part=m.part)
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA and "clip.mp4" in str(caught.value)
    assert "no video processor" in str(caught.value)


def test_video_metadata_describes_the_sampled_frames(tmp_path, make_config):
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=build_processor_dir(tmp_path, "qwen2_5_vl")).model)
    from vlmpack_offline.media import probe_video, sample_video

    info = probe_video(video_bytes(12, 4, 64, 48))  # 12 frames at 4 fps: 3 seconds
    sampling = sample_video(info, rules.video, factor=rules.factor, temporal_factor=rules.temporal_patch_size)
    metadata = video_metadata(sampling)
    assert (metadata.total_num_frames, metadata.fps, metadata.duration) == (12, 4.0, 3.0)
    assert metadata.frames_indices == list(sampling.frame_indices)
    assert metadata.timestamps == [i / 4.0 for i in sampling.frame_indices]  # HF's own timestamp rule
    assert (metadata.width, metadata.height) == (sampling.resized_width, sampling.resized_height)


def test_the_path_is_named_for_fast_families(qwen25_processor_dir, make_config):
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=qwen25_processor_dir).model)
    assert counting_path(rules) == "qwen2_5_vl: fast path (sizes from headers)"
