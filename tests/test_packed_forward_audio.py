"""The loader serves audio exactly: a packed forward of a tiny random omni model equals each sub-sample's forward alone.

For each omni family that builds offline (Qwen3-Omni's and Qwen2.5-Omni's Thinker, Gemma 4), three packs go through
the real loader (``PackEncoder`` on the folder ``synthetic/folder_<type>`` builds, its ``config.json`` the tiny
model's own, ``synthetic.tiny_models.tiny_omni``): audio-only sub-samples of different lengths (one with two audios),
audio beside images, and audio beside a text-only sub-sample. The clips are 16-bit PCM WAV at the feature
extractors' 16 kHz (``synthetic/audio.py encode_audio``), one of them stereo; 15,400 samples is not a whole number
of Whisper hops (160), so padded beside a longer clip it has one mel frame more than alone (97, not 96: Whisper
drops the last mask frame only when the padded length is not a multiple of the hop) and Qwen3-Omni gives it 13
tokens, not 12. Each sub-sample is compared with the oracles, run on it alone:

- (a) inputs: the real processor class (``AutoProcessor`` where torchvision is; else the class itself from
  transformers' own parts, its torchvision-gated video processor left out) on the sub-sample's text (its own
  ``apply_chat_template``), images as opened, and its audio read by the stdlib ``wave`` module (int16 / 32768,
  channels averaged, as transformers' ``load_audio`` does): ``input_ids``, the per-token fields, every field its
  forward takes; each audio's features and mask equal the oracle's, zero past its own length in the pack;
  ``n_audios_per_sample``; no label on an audio token;
- (b) positions: the model's own ``get_rope_index`` on the processor's output (Qwen-Omni: with the audio's mel
  frames, ``audio_seqlens``), ``arange`` for Gemma 4 (no rope index);
- (c) the tiny model (fp32, sdpa; Gemma 4's audio tower eager; eval, seed 0): the packed forward
  (``PackBatch.model_kwargs``: HF finds the sub-samples from the restarting positions) equals each sub-sample's
  forward on the processor's output alone, the last hidden state at every position and the logits at every
  scored one; read as one sequence (positions running on) the pack gives other states, so the check can fail.

And the case is sharp: the processor called on the audio pack as ONE batch gives the short clip another token
count (Qwen3-Omni), so a loader that batched the pack's audio would not make the scan's tokens.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import io
import json
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from _family_kit import assert_own_rows_then_zeros, forward_fields, segment_bounds, text_item
from _folders_2026 import every_frame
from PIL import Image

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.labels import IGNORE_INDEX
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.audio import encode_audio
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.synthetic.tiny_models import tiny_omni

pytestmark = pytest.mark.slow

TOL = 1e-4
RATE = 16000  # the three folders' feature extractors' sampling_rate
HOP = 160  # Whisper's hop_length in the Qwen-Omni folders
# part -> (samples per channel, channels, seed); 15400 = 96.25 hops (module doc)
CLIPS = {"a0.wav": (15400, 1, 1), "a1.wav": (41000, 2, 2), "a2.wav": (24160, 1, 3), "a3.wav": (8000, 1, 4)}
MEDIA = {**{part: encode_audio("wav", samples=n, sample_rate=RATE, channels=c, seed=seed)
            for part, (n, c, seed) in CLIPS.items()},
         "m0.jpg": image_bytes(224, 224, seed=1), "m1.png": image_bytes(120, 300, fmt="PNG", seed=2)}  # fmt: skip
# the clip of the audio + video pack: (frames, fps, width, height), as tests/test_packed_forward_2026.py's
VIDEO = {"qwen3_omni_moe": (8, 4, 64, 48), "qwen2_5_omni": (8, 4, 64, 48), "gemma4": (32, 8, 64, 48)}


def _audio(part: str) -> dict:
    return {"type": "audio", "audio": part}


def _image(part: str) -> dict:
    return {"type": "image", "image": part}


def _video(part: str) -> dict:
    return {"type": "video", "video": part}


# pack -> sub-samples (user content, assistant answer)
PACKS = {
    "audio": [
        ([_audio("a0.wav"), text_item("What is this sound?")], "A short hum."),
        ([text_item("Compare"), _audio("a1.wav"), text_item("with"), _audio("a2.wav")], "The first one is longer."),
        ([_audio("a3.wav"), text_item("Transcribe it.")], "Nothing but noise."),
    ],
    "audio_image": [
        ([_image("m0.jpg"), _audio("a0.wav"), text_item("Does the sound fit the picture?")], "Not really."),
        ([_audio("a1.wav"), text_item("And this one?")], "A steady tone."),
        ([_image("m1.png"), text_item("What is it?")], "A square on a plain ground."),
    ],
    "audio_text": [
        ([_audio("a2.wav"), text_item("Describe it.")], "A tone with some noise."),
        ([text_item("Say hello to everyone in this room, please.")], "Hello there, everyone in the room!"),
        ([text_item("Listen:"), _audio("a0.wav")], "It hums."),
    ],
    "audio_video": [  # a video and an audio item apart (not the video's own track: use_audio_in_video)
        ([_video("v0.mp4"), _audio("a0.wav"), text_item("Does the sound go with it?")], "It could."),
        ([_audio("a2.wav"), text_item("And this?")], "A tone."),
        ([_video("v0.mp4"), text_item("What moves?")], "A bar that drifts to the right."),
    ],
}
FAMILIES = ("qwen3_omni_moe", "qwen2_5_omni", "gemma4")
ROPE = {"qwen3_omni_moe", "qwen2_5_omni"}  # families whose model has a rope index (Gemma 4: 1-D positions)


def wav_mono(data: bytes) -> np.ndarray:
    """The oracle's decode: a 16-bit PCM WAV by the stdlib, int16 / 32768 as float32, channels averaged."""
    with wave.open(io.BytesIO(data)) as reader:
        assert reader.getsampwidth() == 2 and reader.getframerate() == RATE
        channels = reader.getnchannels()
        samples = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2").astype(np.float32) / 32768
    return samples.reshape(-1, channels).mean(axis=1, dtype=np.float32) if channels > 1 else samples


