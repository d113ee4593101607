"""Labels equal an oracle that shares no code with the loader, for templates as the models publish them.

The processor directories carry the chat templates Qwen2-VL / Qwen2.5-VL / Qwen3-VL
publish (no ``{% generation %}`` markers), plus one marker template. The oracle
reads the token ids alone: it finds every ``<|im_start|>assistant\\n`` header and
labels the tokens after it up to and including the next ``<|im_end|>`` (media pads
and the sample's first token excepted). For text and image samples the ids it
reads are the REAL HF processor's (``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` /
``Qwen3VLProcessor`` with the PIL image processor), and the loader's ids must equal
them too.
"""

from __future__ import annotations

import io
import json

import pytest
import torch
from PIL import Image
from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.stages import scan
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, generate_dataset, write_shard
from vlmpack_offline.tario import iter_samples, read_range

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}
PROCESSORS = {"qwen2_vl": Qwen2VLProcessor, "qwen2_5_vl": Qwen2_5_VLProcessor, "qwen3_vl": Qwen3VLProcessor}
CASES = [("qwen2_vl", "published"), ("qwen2_5_vl", "published"), ("qwen3_vl", "published"), ("qwen2_5_vl", "generation")]


def _config(processor_dir, tmp_path, video=TINY_VIDEO, **sections):
    raw = {
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "video": video,
    }  # fmt: skip
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw, source="test")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> list[tuple[str, object, dict[str, bytes]]]:
    """Every layout of the generated dataset: text, image, multi-image, video, multi-turn, system prompt."""
    paths = generate_dataset(tmp_path_factory.mktemp("wds"), seed=5, n_shards=2, samples_per_shard=14,
                             include_faults=False)  # fmt: skip
    samples = []
    for path in paths:
        with open(path, "rb") as handle:
            for raw in iter_samples(path):
                parts = {m.part: read_range(handle, m.offset, m.size) for m in raw.members}
                samples.append((raw.key, parse_conversation(parts.pop("json"), key=raw.key, parts=list(parts)), parts))
    return samples


