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

import dataclasses
import hashlib
import io
import json
import re
import tarfile
from collections import Counter

import numpy as np
import pytest
from _layout_samples import CAPTIONS, CONVERSATIONS, LATE_SYSTEM, SINGLE_IMAGE, SYSTEM, pack_through_plan
from _packed_fixture import build_inputs
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    SampleDecoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
    stateless,
)
from PIL import Image

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError, LayoutError, StaleArtifactError
from vlmpack_offline.loader import PackDataset, PackEncoder, PackTaskEncoder
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import bucket, plan, verify, write
from vlmpack_offline.stats import read_stats


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
    data = _json(sample)
    images = [sample.get(f"img{i}.jpg") for i in range(len(data["images"]))]
    return {"subs": [{"turns": [("user", p), ("assistant", c)], "media": [img]}
                     for p, c, img in zip(data["prompts"], data["captions"], images, strict=True)]}  # fmt: skip


def _json(sample: dict) -> dict:
    """The json part: energon's decoder gives a dict; undecoded (``RawBytesReader``) it is bytes."""
    value = sample["json"]
    return json.loads(value) if isinstance(value, (bytes, bytearray)) else value


def _as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


@stateless
def cook_multi_mix_qa(sample: dict) -> dict:
    data = _json(sample)
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
    data = _json(sample)
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


class RawBytesReader(PublishedTrainerReader):
    """The same cookers without decoding: each media part's bytes as stored."""

    decoder = None


def _read_as_the_trainer(root, reader=PublishedTrainerReader) -> list[dict]:
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(root, worker_config=worker_config, batch_size=1, shuffle_buffer_size=None,
                                max_samples_per_sequence=None, task_encoder=reader(), repeat=False)  # fmt: skip
    return [sub for batch in get_loader(dataset) for cooked in batch for sub in cooked["subs"]]


@pytest.mark.parametrize(("sample_type", "samples"), [
    ("packed_captioning", CAPTIONS), ("packed_vqa", SINGLE_IMAGE),
    ("packed_multi_mix_qa", CONVERSATIONS), ("packed_chat_mix", CONVERSATIONS | SYSTEM),
])  # fmt: skip
def test_the_published_trainer_reads_back_every_sample(tmp_path, qwen25_processor_dir, sample_type, samples):
    config = pack_through_plan(tmp_path, qwen25_processor_dir, samples, sample_type)
    assert write.run(config).exit_code == 0 and verify.run(config).exit_code == 0
    got = _read_as_the_trainer(config.packed_wds_dir)
    planned = sum(len(p.sample_ids) for p in read_plan(config.work_dir))
    assert len(got) == planned == len(samples)  # the trainer sees as many sub-samples as the plan holds
    want = Counter(repr((turns, [_expected_media(m) for m in media])) for _, _, turns, media in samples.values())
    seen = Counter(repr(([tuple(t) for t in sub["turns"]], [_media(m) for m in sub["media"]])) for sub in got)
    assert seen == want  # same prompts, answers and media (decoded as the trainer decodes them) per sub-sample
    raw = Counter(repr(([tuple(t) for t in sub["turns"]], [hashlib.sha256(m).hexdigest() for m in sub["media"]]))
                  for sub in _read_as_the_trainer(config.packed_wds_dir, RawBytesReader))  # fmt: skip
    assert raw == Counter(repr((turns, [hashlib.sha256(m).hexdigest() for m in media]))
                          for _, _, turns, media in samples.values())  # and the media bytes are the input's  # fmt: skip
    # vlmpack's own loader reads the same folder (vlmpack.json beside the layout's json), at the planned lengths
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir, qwen25_processor_dir)
    batches = list(PackDataset(config.packed_wds_dir, encoder, split="train"))
    assert sorted(i for b in batches for i in b.sample_ids) == sorted(f"part-0.tar/{k}" for k in samples)


