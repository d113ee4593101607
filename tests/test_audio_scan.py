"""No audio is lost silently: every input form of audio, scanned as a new user's shards, ends in an ok sample
counted exactly, or in a drop with its reason and the member named, or in the unused-media count.

The corpus holds every form the issue names (HF messages ``{"type": "audio"}``, LLaMA-Factory / ms-swift
``<audio>`` tags with ``audios``, ShareGPT tags taking audio members by extension, every container) and the bad
ones (a cut file, garbage, a zero-length clip, a WAV whose header claims more than it holds, more tags than audios
and the reverse, an ``<audio>`` tag with no audio at all, an audio member nothing references). It goes through
``vlmpack scan`` itself for an omni family (Qwen3-Omni, whose feature extractor pads a call's audios together)
and for a family that does not hear (Qwen2.5-VL). The oracle for an ok sample's length is the real processor
(built from the folder's parts, tokens/processor_parts.py) on the chat template's text and the decoded audio.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.media.audio import decode_audio
from vlmpack_offline.stages import scan
from vlmpack_offline.synthetic.audio import encode_audio, garbage, lying_wav, truncated
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

ANSWER = {"role": "assistant", "content": "It is a tone."}


def _clip(container: str, seconds: float, rate: int = 16000, channels: int = 1, seed: int = 0) -> bytes:
    return encode_audio(container, samples=int(seconds * rate), sample_rate=rate, channels=channels, seed=seed)


def _corpus() -> tuple[list[SyntheticSample], dict[str, str]]:
    """The samples, and each key's expected status (``ok`` or a drop reason) for a family that hears."""
    wav = _clip("wav", 1.3)
    samples, expected = [], {}

    def add(key: str, status: str, data: dict, media: dict[str, bytes]) -> None:
        samples.append(SyntheticSample(key=key, json=data, media=media))
        expected[key] = status

    messages = lambda *content: {"messages": [{"role": "user", "content": list(content)}, ANSWER]}  # noqa: E731
    add("hf_wav", "ok", messages({"type": "audio", "audio": "a.wav"}, {"type": "text", "text": "What is it?"}),
        {"a.wav": wav})
    for container, rate, channels in (("flac", 44100, 2), ("mp3", 22050, 1), ("ogg", 48000, 2), ("m4a", 32000, 1)):
        add(f"hf_{container}", "ok", messages({"type": "audio", "audio": f"a.{container}"}, {"type": "text", "text": "Hm?"}),
            {f"a.{container}": _clip(container, 2.1, rate, channels, seed=len(samples))})
    add("llamafactory", "ok", {"messages": [{"role": "user", "content": "<audio>listen?"}, ANSWER], "audios": ["aud.wav"]},
        {"aud.wav": _clip("wav", 0.7, 8000)})
    add("two_audios", "ok", messages({"type": "audio", "audio": "a.wav"}, {"type": "audio", "audio": "b.flac"},
                                     {"type": "text", "text": "Compare."}),
        {"a.wav": _clip("wav", 3.01), "b.flac": _clip("flac", 1.0049, 24000)})  # Whisper pads the two together
    add("sharegpt_by_extension", "ok", {"conversations": [{"from": "human", "value": "<audio>\nTranscribe."},
                                                          {"from": "gpt", "value": "Beep."}]},
        {"speech.mp3": _clip("mp3", 1.5, 44100)})
    add("unused_member", "ok", messages({"type": "text", "text": "Just text."}), {"stray.wav": wav})
    add("truncated", "truncated_media", messages({"type": "audio", "audio": "a.wav"}), {"a.wav": truncated(wav)})
    add("lying_header", "truncated_media", messages({"type": "audio", "audio": "a.wav"}),
        {"a.wav": lying_wav(samples=8000, sample_rate=16000, claimed=32000)})
    add("garbage", "corrupt_media", messages({"type": "audio", "audio": "a.wav"}), {"a.wav": garbage()})
    add("zero_length", "corrupt_media", messages({"type": "audio", "audio": "a.wav"}),
        {"a.wav": encode_audio("wav", samples=0, sample_rate=16000)})
    add("tag_without_audio", "missing_media", {"messages": [{"role": "user", "content": "<audio>what?"}, ANSWER]}, {})
    add("more_tags", "missing_media", {"messages": [{"role": "user", "content": "<audio><audio>?"}, ANSWER],
                                       "audios": ["a.wav"]}, {"a.wav": wav})
    add("more_audios", "media_mismatch", {"messages": [{"role": "user", "content": "<audio>?"}, ANSWER],
                                          "audios": ["a.wav", "b.wav"]}, {"a.wav": wav, "b.wav": wav})
    add("missing_member", "missing_media", messages({"type": "audio", "audio": "gone.wav"}), {})
    return samples, expected


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("audio_corpus")
    samples, expected = _corpus()
    write_shard(root / "shards" / "part-000.tar", samples)
    return root, expected


