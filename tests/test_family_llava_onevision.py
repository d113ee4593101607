"""LLaVA-OneVision: what only LLaVA-OneVision has, beyond the conformance table's checks.

Counts against the real ``LlavaOnevisionProcessor`` on the whole scan (images in both layouts, and with
torchvision ``AutoProcessor`` with videos; materialize; the settings read from both layouts) are the
``llava_onevision`` and ``llava_onevision-video`` rows of ``tests/_families_table.py``. Here, with the same
oracles (the real class restricted to its image processor and tokenizer in ``.venv``, ``AutoProcessor`` in
``.venv-ref``):

- the table's reference call (``images=[images]``, one list per sample) is what ``apply_chat_template`` hands
  the processor: a flat list would tile every image of a multi-image sample;
- ``model.processor_kwargs`` (strategy, aspect, pinpoints, tile size, token count) change ``count`` as they
  change the processor's output; a folder without ``num_image_tokens`` is refused;
- another ``video:`` section picks other frames and the count follows the processor on them; a 1000 x 4 video
  (past the Qwen sampler's 200:1) is counted as the processor takes it;
- the module doc's hand-worked counts.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from _families_table import row
from _family_kit import samples_in
from PIL import Image

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

OV, OV_VIDEO = row("llava_onevision"), row("llava_onevision-video")


@pytest.fixture(scope="module")
def ov_dirs(tmp_path_factory) -> dict[str, Path]:
    return OV.folders(tmp_path_factory.mktemp("ov"))


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    return OV.data.build(tmp_path_factory.mktemp("ov_wds"))



def test_the_reference_call_is_apply_chat_templates(ov_dirs, wds):
    """``images=[images]`` (one list per sample, the table row's ``nested_images``) is what ``apply_chat_template`` hands the processor;
    a flat list would tile every image of a multi-image sample (and give another count)."""
    processor = OV.oracle(ov_dirs["hub"])
    conversation, parts = samples_in(wds)["two006"]
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
    loaded = iter(images)
    messages = [{**m, "content": [{**item, "image": next(loaded)} if item.get("type") == "image" else item
                                  for item in m["content"]]} for m in conversation.messages]  # fmt: skip
    applied = processor.apply_chat_template(messages, tokenize=True, return_dict=True)
    assert list(applied["input_ids"][0]) == OV.reference_ids(processor, conversation, parts, None)
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    assert len(processor(text=[text], images=images)["input_ids"][0]) > len(applied["input_ids"][0])


@pytest.mark.parametrize("kwargs", [
    {"vision_feature_select_strategy": "default", "vision_aspect_ratio": "anyres_max_4"},
    {"image_grid_pinpoints": [[384, 768], [768, 384], [768, 768], [1152, 384], [384, 1152]], "num_image_tokens": 576,
     "size": {"height": 336, "width": 336}},
], ids=["strategy-aspect", "pinpoints-size-tokens"])  # fmt: skip
def test_processor_kwargs_change_the_count_as_in_the_processor(ov_dirs, wds, make_config, kwargs):
    """Settings from model.processor_kwargs, as ``from_pretrained`` hands them to the processor and its
    image processor; counted with ``count`` (the scan's own entry) on every other edge size, alone and paired."""
    directory = ov_dirs["hub"]
    processor = OV.oracle(directory, **kwargs)
    config = make_config(wds_dir="unused", processor_dir=directory,
                         model={"processor_kwargs": {"pretrained_model_name_or_path": str(directory), **kwargs}})  # fmt: skip
    counter = make_counter(config)
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        if not key.startswith(("one", "two")) or int(key[3:]) % 2:  # every other size, alone and with a second one
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        count = counter.count(conversation, media)
        ids = OV.reference_ids(processor, conversation, parts, None)
        assert (count.token_len, count.media_tokens) == (len(ids), ids.count(processor.image_token_id)), key
        checked += 1
    assert checked == len(OV.data.sizes)


def test_a_folder_without_num_image_tokens_is_refused(tmp_path, make_config):
    custom = build_processor_dir(tmp_path / "custom", "llava_onevision")
    settings = json.loads((custom / "processor_config.json").read_text())
    (custom / "processor_config.json").write_text(json.dumps({**settings, "num_image_tokens": None}))
    with pytest.raises(ConfigError, match="no num_image_tokens"):
        load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)


# -- with torchvision: AutoProcessor, videos included ---------------------------------------------------------


@pytest.fixture(scope="module")
def ov_video_dirs(tmp_path_factory) -> dict[str, Path]:
    return OV_VIDEO.folders(tmp_path_factory.mktemp("ov_video"))


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
            ids = OV_VIDEO.reference_ids(processor, conversation, parts, counter)
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
    ids = OV_VIDEO.reference_ids(processor, conversation, parts, counter)
    assert media[0].sampling.n_frames >= 2
    assert (count.token_len, count.media_tokens) == (len(ids), ids.count(processor.video_token_id))
