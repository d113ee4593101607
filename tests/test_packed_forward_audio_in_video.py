"""The loader serves a video's own audio track (``load_audio_from_video``): a packed forward equals each sub-sample's.

For Qwen3-Omni's and Qwen2.5-Omni's Thinker (tiny and random, ``synthetic.tiny_models.tiny_omni``, on the folders
``synthetic/folder_<type>`` builds), with ``model.processor_kwargs: {load_audio_from_video: true}``, one pack goes
through the real loader (``PackEncoder``): a video with an AAC track (stereo, 44.1 kHz), a standalone audio beside a
video with a mono 22.05 kHz track, and a video without an audio stream. Each sub-sample is compared with the
oracles, run on it alone:

- (a) inputs: the real processor (``AutoProcessor``) on the sub-sample's own ``apply_chat_template`` text, every
  frame of each video with its ``VideoMetadata`` (it samples them itself), and one audio per slot with
  ``audio_from_video_indices`` and ``load_audio_from_video=True`` (each track decoded by ``media.audio.decode_audio``
  at 16 kHz: no torchcodec): ``input_ids``, every field its forward takes (each audio's features zero past its own
  length in the pack); no label on an audio or video token;
- (b) positions: the Thinker's own ``get_rope_index`` with ``use_audio_in_video=True`` (the frames and the track's
  tokens interleaved in time), ``False`` for the silent video's sub-sample;
- (c) the packed forward (fp32, sdpa, eval) equals each sub-sample's forward alone within 1e-4.

Every video processor needs torchvision: the module runs in ``.venv-ref``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _family_kit import assert_own_rows_then_zeros, forward_fields, segment_bounds, text_item
from _folders_2026 import every_frame

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.labels import IGNORE_INDEX
from vlmpack_offline.media.audio import decode_audio
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.audio import encode_audio, encode_video_with_audio
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import video_bytes
from vlmpack_offline.synthetic.tiny_models import tiny_omni

pytestmark = [pytest.mark.slow, pytest.mark.torchvision]

TOL = 1e-4
RATE = 16_000  # both folders' WhisperFeatureExtractor
MEDIA = {
    "talk.mp4": encode_video_with_audio(seconds=2.0, sample_rate=44_100, channels=2, fps=4),
    "hum.mp4": encode_video_with_audio(seconds=1.5, sample_rate=22_050, channels=1, fps=4, seed=2),
    "silent.mp4": video_bytes(8, 4, 64, 48, seed=5),
    "note.wav": encode_audio("wav", samples=24_160, sample_rate=RATE, seed=3),
}
TRACKS = frozenset({"talk.mp4", "hum.mp4"})
PACK = [
    ([{"type": "video", "video": "talk.mp4"}, text_item("What do you see and hear?")], "A drifting bar and a hum."),
    ([{"type": "audio", "audio": "note.wav"}, {"type": "video", "video": "hum.mp4"}, text_item("Same sound?")], "No."),
    ([{"type": "video", "video": "silent.mp4"}, text_item("What moves?")], "A bar that drifts to the right."),
]
TYPES = ("qwen3_omni_moe", "qwen2_5_omni")


def _items(sub: PackedSubSample) -> list[tuple[str, str]]:
    return [(c["type"], c[c["type"]]) for m in sub.messages for c in m["content"] if c["type"] != "text"]


def alone(processor, sub: PackedSubSample) -> dict:
    """The real processor's output for one sub-sample alone (module doc, (a))."""
    messages = [{"role": m["role"], "content": [c if c["type"] == "text" else {"type": c["type"]} for c in m["content"]]}
                for m in sub.messages]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False)
    videos, audio, slots = [], [], []
    for kind, part in _items(sub):
        if kind == "audio" or part in TRACKS:
            audio.append(decode_audio(MEDIA[part], sampling_rate=RATE, part=part))
            slots.append(None if kind == "audio" else len(videos))
        if kind == "video":
            videos.append(every_frame(MEDIA[part]))
    return dict(processor(text=[text], videos=[v for v, _ in videos], video_metadata=[m for _, m in videos],
                          audio=audio or None, audio_from_video_indices=slots, load_audio_from_video=True,
                          return_tensors="pt"))  # fmt: skip