def oracle_labels(ids: list[int], tokenizer) -> list[int]:
    """Labels from the ids alone: tokens of each assistant turn after its header, through its <|im_end|>."""
    start, end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    pads = set(tokenizer.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>"]))
    header = tokenizer.encode("assistant\n", add_special_tokens=False)
    labels = [-100] * len(ids)
    i = 0
    while i < len(ids):
        if ids[i] == start and ids[i + 1 : i + 1 + len(header)] == header:
            j = i + 1 + len(header)
            while ids[j] != end:
                labels[j] = -100 if ids[j] in pads else ids[j]
                j += 1
            labels[j] = end
            i = j
        i += 1
    labels[0] = -100
    return labels


def _real_processor(family: str, processor_dir, tokenizer):
    """The family's real processor class on the PIL image processor (its video processor needs torchvision)."""
    cls = type("ImageOnly", (PROCESSORS[family],), {"get_attributes": classmethod(lambda c: ["image_processor", "tokenizer"])})
    return cls(image_processor=Qwen2VLImageProcessorPil.from_pretrained(processor_dir), tokenizer=tokenizer,
               chat_template=tokenizer.chat_template)  # fmt: skip


def _encode_alone(encoder: PackEncoder, conversation, parts) -> torch.Tensor:
    counter = encoder.counter
    count = counter.count(conversation, [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media])
    sub = PackedSubSample(id="src/k", token_len=count.token_len, media_tokens=count.media_tokens,
                          messages=conversation.messages)  # fmt: skip
    return encoder.encode(PackedSample(pack_id=0, capacity=1 << 20, split="train", samples=(sub,)), parts)


@pytest.mark.parametrize(("family", "template"), CASES, ids=[f"{f}-{t}" for f, t in CASES])
def test_labels_equal_the_oracle_for_every_sample(family, template, dataset, tmp_path):
    processor_dir = build_processor_dir(tmp_path / "proc", family, template=template)
    encoder = PackEncoder(_config(processor_dir, tmp_path))
    tokenizer = encoder.counter.tokenizer
    assert ("{% generation %}" in tokenizer.chat_template) == (template == "generation")
    real = _real_processor(family, processor_dir, tokenizer)
    kinds = set()
    for key, conversation, parts in dataset:
        batch = _encode_alone(encoder, conversation, parts)
        ids = batch.input_ids[0].tolist()
        if conversation.media_type != "video":
            text = tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
            images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
            assert ids == list(real(text=[text], images=images or None)["input_ids"][0]), key
        expected = oracle_labels(ids, tokenizer)
        assert batch.labels[0].tolist() == expected, key
        assert sum(label != -100 for label in expected) >= 2, key
        roles = [m["role"] for m in conversation.messages]
        kinds.add(conversation.media_type)
        kinds.update({"system"} & set(roles))
        kinds.add("multi-turn" if roles.count("assistant") > 1 else "single-turn")
        kinds.add("multi-image" if len(conversation.media) > 1 else "")
    assert {"text", "image", "video", "system", "multi-turn", "single-turn", "multi-image"} <= kinds


def test_train_on_all_labels_every_text_token(dataset, qwen25_processor_dir, tmp_path):
    encoder = PackEncoder(_config(qwen25_processor_dir, tmp_path), EncoderOptions(train_on="all"))
    pads = set(encoder.counter.tokenizer.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>"]))
    for _key, conversation, parts in dataset[:8]:
        batch = _encode_alone(encoder, conversation, parts)
        ids = batch.input_ids[0].tolist()
        assert batch.labels[0].tolist() == [-100] + [-100 if i in pads else i for i in ids[1:]]


def test_a_sample_with_nothing_to_learn_is_dropped_at_scan_time(qwen25_processor_dir, tmp_path):
    no_answer = {"messages": [{"role": "user", "content": "Only a question?"}]}
    system_only = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    answered = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    write_shard(tmp_path / "src" / "part-000.tar", [
        SyntheticSample(key="no_answer", json=no_answer, media={}),
        SyntheticSample(key="system_only", json=system_only, media={}),
        SyntheticSample(key="answered", json=answered, media={}),
    ])  # fmt: skip
    config = _config(qwen25_processor_dir, tmp_path)
    scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        status = {row.key: row.status for row in manifest.iter_samples()}
    assert status == {"no_answer": "no_labels", "system_only": "no_labels", "answered": "ok"}

    everything = _config(qwen25_processor_dir, tmp_path, loss={"train_on": "all"},
                         data={"work_dir": str(tmp_path / "work_all")})  # fmt: skip
    scan.run(everything)
    with Manifest(manifest_path(everything.work_dir)) as manifest:
        assert {row.key: row.status for row in manifest.iter_samples()} == dict.fromkeys(status, "ok")


def _runs(labels: list[int]) -> list[list[int]]:
    """The labelled tokens, one list per unbroken run."""
    runs, current = [], []
    for label in [*labels, -100]:
        if label != -100:
            current.append(label)
        elif current:
            runs, current = [*runs, current], []
    return runs


def test_llava_onevision_labels_hold_each_turns_im_end_though_its_markers_leave_it_out(dataset, tmp_path):
    """LLaVA-OneVision's published template wraps the assistant text alone in {% generation %}; labels still
    hold each turn's <|im_end|>, as the ids-only oracle reads them (its pads are <image> / <video>)."""
    processor_dir = build_processor_dir(tmp_path / "proc", "llava_onevision")
    encoder = PackEncoder(_config(processor_dir, tmp_path, video={"min_frames": 4, "max_frames": 4}))  # no pixel bounds
    tokenizer = encoder.counter.tokenizer
    assert "{% generation %}" in tokenizer.chat_template
    image, video = tokenizer.convert_tokens_to_ids(["<image>", "<video>"])
    checked = 0
    for key, conversation, parts in dataset:
        if conversation.media_type == "video":  # the video tensors need torchvision; the labels do not differ
            continue
        batch = _encode_alone(encoder, conversation, parts)
        ids = batch.input_ids[0].tolist()
        expected = [-100 if i in (image, video) else label for i, label in zip(ids, oracle_labels(ids, tokenizer), strict=True)]
        assert batch.labels[0].tolist() == expected, key
        assert all(run[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") for run in _runs(expected)), key
        checked += 1
    assert checked >= 20


ENDINGS = ["Goodbye 👋", "ça va ✨", "结束了。", "family 👨‍👩‍👧", "done ✔️"]


@pytest.mark.parametrize(("family", "end_of_turn", "next_turn"), [("qwen2_5_vl", "<|im_end|>", ""),
                                                                  ("llava_onevision", "<|im_end|>", ""),
                                                                  ("glm4v", "", "<|user|>")])  # fmt: skip
def test_answers_ending_in_multi_byte_characters_decode_whole_from_their_labels(family, end_of_turn, next_turn,
                                                                                tmp_path):
    """Byte-level BPE spreads 👋 over two tokens, both mapped to the one character: labels hold both, so every
    assistant turn's labels decode to its answer + its end-of-turn token. GLM's template writes none: the model
    stops by emitting the next turn's <|user|> (one of its eos ids), which is labelled where it follows an answer;
    a last turn has none."""
    processor_dir = build_processor_dir(tmp_path / "proc", family)
    encoder = PackEncoder(_config(processor_dir, tmp_path, video={}))
    turns = [("Say bye.", ENDINGS[0]), ("And in French?", ENDINGS[1]), ("In Chinese?", ENDINGS[2])]
    samples = [turns[:1], turns, [("Who?", ENDINGS[3])], [("Ok?", ENDINGS[4])]]
    for n, sample in enumerate(samples):
        messages = [m for question, answer in sample for m in ({"role": "user", "content": question},
                                                                 {"role": "assistant", "content": answer})]  # fmt: skip
        conversation = parse_conversation(json.dumps({"messages": messages}), key=f"k{n}", parts=[])
        labels = _encode_alone(encoder, conversation, {}).labels[0].tolist()
        decoded = [encoder.counter.tokenizer.decode(run) for run in _runs(labels)]
        ends = [end_of_turn + next_turn] * (len(sample) - 1) + [end_of_turn]
        assert decoded == [answer + end for (_, answer), end in zip(sample, ends, strict=True)], n


def test_a_marker_template_whose_prefixes_do_not_render_keeps_its_marker_spans(dataset, tmp_path):
    """A template that refuses a conversation of one message renders every sample, but not the generation prompt
    of its first turn (the user message alone): its turns cannot be rendered one by one, so the labels are its
    {% generation %} spans (content + <|im_end|> in this template), equal to the ids-only oracle."""
    processor_dir = build_processor_dir(tmp_path / "proc", "qwen2_5_vl", template="generation")
    guard = "{% if messages | length < 2 %}{{ raise_exception('a conversation has a question and an answer') }}{% endif %}"
    (processor_dir / "chat_template.jinja").write_text(guard + (processor_dir / "chat_template.jinja").read_text())
    encoder = PackEncoder(_config(processor_dir, tmp_path))
    tokenizer = encoder.counter.tokenizer
    assert tokenizer.chat_template.startswith(guard)
    checked = 0
    for key, conversation, parts in dataset[:10]:
        if conversation.media_type == "video":
            continue
        batch = _encode_alone(encoder, conversation, parts)
        assert batch.labels[0].tolist() == oracle_labels(batch.input_ids[0].tolist(), tokenizer), key
        checked += 1
    assert checked >= 5
