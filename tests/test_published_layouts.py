"""The published tool's packed layouts, read as its trainer reads them, give back every input sample.

vlmpack packs a dataset (scan -> bucket -> plan -> write -> verify) in each ``sample.sample_type`` of the
published offline-packing tool, and energon's own ``get_train_dataset`` reads the output through cookers
that do what that tool's trainer cookers do (LoongForge ``loongforge/data/multimodal/base/task_encoder.py``,
``cooker_packed_caption`` / ``cooker_packed_vqa`` / ``cooker_packed_multi_mix_qa`` / ``cooker_packed_chat_mix``:
they pick the cooker by the ``sample_type`` subflavor, look media up by the names the JSON gives, and leave
decoding to energon's default decoder, which decodes a part by its extension). Oracle: the samples this test
wrote, as text with ``<image>`` / ``<video>`` placeholders, and their media bytes. vlmpack's own loader reads
the same folders (``vlmpack.json``); a layout that cannot hold a sample is refused before any tar.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter

import numpy as np
import pytest
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    SampleDecoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
    reraise_exception,
    stateless,
)
from PIL import Image

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import LayoutError
from vlmpack_offline.loader import PackDataset, PackEncoder, PackTaskEncoder
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import bucket, plan, scan, verify, write
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard

JPG, PNG = image_bytes(96, 64, seed=1), image_bytes(64, 80, fmt="PNG", seed=2)
CLIP = video_bytes(8, 4, 64, 64, seed=3)


def _hf(*turns, system=None, media=()):
    """An HF-messages sample: turns alternate user / assistant, media items lead the first user turn."""
    messages = [{"role": "system", "content": system}] if system else []
    for index, text in enumerate(turns):
        role = "user" if index % 2 == 0 else "assistant"
        content = [{"type": kind, kind: part} for kind, part in media] if index == 0 else []
        messages.append({"role": role, "content": content + [{"type": "text", "text": text}]})
    return {"messages": messages}


# key -> (json, media parts, what the trainer must see: [(role, text with placeholders)], media bytes in order)
SINGLE_IMAGE = {
    "cap_jpg": (_hf("Describe it.", "A gradient.", media=[("image", "img.jpg")]), {"img.jpg": JPG},
                [("user", "<image>Describe it."), ("assistant", "A gradient.")], [JPG]),
    "cap_png": (_hf("And this?", "Another one.", media=[("image", "p.png")]), {"p.png": PNG},
                [("user", "<image>And this?"), ("assistant", "Another one.")], [PNG]),
}  # fmt: skip
CONVERSATIONS = {
    **SINGLE_IMAGE,
    "two_images": (_hf("Compare.", "Same size.", media=[("image", "a.jpg"), ("image", "b.png")]),
                   {"a.jpg": JPG, "b.png": PNG},
                   [("user", "<image><image>Compare."), ("assistant", "Same size.")], [JPG, PNG]),
    "multi_turn": (_hf("Hi.", "Hello.", "And now?", "Now this."), {},
                   [("user", "Hi."), ("assistant", "Hello."), ("user", "And now?"), ("assistant", "Now this.")], []),
    "video": (_hf("What moves?", "A square.", media=[("video", "v.mp4")]), {"v.mp4": CLIP},
              [("user", "<video>What moves?"), ("assistant", "A square.")], [CLIP]),
}  # fmt: skip
SYSTEM = {
    "with_system": (_hf("Hi.", "Hello.", system="Be brief."), {},
                    [("system", "Be brief."), ("user", "Hi."), ("assistant", "Hello.")], []),
}  # fmt: skip


def _pipeline(tmp_path, processor, samples: dict, sample_type: str):
    write_shard(tmp_path / "wds" / "part-0.tar",
                [SyntheticSample(key=key, json=js, media=media) for key, (js, media, _, _) in samples.items()])  # fmt: skip
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "wds"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": 4096, "sample_type": sample_type},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan):
        assert stage.run(config).exit_code == 0
    return config


def _media(value):
    """What a trainer gets for one media name: a PIL image (energon decoded it by its extension), or the
    video decoder; as comparable data."""
    if isinstance(value, Image.Image):
        return ("image", _digest(value))
    return ("video", type(value).__name__)


def _digest(image: Image.Image) -> str:
    pixels = np.asarray(image.convert("RGB"))
    return f"{pixels.shape} {hashlib.sha256(pixels.tobytes()).hexdigest()}"


def _expected_media(data: bytes):
    try:
        return ("image", _digest(Image.open(io.BytesIO(data))))
    except Exception:  # noqa: BLE001 - not an image: a video
        return ("video", "AVDecoder")


# -- what the published trainer's cookers read, per layout (LoongForge task_encoder.py, see module doc) --
@stateless
def cook_single_image(sample: dict) -> dict:
    data = sample["json"]
    images = [sample.get(f"img{i}.jpg") for i in range(len(data["images"]))]
    return {"subs": [{"turns": [("user", p), ("assistant", c)], "media": [img]}
                     for p, c, img in zip(data["prompts"], data["captions"], images, strict=True)]}  # fmt: skip


def _as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


@stateless
def cook_multi_mix_qa(sample: dict) -> dict:
    data = sample["json"]
    assert data["media_type"] in ("image", "video", "text")
    prompts, captions = data["texts"]["prompts"], data["texts"]["captions"]
    subs = []
    for prompt, caption, group in zip(prompts, captions, data["media_files"], strict=True):
        turns = [t for pair in zip(_as_list(prompt), _as_list(caption), strict=True)
                 for t in (("user", pair[0]), ("assistant", pair[1]))]  # fmt: skip
        subs.append({"turns": turns, "media": [sample.get(name) for name in group]})
    return {"subs": subs}


@stateless
def cook_chat_mix(sample: dict) -> dict:
    data = sample["json"]
    assert data["media_type"] in ("image", "video", "text") and len(data["media_files"]) == len(data["messages"])
    return {"subs": [{"turns": [(m["role"], m["content"]) for m in entry["messages"]],
                      "media": [sample.get(name) for name in group]}
                     for entry, group in zip(data["messages"], data["media_files"], strict=True)]}  # fmt: skip


COOKERS = {"packed_captioning": cook_single_image, "packed_vqa": cook_single_image,
           "packed_multi_mix_qa": cook_multi_mix_qa, "packed_chat_mix": cook_chat_mix}  # fmt: skip


class PublishedTrainerReader(DefaultTaskEncoder):
    """energon's decoder as the trainer sets it (images to PIL by extension, videos to its AV decoder),
    the cookers above."""

    decoder = SampleDecoder(image_decode="pil")
    cookers = [Cooker(cook, has_subflavors={"sample_type": name}) for name, cook in COOKERS.items()]

    def encode_sample(self, sample):
        return sample

    def batch(self, samples):
        return samples


def _read_as_the_trainer(root) -> list[dict]:
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(root, worker_config=worker_config, batch_size=1, shuffle_buffer_size=None,
                                max_samples_per_sequence=None, task_encoder=PublishedTrainerReader(), repeat=False)  # fmt: skip
    return [sub for batch in get_loader(dataset) for cooked in batch for sub in cooked["subs"]]


@pytest.mark.parametrize(("sample_type", "samples"), [
    ("packed_captioning", SINGLE_IMAGE), ("packed_vqa", SINGLE_IMAGE),
    ("packed_multi_mix_qa", CONVERSATIONS), ("packed_chat_mix", CONVERSATIONS | SYSTEM),
])  # fmt: skip
def test_the_published_trainer_reads_back_every_sample(tmp_path, qwen25_processor_dir, sample_type, samples):
    config = _pipeline(tmp_path, qwen25_processor_dir, samples, sample_type)
    assert write.run(config).exit_code == 0 and verify.run(config).exit_code == 0
    got = _read_as_the_trainer(config.packed_wds_dir)
    planned = sum(len(p.sample_ids) for p in read_plan(config.work_dir))
    assert len(got) == planned == len(samples)  # the trainer sees as many sub-samples as the plan holds
    want = Counter(repr((turns, [_expected_media(m) for m in media])) for _, _, turns, media in samples.values())
    seen = Counter(repr(([tuple(t) for t in sub["turns"]], [_media(m) for m in sub["media"]])) for sub in got)
    assert seen == want  # same prompts, answers and media (decoded as the trainer decodes them) per sub-sample
    # vlmpack's own loader reads the same folder (vlmpack.json beside the layout's json), at the planned lengths
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir, qwen25_processor_dir)
    batches = list(PackDataset(config.packed_wds_dir, encoder, split="train"))
    assert sorted(i for b in batches for i in b.sample_ids) == sorted(f"part-0.tar/{k}" for k in samples)


@pytest.mark.parametrize(("sample_type", "refused"), [
    ("packed_vqa", {"two_images": "not exactly one image", "multi_turn": "not one user turn",
                    "video": "not exactly one image", "with_system": "not one user turn"}),
    ("packed_multi_mix_qa", {"with_system": "a system prompt"}),
])  # fmt: skip
def test_a_layout_that_cannot_hold_samples_refuses_before_any_tar(tmp_path, qwen25_processor_dir, sample_type, refused):
    config = _pipeline(tmp_path, qwen25_processor_dir, CONVERSATIONS | SYSTEM, sample_type)
    with pytest.raises(LayoutError) as caught:
        write.run(config)
    message = str(caught.value)
    assert f"{len(refused)} of the planned samples cannot be written" in message
    for why in refused.values():
        assert why in message
    assert "packed_chat_mix" in message  # the layout that holds them
    assert not list(config.packed_wds_dir.glob("pretrain-*.tar"))


def test_a_folder_read_as_another_layout_is_refused_naming_both(tmp_path, qwen25_processor_dir):
    config = _pipeline(tmp_path, qwen25_processor_dir, SINGLE_IMAGE, "packed_vqa")
    write.run(config)
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir, qwen25_processor_dir)
    other = PackEncoder(config_from_dict({**{"model": {"processor_kwargs": {
        "pretrained_model_name_or_path": str(qwen25_processor_dir)}}}, "sample": {"sample_type": "packed_chat_mix"}}))  # fmt: skip
    with pytest.raises(LayoutError, match="written as sample_type 'packed_vqa'.*reads 'packed_chat_mix'"):
        PackDataset(config.packed_wds_dir, other)
    # energon logs a cooker's error and skips the sample by default; a training job sees that line for every pack
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=reraise_exception)
    dataset = get_train_dataset(config.packed_wds_dir, worker_config=worker_config, batch_size=1,
                                shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False,
                                task_encoder=PackTaskEncoder(encoder, sample_type="packed_chat_mix"))  # fmt: skip
    with pytest.raises(LayoutError, match="written as sample_type 'packed_vqa'.*reads sample_type 'packed_chat_mix'"):
        next(iter(get_loader(dataset)))


def test_an_unknown_layout_lists_the_valid_ones():
    with pytest.raises(Exception, match="packed_chat_mix.*packed_multi_mix_qa.*packed_captioning.*packed_vqa"):  # noqa: PT011
        config_from_dict({"sample": {"sample_type": "packed_chat"}})