def _scan(root: Path, folder: Path, name: str, **sections: dict):
    config = config_from_dict({
        "data": {"wds_dir": str(root / "shards"), "work_dir": str(root / name), "packed_wds_dir": str(root / f"{name}-out")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
        "scan": {"max_drop_ratio": 1.0}, **sections,
    }, source="test")  # fmt: skip
    result = scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        return config, result, {s.key: s for s in manifest.iter_samples()}


def _accounted(rows: dict, samples: list[SyntheticSample]) -> None:
    """Every audio member is in an ok sample's n_audios, in a dropped sample's row, or in unused_media."""
    for sample in samples:
        row = rows[sample.key]
        audio_members = [p for p in sample.media if p.rsplit(".", 1)[-1] in ("wav", "flac", "mp3", "ogg", "m4a")]
        if row.status == "ok":
            assert row.n_audios + row.unused_media == len(audio_members), sample.key
        else:
            assert row.error, sample.key  # the reason's text says what and where


def test_an_omni_family_counts_every_audio_form_and_records_every_bad_one(corpus, tmp_path_factory):
    root, expected = corpus
    folder = build_processor_dir(tmp_path_factory.mktemp("qwen3_omni") / "folder", "qwen3_omni_moe")
    config, result, rows = _scan(root, folder, "omni")
    assert {key: row.status for key, row in rows.items()} == expected
    _accounted(rows, _corpus()[0])
    assert rows["unused_member"].unused_media == 1
    for key in ("truncated", "lying_header", "garbage", "zero_length"):
        assert "a.wav" in rows[key].error, rows[key].error  # the member is named
    assert result.counts["audios"] == sum(row.n_audios for row in rows.values() if row.status == "ok") == 9
    assert all(rows[key].media_type == "audio" for key, status in expected.items()
               if status == "ok" and key != "unused_member")
    assert rows["two_audios"].audio_frames > rows["hf_wav"].audio_frames > 0  # the cost model sees the audio


def test_an_ok_samples_length_is_the_real_processors(corpus, tmp_path_factory):
    """The oracle: the real Qwen3-Omni processor on the template's text and the decoded audio of each sample."""
    from vlmpack_offline.tokens.processor_parts import build_processor

    root, expected = corpus
    folder = build_processor_dir(tmp_path_factory.mktemp("qwen3_omni_oracle") / "folder", "qwen3_omni_moe")
    _, _, rows = _scan(root, folder, "omni-oracle")
    processor = build_processor(folder, "qwen3_omni_moe", {}, skip=frozenset({"video_processor"})).processor
    samples = {s.key: s for s in _corpus()[0]}
    for key, status in expected.items():
        if status != "ok":
            continue
        sample = samples[key]
        conversation = parse_conversation(json.dumps(sample.json), key=key, parts=list(sample.media))
        text = processor.apply_chat_template(list(conversation.messages), tokenize=False)
        audio = [decode_audio(sample.media[ref.part], sampling_rate=processor.feature_extractor.sampling_rate,
                              part=ref.part) for ref in conversation.media]  # fmt: skip
        ids = processor(text=[text], audio=audio or None)["input_ids"][0]
        assert rows[key].token_len == len(ids), key


def test_a_family_that_does_not_hear_drops_its_audio_naming_it(corpus, tmp_path_factory):
    root, expected = corpus
    folder = build_processor_dir(tmp_path_factory.mktemp("qwen2_5_vl") / "folder", "qwen2_5_vl")
    _, _, rows = _scan(root, folder, "vl")
    for key, status in expected.items():
        row = rows[key]
        if key == "unused_member":
            assert row.status == "ok" and row.unused_media == 1
        elif status == "ok":
            assert row.status == "unsupported_media" and "takes no audio" in row.error, (key, row.error)
        else:  # what the JSON gets wrong is found before the family is asked
            assert row.status in (status, "unsupported_media"), (key, row.status)


@pytest.fixture(scope="module")
def packed(corpus, tmp_path_factory):
    """The corpus through scan -> bucket -> plan -> write for Qwen3-Omni: (config, folder, manifest rows, packs)."""
    from vlmpack_offline.plan_file import read_plan
    from vlmpack_offline.stages import bucket, plan, write

    root, _ = corpus
    folder = build_processor_dir(tmp_path_factory.mktemp("qwen3_omni_e2e") / "folder", "qwen3_omni_moe")
    config, _, rows = _scan(root, folder, "e2e", sample={"max_token_len": 400})
    for stage in (bucket, plan, write):
        assert stage.run(config).exit_code == 0, stage.__name__
    return config, folder, rows, list(read_plan(config.work_dir))


def test_audio_samples_go_through_every_stage_and_energon_hands_the_loader_their_audio(packed):
    """Every ok sample is in one pack, its audio members copied, and each batch energon's own loader (DataLoader
    workers) builds holds the planned lengths and the feature extractor's fields, one audio row per audio item."""
    from megatron.energon import WorkerConfig, get_loader

    from vlmpack_offline.loader import PackEncoder, PackTaskEncoder, train_dataset

    config, folder, rows, packs = packed
    planned = {i: n for pack in packs for i, n in zip(pack.sample_ids, pack.sample_token_lens, strict=True)}
    assert sorted(planned) == sorted(row.id for row in rows.values() if row.status == "ok")
    encoder = PackEncoder.from_packed_dir(config.data.packed_wds_dir, str(folder))
    dataset = train_dataset(config.data.packed_wds_dir, PackTaskEncoder(encoder), WorkerConfig(rank=0, world_size=1,
                                                                                                num_workers=2))
    train = {pack.pack_id for pack in packs if pack.split == "train"}
    audios: dict[int, int] = {}
    for batch in get_loader(dataset):  # energon's train loader repeats: read until every pack came once
        lengths = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).tolist()
        assert lengths == [planned[i] for i in batch.sample_ids]
        n = int(batch.n_audios_per_sample.sum())
        assert (batch.vision["input_features"].shape[0] if n else 0) == n
        assert [rows[i.rsplit("/", 1)[-1]].n_audios for i in batch.sample_ids] == batch.n_audios_per_sample.tolist()
        audios[batch.pack_id] = n
        if set(audios) == train:
            break
    assert sum(audios.values()) > 0


