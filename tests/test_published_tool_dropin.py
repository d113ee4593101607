"""A drop-in for the published offline-packing tool (LLaVA-OneVision-1.5 ``examples_offline_packing``).

Its configs, written here key for key with only the paths changed, load; its keys without an
equivalent each give one notice; and the real pipeline (scan -> bucket -> plan -> write -> verify)
runs on shards in its converter's layouts (``convert_to_webdataset.py``):

    mix / video / text    key image_N | video_N | text_N, parts "<i>_<basename>",
                          json {"texts": <HF messages>, "media": image|video|text, "name": [parts]}
    vqa / caption         key = the record id, one part "jpg", json = the message list itself (VQA)
                          or {"captions": [...], "prompts"/"prompt": [...]} (captioning)

Every input sample ends packed or dropped with the reason this file expects of it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from vlmpack_offline.config import load_config
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import bucket, plan, scan, verify, write
from vlmpack_offline.stages.bucket import read_bucket_drops
from vlmpack_offline.synthetic.processor_dir import tokenizer_files_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard

# -- the published configs, key for key (paths are placeholders filled per test) -------------------------------

# config.yaml of the WDS-native tool (Kimi-K2.5 production packing, text-only loader)
CONFIG_YAML = """
data:
  input_format: "wds"
  wds_dir: "{wds}"
  template_text_key: "texts"
  work_dir: "{work}"
  packed_wds_dir: "{packed}"
model:
  model_type: "kimi-k2.5"
  processor_loader: "auto_tokenizer"
  use_hf_chat_template: true
  chat_template_path: "{template}"
  chat_template_kwargs:
    thinking: false
  processor_kwargs:
    pretrained_model_name_or_path: "{processor}"
    min_pixels: 3136
    max_pixels: 4014080
    trust_remote_code: True
    use_fast: False
media_preprocess:
  image: custom_image_preprocess
sample:
  max_token_len: 65536
  sample_type: packed_multi_mix_qa
packing:
  algorithm: "best_fit_decreasing"
  validate_pack_plan: false
artifacts:
  debug_artifacts: false
  keep_intermediate: false
packed_wds:
  maxsize: 2000000000
  maxcount: 1000000000
process:
  workers: 1
  max_shards: 0
log:
  level: "INFO"
"""

# config_256k.yaml: the same keys for a 256k context with the Qwen-VL processor
CONFIG_256K_YAML = """
data:
  input_format: "wds"
  wds_dir: "{wds}"
  template_text_key: "texts"
  work_dir: "{work}"
  packed_wds_dir: "{packed}"
model:
  model_type: "qwenvl"
  processor_loader: "auto_processor"
  use_hf_chat_template: true
  processor_kwargs:
    pretrained_model_name_or_path: "{processor}"
    min_pixels: 3136
    max_pixels: 4014080
    trust_remote_code: True
    use_fast: False
media_preprocess:
  image: custom_image_preprocess
sample:
  max_token_len: 262144
  sample_type: packed_multi_mix_qa
packing:
  algorithm: "best_fit_decreasing"
  validate_pack_plan: false
artifacts:
  debug_artifacts: false
  keep_intermediate: false
packed_wds:
  maxsize: 2000000000
  maxcount: 1000000000
process:
  workers: 2
  max_shards: 0
log:
  level: "INFO"
"""

# packed_vqa_demo.yaml of the earlier tool: packed_json_dir instead of work_dir, chunked processing keys
PACKED_VQA_DEMO_YAML = """
data:
  wds_dir: "{wds}"
  template_text_key: "messages"
  packed_json_dir: "{work}"
  packed_wds_dir: "{packed}"
model:
  model_type: "qwenvl"
  processor_kwargs:
    pretrained_model_name_or_path: "{processor}"
    min_pixels: 3136
    max_pixels: 4014080
    trust_remote_code: True
    use_fast: False
media_preprocess:
  image: custom_image_preprocess
sample:
  max_token_len: 8192
  sample_type: packed_vqa
process:
  chunk_size: 5000
  merge_batch_size: 20
  time_out: 2000
log:
  level: "INFO"