def oracle_processor(folder: Path):
    """The real processor: ``AutoProcessor``; without torchvision the folder's processor class itself from
    transformers' own parts (image processor, feature extractor, tokenizer), its video processor None and its
    check of the parts' classes (which looks the video class up through the torchvision-gated mapping) left out."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        return AutoProcessor.from_pretrained(folder)
    settings = json.loads((folder / "processor_config.json").read_text())
    name = settings["processor_class"]
    module = importlib.import_module(f"transformers.models.{_module_of(name)}.processing_{_module_of(name)}")
    cls = type(name, (getattr(module, name),), {"check_argument_for_proper_class": lambda self, arg, value: None})
    own = {k: v for k, v in settings.items() if k != "processor_class" and not isinstance(v, dict)}
    return cls(image_processor=AutoImageProcessor.from_pretrained(folder), video_processor=None,
               feature_extractor=AutoFeatureExtractor.from_pretrained(folder), tokenizer=AutoTokenizer.from_pretrained(folder),
               chat_template=(folder / "chat_template.jinja").read_text(), **own)  # fmt: skip


def _module_of(processor_class: str) -> str:
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    return next(t for t, n in PROCESSOR_MAPPING_NAMES.items() if n == processor_class)


def _parts(sub: PackedSubSample, kind: str) -> list[str]:
    return [c[kind] for m in sub.messages for c in m["content"] if c["type"] == kind]


def alone(processor, sub: PackedSubSample, media: dict[str, bytes], **kwargs) -> dict:
    """The real processor's output for one sub-sample alone (module doc, (a))."""
    messages = [{"role": m["role"], "content": [c if c["type"] == "text" else {"type": c["type"]} for c in m["content"]]}
                for m in sub.messages]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False)
    images = [Image.open(io.BytesIO(media[p])) for p in _parts(sub, "image")]
    audio = [wav_mono(media[p]) for p in _parts(sub, "audio")]
    videos = [every_frame(media[p]) for p in _parts(sub, "video")]  # the processor samples them by its own rule
    if videos:
        kwargs.update(videos=[v for v, _ in videos], video_metadata=[m for _, m in videos])
    return dict(processor(text=[text], images=images or None, audio=audio or None, return_tensors="pt", **kwargs))


@dataclass(frozen=True, slots=True)
class Case:
    model_type: str
    model: torch.nn.Module
    processor: object
    encoder: PackEncoder
    folder: Path


_CASES: dict[str, Case] = {}


@pytest.fixture(scope="module", autouse=True)
def _forget_cases():
    yield
    _CASES.clear()


def _case(model_type: str, tmp_path_factory) -> Case:
    """The folder, tiny model, loader and oracle processor of one family, built once."""
    if model_type not in _CASES:
        folder = build_processor_dir(tmp_path_factory.mktemp(model_type), model_type, layout="transformers5", video=True)
        model = tiny_omni(model_type, folder)  # before the loader: it reads the model's config from the folder
        config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}},
                                  source="test")  # fmt: skip
        _CASES[model_type] = Case(model_type, model, oracle_processor(folder), PackEncoder(config, EncoderOptions()), folder)
    return _CASES[model_type]


@functools.cache
def _media(model_type: str) -> dict[str, bytes]:
    return {**MEDIA, "v0.mp4": video_bytes(*VIDEO[model_type], seed=5)}