def test_the_write_records_the_media_items_it_packed_from(packed):
    from vlmpack_offline.packed_settings import may_hold, written_counts

    config, _, rows, _ = packed
    ok = [row for row in rows.values() if row.status == "ok"]
    counts = written_counts(config.data.packed_wds_dir)
    assert (counts["images"], counts["videos"], counts["audios"]) == tuple(
        sum(getattr(row, f"n_{kind}") for row in ok) for kind in ("images", "videos", "audios"))
    assert counts["audios"] > 0 and may_hold(config.data.packed_wds_dir, "audios")


def test_automodels_adapter_refuses_an_audio_set_its_collater_would_strip(packed, tmp_path):
    """NeMo Automodel's VLM collaters keep only image and video fields: a set the write recorded audio in is refused
    when the adapter is built, and where no count was recorded (an older set), each audio pack is refused."""
    import shutil

    from vlmpack_offline.errors import ConfigError
    from vlmpack_offline.loader import PackDataset, PackEncoder
    from vlmpack_offline.loader.adapters import AutomodelAdapter

    config, folder, _, _ = packed
    encoder = PackEncoder.from_packed_dir(config.data.packed_wds_dir, str(folder))
    with pytest.raises(ConfigError, match="holds audio, and NeMo Automodel's VLM collaters"):
        AutomodelAdapter(encoder)
    older = tmp_path / "older"
    shutil.copytree(config.data.packed_wds_dir, older)
    marker = older / ".nv-meta" / "vlmpack_write.json"
    record = json.loads(marker.read_text())
    del record["counts"]
    marker.write_text(json.dumps(record))
    encoder = PackEncoder.from_packed_dir(older, str(folder))
    adapter = AutomodelAdapter(encoder)
    batches = list(PackDataset(older, encoder))
    with pytest.raises(ConfigError, match="holds audio"):
        adapter.pack(next(b for b in batches if int(b.n_audios_per_sample.sum())))
    adapter.pack(next(b for b in batches if not int(b.n_audios_per_sample.sum())))  # the rest packs as before


def test_checkpointing_with_several_ranks_on_an_audio_set_needs_the_unused_parameter_search(packed, tmp_path,
                                                                                            monkeypatch):
    """A rank whose pack has no audio leaves the audio tower without gradients; with gradient checkpointing
    transformers turns DDP's unused-parameter search off, so DDP would wait forever: refused, dummy images or not."""
    from transformers import TrainingArguments

    from vlmpack_offline.errors import ConfigError
    from vlmpack_offline.loader.adapters.hf_trainer import TrainerPacks

    config, folder, _, _ = packed

    def args(**overrides) -> TrainingArguments:
        made = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, use_cpu=True,
                                 report_to=[], gradient_checkpointing=True, **overrides)  # fmt: skip
        monkeypatch.setattr(type(made), "world_size", property(lambda self: 2))
        return made

    with pytest.raises(ConfigError, match="holds audio: .* set ddp_find_unused_parameters=True"):
        TrainerPacks.for_packed_dir(config.data.packed_wds_dir, args(), processor_path=str(folder))
    TrainerPacks.for_packed_dir(config.data.packed_wds_dir, args(ddp_find_unused_parameters=True),
                                processor_path=str(folder))


def test_a_dummy_image_where_the_family_has_none_is_refused_when_the_encoder_is_built(packed):
    from vlmpack_offline.errors import ConfigError
    from vlmpack_offline.loader import EncoderOptions, PackEncoder

    config, folder, _, _ = packed
    with pytest.raises(ConfigError, match="qwen3_omni_moe has no such dummy: train with DDP's unused-parameter"):
        PackEncoder.from_packed_dir(config.data.packed_wds_dir, str(folder),
                                    options=EncoderOptions(dummy_image_for_text_packs=True))