"""

# its CI config: a small run with the hashbucket algorithm and every debug switch on
CI_YAML = """
data:
  input_format: "wds"
  wds_dir: "{wds}"
  template_text_key: "texts"
  work_dir: "{work}"
  packed_wds_dir: "{packed}"
model:
  model_type: "qwenvl"
  processor_loader: "auto_processor"
  use_hf_chat_template: false
  processor_kwargs:
    pretrained_model_name_or_path: "{processor}"
sample:
  max_token_len: 8192
  sample_type: packed_multi_mix_qa
packing:
  algorithm: "hashbucket"
  validate_pack_plan: true
artifacts:
  debug_artifacts: true
  keep_intermediate: true
packed_wds:
  maxsize: 100000000
  maxcount: 2
process:
  workers: 2
  max_shards: 0
  chunk_size: 100
  merge_batch_size: 4
  time_out: 600
log:
  level: "DEBUG"
"""

SHAPES = {"config.yaml": CONFIG_YAML, "config_256k.yaml": CONFIG_256K_YAML,
          "packed_vqa_demo.yaml": PACKED_VQA_DEMO_YAML, "ci.yaml": CI_YAML}  # fmt: skip

# the keys of each shape that have no effect here: exactly one notice each
NO_EFFECT = {
    "config.yaml": {"model.use_hf_chat_template", "model.chat_template_path", "media_preprocess.image",
                    "packing.validate_pack_plan", "artifacts.debug_artifacts", "artifacts.keep_intermediate",
                    "process.max_shards"},
    "config_256k.yaml": {"model.use_hf_chat_template", "media_preprocess.image", "packing.validate_pack_plan",
                         "artifacts.debug_artifacts", "artifacts.keep_intermediate", "process.max_shards"},
    "packed_vqa_demo.yaml": {"media_preprocess.image", "process.chunk_size", "process.merge_batch_size",
                             "process.time_out"},
    "ci.yaml": {"model.use_hf_chat_template", "packing.validate_pack_plan", "artifacts.debug_artifacts",
                "artifacts.keep_intermediate", "process.max_shards", "process.chunk_size",
                "process.merge_batch_size", "process.time_out"},
}  # fmt: skip

# A Kimi-K2.5-like chat template: `thinking: false` (a chat_template_kwargs entry) adds an empty think block
# to every assistant turn; left undefined, it adds nothing.
KIMI_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'assistant' and thinking is defined and thinking is false %}<think></think>{% endif -%}"
    "{%- if m.content is string %}{{ m.content }}{% else %}"
    "{%- for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}{% endif -%}"
    "<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if thinking is defined and thinking is false %}<think></think>{% endif %}{% endif -%}"
)


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory) -> Path:
    """A text-model folder that declares model_type kimi_k25 (the Qwen tokenizer files, the template above)."""
    target = tmp_path_factory.mktemp("kimi_k25")
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_files_dir() / name, target / name)
    settings = json.loads((target / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (target / "tokenizer_config.json").write_text(json.dumps(settings))
    (target / "chat_template.jinja").write_text(KIMI_TEMPLATE)
    (target / "config.json").write_text(json.dumps({"model_type": "kimi_k25"}))
    return target


def _write_shape(tmp_path: Path, shape: str, processor: Path, wds: Path, *, template: Path | None = None) -> Path:
    text = SHAPES[shape].format(wds=wds, work=tmp_path / "work", packed=tmp_path / "packed", processor=processor,
                                template=template or "")  # fmt: skip
    path = tmp_path / shape
    path.write_text(text)
    return path


def _template_copy(tmp_path: Path, kimi_dir: Path) -> Path:
    """The published config points chat_template_path at its own copy of the checkpoint's template."""
    copy = tmp_path / "templates" / "chat_template.jinja"
    copy.parent.mkdir(exist_ok=True)
    copy.write_text((kimi_dir / "chat_template.jinja").read_text())
    return copy


# -- shards in the published converter's layouts --------------------------------------------------------------

LONG = " hello" * 100_000  # ~100k tokens: overlong at 8192 and 65536, fits 262144