@pytest.mark.parametrize(("sample_type", "refused"), [
    ("packed_vqa", {"two_images": "not exactly one image", "multi_turn": "not one user turn",
                    "video": "not exactly one image", "with_system": "not one user turn",
                    "late_system": "not one user turn"}),
    ("packed_multi_mix_qa", {"with_system": "a system prompt", "late_system": "a system prompt"}),
    ("packed_chat_mix", {"late_system": "a system turn that is not the first"}),
    ("packed_captioning", {"cap_jpg": "a prompt", "cap_png": "a prompt", "odd_name": "a prompt",
                           "two_images": "not exactly one image",
                           "multi_turn": "not one user turn", "video": "not exactly one image",
                           "with_system": "not one user turn", "late_system": "not one user turn"}),
])  # fmt: skip
def test_bucket_drops_what_a_layout_cannot_hold_and_the_rest_is_written(tmp_path, qwen25_processor_dir,
                                                                         sample_type, refused):
    everything = CONVERSATIONS | SYSTEM | LATE_SYSTEM
    config = pack_through_plan(tmp_path, qwen25_processor_dir, everything, sample_type,
                               scan={"max_drop_ratio": 1.0})  # drops on purpose
    listed = [json.loads(line) for line in (config.work_dir / "bins" / "layout_unfit.jsonl").read_text().splitlines()]
    errors = {row["id"]: row["error"] for row in listed}
    assert errors.keys() == {f"part-0.tar/{key}" for key in refused}  # each one, with the layout's reason
    assert all(why in errors[f"part-0.tar/{key}"] and sample_type in errors[f"part-0.tar/{key}"]
               for key, why in refused.items())
    assert {row["status"] for row in listed} == {"layout_unfit"}
    planned = {i for pack in read_plan(config.work_dir) for i in pack.sample_ids}
    assert planned == {f"part-0.tar/{key}" for key in everything} - errors.keys()  # the rest is packed
    assert write.run(config).exit_code == 0 and verify.run(config).exit_code == 0
    assert read_stats(config.work_dir)["drops"]["layout_unfit"] == len(refused)


def test_layout_unfit_counts_under_the_drop_gate(tmp_path, qwen25_processor_dir):
    """5 of the 13 samples have a system prompt packed_multi_mix_qa cannot hold: past the default 5% the
    bucket exits 1 after its reports, and plan and write say the same line instead of going on."""
    config = pack_through_plan(tmp_path, qwen25_processor_dir, CONVERSATIONS | SYSTEM | LATE_SYSTEM,
                               "packed_multi_mix_qa", scan={"max_drop_ratio": 1.0})
    gated = dataclasses.replace(config, scan=dataclasses.replace(config.scan, max_drop_ratio=0.05))
    n_unfit = len((config.work_dir / "bins" / "layout_unfit.jsonl").read_text().splitlines())
    results = [stage.run(gated) for stage in (bucket, plan, write)]
    assert [r.exit_code for r in results] == [1, 1, 1]
    assert all(f"top reasons: layout_unfit {n_unfit}" in r.summary[-1] for r in results)
    assert not list(config.packed_wds_dir.glob("pretrain-*.tar"))


def test_a_sample_that_reaches_write_unfit_is_refused_before_any_tar(tmp_path, qwen25_processor_dir):
    """The net under bucket: a manifest that does not record what the layout cannot hold (not made by this
    scan) lets an unfit sample reach write, which refuses before it touches the output, listing each."""
    config = pack_through_plan(tmp_path, qwen25_processor_dir, CONVERSATIONS | SYSTEM, "vlmpack_packed")
    with Manifest(manifest_path(config.work_dir)) as manifest, manifest.conn:
        manifest.conn.execute("UPDATE samples SET layout_unfit = ''")
    multi = dataclasses.replace(config, sample=dataclasses.replace(config.sample, sample_type="packed_multi_mix_qa"))
    for stage in (bucket, plan):
        assert stage.run(multi).exit_code == 0
    with pytest.raises(LayoutError, match="nothing was written or removed") as caught:
        write.run(multi)
    assert "a system prompt" in str(caught.value) and "`vlmpack scan --rescan`" in str(caught.value)
    assert not list(config.packed_wds_dir.glob("pretrain-*.tar"))
    listed = [json.loads(line) for line in (config.work_dir / "layout_refused.jsonl").read_text().splitlines()]
    assert {row["id"] for row in listed} == {f"part-0.tar/{key}" for key in SYSTEM}


