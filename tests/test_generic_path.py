"""The generic fast path counts exactly what the model's real processor gives, without torchvision.

Every model type the suite proves (``tokens.proof.SUITE_PROVEN``), and the image-only types whose processors
run without torchvision (paddleocr_vl, hunyuan_vl: their videos are dropped, as their processors take none),
is counted on held-out samples (sizes, clips and text that the proof at folder load never uses): text only,
one image, two and three images of mixed aspect ratios, three videos (one too short for Gemma4's 32 frames).
Folders: ``synthetic/folder_<type>``, in both layouts.

- reference (``.venv-ref``, marked ``torchvision``): the oracle is the real processor, ``AutoProcessor`` on the
  folder, fed ``processor.apply_chat_template``'s text, the decoded images and every decoded frame of each video
  with its ``VideoMetadata`` (the processor samples frames itself). Its ``len(input_ids)`` per sample must be
  ``PINNED``, and vlmpack's count (``make_counter``: the generic path, proven at load) must equal it. This run
  is what lets ``SUITE_PROVEN`` accept, without torchvision, the parts that cannot run there.
- core (``.venv``): the same samples through ``make_counter`` give ``PINNED`` too, and the written-out video
  rules agree (``test_video_rules.py`` checks them against the real classes).

``PINNED`` was written down from the reference run (``refused``: the real processor refuses the sample, and
vlmpack drops it with the rule's reason).

``SLOW_PINNED``: types with a synthetic folder that the generic path cannot count, because their image processor
returns a field it cannot build from sizes (``families/generic_fields.py``, ``adapter_for``; llama4's
``pixel_values`` with its tiles, which ``replace_image_token`` reads off the pixels' shape). In the reference
environment they take the slow path and count what the real processor gives; in the core one their
torchvision-only image processor does not load, and the folder is refused at load naming torchvision.
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest
from _folders_2026 import LazyFolders, every_frame
from PIL import Image

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.tokens import make_counter
from vlmpack_offline.tokens.factory import counting_path
from vlmpack_offline.tokens.proof import (
    PROOF_IMAGES,
    PROOF_PAIR,
    PROOF_VIDEOS,
    SUITE_PROVEN,
    SUITE_TRANSFORMERS,
)

LAYOUTS = ("transformers5", "hub")

# sample -> (media items: ("image", (width, height)) or ("video", (frames, fps, width, height)), user text)
SAMPLES = {
    "text": ((), "Summarise: the river rose two metres overnight and the lower bridge is closed until Friday."),
    "image": ((("image", (500, 375)),), "What is on the table?"),
    "two_images": ((("image", (768, 1024)), ("image", (1200, 200))), "Compare the two pictures."),
    "three_images": ((("image", (64, 64)), ("image", (1280, 720)), ("image", (300, 1500))), "Which one is tallest?"),
    "video": ((("video", (48, 8, 96, 64)),), "What happens in the clip?"),
    "long_video": ((("video", (90, 30, 64, 48)),), "Describe the motion."),
    "short_video": ((("video", (12, 6, 64, 48)),), "Is anything moving?"),
}  # fmt: skip
ANSWER = "A gradient that drifts slowly to the right."

_KEYS = ("text", "image", "two_images", "three_images", "video", "long_video", "short_video")
PINNED: dict[str, dict[str, int | str]] = {model_type: dict(zip(_KEYS, counts, strict=True)) for model_type, counts in {
    "ernie4_5_vl_moe": (35, 262, 1333, 1833, 7948, 13526, 1826),
    "gemma4": (40, 295, 536, 811, 2234, 2328, "refused"),  # 12 frames < its 32
    "glm5_next": (38, 279, 1408, 1836, 135, 61, 61),
    "lfm3_vl": (40, 221, 1026, 1339, 149, 123, 113),
    "molmo2": (39, 576, 1993, 2790, 1081, 551, 375),
    "qwen3_omni_moe": (39, 220, 1025, 1338, 3388, 6326, 866),
    "qwen2_5_omni": (50, 273, 1340, 1836, 3399, 6337, 877),
    "paddleocr_vl": (35, 259, 1326, 2014, "refused", "refused", "refused"),  # images only
    "hunyuan_vl": (33, 304, 1114, 1675, "refused", "refused", "refused"),  # images only
}.items()}  # fmt: skip
TYPES = sorted(PINNED)
SLOW_PINNED: dict[str, dict[str, int | str]] = {model_type: dict(zip(_KEYS, counts, strict=True)) for model_type, counts in {
    "llama4": (40, 754, 2640, 2932, "refused", "refused", "refused"),  # images only
}.items()}  # fmt: skip
IMAGES_ONLY = frozenset({"paddleocr_vl", "hunyuan_vl", "llama4"})  # processors without a video processor


def test_every_type_the_suite_vouches_for_is_checked_here():
    """SUITE_PROVEN lets the core environment accept parts it cannot run: each such type has its row above."""
    assert set(SUITE_PROVEN) <= set(PINNED)


def test_the_samples_are_held_out_from_the_proof():
    """No size or clip of these samples is one the proof at folder load checks: they test other items."""
    media = [spec for items, _ in SAMPLES.values() for spec in items]
    sizes = {(height, width) for kind, (width, height) in (m for m in media if m[0] == "image")}
    clips = {(n, float(fps), height, width) for kind, (n, fps, width, height) in (m for m in media if m[0] == "video")}
    assert sizes and clips and not sizes & {*PROOF_IMAGES, *PROOF_PAIR} and not clips & set(PROOF_VIDEOS)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> LazyFolders:
    return LazyFolders(tmp_path_factory.mktemp("generic-folders"), video=lambda model_type: model_type not in IMAGES_ONLY)


def _parts(name: str) -> tuple[dict, dict[str, bytes]]:
    items, text = SAMPLES[name]
    content, parts = [], {}
    for index, (kind, spec) in enumerate(items):
        if kind == "image":
            part = f"img{index}.jpg"
            parts[part] = image_bytes(*spec, seed=index)
        else:
            frames, fps, width, height = spec
            part = f"clip{index}.mp4"
            parts[part] = video_bytes(frames, fps, width, height, seed=index)
        content.append({"type": kind, kind: part})
    messages = [{"role": "user", "content": [*content, {"type": "text", "text": text}]},
                {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]  # fmt: skip
    return {"messages": messages}, parts


def _config(folder: Path):
    return config_from_dict({
        "data": {"wds_dir": str(folder), "work_dir": str(folder / "work"), "packed_wds_dir": str(folder / "out")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
        "loss": {"train_on": "all"},  # counts only (Gemma4's generation prompt is no prefix of its answer turn)
    }, source="test")  # fmt: skip


def _vlmpack(counter, name: str) -> int | str:
    """vlmpack's token_len for the sample, or ``refused`` with the drop's reason checked."""
    raw, parts = _parts(name)
    conversation = parse_conversation(json.dumps(raw).encode(), key="k", parts=list(parts))
    try:
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        return counter.count(conversation, media).token_len
    except DropError as exc:
        assert exc.reason == Reason.UNSUPPORTED_MEDIA, exc
        return "refused"


def _real(processor, name: str) -> int | str:
    """The real processor's len(input_ids) for the sample (its own frame sampling), or ``refused``."""
    raw, parts = _parts(name)
    messages = [{"role": m["role"], "content": [{"type": c["type"]} if c["type"] != "text" else c for c in m["content"]]}
                for m in raw["messages"]]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False)
    images = [Image.open(io.BytesIO(data)).convert("RGB") for part, data in parts.items() if part.endswith(".jpg")]
    videos = [every_frame(data) for part, data in parts.items() if part.endswith(".mp4")]
    if videos and getattr(processor, "video_processor", None) is None:
        return "refused"  # it takes no video (its call would count the text and leave the video out)
    inputs = {"images": images or None}
    if videos:
        inputs.update(videos=[v for v, _ in videos], video_metadata=[m for _, m in videos])
    try:
        return len(processor(text=[text], **inputs)["input_ids"][0])
    except ValueError:  # the processor's own refusal (Gemma4: num_frames=32 exceeds total_num_frames=12)
        return "refused"


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_the_generic_path_counts_what_the_real_processor_gives(folders, model_type, layout):
    import transformers
    from transformers import AutoProcessor

    assert transformers.__version__ == SUITE_TRANSFORMERS, "SUITE_PROVEN holds for this version only: prove again"
    folder = folders[model_type, layout]
    counter = make_counter(_config(folder))
    line = counting_path(counter.rules)
    assert line.startswith(f"{model_type}: generic fast path (proved: ") and "by the test suite" not in line, line
    processor = AutoProcessor.from_pretrained(folder)
    real = {name: _real(processor, name) for name in SAMPLES}
    assert real == PINNED[model_type], f"the real processor's counts moved: {real}"
    assert {name: _vlmpack(counter, name) for name in SAMPLES} == real


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_without_torchvision_the_generic_path_gives_the_pinned_counts(folders, model_type, layout):
    counter = make_counter(_config(folders[model_type, layout]))
    assert counting_path(counter.rules).startswith(f"{model_type}: generic fast path (proved")
    assert {name: _vlmpack(counter, name) for name in SAMPLES} == PINNED[model_type]


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", sorted(SLOW_PINNED))
def test_a_type_without_a_generic_rule_takes_the_slow_path_and_counts_what_the_real_processor_gives(
    folders, model_type, layout
):
    from transformers import AutoProcessor

    folder = folders[model_type, layout]
    counter = make_counter(_config(folder))
    line = counting_path(counter.rules)
    assert line.startswith(f"{model_type}: slow path (HF processor; no generic rule: "), line
    real = {name: _real(AutoProcessor.from_pretrained(folder), name) for name in SAMPLES}
    assert real == SLOW_PINNED[model_type], f"the real processor's counts moved: {real}"
    assert {name: _vlmpack(counter, name) for name in SAMPLES} == real


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", sorted(SLOW_PINNED))
def test_without_torchvision_a_slow_type_is_refused_at_load_naming_it(folders, model_type, layout):
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the reference environment counts this type on the slow path")
    with pytest.raises(ConfigError, match="torchvision"):
        make_counter(_config(folders[model_type, layout]))