def _texts(user: str, answer: str, system: str | None = None) -> list[dict]:
    turns = [{"role": "system", "content": system}] if system else []
    return [*turns, {"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def _published_shards(root: Path) -> dict[str, str]:
    """Write the shards; returns sample id -> what the sample is: "text", "image", "video" or a parse drop reason."""
    jpg, png = image_bytes(96, 64, seed=1), image_bytes(64, 64, fmt="PNG", seed=2)
    mix = [  # convert_to_webdataset.py --media mix: texts + media + name, parts "<i>_<basename>"
        ("image", SyntheticSample(key="image_0", media={"0_cat.jpg": jpg, "1_dog.png": png}, json={
            "texts": _texts("<image>\n<image>\nCompare the two pictures.", "Both are pets."),
            "media": "image", "name": ["0_cat.jpg", "1_dog.png"]})),
        ("video", SyntheticSample(key="video_1", media={"0_clip.mp4": video_bytes(8, 4, 64, 64)}, json={
            "texts": _texts("<video>\nWhat happens?", "A square moves.", system="You are helpful."),
            "media": "video", "name": ["0_clip.mp4"]})),
        ("text", SyntheticSample(key="text_2", json={"texts": _texts("Say hi.", "Hi!"), "media": "text"})),
        ("media_mismatch", SyntheticSample(key="image_3", media={"0_a.jpg": jpg, "1_b.jpg": jpg}, json={
            "texts": _texts("<image>\nOne tag for two images.", "Hm."), "media": "image", "name": ["0_a.jpg", "1_b.jpg"]})),
        ("image", SyntheticSample(key="image_4", media={"0_a.jpg": jpg}, json={  # the media_type / media_files spelling
            "texts": _texts("<image>What is this?", "A test pattern."), "media_type": "image",
            "media_files": [["0_a.jpg"]]})),
        ("text", SyntheticSample(key="text_5", json={"texts": _texts("Repeat hello.", LONG), "media": "text"})),
    ]  # fmt: skip
    vqa = [  # --sample_type vqa: key = record id ('.' -> '_'), the image as "jpg", the json IS the message list
        ("image", SyntheticSample(key="coco_000123", media={"jpg": jpg}, json=[
            {"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A bus."}])),
        ("image", SyntheticSample(key="coco_000124", media={"jpg": jpg}, json=[  # no tag: the image leads the turn
            {"role": "user", "content": "How many?"}, {"role": "assistant", "content": "Two."}])),
        ("unknown_format", SyntheticSample(key="coco_000125", media={"jpg": jpg}, json=[])),
    ]  # fmt: skip
    captions = [  # captioning: {"captions": [{"content"}]} + jpg; the raw-packing {images, prompt, captions} forms
        ("image", SyntheticSample(key="cap_0", media={"jpg": jpg}, json={"captions": [{"content": "A red bus."}]})),
        ("image", SyntheticSample(key="cap_1", media={"img000.jpg": jpg, "img001.jpg": png}, json={
            "images": ["img000.jpg", "img001.jpg"], "prompt": ["Describe.", "And this one?"],
            "captions": ["A cat.", "A dog."]})),
        ("image", SyntheticSample(key="cap_2", media={"img000.jpg": jpg}, json={
            "images": [["img000.jpg"], []], "prompts": [["Describe this."], ["How are you?", "And now?"]],
            "captions": [["A tree."], ["Fine.", "Still fine."]]})),
        ("unknown_format", SyntheticSample(key="cap_3", media={"jpg": jpg}, json={"captions": "not a list"})),
    ]  # fmt: skip
    expected = {}
    for rel, samples in (("pretrain-0.tar", mix), ("vqa/pretrain-0.tar", vqa), ("caption/pretrain-0.tar", captions)):
        write_shard(root / rel, [s for _, s in samples])
        expected.update({f"{rel}/{s.key}": what for what, s in samples})
    return expected


def _outcomes(config) -> dict[str, str]:
    """Sample id -> "packed" (in exactly one pack) or its drop reason (manifest, or bucket's drop lists)."""
    with Manifest(manifest_path(config.data.work_dir)) as manifest:
        status = {s.id: s.status for s in manifest.iter_samples()}
    packed = Counter(i for pack in read_plan(config.data.work_dir) for i in pack.sample_ids)
    assert set(packed.values()) <= {1}, "a sample in two packs"
    bucket_drops = read_bucket_drops(config)  # id -> overlong / layout_unfit
    out = {}
    for sample_id, state in status.items():
        if state != "ok":
            out[sample_id] = state
        else:
            assert (sample_id in bucket_drops) != (sample_id in packed), sample_id
            out[sample_id] = bucket_drops.get(sample_id, "packed")
    return out


def _run_pipeline(config):
    """scan -> verify on shards that hold faults on purpose (the drop gate is opened: scan.max_drop_ratio 1.0).
    packed_vqa and packed_multi_mix_qa cannot hold some of the mixture (texts, videos, a system prompt, two
    images): bucket drops those as layout_unfit and the rest is written. Returns the config that ran."""
    config = dataclasses.replace(config, scan=dataclasses.replace(config.scan, max_drop_ratio=1.0))
    for stage in (scan, bucket, plan, write, verify):
        result = stage.run(config)
        assert result.exit_code == 0, (stage.__name__, result.summary)
    return config


# what each published layout cannot hold of _published_shards, by its rules (docs/switch.md), read off the data
UNFIT = {
    "packed_multi_mix_qa": {"pretrain-0.tar/video_1"},  # its system prompt
    "packed_vqa": {"pretrain-0.tar/image_0",  # two images
                   "pretrain-0.tar/video_1", "pretrain-0.tar/text_2", "pretrain-0.tar/text_5",  # no image
                   "caption/pretrain-0.tar/cap_1", "caption/pretrain-0.tar/cap_2"},  # several turns
}  # fmt: skip


def _load_every_pack(config, processor: Path) -> list:
    """Each pack through the loader, built from the packed dataset's recorded settings: a sub-sample whose
    materialized length differs from the planned one raises ``LengthMismatchError``."""
    from vlmpack_offline.loader import PackDataset, PackEncoder

    encoder = PackEncoder.from_packed_dir(config.data.packed_wds_dir, processor)
    return list(PackDataset(config.data.packed_wds_dir, encoder, split="train"))


# -- tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_published_config_loads_with_one_notice_per_key_without_effect(
    tmp_path, shape, qwen25_processor_dir, kimi_dir, caplog
):
    processor = kimi_dir if shape == "config.yaml" else qwen25_processor_dir
    path = _write_shape(tmp_path, shape, processor, tmp_path / "wds", template=_template_copy(tmp_path, kimi_dir))
    with caplog.at_level("WARNING", logger="vlmpack_offline.config"):
        config = load_config(path)
    named = [n.split("`")[1] for n in config.notices]
    assert sorted(named) == sorted(NO_EFFECT[shape])  # one each, no more
    assert all("has no effect in vlmpack: " in n for n in config.notices)
    logged = [r.getMessage() for r in caplog.records]
    assert all(logged.count(n) <= 1 for n in config.notices)  # logged once per process
    assert config.data.work_dir == str(tmp_path / "work")  # packed_json_dir is the work folder where it is used
    assert config.data.packed_wds_dir == str(tmp_path / "packed")
    raw = yaml.safe_load(SHAPES[shape])
    assert config.sample.max_token_len == raw["sample"]["max_token_len"]
    assert config.sample.sample_type == raw["sample"]["sample_type"]
    assert config.model.model_type == {"kimi-k2.5": "kimi_k25"}.get(raw["model"]["model_type"], "qwenvl")


def test_packed_json_dir_alone_holds_work_and_packed_output_side_by_side(tmp_path, qwen25_processor_dir):
    """The tool's own config has no work_dir / packed_wds_dir: both land in packed_json_dir, not nested."""
    expected = _published_shards(tmp_path / "wds")
    text = PACKED_VQA_DEMO_YAML.replace('  packed_wds_dir: "{packed}"\n', "")
    path = tmp_path / "c.yaml"
    path.write_text(text.format(wds="wds", work="packed_json", processor=qwen25_processor_dir))
    config = load_config(path)
    assert config.data.work_dir == str(tmp_path / "packed_json" / "work")
    assert config.data.packed_wds_dir == str(tmp_path / "packed_json" / "packed_wds")  # where the tool wrote it
    _run_pipeline(config)
    assert set(_outcomes(config)) == set(expected)
    assert sorted((tmp_path / "packed_json" / "packed_wds").glob("pretrain-*.tar"))


def test_chat_template_path_that_differs_from_the_folder_is_refused(tmp_path, kimi_dir):
    other = tmp_path / "other.jinja"
    other.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    path = _write_shape(tmp_path, "config.yaml", kimi_dir, tmp_path / "wds", template=other)
    with pytest.raises(ConfigError, match="differs from the chat template of the processor folder"):
        load_config(path)


def test_qwenvl_needs_a_qwen_folder(tmp_path, kimi_dir):
    wds = tmp_path / "wds"
    write_shard(wds / "pretrain-0.tar", [SyntheticSample(key="text_0", json={"texts": _texts("a", "b")})])
    path = _write_shape(tmp_path, "ci.yaml", kimi_dir, wds)
    with pytest.raises(ConfigError, match="'qwenvl'.*needs a Qwen-VL processor folder.*'kimi_k25'"):
        scan.run(load_config(path))


@pytest.mark.parametrize("shape", ["packed_vqa_demo.yaml", "ci.yaml", "config_256k.yaml"])
def test_qwenvl_shapes_pack_the_published_layouts(tmp_path, shape, qwen25_processor_dir):
    expected = _published_shards(tmp_path / "wds")
    config = _run_pipeline(load_config(_write_shape(tmp_path, shape, qwen25_processor_dir, tmp_path / "wds")))
    settings = json.loads((tmp_path / "packed" / ".nv-meta" / "vlmpack.json").read_text())
    assert settings["model"]["model_type"] == "qwen2_5_vl"  # qwenvl, resolved from the folder and recorded
    capacity = config.sample.max_token_len
    want = {
        i: ("overlong" if i.endswith("/text_5") and capacity < 200_000 else
            "layout_unfit" if i in UNFIT[config.sample.sample_type] else
            "packed" if what in ("text", "image", "video") else what)
        for i, what in expected.items()
    }  # fmt: skip
    assert _outcomes(config) == want
    if shape == "ci.yaml":  # the loader reproduces every planned length of the published layouts
        batches = _load_every_pack(config, qwen25_processor_dir)
        assert sum(len(b.sample_ids) for b in batches) == list(want.values()).count("packed")


def test_kimi_config_counts_text_with_its_template_kwargs_and_drops_media(tmp_path, kimi_dir):
    expected = _published_shards(tmp_path / "wds")
    config = load_config(_write_shape(tmp_path, "config.yaml", kimi_dir, tmp_path / "wds",
                                      template=_template_copy(tmp_path, kimi_dir)))  # fmt: skip
    config = _run_pipeline(config)  # Kimi's config drops the media: one-turn texts, which the layout holds
    want = {
        i: ("overlong" if i.endswith("/text_5") else "packed" if what == "text" else
            "unsupported_media" if what in ("image", "video") else what)
        for i, what in expected.items()
    }  # fmt: skip
    assert _outcomes(config) == want
    assert _load_every_pack(config, kimi_dir)  # the loader renders with the same kwargs: lengths agree
    # thinking: false reached the template: each assistant turn holds "<think></think>" (unset: nothing)
    with Manifest(manifest_path(config.data.work_dir)) as manifest:
        with_kwargs = {s.id: s.token_len for s in manifest.iter_samples()}
    plain = tmp_path / "plain"
    plain.mkdir()
    text = (tmp_path / "config.yaml").read_text().replace("    thinking: false\n", "").replace(
        "  chat_template_kwargs:\n", "").replace(str(tmp_path / "work"), str(plain / "work"))
    (plain / "config.yaml").write_text(text)
    plain_config = load_config(plain / "config.yaml")
    assert plain_config.model.chat_template_kwargs == {}
    scan.run(plain_config)
    with Manifest(manifest_path(plain_config.data.work_dir)) as manifest:
        without = {s.id: s.token_len for s in manifest.iter_samples()}
    from transformers import AutoTokenizer

    think = len(AutoTokenizer.from_pretrained(kimi_dir).encode("<think></think>", add_special_tokens=False))
    sample = "pretrain-0.tar/text_2"  # one assistant turn
    assert with_kwargs[sample] - without[sample] == think > 0