def test_a_folder_read_as_another_layout_is_refused_naming_both(tmp_path, qwen25_processor_dir, capsys):
    config = pack_through_plan(tmp_path, qwen25_processor_dir, SINGLE_IMAGE, "packed_vqa")
    write.run(config)
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir, qwen25_processor_dir)
    other = PackEncoder(config_from_dict({**{"model": {"processor_kwargs": {
        "pretrained_model_name_or_path": str(qwen25_processor_dir)}}}, "sample": {"sample_type": "packed_chat_mix"}}))  # fmt: skip
    with pytest.raises(LayoutError, match="written as sample_type 'packed_vqa'.*reads 'packed_chat_mix'"):
        PackDataset(config.packed_wds_dir, other)
    # energon hands a cooker's error to its error handler (by default: print it and skip the sample, every
    # pack alike, until its failure tolerance stops the job); either way the refusal is what the user reads
    dataset = get_train_dataset(config.packed_wds_dir, worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
                                batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False,
                                task_encoder=PackTaskEncoder(encoder, sample_type="packed_chat_mix"))  # fmt: skip
    try:
        batches = list(get_loader(dataset))
    except Exception as exc:  # noqa: BLE001 - energon's own error types differ between its versions
        chain, batches = [], []
        while exc is not None:
            chain.append(str(exc))
            exc = exc.__cause__ or exc.__context__
        capsys.readouterr()
        said = "\n".join(chain)
    else:
        captured = capsys.readouterr()
        said = captured.out + captured.err
    assert batches == []
    assert re.search("written as sample_type 'packed_vqa'.*reads sample_type 'packed_chat_mix'", said)


def test_a_refused_layout_leaves_the_previous_output_as_it_was(tmp_path, qwen25_processor_dir):
    config = pack_through_plan(tmp_path, qwen25_processor_dir, CONVERSATIONS, "vlmpack_packed")
    assert write.run(config).exit_code == 0
    before = {p.name: p.read_bytes() for p in config.packed_wds_dir.rglob("*") if p.is_file()}
    vqa = dataclasses.replace(config, sample=dataclasses.replace(config.sample, sample_type="packed_vqa"))
    with pytest.raises(StaleArtifactError, match=r'sample\.sample_type "vlmpack_packed" -> "packed_vqa"\): rerun '
                                                 r"`vlmpack bucket`"):
        write.run(vqa)  # a new layout drops other samples: bucket first
    assert {p.name: p.read_bytes() for p in config.packed_wds_dir.rglob("*") if p.is_file()} == before
    assert verify.run(config).exit_code == 0


def test_verify_refuses_a_dataset_yaml_of_an_older_vlmpack(tmp_path, qwen25_processor_dir):
    config = pack_through_plan(tmp_path, qwen25_processor_dir, CAPTIONS, "vlmpack_packed")
    assert write.run(config).exit_code == 0
    (config.packed_wds_dir / ".nv-meta" / "dataset.yaml").write_text(
        "__module__: vlmpack_offline.output.energon_dataset\n__class__: PackedCrudeWebdataset\n")
    result = verify.run(config)
    assert result.exit_code != 0 and "not energon's own CrudeWebdataset" in result.summary[0]


def test_verify_finds_a_published_json_that_is_not_its_packs(tmp_path, qwen25_processor_dir):
    config = pack_through_plan(tmp_path, qwen25_processor_dir, SINGLE_IMAGE, "packed_vqa")
    assert write.run(config).exit_code == 0 and verify.run(config).exit_code == 0
    tar_path = next(config.packed_wds_dir.glob("pretrain-*.tar"))
    with tarfile.open(tar_path) as tar:
        member = next(m for m in tar if m.name.endswith(".json") and not m.name.endswith(".vlmpack.json"))
    data = bytearray(tar_path.read_bytes())
    at = data.index(b"A gradient.", member.offset_data)
    data[at] = ord("B")  # same size: only the trainer's json changes, vlmpack.json and the index still agree
    tar_path.write_bytes(bytes(data))
    result = verify.run(config)
    assert result.exit_code != 0
    assert any("not the packed_vqa JSON of its vlmpack.json" in line for line in result.summary)


def test_a_published_layout_needs_packs_of_one_media_type():
    with pytest.raises(ConfigError, match="packed_multi_mix_qa holds one media kind per pack.*group_by: media_type"):
        config_from_dict({"sample": {"sample_type": "packed_multi_mix_qa"}, "packing": {"group_by": "none"}})


def test_a_pack_mixing_media_kinds_is_refused(tmp_path):
    """A hand-made plan that mixes text, image and video samples in one pack (the plan stage never does
    with packing.group_by: media_type): a published pack has one media_type."""
    inputs = build_inputs(tmp_path, sample={"sample_type": "packed_chat_mix"})
    with pytest.raises(LayoutError, match="a pack mixing image and text and video samples"):
        write.run(inputs.config)
    assert not list(inputs.config.packed_wds_dir.glob("pretrain-*.tar"))


def test_an_unknown_layout_lists_the_valid_ones():
    with pytest.raises(Exception, match="packed_chat_mix.*packed_multi_mix_qa.*packed_captioning.*packed_vqa"):  # noqa: PT011
        config_from_dict({"sample": {"sample_type": "packed_chat"}})
