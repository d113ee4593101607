"""Audio items count exactly what the model's real processor gives, from the clip's length alone.

For each omni family that builds offline (``qwen3_omni_moe``, ``qwen2_5_omni``, ``gemma4``: folders from
``synthetic/folder_<type>``) one sample per processor call, holding one or several clips, is counted by the scan's
counter (``make_counter``: the generic fast path, proven at folder load, ``tokens/proof.py``) from
``AudioMedia(samples, sample_rate)`` records, and run through the real processor (built from its real parts) on
waveforms of those lengths, with the text of its own ``apply_chat_template``. The oracle is the real processor's:
its ``len(input_ids)``, the audio token ids among them, and each clip's replacement string
(``return_text_replacement_offsets``). A clip the real processor refuses, or gives no audio token, when run alone
is one the counter refuses (``unsupported_media``, naming the clip), whatever other clips share its call (a longer
one would pad a 10 ms clip into one frame of Qwen3-Omni's: vlmpack does not train on that).

Lengths are samples at the feature extractors' rate (16 kHz, hop 160 for all three), held out from the proof's:
0.1 s to 10 min, and odd lengths around hop multiples, Gemma4's first frame and 128-sample padding, Qwen-Omni's
1 s / 2 s encoder chunks, 30 s (Gemma4's cut) and 5 min (the Qwen-Omni extractors' ``n_samples``: Qwen2.5-Omni pads
and cuts there). Several clips of different lengths in one call are padded together (Qwen3-Omni: to the longest,
so a shorter clip's count depends on it). The long grid (every length from 0.1 s to 10 min on a log scale, and
random multi-clip calls) is marked ``slow``.

Encoder work (``Size.encoder_*``): the oracle is the models' own audio encoders' windowing functions
(``modeling_qwen3_omni_moe.py`` / ``modeling_qwen2_5_omni.py``: ``chunk_and_pad_features``,
``get_audio_cu_seqlens``; ``modeling_gemma4.py``: ``Gemma4AudioAttention``'s blocks) fed the real feature
extractor's frames.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _folders_2026 import LazyFolders

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.families.generic import build_generic
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.audio import encode_audio
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import make_counter
from vlmpack_offline.tokens.factory import counting_path
from vlmpack_offline.tokens.media_info import AudioMedia
from vlmpack_offline.tokens.processor_parts import build_processor
from vlmpack_offline.tokens.proof import PROOF_AUDIO_CALLS, PROOF_AUDIOS

TYPES = ("qwen3_omni_moe", "qwen2_5_omni", "gemma4")
RATE, HOP = 16_000, 160  # every feature extractor of these folders (Whisper's and Gemma4's)
MINUTE = 60 * RATE

SINGLE = (1603, 5927, 16001, 31999, 124_321, 479_840, 480_000, 481_003, 980_801, 2 * MINUTE, 5 * MINUTE - 1,
          5 * MINUTE, 5 * MINUTE + 1, 10 * MINUTE)  # fmt: skip
# hop multiples +-1 (first frames, 1 s and 2 s chunks, 30 s), Gemma4's first frame (frame_length 320 + 1) and
# its 128-sample padding
BOUNDARY = tuple(sorted(({k * HOP + d for k in (1, 99, 101, 201, 3001) for d in (-1, 0, 1)}
                         | {320, 321, 448, 449}) - set(PROOF_AUDIOS)))  # fmt: skip
CALLS = ((16_001, 16_159), (8_007, 480_321, 31_999), (10 * MINUTE, 1603), (5 * MINUTE + 1, 5 * MINUTE - 1, 33_337),
         (640, 159, 16_161))  # fmt: skip
GRID = (*((n,) for n in SINGLE), *((n,) for n in BOUNDARY), *CALLS)

ANSWER = "A short recording of a tone."


def _long_grid() -> tuple[tuple[int, ...], ...]:
    """0.1 s to 10 min on a log scale with odd offsets, and seeded calls of 2 to 4 clips."""
    rng = np.random.default_rng(36)
    singles = sorted({int(n) + int(rng.integers(-HOP, HOP)) for n in np.geomspace(0.1 * RATE, 10 * MINUTE, 60)})
    calls = [tuple(int(n) for n in rng.integers(1600, 3 * MINUTE, size=int(rng.integers(2, 5)))) for _ in range(12)]
    return (*((n,) for n in singles if n not in PROOF_AUDIOS), *calls)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> LazyFolders:
    return LazyFolders(tmp_path_factory.mktemp("audio-folders"), video=lambda model_type: True)


class _Pairs(dict):
    """model type -> its ``_Pair`` on the transformers5 folder, built on first use."""

    def __init__(self, folders: LazyFolders) -> None:
        super().__init__()
        self.folders = folders

    def __missing__(self, model_type: str) -> _Pair:
        self[model_type] = _Pair(self.folders[model_type, "transformers5"], model_type)
        return self[model_type]


@pytest.fixture(scope="module")
def pairs(folders) -> _Pairs:
    return _Pairs(folders)


def _config(folder):
    return config_from_dict({
        "data": {"wds_dir": str(folder), "work_dir": str(folder / "work"), "packed_wds_dir": str(folder / "out")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
        "loss": {"train_on": "all"},  # counts only (Gemma4's generation prompt is no prefix of its answer turn)
    }, source="test")  # fmt: skip


class _Pair:
    """One folder's counter (vlmpack) and real processor (the oracle)."""

    def __init__(self, folder, model_type: str) -> None:
        self.counter = make_counter(_config(folder))
        self.family = self.counter.expander.family
        self.real = build_processor(folder, model_type, {"pretrained_model_name_or_path": str(folder)}).processor

    def messages(self, clips: int) -> list[dict]:
        content = [{"type": "audio", "audio": f"clip{i}.wav"} for i in range(clips)]
        return [{"role": "user", "content": [*content, {"type": "text", "text": "What do you hear?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]  # fmt: skip

    def vlmpack(self, lengths: tuple[int, ...], rate: int = RATE):
        """(token_len, audio tokens, replacements) as the scan counts the sample, or ``refused``."""
        raw = {"messages": self.messages(len(lengths))}
        conversation = parse_conversation(json.dumps(raw).encode(), key="k", parts=[f"clip{i}.wav" for i in range(len(lengths))])
        media = [AudioMedia(samples=n, sample_rate=rate, channels=1) for n in lengths]
        try:
            for index, item in enumerate(media):  # at probe time, each clip alone (tokens/media_info.probe_media)
                self.family.check(self.counter.rules, item, part=f"clip{index}.wav")
            count = self.counter.count(conversation, media)
        except DropError as exc:
            assert exc.reason == Reason.UNSUPPORTED_MEDIA, exc
            return "refused"
        texts = [self.family.expansion(m).text for m in self.counter.expander.in_sample(media)]
        return count.token_len, count.media_tokens, texts

    def oracle(self, clips: list[np.ndarray]):
        """(len(input_ids), audio tokens, replacements) from the real processor, or ``refused``: where it refuses
        the call, gives a clip no audio token, or does either to one of several clips run alone."""
        # alone: the clips under a second (a longer one every processor here takes alone: the singles show it)
        if len(clips) > 1 and any(len(clip) < RATE and self.oracle([clip]) == "refused" for clip in clips):
            return "refused"
        text = self.real.apply_chat_template([{**m, "content": [{"type": c["type"]} if c["type"] == "audio" else c
                                                                 for c in m["content"]]}
                                              for m in self.messages(len(clips))], tokenize=False)  # fmt: skip
        try:
            out = self.real(text=[text], audio=clips, return_text_replacement_offsets=True)
        except Exception:  # noqa: BLE001 - its own refusal (Whisper's STFT on a clip shorter than its window)
            return "refused"
        ids = list(out["input_ids"][0])
        texts = [r["replacement"] for r in out["text_replacement_offsets"][0]]
        audio_ids = set(self.real.audio_token_ids)
        if any(not any(i in audio_ids for i in self.real.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts):
            return "refused"  # a clip with no audio token: nothing of it reaches the model
        return len(ids), sum(1 for i in ids if i in audio_ids), texts


def _waveforms(lengths: tuple[int, ...]) -> list[np.ndarray]:
    return [np.random.default_rng(n).standard_normal(n).astype(np.float32) * 0.05 for n in lengths]


def _mismatches(pair: _Pair, grid) -> list[str]:
    out = []
    for lengths in grid:
        ours, real = pair.vlmpack(lengths), pair.oracle(_waveforms(lengths))
        if ours != real:
            brief = (lambda r: r if isinstance(r, str) else (r[0], r[1], [len(t) for t in r[2]]))  # noqa: E731
            out.append(f"{lengths}: vlmpack {brief(ours)} vs real {brief(real)}")
    return out


def test_the_lengths_are_held_out_from_the_proof():
    singles = {lengths[0] for lengths in GRID if len(lengths) == 1}
    assert not singles & set(PROOF_AUDIOS) and not set(CALLS) & set(PROOF_AUDIO_CALLS)
    assert min(singles) < 0.1 * RATE and max(singles) == 10 * MINUTE


@pytest.mark.parametrize("model_type", TYPES)
def test_audio_counts_equal_the_real_processors(pairs, model_type):
    pair = pairs[model_type]
    line = counting_path(pair.counter.rules)
    assert line.startswith(f"{model_type}: generic fast path (proved") and re.search(r"\d+ audios", line), line
    assert pair.family.takes_audio
    assert _mismatches(pair, GRID) == [], f"{len(GRID)} calls"


@pytest.mark.slow
@pytest.mark.parametrize("model_type", TYPES)
def test_audio_counts_equal_the_real_processors_from_a_tenth_of_a_second_to_ten_minutes(pairs, model_type):
    grid = _long_grid()
    assert _mismatches(pairs[model_type], grid) == [], f"{len(grid)} calls"


@pytest.mark.parametrize("model_type", TYPES)
def test_a_clip_too_short_for_one_audio_token_is_refused_naming_it(pairs, model_type):
    pair = pairs[model_type]
    for samples in (0, 100):
        assert pair.oracle(_waveforms((samples,))) == "refused"
        with pytest.raises(DropError, match=r"^clip0\.wav: .*(no audio token|STFT)") as caught:
            pair.family.check(pair.counter.rules, AudioMedia(samples=samples, sample_rate=RATE, channels=1), part="clip0.wav")
        assert caught.value.reason == Reason.UNSUPPORTED_MEDIA


@pytest.mark.parametrize("model_type", TYPES)
def test_encoded_clips_at_any_rate_count_what_the_processor_gives_the_loaders_decode(pairs, model_type):
    """The scan probes the file (its own rate, channels and container); the processor gets what the loader
    decodes (mono, resampled to 16 kHz)."""
    from vlmpack_offline.media.audio import decode_audio

    pair = pairs[model_type]
    clips = (("wav", 44_100, 2, 97_301), ("flac", 8_000, 1, 12_345), ("mp3", 48_000, 2, 480_000),
             ("ogg", 24_000, 1, 77_777), ("m4a", 22_050, 2, 220_501))  # fmt: skip
    for container, rate, channels, samples in clips:
        data = encode_audio(container, samples=samples, sample_rate=rate, channels=channels)
        media = pair.counter.probe("audio", data, part=f"clip0.{container}")
        ours = pair.vlmpack((media.samples,), rate=media.sample_rate)
        real = pair.oracle([decode_audio(data, sampling_rate=RATE, part="clip0")])
        assert ours == real, (container, rate, channels)


def test_a_family_without_an_audio_processor_takes_no_audio(tmp_path, folders):
    """A generic family whose processor has no feature extractor, and a family module without audio (Qwen2.5-VL)."""
    folder = folders["lfm3_vl", "transformers5"]
    family = build_generic(folder, "lfm3_vl", {"pretrained_model_name_or_path": str(folder)})
    assert not family.takes_audio and "no audio feature extractor" in family.no_audio_reason
    with pytest.raises(DropError, match=r"a\.wav: lfm3_vl: .*no audio feature extractor") as caught:
        family.check(None, AudioMedia(samples=RATE, sample_rate=RATE, channels=1), part="a.wav")
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA

    counter = make_counter(_config(build_processor_dir(tmp_path / "qwen2_5_vl", "qwen2_5_vl")))
    assert not getattr(counter.expander.family, "takes_audio", False)
    with pytest.raises(DropError) as caught:
        counter.probe("audio", encode_audio("wav", samples=RATE, sample_rate=RATE), part="a.wav")
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA


# -- the audio encoder's work ------------------------------------------------------------------------------
def _frames(pair: _Pair, samples: int) -> int:
    """The mel frames the real processor hands the encoder for the clip (its feature mask's sum)."""
    out = pair.real(text=[pair.real.audio_token], audio=_waveforms((samples,)))
    mask = out["feature_attention_mask"] if "feature_attention_mask" in out else out["input_features_mask"]
    return int(np.asarray(mask[0]).sum())


def _windows_of_the_model(model_type: str, frames: int, tokens: int) -> list[int] | int:
    """Tokens per attention window as the model's own code cuts them (Gemma4: its query-key pairs)."""
    import torch

    lens = torch.tensor([frames])
    if model_type == "qwen3_omni_moe":
        from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import (
            Qwen3OmniMoeAudioEncoderConfig,
        )
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
            chunk_and_pad_features,
            get_audio_cu_seqlens,
        )

        config = Qwen3OmniMoeAudioEncoderConfig()
        _, chunks = chunk_and_pad_features(torch.zeros(1, frames), lens, config.n_window)
        return torch.diff(get_audio_cu_seqlens(chunks, lens, config.n_window_infer, config.n_window)).tolist()
    if model_type == "qwen2_5_omni":
        from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniAudioEncoderConfig
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
            chunk_and_pad_features,
            get_audio_cu_seqlens,
        )

        _, chunks = chunk_and_pad_features(torch.zeros(1, frames), lens, Qwen2_5OmniAudioEncoderConfig().n_window)
        return torch.diff(get_audio_cu_seqlens(chunks)).tolist()
    from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioAttention

    attention = Gemma4AudioAttention(Gemma4AudioConfig(hidden_size=8, num_attention_heads=1), layer_idx=0)
    states = torch.zeros(1, tokens, 1, 1)
    queries, keys = attention._convert_to_block(states), attention._extract_block_context(states)
    return queries.shape[1] * queries.shape[2] * keys.shape[2]


@pytest.mark.parametrize("model_type", TYPES)
def test_the_audio_encoder_work_is_the_models_own_windows(pairs, folders, model_type):
    pair = pairs[model_type]
    assert json.loads((folders[model_type, "transformers5"] / "config.json").read_text()).get("audio_config") is None
    for samples in (5_927, 16_001, 124_321, 480_000, 2 * MINUTE + 7):
        size = pair.family.replacement_size(pair.counter.rules, AudioMedia(samples=samples, sample_rate=RATE, channels=1), len)
        frames = _frames(pair, samples)
        assert (size.encoder_patches, size.encoder_attention) == (0, 0)  # the vision encoder does not run
        if model_type == "gemma4":  # the conformer runs on the conv output: the clip's audio tokens
            assert size.audio_frames == size.media_tokens
            assert size.audio_attention == _windows_of_the_model(model_type, frames, size.audio_frames)
            continue
        windows = _windows_of_the_model(model_type, frames, 0)
        assert (size.audio_frames, size.audio_attention) == (sum(windows), sum(w * w for w in windows)), samples