@pytest.fixture(scope="module", params=TYPES)
def case(request, tmp_path_factory):
    from transformers import AutoProcessor

    model_type = request.param
    folder: Path = build_processor_dir(tmp_path_factory.mktemp(model_type), model_type, layout="transformers5", video=True)
    model = tiny_omni(model_type, folder)  # before the loader: it reads the model's config from the folder
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder),
                                                              "load_audio_from_video": True}}}, source="test")  # fmt: skip
    processor = AutoProcessor.from_pretrained(folder)
    subs = [PackedSubSample(id=f"s{i}", token_len=0, media_tokens=0,
                            messages=({"role": "user", "content": user},
                                      {"role": "assistant", "content": [text_item(answer)]}))
            for i, (user, answer) in enumerate(PACK)]  # fmt: skip
    oracle = [alone(processor, sub) for sub in subs]
    subs = [PackedSubSample(id=s.id, token_len=len(o["input_ids"][0]), media_tokens=0, messages=s.messages)
            for s, o in zip(subs, oracle, strict=True)]  # fmt: skip
    pack = PackedSample(pack_id=0, capacity=sum(s.token_len for s in subs), split="train", samples=tuple(subs))
    batch = PackEncoder(config, EncoderOptions()).encode(pack, MEDIA)
    return model, processor, pack, oracle, batch


def test_the_loaders_inputs_are_the_processors_on_each_sub_sample(case):
    model, processor, pack, oracle, batch = case
    tokens = {processor.tokenizer.convert_tokens_to_ids(t) for t in (processor.audio_token, processor.video_token)}
    assert batch.n_audios_per_sample.tolist() == [1, 2, 0]  # the tracks are audio slots
    for (start, end), out, sub in zip(segment_bounds(batch), oracle, pack.samples, strict=True):
        ids = batch.input_ids[0, start:end]
        assert ids.tolist() == out["input_ids"][0].tolist(), sub.id
        media = torch.tensor([int(i) in tokens for i in ids])
        assert media.any() and (batch.labels[0, start:end][media] == IGNORE_INDEX).all(), sub.id
    forward = forward_fields(model, {k: None for o in oracle for k in o})
    audio_fields = {k for k in forward if "feature" in k}
    media_fields = {k for k in forward if not k.endswith("token_type_ids") and k not in ("input_ids", "attention_mask")}
    assert audio_fields and media_fields == set(batch.vision) - {k for k in batch.vision if k.endswith("token_type_ids")}
    for name in media_fields - audio_fields:
        assert torch.equal(batch.vision[name], torch.cat([o[name] for o in oracle if name in o])), name
    for name in audio_fields:  # each slot's own rows, then zeros to the pack's longest
        expected = [row for o in oracle if name in o for row in o[name]]
        assert len(batch.vision[name]) == len(expected) == 3
        assert_own_rows_then_zeros(batch.vision[name], expected, name)


def test_positions_are_the_models_own_rope_index_with_the_tracks_interleaved(case):
    model, processor, pack, oracle, batch = case
    for (start, end), out, sub in zip(segment_bounds(batch), oracle, pack.samples, strict=True):
        tracks = any(part in TRACKS for _, part in _items(sub))
        mask = out.get("feature_attention_mask")
        with torch.no_grad():  # the Thinker's own function, as its forward calls it
            expected, _ = model.model.get_rope_index(
                out["input_ids"], None, out["video_grid_thw"], out["attention_mask"], use_audio_in_video=tracks,
                audio_seqlens=None if mask is None else mask.sum(-1), second_per_grids=out["video_second_per_grid"],
            )  # fmt: skip
        assert torch.equal(batch.position_ids[..., start:end], expected), sub.id


def test_a_packed_forward_equals_each_sub_sample_alone(case):
    model, processor, pack, oracle, batch = case
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    with torch.no_grad():
        packed = model(**kwargs, output_hidden_states=True)
        each = [model(**forward_fields(model, out), use_audio_in_video=any(p in TRACKS for _, p in _items(sub)),
                      use_cache=False, output_hidden_states=True)
                for out, sub in zip(oracle, pack.samples, strict=True)]  # fmt: skip
    alone_hidden = torch.cat([h.hidden_states[-1] for h in each], dim=1)
    assert packed.hidden_states[-1].shape == alone_hidden.shape
    assert (packed.hidden_states[-1] - alone_hidden).abs().max() < TOL


@pytest.mark.parametrize("model_type", TYPES)
def test_the_scan_start_check_serves_each_omni_folder_with_the_setting(model_type, tmp_path):
    """``check_servable`` runs the loader on a generated video with a track of its own (and a plain video): a
    folder whose processor would otherwise decode each video's audio itself (torchcodec) is served."""
    from vlmpack_offline.loader.servable import check_servable
    from vlmpack_offline.tokens.rules import load_model_rules

    folder = build_processor_dir(tmp_path, model_type, layout="transformers5", video=True)
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder),
                                                              "load_audio_from_video": True}}}, source="test")  # fmt: skip
    check_servable(load_model_rules(config.model), config.model.processor_kwargs)