def _pack(case: Case, name: str) -> tuple[PackedSample, list[dict]]:
    """The pack ``name`` with the real processor's lengths as the plan's, and the processor's output per sub-sample."""
    subs = [PackedSubSample(id=f"s{i}", token_len=0, media_tokens=0,
                            messages=({"role": "user", "content": user},
                                      {"role": "assistant", "content": [text_item(answer)]}))
            for i, (user, answer) in enumerate(PACKS[name])]  # fmt: skip
    oracle = [alone(case.processor, sub, _media(case.model_type)) for sub in subs]
    subs = [PackedSubSample(id=s.id, token_len=len(o["input_ids"][0]), media_tokens=0, messages=s.messages)
            for s, o in zip(subs, oracle, strict=True)]  # fmt: skip
    return PackedSample(pack_id=0, capacity=sum(s.token_len for s in subs), split="train", samples=tuple(subs)), oracle


# every video processor needs torchvision: the audio + video packs run where it is (.venv-ref)
CASES = [pytest.param(t, p, id=f"{t}-{p}", marks=[pytest.mark.torchvision] if p == "audio_video" else [])
         for t in FAMILIES for p in PACKS]  # fmt: skip


def _audio_token_id(processor) -> int:
    return processor.tokenizer.convert_tokens_to_ids(processor.audio_token)


@pytest.mark.parametrize(("model_type", "pack_name"), CASES)
def test_the_loaders_inputs_are_the_processors_on_each_sub_sample(model_type, pack_name, tmp_path_factory):
    case = _case(model_type, tmp_path_factory)
    pack, oracle = _pack(case, pack_name)
    batch = case.encoder.encode(pack, _media(model_type))
    assert batch.n_audios_per_sample.tolist() == [len(_parts(s, "audio")) for s in pack.samples]
    audio_id = _audio_token_id(case.processor)
    for (start, end), out, sub in zip(segment_bounds(batch), oracle, pack.samples, strict=True):
        ids = batch.input_ids[0, start:end]
        assert ids.tolist() == out["input_ids"][0].tolist(), sub.id
        assert int((ids == audio_id).sum()) > 0 or not _parts(sub, "audio")
        for name in (k for k in batch.vision if k.endswith("token_type_ids")):  # Gemma 4's mm_token_type_ids
            assert batch.vision[name][0, start:end].tolist() == out[name][0].tolist(), (sub.id, name)
        labels = batch.labels[0, start:end]
        assert (labels[ids == audio_id] == IGNORE_INDEX).all(), sub.id
        scored = case.processor.tokenizer.decode(ids[labels != IGNORE_INDEX])
        answer = sub.messages[1]["content"][0]["text"]
        assert answer in scored and len(scored) - len(answer) < 24, (sub.id, scored)
    forward = forward_fields(case.model, {k: None for o in oracle for k in o})
    audio_fields = {k for k in forward if "feature" in k}  # input_features, feature_attention_mask / input_features_mask
    media_fields = {k for k in forward if not k.endswith("token_type_ids") and k not in ("input_ids", "attention_mask")}
    assert media_fields == set(batch.vision) - {k for k in batch.vision if k.endswith("token_type_ids")}
    for name in media_fields - audio_fields:
        assert torch.equal(batch.vision[name], torch.cat([o[name] for o in oracle if name in o])), name
    for name in audio_fields:  # each audio's own rows, then zeros to the pack's longest
        expected = [row for o in oracle if name in o for row in o[name]]
        assert len(batch.vision[name]) == len(expected) == sum(batch.n_audios_per_sample.tolist())
        assert_own_rows_then_zeros(batch.vision[name], expected, name)


@pytest.mark.parametrize(("model_type", "pack_name"), CASES)
def test_positions_are_the_models_own_rope_index_on_each_sub_sample(model_type, pack_name, tmp_path_factory):
    case = _case(model_type, tmp_path_factory)
    pack, oracle = _pack(case, pack_name)
    batch = case.encoder.encode(pack, _media(model_type))
    for (start, end), out in zip(segment_bounds(batch), oracle, strict=True):
        if model_type not in ROPE:
            assert torch.equal(batch.position_ids[..., start:end], torch.arange(end - start)[None])
            continue
        mask = out.get("feature_attention_mask")
        with torch.no_grad():  # the Thinker's own function, as its forward calls it
            expected, _ = case.model.model.get_rope_index(
                out["input_ids"], out.get("image_grid_thw"), out.get("video_grid_thw"), out["attention_mask"],
                audio_seqlens=None if mask is None else mask.sum(-1), second_per_grids=out.get("video_second_per_grid"),
            )  # fmt: skip
        assert batch.position_ids.shape[0] == 3
        assert torch.equal(batch.position_ids[..., start:end], expected)


@pytest.mark.parametrize(("model_type", "pack_name"), CASES)
def test_a_packed_forward_equals_each_sub_sample_alone(model_type, pack_name, tmp_path_factory):
    case = _case(model_type, tmp_path_factory)
    pack, oracle = _pack(case, pack_name)
    batch = case.encoder.encode(pack, _media(model_type))
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    scored = batch.labels[0] != IGNORE_INDEX
    keep = "logits_to_keep" in inspect.signature(case.model.forward).parameters

    def logits_at(where: torch.Tensor) -> dict:
        return {"logits_to_keep": torch.nonzero(where)[:, 0]} if keep else {}

    with torch.no_grad():
        packed = case.model(**kwargs, **logits_at(scored), output_hidden_states=True)
        each = [case.model(**forward_fields(case.model, out), **logits_at(scored[start:end]), use_cache=False,
                           output_hidden_states=True) for out, (start, end) in zip(oracle, segment_bounds(batch), strict=True)]  # fmt: skip
    alone_hidden = torch.cat([h.hidden_states[-1] for h in each], dim=1)
    assert packed.hidden_states[-1].shape == alone_hidden.shape
    assert (packed.hidden_states[-1] - alone_hidden).abs().max() < TOL
    packed_logits = packed.logits[0] if keep else packed.logits[0, scored]
    alone_logits = torch.cat([h.logits for h in each], dim=1)[0]
    alone_logits = alone_logits if keep else alone_logits[scored]
    assert packed_logits.shape == (int(scored.sum()), case.model.config.get_text_config().vocab_size)
    assert (packed_logits - alone_logits).abs().max() < TOL
    # the packing is visible: read as one sequence (positions running on) the pack gives other states
    whole = dict(kwargs)
    whole["position_ids"] = torch.arange(batch.seq_len).expand_as(kwargs["position_ids"])
    with torch.no_grad():
        whole = case.model(**whole, **({"logits_to_keep": 1} if keep else {}), output_hidden_states=True)
    assert (whole.hidden_states[-1] - alone_hidden).abs().max() > 1e-3


def test_one_processor_call_for_the_audio_pack_would_count_the_short_clip_otherwise(tmp_path_factory):
    """Why the loader calls the processor per sub-sample when a pack holds audio (module doc): Whisper pads the
    call's audios to the longest, so the 15,400-sample clip gets 97 mel frames beside a longer one, 96 alone."""
    case = _case("qwen3_omni_moe", tmp_path_factory)
    pack, oracle = _pack(case, "audio")
    texts = [case.processor.apply_chat_template(
        [{"role": m["role"], "content": [c if c["type"] == "text" else {"type": c["type"]} for c in m["content"]]}
         for m in sub.messages], tokenize=False) for sub in pack.samples]  # fmt: skip
    audio = [wav_mono(MEDIA[p]) for sub in pack.samples for p in _parts(sub, "audio")]
    together = case.processor(text=texts, audio=audio, padding=True, return_tensors="pt")
    audio_id = _audio_token_id(case.processor)
    assert int(oracle[0]["feature_attention_mask"].sum()) == CLIPS["a0.wav"][0] // HOP == 96
    assert int(together["feature_attention_mask"][0].sum()) == 97
    assert int((together["input_ids"][0] == audio_id).sum()) == 13 != int((oracle[0]["input_ids"] == audio_id).sum()) == 12
    assert case.encoder.encode(pack, MEDIA).input_ids[0, : pack.samples[0].token_len].eq(audio_id).sum() == 12


def _check_servable(folder: Path) -> None:
    from vlmpack_offline.loader.servable import check_servable
    from vlmpack_offline.tokens.rules import load_model_rules

    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}},
                              source="test")  # fmt: skip
    check_servable(load_model_rules(config.model), config.model.processor_kwargs)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_scan_start_check_serves_each_omni_folder_with_audio(model_type, tmp_path):
    """``check_servable`` runs the loader on a generated pack with a tone, alone and beside an image."""
    _check_servable(build_processor_dir(tmp_path, model_type, layout="transformers5", video=True))


def test_the_scan_start_check_refuses_a_model_whose_audio_windows_are_not_its_processors(tmp_path):
    """Qwen3-Omni's rope index counts an audio's tokens with the model's ``audio_config.n_window``, its processor
    with its own (50): a config with 20 is refused at scan start, naming the audio sample. Without the audio
    in the check it would pass: text and images never read it."""
    from vlmpack_offline.errors import ConfigError

    folder = build_processor_dir(tmp_path, "qwen3_omni_moe", layout="transformers5", video=True)
    raw = json.loads((folder / "config.json").read_text())
    raw["thinker_config"]["audio_config"] = {"n_window": 20}
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"cannot serve it: a generated image\+audio sample fails"):
        _check_servable(folder)
